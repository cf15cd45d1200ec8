// A libFuzzer-ready entry point for the spec parser. The fuzz/ build wraps it:
//   extern "C" int LLVMFuzzerTestOneInput(const uint8_t* d, size_t n) {
//     return space::tmpl::FuzzParseSpec(d, n);
//   }
// Besides "does not crash", it checks the parser's promises and aborts when one breaks, so a
// fuzzer finds wrong answers too, not only memory errors.
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "template/internal.h"
#include "template/template.h"

namespace space::tmpl {

namespace {

[[noreturn]] void Violated(const char* what, const std::string& detail) {
  std::fprintf(stderr, "FuzzParseSpec invariant violated: %s: %s\n", what, detail.c_str());
  std::abort();
}

// The N of a "line N: ..." message, or -1.
long LineOf(const std::string& msg) {
  if (msg.compare(0, 5, "line ") != 0) return -1;
  char* end = nullptr;
  long n = std::strtol(msg.c_str() + 5, &end, 10);
  if (!end || *end != ':') return -1;
  return n;
}

bool HasDotDot(const std::string& path) {
  size_t i = 0;
  while (i <= path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    if (path.compare(i, j - i, "..") == 0) return true;
    i = j + 1;
  }
  return false;
}

}  // namespace

int FuzzParseSpec(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  long lines = 1;
  for (char c : text) lines += c == '\n';
  auto spec = ParseSpec(text);
  if (!spec) {
    const Error& e = spec.error();
    if (e.message.empty()) Violated("empty error message", "");
    if (e.code != Errc::kInvalidArgument && e.code != Errc::kTooLarge)
      Violated("unexpected error code", e.message);
    long n = LineOf(e.message);
    if (n == 0 || n > lines) Violated("error names a line outside the text", e.message);
    return 0;
  }
  if (size > kMaxSpecBytes) Violated("oversized spec accepted", std::to_string(size));
  if (spec->steps.size() > static_cast<size_t>(kMaxInstructions))
    Violated("too many steps accepted", std::to_string(spec->steps.size()));
  for (const auto& w : spec->warnings) {
    long n = LineOf(w);
    if (n == 0 || n > lines) Violated("warning names a line outside the text", w);
  }
  const FromRef& f = spec->from;
  if (f.kind == FromRef::Kind::kNameTag && (f.name.empty() || f.tag.empty()))
    Violated("empty name or tag", f.ToString());
  if (f.kind == FromRef::Kind::kDigest && f.digest.size() != 71) Violated("bad digest", f.digest);
  std::string parent = "sha256:base";
  int last_line = 0;
  for (const auto& s : spec->steps) {
    if (s.line < 1 || s.line > lines || s.line < last_line)
      Violated("step line out of order or range", std::to_string(s.line));
    last_line = s.line;
    if (s.args.empty()) Violated("step without args", s.text);
    switch (s.kind) {
      case StepKind::kRun:
        if (RunArgv(s).empty() || RunArgv(s)[0].empty()) Violated("empty RUN argv", s.text);
        break;
      case StepKind::kCopy:
        if (s.args.size() < 2 || s.args.back().empty() || s.args.back()[0] != '/')
          Violated("COPY destination not absolute", s.text);
        for (size_t i = 0; i + 1 < s.args.size(); ++i) {
          const std::string& src = s.args[i];
          if (src.empty() || src[0] == '/' || HasDotDot(src))
            Violated("COPY source escapes the context", src);
          if (IsCopyPattern(src) && !internal::CopyPatternError(src).empty())
            Violated("malformed COPY wildcard accepted", src);
        }
        break;
      case StepKind::kWorkdir:
        if (s.args.size() != 1 || s.args[0].empty() || s.args[0][0] != '/')
          Violated("WORKDIR not absolute", s.text);
        break;
      case StepKind::kEnv:
        for (const auto& kv : s.args) {
          if (kv.find('=') == std::string::npos || kv[0] == '=') Violated("ENV without K=", kv);
        }
        break;
      case StepKind::kUser:
        if (s.args.size() != 1 || s.args[0].empty()) Violated("empty USER", s.text);
        break;
    }
    std::string key = StepCacheKey(parent, s, "sha256:content");
    if (key.size() != 71 || key.compare(0, 7, "sha256:") != 0) Violated("bad cache key", key);
    if (key != StepCacheKey(parent, s, "sha256:content")) Violated("unstable cache key", key);
    parent = key;
  }
  return 0;
}

}  // namespace space::tmpl
