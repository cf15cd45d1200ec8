// Fuzz target mux_stream: client::MuxParser (the `format=mux` output stream of
// GET .../commands/{cid}/output) fed in seed-chosen pieces.
//
// Input: u32 split seed | stream bytes. The stream is parsed whole and in pieces; both must
// deliver the same stdout/stderr bytes and exit payload, agree on errors, on saw_exit() and on
// the byte counters. The exit payload is parsed as the COMMAND JSON the CLI reads.
#include <cstdint>
#include <string>
#include <string_view>

#include "cli/client.h"
#include "common/json.h"
#include "fuzz/fuzz_util.h"

namespace {

using space::client::MuxKind;
using space::client::MuxParser;
using space::fuzz::Check;

struct Seen {
  std::string out, err, exit;
  int exits = 0;
  bool failed = false;
  bool stopped = false;
  bool saw_exit = false;
  uint64_t out_bytes = 0, err_bytes = 0;
};

Seen Parse(std::string_view in, uint32_t seed, bool split) {
  Seen s;
  MuxParser p;
  auto cb = [&](MuxKind kind, std::string_view bytes) {
    switch (kind) {
      case MuxKind::kStdout: s.out.append(bytes); break;
      case MuxKind::kStderr: s.err.append(bytes); break;
      case MuxKind::kExit:
        s.exit.assign(bytes);
        ++s.exits;
        break;
      default: Check(false, "callback got an unknown kind");
    }
    return true;
  };
  space::fuzz::SplitSizes sizes(seed, 1 + (seed >> 24) % 32);
  while (!in.empty()) {
    size_t n = split ? std::min(sizes.Next(), in.size()) : in.size();
    auto r = p.Feed(in.substr(0, n), cb);
    in.remove_prefix(n);
    if (!r) {
      Check(r.error().code == space::Errc::kInvalidArgument, "MuxParser error code");
      s.failed = true;
      break;
    }
    if (!*r) {
      s.stopped = true;
      break;
    }
  }
  s.saw_exit = p.saw_exit();
  s.out_bytes = p.stdout_bytes();
  s.err_bytes = p.stderr_bytes();
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  uint32_t seed = space::fuzz::TakeU32(&in);
  Seen whole = Parse(in, seed, false);
  Seen split = Parse(in, seed, true);
  Check(!whole.stopped && !split.stopped, "parser stopped though the callback never asked");
  Check(whole.failed == split.failed, "split feeding changes whether the stream fails");
  Check(whole.exits <= 1 && split.exits <= 1, "exit record delivered twice");
  Check(whole.saw_exit == (whole.exits == 1), "saw_exit disagrees with the callback");
  Check(whole.out_bytes == whole.out.size() && whole.err_bytes == whole.err.size(),
        "byte counters disagree with delivered bytes");
  if (!whole.failed) {
    // Before an error the whole feed may have delivered less (it fails at once), so the
    // streams are compared only when both succeeded.
    Check(whole.out == split.out && whole.err == split.err && whole.exit == split.exit,
          "split feeding changes the delivered bytes");
    Check(whole.saw_exit == split.saw_exit, "split feeding changes saw_exit");
  }
  if (whole.exits == 1) {
    Check(whole.exit.size() <= MuxParser::kMaxExitRecord, "oversized exit record delivered");
    if (auto cmd = space::ParseJson(whole.exit)) {
      (void)space::JsonString(*cmd, "id");
      (void)space::JsonString(*cmd, "state");
      (void)space::JsonInt(*cmd, "exit_code");
      (void)space::JsonBool(*cmd, "timed_out");
    }
  }
  return 0;
}
