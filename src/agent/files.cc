#include "agent/files.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "agent/protocol.h"
#include "agent/users.h"
#include "agent/xattrs.h"

namespace space::agent {
namespace {

using Reply = FileService::Reply;

Result<std::string> PathField(const Json& req, const char* key) {
  auto s = JsonString(req, key);
  if (!s) return Fail(Errc::kInvalidArgument, std::string(key) + " must be a string");
  return CleanPath(*s);
}

Result<int64_t> IntField(const Json& req, const char* key, int64_t def, int64_t min, int64_t max) {
  if (!JsonField(req, key)) return def;
  auto v = JsonInt(req, key);
  if (!v || *v < min || *v > max)
    return Fail(Errc::kInvalidArgument, std::string(key) + " must be an integer in " +
                                            std::to_string(min) + ".." + std::to_string(max));
  return *v;
}

Result<bool> BoolField(const Json& req, const char* key) {
  if (!JsonField(req, key)) return false;
  auto v = JsonBool(req, key);
  if (!v) return Fail(Errc::kInvalidArgument, std::string(key) + " must be a bool");
  return *v;
}

// Gives `name` under `dirfd` (never following a symlink) to the user and their group.
Status ChownAt(int dirfd, const std::string& name, const UserInfo& who, const std::string& path) {
  if (::fchownat(dirfd, name.c_str(), who.uid, who.gid, AT_SYMLINK_NOFOLLOW) < 0)
    return ErrnoFail("chown " + path);
  return Ok();
}

std::string Join(const std::string& dir, std::string_view name) {
  std::string out = dir;
  if (out != "/") out += '/';
  out += name;
  return out;
}

Result<std::string> ReadLinkAt(int dirfd, const char* name) {
  std::string buf(256, '\0');
  for (;;) {
    ssize_t n = ::readlinkat(dirfd, name, buf.data(), buf.size());
    if (n < 0) return ErrnoFail("readlink");
    if (static_cast<size_t>(n) < buf.size()) {
      buf.resize(static_cast<size_t>(n));
      return buf;
    }
    if (buf.size() >= (1u << 16)) return Fail(Errc::kTooLarge, "readlink: target too long");
    buf.resize(buf.size() * 2);
  }
}

const char* TypeName(mode_t mode) {
  return S_ISREG(mode) ? "file" : S_ISDIR(mode) ? "dir" : S_ISLNK(mode) ? "symlink" : "other";
}

// ENTRY of docs/agent-protocol.md. `dirfd`/`name` locate a symlink's target.
Json EntryJson(const std::string& path, std::string_view name, const struct stat& st, int dirfd,
               const IdNames& names) {
  const char* type = TypeName(st.st_mode);
  Json e = {
      {"path", path},
      {"name", std::string(name)},
      {"type", type},
      {"size", static_cast<int64_t>(st.st_size)},
      {"mode", static_cast<int>(st.st_mode & 07777)},
      {"mtime_ms", static_cast<int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1000000},
      {"uid", static_cast<int64_t>(st.st_uid)},
      {"gid", static_cast<int64_t>(st.st_gid)}};
  if (std::string u = NameOfId(names.passwd, st.st_uid); !u.empty()) e["user"] = u;
  if (std::string g = NameOfId(names.group, st.st_gid); !g.empty()) e["group"] = g;
  if (S_ISLNK(st.st_mode)) {
    auto target = ReadLinkAt(dirfd, std::string(name).c_str());
    if (target) e["link_target"] = *target;
  }
  return e;
}

// An ENTRY's "xattrs" under `prefix`, when asked for and it has some.
void AddXattrs(Json& e, int dirfd, const char* name, const struct stat& st, const std::string& prefix) {
  if (prefix.empty()) return;
  Json x = XattrsAt(dirfd, name, st, prefix);
  if (!x.empty()) e["xattrs"] = std::move(x);
}

// Lists one directory (taking ownership of fd) into `out`, descending `depth - 1` more
// levels. Subdirectories are opened O_NOFOLLOW relative to their parent, so the walk
// never follows a symlink; unreadable subdirectories are skipped.
Status Walk(int fd, const std::string& prefix, int depth, const IdNames& ids,
            const std::string& xattr_prefix, std::vector<Json>* out, bool* truncated) {
  DIR* d = ::fdopendir(fd);
  if (!d) {
    int err = errno;
    ::close(fd);
    return ErrnoFail("list " + prefix, err);
  }
  std::vector<std::string> names;
  while (struct dirent* de = ::readdir(d)) {
    std::string_view n = de->d_name;
    if (n == "." || n == "..") continue;
    names.emplace_back(n);
  }
  std::sort(names.begin(), names.end());
  for (const auto& n : names) {
    if (out->size() >= kMaxListEntries) {
      *truncated = true;
      break;
    }
    struct stat st;
    if (::fstatat(::dirfd(d), n.c_str(), &st, AT_SYMLINK_NOFOLLOW) < 0) continue;  // raced away
    std::string path = Join(prefix, n);
    out->push_back(EntryJson(path, n, st, ::dirfd(d), ids));
    AddXattrs(out->back(), ::dirfd(d), n.c_str(), st, xattr_prefix);
    if (S_ISDIR(st.st_mode) && depth > 1) {
      int sub = ::openat(::dirfd(d), n.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub >= 0) (void)Walk(sub, path, depth - 1, ids, xattr_prefix, out, truncated);
    }
  }
  ::closedir(d);
  return Ok();
}

// Removes the directory `name` under `parent` and everything below it, never following
// symlinks and never descending into another filesystem (a mount point inside the tree
// is an error, as with `rm --one-file-system`).
Status RemoveTree(int parent, const std::string& name, dev_t dev, const std::string& path) {
  int fd = ::openat(parent, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return ErrnoFail("remove " + path);
  DIR* d = ::fdopendir(fd);
  if (!d) {
    int err = errno;
    ::close(fd);
    return ErrnoFail("remove " + path, err);
  }
  struct stat self;
  if (::fstat(::dirfd(d), &self) == 0 && self.st_dev != dev) {
    ::closedir(d);
    return Fail(Errc::kConflict, "remove " + path + ": is a mount point");
  }
  // Collect first: unlinking while readdir walks the same directory may skip entries.
  std::vector<std::string> names;
  while (struct dirent* de = ::readdir(d)) {
    std::string_view n = de->d_name;
    if (n != "." && n != "..") names.emplace_back(n);
  }
  Status result = Ok();
  for (const auto& n : names) {
    struct stat st;
    if (::fstatat(::dirfd(d), n.c_str(), &st, AT_SYMLINK_NOFOLLOW) < 0) {
      if (errno == ENOENT) continue;
      result = ErrnoFail("remove " + Join(path, n));
      break;
    }
    if (S_ISDIR(st.st_mode)) {
      result = RemoveTree(::dirfd(d), n, dev, Join(path, n));
      if (!result) break;
    } else if (::unlinkat(::dirfd(d), n.c_str(), 0) < 0 && errno != ENOENT) {
      result = ErrnoFail("remove " + Join(path, n));
      break;
    }
  }
  ::closedir(d);
  if (!result) return result;
  if (::unlinkat(parent, name.c_str(), AT_REMOVEDIR) < 0) return ErrnoFail("remove " + path);
  return Ok();
}

}  // namespace

Result<std::string> CleanPath(std::string_view path) {
  if (path.empty() || path[0] != '/')
    return Fail(Errc::kInvalidArgument, "path must be absolute: " + std::string(path));
  if (path.find('\0') != std::string_view::npos)
    return Fail(Errc::kInvalidArgument, "path holds a NUL byte");
  std::vector<std::string_view> parts;
  size_t i = 0;
  while (i < path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string_view::npos) j = path.size();
    std::string_view c = path.substr(i, j - i);
    if (c == "..") {
      if (!parts.empty()) parts.pop_back();
    } else if (!c.empty() && c != ".") {
      parts.push_back(c);
    }
    i = j + 1;
  }
  if (parts.empty()) return std::string("/");
  std::string out;
  for (auto c : parts) {
    out += '/';
    out += c;
  }
  return out;
}

Result<FileService> FileService::Open(const std::string& root) {
  int fd = ::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoFail("open root " + root);
  return FileService(sys::UniqueFd(fd));
}

bool FileService::IsFileOp(std::string_view op) {
  return op == "stat" || op == "list" || op == "read" || op == "write" || op == "mkdir" ||
         op == "remove" || op == "rename";
}

Result<FileService::Reply> FileService::Handle(std::string_view op, const Json& req,
                                               std::string_view body) {
  if (op == "stat") return Stat(req);
  if (op == "list") return List(req);
  if (op == "read") return Read(req);
  if (op == "write") return Write(req, body);
  if (op == "mkdir") return Mkdir(req);
  if (op == "remove") return Remove(req);
  if (op == "rename") return Rename(req);
  return Fail(Errc::kInvalidArgument, "unknown file op " + std::string(op));
}

namespace {
// Whether `fd` is the calling process's root directory.
bool SameAsProcessRoot(int fd) {
  struct stat a, b;
  return ::fstat(fd, &a) == 0 && ::stat("/", &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}
}  // namespace

bool FileService::RootIsProcessRoot() const { return SameAsProcessRoot(root_.get()); }

Result<sys::UniqueFd> FileService::Resolve(const std::string& path, int flags, mode_t mode) const {
  struct open_how how = {};
  how.flags = static_cast<uint64_t>(flags | O_CLOEXEC);
  how.mode = (flags & O_CREAT) ? mode : 0;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
  for (int attempt = 0;; ++attempt) {
    long fd = ::syscall(SYS_openat2, root_.get(), path.c_str(), &how, sizeof how);
    if (fd >= 0) return sys::UniqueFd(static_cast<int>(fd));
    // RESOLVE_IN_ROOT answers EAGAIN when a concurrent rename or mount could have let
    // ".." escape; retrying is the documented remedy.
    if ((errno == EAGAIN || errno == EINTR) && attempt < 16) continue;
    if (errno == ENOSYS && RootIsProcessRoot()) {
      // Kernels without openat2 (gVisor's): resolving inside the process's own root is
      // what RESOLVE_IN_ROOT does there anyway; only the magic-link refusal is lost, and
      // a magic link in that kernel leads nowhere but into the sandbox itself.
      int plain = ::openat(AT_FDCWD, path.c_str(), flags | O_CLOEXEC, how.mode);
      if (plain >= 0) return sys::UniqueFd(plain);
    }
    return ErrnoFail("open " + path);
  }
}

Result<std::pair<sys::UniqueFd, std::string>> FileService::ResolveParent(
    const std::string& path) const {
  size_t slash = path.rfind('/');
  std::string parent = slash == 0 ? "/" : path.substr(0, slash);
  auto fd = Resolve(parent, O_PATH | O_DIRECTORY);
  if (!fd) return tl::unexpected(fd.error());
  return std::make_pair(std::move(*fd), path.substr(slash + 1));
}

std::string FileService::ReadInRoot(const std::string& path) const {
  auto fd = Resolve(path, O_RDONLY | O_NONBLOCK | O_NOCTTY);
  if (!fd) return "";
  std::string out;
  char buf[8192];
  for (;;) {
    ssize_t n = ::read(fd->get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > (4u << 20)) break;  // a passwd file is not this large: stop reading
  }
  return out;
}

IdNames FileService::Names() const { return IdNames{ReadInRoot("/etc/passwd"), ReadInRoot("/etc/group")}; }

void FileService::AddTarget(Json& e, const std::string& path) const {
  auto fd = Resolve(path, O_PATH);
  if (!fd) return;
  struct stat st;
  if (::fstat(fd->get(), &st) < 0) return;
  e["target_type"] = TypeName(st.st_mode);
  // The kernel's name for the fd, less the root's own (when the root is not "/").
  auto real = ReadLinkAt(AT_FDCWD, ("/proc/self/fd/" + std::to_string(fd->get())).c_str());
  auto root = ReadLinkAt(AT_FDCWD, ("/proc/self/fd/" + std::to_string(root_.get())).c_str());
  if (!real || !root || real->empty() || (*real)[0] != '/') return;
  if (*root != "/") {
    if (!StartsWith(*real, *root) || (real->size() > root->size() && (*real)[root->size()] != '/')) return;
    *real = real->size() == root->size() ? "/" : real->substr(root->size());
  }
  e["target_path"] = *real;
}

Result<std::optional<UserInfo>> FileService::OwnerOf(const Json& req) const {
  const Json* u = JsonField(req, "user");
  if (!u || u->is_null()) return std::optional<UserInfo>();
  std::string user;
  if (u->is_string() && !u->get<std::string>().empty()) {
    user = u->get<std::string>();
  } else if (u->is_number_integer() && u->get<int64_t>() >= 0 && u->get<int64_t>() < 0xffffffffll) {
    user = std::to_string(u->get<int64_t>());
  } else {
    return Fail(Errc::kInvalidArgument, "user must be a name or a uid");
  }
  auto info = LookupUserIn(user, ReadInRoot("/etc/passwd"), ReadInRoot("/etc/group"), "/etc/passwd");
  if (!info) return tl::unexpected(info.error());
  return std::optional<UserInfo>(std::move(*info));
}

Status FileService::MkdirAll(const std::string& path, mode_t mode, const UserInfo* owner) const {
  auto prev = Resolve("/", O_PATH | O_DIRECTORY);
  if (!prev) return tl::unexpected(prev.error());
  std::string cur;
  size_t i = 1;
  while (i < path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    std::string comp = path.substr(i, j - i);
    i = j + 1;
    cur += "/" + comp;
    // Each prefix is resolved from the root again so that a symlinked component is
    // followed inside the root, like `mkdir -p` would.
    auto fd = Resolve(cur, O_PATH | O_DIRECTORY);
    if (!fd && fd.error().sys_errno == ENOENT) {
      if (::mkdirat(prev->get(), comp.c_str(), mode) < 0) {
        if (errno != EEXIST) return ErrnoFail("mkdir " + cur);
      } else if (owner) {
        SPACE_TRY(ChownAt(prev->get(), comp, *owner, cur));
      }
      fd = Resolve(cur, O_PATH | O_DIRECTORY);
    }
    if (!fd) {
      if (fd.error().sys_errno == ENOTDIR)
        return Fail(Errc::kConflict, "mkdir " + cur + ": exists and is not a directory");
      return tl::unexpected(fd.error());
    }
    prev = std::move(fd);
  }
  return Ok();
}

Result<Reply> FileService::Stat(const Json& req) {
  auto path = PathField(req, "path");
  if (!path) return tl::unexpected(path.error());
  auto xattr_prefix = XattrPrefixOf(req);
  if (!xattr_prefix) return tl::unexpected(xattr_prefix.error());
  struct stat st;
  if (*path == "/") {
    if (::fstat(root_.get(), &st) < 0) return ErrnoFail("stat /");
    Json e = EntryJson("/", "/", st, -1, Names());
    AddXattrs(e, root_.get(), ".", st, *xattr_prefix);
    return Reply{{{"ok", true}, {"entry", std::move(e)}}, {}};
  }
  auto parent = ResolveParent(*path);
  if (!parent) return tl::unexpected(parent.error());
  if (::fstatat(parent->first.get(), parent->second.c_str(), &st, AT_SYMLINK_NOFOLLOW) < 0)
    return ErrnoFail("stat " + *path);
  Json e = EntryJson(*path, parent->second, st, parent->first.get(), Names());
  AddXattrs(e, parent->first.get(), parent->second.c_str(), st, *xattr_prefix);
  if (S_ISLNK(st.st_mode)) AddTarget(e, *path);
  return Reply{{{"ok", true}, {"entry", std::move(e)}}, {}};
}

Result<Reply> FileService::List(const Json& req) {
  auto path = PathField(req, "path");
  if (!path) return tl::unexpected(path.error());
  auto depth = IntField(req, "depth", 1, 1, kMaxListDepth);
  if (!depth) return tl::unexpected(depth.error());
  auto xattr_prefix = XattrPrefixOf(req);
  if (!xattr_prefix) return tl::unexpected(xattr_prefix.error());
  auto dir = Resolve(*path, O_RDONLY | O_DIRECTORY);
  if (!dir) return tl::unexpected(dir.error());
  std::vector<Json> entries;
  bool truncated = false;
  auto st = Walk(dir->Release(), *path, static_cast<int>(*depth), Names(), *xattr_prefix, &entries,
                 &truncated);
  if (!st) return tl::unexpected(st.error());
  std::sort(entries.begin(), entries.end(), [](const Json& a, const Json& b) {
    return a["path"].get_ref<const std::string&>() < b["path"].get_ref<const std::string&>();
  });
  Reply r{{{"ok", true}, {"entries", std::move(entries)}}, {}};
  if (truncated) r.json["truncated"] = true;
  return r;
}

Result<Reply> FileService::Read(const Json& req) {
  auto path = PathField(req, "path");
  if (!path) return tl::unexpected(path.error());
  auto offset = IntField(req, "offset", 0, 0, INT64_MAX);
  if (!offset) return tl::unexpected(offset.error());
  auto length = IntField(req, "length", kMaxFileChunk, 0, INT64_MAX);
  if (!length) return tl::unexpected(length.error());
  // O_NONBLOCK: opening a FIFO planted by the sandbox must not hang the agent.
  auto fd = Resolve(*path, O_RDONLY | O_NONBLOCK | O_NOCTTY);
  if (!fd) return tl::unexpected(fd.error());
  struct stat st;
  if (::fstat(fd->get(), &st) < 0) return ErrnoFail("stat " + *path);
  if (!S_ISREG(st.st_mode))
    return Fail(Errc::kInvalidArgument, "read " + *path + ": not a regular file");
  size_t want = static_cast<size_t>(std::min<int64_t>(*length, kMaxFileChunk));
  std::string body(want, '\0');
  size_t got = 0;
  while (got < want) {
    ssize_t n =
        ::pread(fd->get(), body.data() + got, want - got, *offset + static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoFail("read " + *path);
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  body.resize(got);
  // Files in /proc report size 0, so a short read is the reliable end signal.
  bool eof = got < want || (st.st_size > 0 && *offset + static_cast<int64_t>(got) >= st.st_size);
  return Reply{{{"ok", true}, {"size", static_cast<int64_t>(st.st_size)}, {"eof", eof}},
               std::move(body)};
}

Result<Reply> FileService::Write(const Json& req, std::string_view body) {
  auto path = PathField(req, "path");
  if (!path) return tl::unexpected(path.error());
  if (*path == "/") return Fail(Errc::kInvalidArgument, "write /: is a directory");
  auto offset = IntField(req, "offset", 0, 0, INT64_MAX - kMaxPayload);
  if (!offset) return tl::unexpected(offset.error());
  auto mode = IntField(req, "mode", 0644, 0, 07777);
  if (!mode) return tl::unexpected(mode.error());
  auto truncate = BoolField(req, "truncate");
  if (!truncate) return tl::unexpected(truncate.error());
  auto parents = BoolField(req, "create_parents");
  if (!parents) return tl::unexpected(parents.error());
  auto owner = OwnerOf(req);
  if (!owner) return tl::unexpected(owner.error());
  auto xattrs = XattrWriteOf(req);
  if (!xattrs) return tl::unexpected(xattrs.error());
  const UserInfo* who = *owner ? &**owner : nullptr;
  if (*parents) {
    size_t slash = path->rfind('/');
    SPACE_TRY(MkdirAll(slash == 0 ? "/" : path->substr(0, slash), 0755, who));
  }
  auto fd = Resolve(*path, O_WRONLY | O_CREAT | O_NONBLOCK | O_NOCTTY, static_cast<mode_t>(*mode));
  if (!fd) return tl::unexpected(fd.error());
  struct stat st;
  if (::fstat(fd->get(), &st) < 0) return ErrnoFail("stat " + *path);
  if (!S_ISREG(st.st_mode))
    return Fail(Errc::kInvalidArgument, "write " + *path + ": not a regular file");
  // The first piece of a write (offset 0) makes the file the user's, as if they wrote it.
  if (who && *offset == 0 && ::fchown(fd->get(), who->uid, who->gid) < 0)
    return ErrnoFail("chown " + *path);
  // Its extended attributes with its first piece (a rewrite replaces them too), before
  // the old content goes: a filesystem without them refuses the write whole.
  if (*xattrs && *offset == 0) SPACE_TRY(ApplyXattrs(fd->get(), **xattrs, *path));
  if (*truncate && ::ftruncate(fd->get(), 0) < 0) return ErrnoFail("truncate " + *path);
  size_t done = 0;
  while (done < body.size()) {
    ssize_t n = ::pwrite(fd->get(), body.data() + done, body.size() - done,
                         *offset + static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoFail("write " + *path);
    done += static_cast<size_t>(n);
  }
  if (::fstat(fd->get(), &st) < 0) return ErrnoFail("stat " + *path);
  return Reply{{{"ok", true}, {"size", static_cast<int64_t>(st.st_size)}}, {}};
}

Result<Reply> FileService::Mkdir(const Json& req) {
  auto path = PathField(req, "path");
  if (!path) return tl::unexpected(path.error());
  auto parents = BoolField(req, "parents");
  if (!parents) return tl::unexpected(parents.error());
  auto mode = IntField(req, "mode", 0755, 0, 07777);
  if (!mode) return tl::unexpected(mode.error());
  auto owner = OwnerOf(req);
  if (!owner) return tl::unexpected(owner.error());
  const UserInfo* who = *owner ? &**owner : nullptr;
  if (*parents) {
    SPACE_TRY(MkdirAll(*path, static_cast<mode_t>(*mode), who));
  } else {
    if (*path == "/") return Fail(Errc::kConflict, "mkdir /: exists");
    auto parent = ResolveParent(*path);
    if (!parent) return tl::unexpected(parent.error());
    if (::mkdirat(parent->first.get(), parent->second.c_str(), static_cast<mode_t>(*mode)) < 0)
      return ErrnoFail("mkdir " + *path);
    if (who) {
      SPACE_TRY(ChownAt(parent->first.get(), parent->second, *who, *path));
    }
  }
  return Reply{{{"ok", true}}, {}};
}

Result<Reply> FileService::Remove(const Json& req) {
  auto path = PathField(req, "path");
  if (!path) return tl::unexpected(path.error());
  if (*path == "/") return Fail(Errc::kInvalidArgument, "refusing to remove /");
  auto recursive = BoolField(req, "recursive");
  if (!recursive) return tl::unexpected(recursive.error());
  auto parent = ResolveParent(*path);
  if (!parent) return tl::unexpected(parent.error());
  int pfd = parent->first.get();
  const std::string& name = parent->second;
  struct stat st;
  if (::fstatat(pfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) < 0)
    return ErrnoFail("remove " + *path);
  if (S_ISDIR(st.st_mode)) {
    if (*recursive) {
      struct stat pst;
      if (::fstat(pfd, &pst) < 0) return ErrnoFail("stat parent of " + *path);
      // The tree must live on the filesystem of its parent: a mount point is not ours
      // to empty (e.g. the bind-mounted agent socket directory).
      if (pst.st_dev != st.st_dev)
        return Fail(Errc::kConflict, "remove " + *path + ": is a mount point");
      SPACE_TRY(RemoveTree(pfd, name, st.st_dev, *path));
    } else if (::unlinkat(pfd, name.c_str(), AT_REMOVEDIR) < 0) {
      return ErrnoFail("remove " + *path);
    }
  } else if (::unlinkat(pfd, name.c_str(), 0) < 0) {
    return ErrnoFail("remove " + *path);
  }
  return Reply{{{"ok", true}}, {}};
}

Result<Reply> FileService::Rename(const Json& req) {
  auto from = PathField(req, "from");
  if (!from) return tl::unexpected(from.error());
  auto to = PathField(req, "to");
  if (!to) return tl::unexpected(to.error());
  if (*from == "/" || *to == "/") return Fail(Errc::kInvalidArgument, "cannot rename /");
  auto fp = ResolveParent(*from);
  if (!fp) return tl::unexpected(fp.error());
  auto tp = ResolveParent(*to);
  if (!tp) return tl::unexpected(tp.error());
  if (::renameat(fp->first.get(), fp->second.c_str(), tp->first.get(), tp->second.c_str()) < 0)
    return ErrnoFail("rename " + *from + " to " + *to);
  return Reply{{{"ok", true}}, {}};
}

}  // namespace space::agent
