// Fuzz target http_target: the request target as spaced splits it (api::ParseTarget,
// PercentDecode) and every query value a route reads (api/parse.h, e2b/parse.h).
//
// Input: the raw request-target bytes (Beast hands the server whatever the request line
// holds). Checks: decoding never grows a string; percent-encoding the parsed segments and
// query pairs and parsing that again gives them back; each query parser keeps its range.
#include <cctype>
#include <cstdint>
#include <string>
#include <string_view>

#include "api/e2b/parse.h"
#include "api/parse.h"
#include "fuzz/fuzz_util.h"

namespace {

using space::Errc;
using space::fuzz::Check;
namespace api = space::api;

std::string Encode(std::string_view s) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

void QueryValues(const api::Query& q) {
  int64_t wait = api::WaitMillis(q);
  Check(wait >= -1 && wait <= 5 * 60 * 1000, "wait is -1 or 0..5 min");
  for (const char* key : {"offset", "stdout_offset", "stderr_offset"}) {
    auto off = api::ParseOffset(q, key);
    if (!off) {
      Check(off.error().code == Errc::kInvalidArgument, "offset: invalid_argument");
      continue;
    }
    std::string v = api::QueryValue(q, key, "0");
    Check(!v.empty() && v.find_first_not_of("0123456789") == std::string::npos,
          "an accepted offset is a decimal number");
  }
  if (auto l = api::ParseOutputLimit(q)) {
    Check(*l >= 1 && *l <= (64u << 20), "output limit 1..64 MiB");
    std::string v = api::QueryValue(q, "limit");
    Check(v.find_first_not_of("0123456789") == std::string::npos, "an accepted limit is a number");
  }
  auto digits = [&](const char* key, const char* alphabet) {
    std::string v = api::QueryValue(q, key);
    return v.find_first_not_of(alphabet) == std::string::npos;
  };
  if (auto l = api::ParseOperationsLimit(q)) {
    Check(*l >= 0 && digits("limit", "0123456789"), "operations limit: a number");
  }
  if (auto m = api::ParseFileMode(q)) {
    Check(*m >= 0 && *m <= 07777 && digits("mode", "01234567"), "mode: octal 0..07777");
  }
  if (auto d = api::ParseListDepth(q)) {
    Check(*d >= 1 && *d <= 16 && digits("depth", "0123456789"), "depth: 1..16");
  }
  if (auto f = api::ParseSandboxFilter(q)) {
    for (const auto& [k, v] : f->labels) Check(!k.empty(), "label keys non-empty");
  }
  (void)api::Truthy(api::QueryValue(q, "recursive"));
  auto labels = space::api::e2b::ParseMetadataFilter(api::QueryValue(q, "metadata"));
  (void)labels;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 64 * 1024) return 0;  // the server's header limit
  std::string_view target(reinterpret_cast<const char*>(data), size);
  Check(api::PercentDecode(target).size() <= target.size(), "decoding never grows");
  Check(api::PercentDecode(Encode(target)) == target, "PercentDecode inverts encoding");

  api::Target t = api::ParseTarget(target);
  for (const auto& s : t.segments) Check(!s.empty(), "no empty segments");

  // Re-encode what was parsed: the same segments and query come back.
  std::string again;
  for (const auto& s : t.segments) again += "/" + Encode(s);
  if (again.empty()) again = "/";
  std::string qs;
  for (const auto& [k, v] : t.query) qs += (qs.empty() ? "" : "&") + Encode(k) + "=" + Encode(v);
  if (!qs.empty()) again += "?" + qs;
  api::Target t2 = api::ParseTarget(again);
  Check(t2.segments == t.segments, "segments survive encode/parse");
  Check(t2.query == t.query, "query survives encode/parse");

  QueryValues(t.query);
  return 0;
}
