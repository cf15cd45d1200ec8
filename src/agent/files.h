// agent/files: the file operations of the agent protocol (stat, list, read, write, mkdir,
// remove, rename), confined to one root directory.
//
// Every path is absolute inside the sandbox, cleaned lexically ("..", ".", "//") and then
// resolved by the kernel with openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS) on a
// directory fd of the root, so neither ".." nor absolute or relative symlinks can leave
// it, even when the root is not the process's root (microVMs, tests). The last path
// component is never followed for stat/remove/rename (they act on the link itself);
// read/write/list follow it, inside the root. Operations block briefly on local disk.
// A FileService owns its root fd; not thread-safe.
#pragma once

#include <string>
#include <string_view>

#include <optional>

#include "agent/users.h"
#include "common/common.h"
#include "common/json.h"
#include "sys/sys.h"

namespace space::agent {

inline constexpr int kMaxListDepth = 16;
inline constexpr size_t kMaxListEntries = 10000;  // larger listings are truncated

// The root's /etc/passwd and /etc/group texts, read once per request: entries carry the
// names of their owner and group ("user", "group") when those files have them.
struct IdNames {
  std::string passwd, group;
};

class FileService {
 public:
  struct Reply {
    Json json;         // {"ok":true,...}
    std::string body;  // file bytes for `read`
  };

  // Opens `root` (a directory) as the resolution root.
  [[nodiscard]] static Result<FileService> Open(const std::string& root);
  static bool IsFileOp(std::string_view op);

  // Runs one request; errors carry the Errc of the failing syscall (ErrcFromErrno) or
  // invalid_argument for a malformed request.
  [[nodiscard]] Result<Reply> Handle(std::string_view op, const Json& req, std::string_view body);

 private:
  explicit FileService(sys::UniqueFd root) : root_(std::move(root)) {}

  Result<Reply> Stat(const Json& req);
  Result<Reply> List(const Json& req);
  Result<Reply> Read(const Json& req);
  Result<Reply> Write(const Json& req, std::string_view body);
  Result<Reply> Mkdir(const Json& req);
  Result<Reply> Remove(const Json& req);
  Result<Reply> Rename(const Json& req);

  // openat2 of a cleaned absolute path inside the root.
  Result<sys::UniqueFd> Resolve(const std::string& path, int flags, mode_t mode = 0) const;
  bool RootIsProcessRoot() const;
  // The parent directory (O_PATH) of a cleaned path other than "/", and the last name.
  Result<std::pair<sys::UniqueFd, std::string>> ResolveParent(const std::string& path) const;
  // Creates the missing directories of `path`; those it creates belong to `owner` if given.
  Status MkdirAll(const std::string& path, mode_t mode, const UserInfo* owner = nullptr) const;
  // A whole small file inside the root ("" when it cannot be read).
  std::string ReadInRoot(const std::string& path) const;
  // A symlink's "target_path" (where it leads, resolved inside the root, absolute) and
  // "target_type"; neither for a dangling link.
  void AddTarget(Json& entry, const std::string& path) const;
  // The root's /etc/passwd and /etc/group, for the owner names of entries.
  IdNames Names() const;
  // A request's optional "user" (a name or a uid, looked up in the root's /etc/passwd as
  // exec does): what a write or mkdir creates is then theirs.
  Result<std::optional<UserInfo>> OwnerOf(const Json& req) const;

  sys::UniqueFd root_;
};

// Cleans an absolute path lexically: "/a//b/./c/../d" -> "/a/b/d"; ".." at the root
// stays at the root. Errors: not absolute, or holds a NUL byte (invalid_argument).
[[nodiscard]] Result<std::string> CleanPath(std::string_view path);

}  // namespace space::agent
