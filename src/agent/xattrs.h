// agent/xattrs: extended attributes in the user namespace for the file operations
// (docs/agent-protocol.md, "write" and ENTRY "xattrs"); E2B's file metadata is kept as
// `user.e2b.*` attributes. Only "user." names: the agent runs as root, and the trusted.
// and security. namespaces (file capabilities, SELinux labels) are not the API's to set.
#pragma once

#include <sys/stat.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/common.h"
#include "common/json.h"

namespace space::agent {

inline constexpr size_t kMaxXattrName = 255;        // XATTR_NAME_MAX
inline constexpr size_t kMaxXattrValue = 4096;      // one ext4 block holds them all
inline constexpr size_t kMaxXattrs = 64;

// What a write sets: every attribute under `prefix` that `set` lacks is removed first.
struct XattrWrite {
  std::string prefix;
  std::vector<std::pair<std::string, std::string>> set;
};

// A request's "xattr_prefix" ("" when absent). kInvalidArgument unless it starts "user.".
[[nodiscard]] Result<std::string> XattrPrefixOf(const Json& req);
// A write request's "xattrs" ({name: value}) with its "xattr_prefix"; nullopt when it has
// neither. kInvalidArgument for a name outside "user." (or outside the prefix), too long,
// a value that is not a string or too long, or too many of them.
[[nodiscard]] Result<std::optional<XattrWrite>> XattrWriteOf(const Json& req);
// Applies `w` to an open file. kInvalidArgument where the filesystem keeps no user
// attributes (gVisor's root, tmpfs before Linux 6.6) and something is to be set; other
// errors carry the syscall's errno.
[[nodiscard]] Status ApplyXattrs(int fd, const XattrWrite& w, const std::string& path);
// The attributes under `prefix` of `name` in `dirfd` (regular files and directories only;
// never following a symlink) as {name: value}; values that are not printable ASCII are
// left out. Empty when it has none or cannot be read.
Json XattrsAt(int dirfd, const char* name, const struct stat& st, const std::string& prefix);

}  // namespace space::agent
