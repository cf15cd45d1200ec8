// COPY wildcards: see template.h. Matching is fnmatch(3) per path segment over the build
// context's paths; the context is a list of regular files, so directories are the proper
// prefixes of its paths and nothing is ever looked up on a filesystem.
#include <fnmatch.h>

#include <algorithm>
#include <set>

#include "template/internal.h"
#include "template/template.h"

namespace space::tmpl {

namespace {

// Orders paths as a walk of sorted directories lists them: '/' sorts before every other byte,
// so "a/x" comes before "a.b/x" (Docker globs directory by directory).
bool WalkOrder(const std::string& a, const std::string& b) {
  return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end(), [](char x, char y) {
    unsigned char ux = x == '/' ? 0 : static_cast<unsigned char>(x);
    unsigned char uy = y == '/' ? 0 : static_cast<unsigned char>(y);
    return ux < uy;
  });
}

}  // namespace

bool IsCopyPattern(std::string_view source) {
  return source.find_first_of("*?[") != std::string_view::npos;
}

std::vector<std::string> MatchCopyPattern(std::string_view pattern,
                                          const std::map<std::string, std::string>& context) {
  // Its segments without empty and "." ones (the parser has normalized it already). One
  // SplitRelPath refuses (absolute, "..", over the limits) can match no context path.
  auto split = internal::SplitRelPath(pattern, "COPY wildcard");
  if (!split || split->empty()) return {};
  const std::vector<std::string>& segs = *split;
  std::set<std::string> found;
  for (const auto& [path, data] : context) {
    (void)data;
    size_t start = 0;
    bool ok = true;
    for (const auto& seg : segs) {
      if (start > path.size()) {  // the path has fewer segments than the pattern
        ok = false;
        break;
      }
      size_t end = path.find('/', start);
      if (end == std::string::npos) end = path.size();
      const std::string name = path.substr(start, end - start);
      if (::fnmatch(seg.c_str(), name.c_str(), FNM_PATHNAME) != 0) {
        ok = false;
        break;
      }
      start = end + 1;
    }
    if (ok) found.insert(path.substr(0, start - 1));
  }
  std::vector<std::string> out(found.begin(), found.end());
  std::sort(out.begin(), out.end(), WalkOrder);
  return out;
}

namespace internal {

std::string CopyPatternError(std::string_view pattern) {
  for (size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    if (c == '\\') {
      if (++i >= pattern.size()) return "a trailing '\\' escapes nothing";
    } else if (c == '[') {
      // A class: an optional '!' or '^', then at least one member (a ']' first is a member),
      // up to ']' within the same segment.
      size_t j = i + 1;
      if (j < pattern.size() && (pattern[j] == '!' || pattern[j] == '^')) ++j;
      if (j < pattern.size() && pattern[j] == ']') ++j;
      while (j < pattern.size() && pattern[j] != ']' && pattern[j] != '/') {
        if (pattern[j] == '\\') ++j;
        ++j;
      }
      if (j >= pattern.size() || pattern[j] != ']') return "'[' without a closing ']'";
      i = j;
    }
  }
  return "";
}

}  // namespace internal

}  // namespace space::tmpl
