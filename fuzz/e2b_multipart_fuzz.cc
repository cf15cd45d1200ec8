// Fuzz target e2b_multipart: the E2B upload parser (api/e2b/parse.h: MultipartBoundary and
// Multipart), as POST /files drives it.
//
// Input: u32 split seed | the Content-Type value up to the first '\n' | the body. The boundary
// comes from the Content-Type (an empty one is refused by the route before parsing). The
// body is parsed twice: whole, and fed in random pieces as the network delivers it; both
// must report the same parts (name, bytes, end) unless one stopped on a size limit (those
// limits count buffered bytes, which depend on the pieces). No part's bytes may contain the
// delimiter. A part without a filename is refused, as the route does without ?path=.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "api/e2b/parse.h"
#include "fuzz/fuzz_util.h"

namespace {

using space::fuzz::Check;
namespace e2b = space::api::e2b;

struct Part {
  std::string name, bytes;
  bool ended = false;
  bool operator==(const Part&) const = default;
};

struct Outcome {
  std::vector<Part> parts;
  bool ok = true;
  bool done = false;
  std::string error;
};

Outcome Parse(const std::string& boundary, std::string_view body, uint32_t seed, bool whole) {
  Outcome out;
  e2b::Multipart mp(boundary);
  mp.on_part = [&](const std::string& name) -> space::Status {
    Check(out.parts.empty() || out.parts.back().ended, "a part starts after the previous ended");
    if (name.empty()) return space::Fail(space::Errc::kInvalidArgument, "a file part has no path");
    out.parts.push_back(Part{name, "", false});
    return space::Ok();
  };
  mp.on_data = [&](std::string_view bytes) -> space::Status {
    Check(!out.parts.empty() && !out.parts.back().ended, "data belongs to an open part");
    out.parts.back().bytes.append(bytes);
    return space::Ok();
  };
  mp.on_end = [&]() -> space::Status {
    Check(!out.parts.empty() && !out.parts.back().ended, "end closes an open part");
    out.parts.back().ended = true;
    return space::Ok();
  };
  space::fuzz::SplitSizes split(seed, 64);
  while (out.ok && !body.empty()) {
    size_t n = whole ? body.size() : std::min(body.size(), split.Next());
    auto st = mp.Feed(body.substr(0, n));
    body.remove_prefix(n);
    if (!st) {
      out.ok = false;
      out.error = st.error().message;
    }
  }
  out.done = mp.done();
  return out;
}

bool SizeLimit(const Outcome& o) {
  return !o.ok && (o.error == "multipart: no boundary" || o.error == "multipart: bad boundary line" ||
                   o.error == "multipart: headers too long");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  uint32_t seed = space::fuzz::TakeU32(&in);
  size_t nl = in.find('\n');
  if (nl == std::string_view::npos) return 0;
  std::string content_type(in.substr(0, nl));
  std::string_view body = in.substr(nl + 1);
  if (e2b::MediaType(content_type) != "multipart/form-data") {
    // Not a multipart upload: the route does not parse it. Still exercise the helpers.
    (void)e2b::MultipartBoundary(content_type);
  }
  std::string boundary = e2b::MultipartBoundary(content_type);
  if (boundary.empty()) return 0;  // "multipart body without a boundary"

  Outcome whole = Parse(boundary, body, seed, true);
  Outcome pieces = Parse(boundary, body, seed, false);
  const std::string delim = "\r\n--" + boundary;
  for (const Outcome* o : {&whole, &pieces}) {
    for (const Part& p : o->parts) {
      Check(p.bytes.find(delim) == std::string::npos, "part bytes never hold the delimiter");
      Check(!p.name.empty(), "parts are named");
    }
    Check(!o->done || o->ok, "done only without an error");
  }
  if (whole.ok && pieces.ok) {
    Check(whole.done == pieces.done, "whole and pieces agree on the end");
    if (whole.done) Check(whole.parts == pieces.parts, "whole and pieces agree on the parts");
  } else if (whole.ok != pieces.ok) {
    Check(SizeLimit(whole) || SizeLimit(pieces), "whole and pieces differ only on a size limit");
  } else if (!SizeLimit(whole) && !SizeLimit(pieces)) {
    Check(whole.parts.size() == pieces.parts.size(), "both fail after the same parts");
  }
  return 0;
}
