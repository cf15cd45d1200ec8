// template/internal: helpers shared by the template subsystem's .cc files (not a public API;
// other folders include template.h only).
#pragma once

#include <sodium.h>

#include <string>
#include <string_view>
#include <vector>

#include "common/common.h"
#include "sys/sys.h"

namespace space::tmpl::internal {

// Longest archive path and deepest nesting accepted: generous for real images, and they bound
// the recursion (and the fds it holds) when removing trees.
inline constexpr size_t kMaxPathBytes = 4096;
inline constexpr size_t kMaxDepth = 256;

// Renders untrusted bytes for an error message (escaped, truncated, in double quotes).
std::string Quote(std::string_view s);

// Splits an archive-relative path into components, dropping "" and "." ones. Refuses
// absolute paths, ".." components, components over NAME_MAX, and paths over the limits
// above; `what` prefixes the error (e.g. "entry \"a/b\"").
Result<std::vector<std::string>> SplitRelPath(std::string_view path, std::string_view what);
std::string JoinPath(const std::vector<std::string>& comps, size_t n);

// openat2(RESOLVE_IN_ROOT): opens `rel` below the directory `root_fd` as if root_fd were "/",
// so neither "..", absolute symlinks nor relative ones can leave it (Linux >= 5.6).
Result<sys::UniqueFd> OpenInRoot(int root_fd, const std::string& rel, int flags);
// The path the kernel reports for an open fd (/proc/self/fd/N).
Result<std::string> FdPath(int fd);

// Streams an fd (from its current offset) through sha256; "sha256:<hex>" and the byte count.
Result<std::pair<std::string, int64_t>> Sha256Fd(int fd);

bool IsSha256Digest(std::string_view d);  // "sha256:" + 64 lowercase hex

// What is wrong with a COPY wildcard pattern (see template.h), "" if nothing: an unclosed
// `[` class or a trailing `\`, which Go's filepath.Match (and so Docker) refuses.
std::string CopyPatternError(std::string_view pattern);

}  // namespace space::tmpl::internal
