#include "storage/fs_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <utility>

#include "sys/sys.h"

namespace space::storage::internal {

namespace {

struct CopyContext {
  uint32_t shift = 0;
  int dst_root_fd = -1;
  // (dev, ino) of a source inode with several links -> its first copy, relative to dst root.
  std::map<std::pair<dev_t, ino_t>, std::string> links;
  bool try_clone = true;   // FICLONE (reflink) until it fails once
  bool try_cfr = true;     // copy_file_range until it fails once
};

std::string Join(const std::string& rel, const char* name) {
  return rel.empty() ? std::string(name) : rel + "/" + name;
}

Result<std::pair<uid_t, gid_t>> Shifted(const CopyContext& cx, const struct stat& st,
                                        const std::string& rel) {
  uint64_t uid = uint64_t{st.st_uid} + cx.shift;
  uint64_t gid = uint64_t{st.st_gid} + cx.shift;
  // (uid_t)-1 means "unchanged" to chown, so it is not a usable id either.
  if (uid >= 0xffffffffu || gid >= 0xffffffffu) {
    return Fail(Errc::kInvalidArgument, "copy " + rel + ": owner " + std::to_string(st.st_uid) +
                                            ":" + std::to_string(st.st_gid) +
                                            " overflows when shifted");
  }
  return std::pair<uid_t, gid_t>(static_cast<uid_t>(uid), static_cast<gid_t>(gid));
}

Status CopyData(CopyContext& cx, int in, int out, off_t size, const std::string& rel) {
  if (size == 0) return Ok();
  if (cx.try_clone) {
    if (::ioctl(out, FICLONE, in) == 0) return Ok();
    cx.try_clone = false;   // another filesystem, or no reflink support: stop asking
  }
  if (cx.try_cfr) {
    off_t left = size;
    bool failed = false;
    while (left > 0) {
      ssize_t n = ::copy_file_range(in, nullptr, out, nullptr, static_cast<size_t>(left), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EXDEV || errno == EINVAL || errno == ENOSYS ||
                    errno == EOPNOTSUPP)) {
        failed = true;
        break;
      }
      if (n < 0) return ErrnoFail("copy " + rel);
      if (n == 0) break;   // source shrank while copying
      left -= n;
    }
    if (!failed) return Ok();
    cx.try_cfr = false;
    // Restart from the beginning with plain read/write.
    if (::lseek(in, 0, SEEK_SET) < 0 || ::lseek(out, 0, SEEK_SET) < 0 || ::ftruncate(out, 0) < 0)
      return ErrnoFail("copy " + rel);
  }
  std::vector<char> buf(1 << 17);
  for (;;) {
    ssize_t n = ::read(in, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoFail("read " + rel);
    if (n == 0) break;
    SPACE_TRY_WRAP(sys::WriteAll(out, std::string_view(buf.data(), static_cast<size_t>(n))),
                   rel);
  }
  return Ok();
}

Status SetMeta(int fd, const struct stat& st, uid_t uid, gid_t gid, const std::string& rel) {
  // chown first: it clears setuid/setgid bits that the chmod then puts back.
  if (::fchown(fd, uid, gid) != 0) return ErrnoFail("chown " + rel);
  if (::fchmod(fd, st.st_mode & 07777) != 0) return ErrnoFail("chmod " + rel);
  struct timespec ts[2] = {st.st_atim, st.st_mtim};
  if (::futimens(fd, ts) != 0) return ErrnoFail("utimens " + rel);
  return Ok();
}

Status CopyDir(CopyContext& cx, int src_fd, int dst_fd, const std::string& rel);

Status CopyEntry(CopyContext& cx, int src_dir, int dst_dir, const char* name,
                 const std::string& rel) {
  struct stat st;
  if (::fstatat(src_dir, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return ErrnoFail("stat " + rel);
  auto ids = Shifted(cx, st, rel);
  if (!ids) return tl::unexpected(ids.error());
  auto [uid, gid] = *ids;

  if (!S_ISDIR(st.st_mode) && st.st_nlink > 1) {
    auto key = std::make_pair(st.st_dev, st.st_ino);
    auto it = cx.links.find(key);
    if (it != cx.links.end()) {
      if (::linkat(cx.dst_root_fd, it->second.c_str(), dst_dir, name, 0) != 0)
        return ErrnoFail("link " + rel);
      return Ok();
    }
    cx.links.emplace(key, rel);
  }

  if (S_ISDIR(st.st_mode)) {
    if (::mkdirat(dst_dir, name, 0700) != 0) return ErrnoFail("mkdir " + rel);
    sys::UniqueFd s(::openat(src_dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!s) return ErrnoFail("open " + rel);
    sys::UniqueFd d(::openat(dst_dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!d) return ErrnoFail("open " + rel);
    SPACE_TRY(CopyDir(cx, s.get(), d.get(), rel));
    // Last, so that creating the children does not change the copied mtime.
    return SetMeta(d.get(), st, uid, gid, rel);
  }
  if (S_ISREG(st.st_mode)) {
    sys::UniqueFd s(::openat(src_dir, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (!s) return ErrnoFail("open " + rel);
    sys::UniqueFd d(
        ::openat(dst_dir, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!d) return ErrnoFail("create " + rel);
    SPACE_TRY(CopyData(cx, s.get(), d.get(), st.st_size, rel));
    return SetMeta(d.get(), st, uid, gid, rel);
  }
  if (S_ISLNK(st.st_mode)) {
    std::string target(static_cast<size_t>(st.st_size) + 1, '\0');
    ssize_t n = ::readlinkat(src_dir, name, target.data(), target.size());
    if (n < 0) return ErrnoFail("readlink " + rel);
    target.resize(static_cast<size_t>(n));
    if (::symlinkat(target.c_str(), dst_dir, name) != 0) return ErrnoFail("symlink " + rel);
    if (::fchownat(dst_dir, name, uid, gid, AT_SYMLINK_NOFOLLOW) != 0)
      return ErrnoFail("chown " + rel);
    struct timespec ts[2] = {st.st_atim, st.st_mtim};
    if (::utimensat(dst_dir, name, ts, AT_SYMLINK_NOFOLLOW) != 0)
      return ErrnoFail("utimens " + rel);
    return Ok();
  }
  // Device nodes, fifos, sockets: recreate the inode itself.
  if (::mknodat(dst_dir, name, (st.st_mode & S_IFMT) | 0600, st.st_rdev) != 0)
    return ErrnoFail("mknod " + rel);
  if (::fchownat(dst_dir, name, uid, gid, AT_SYMLINK_NOFOLLOW) != 0)
    return ErrnoFail("chown " + rel);
  if (::fchmodat(dst_dir, name, st.st_mode & 07777, 0) != 0) return ErrnoFail("chmod " + rel);
  struct timespec ts[2] = {st.st_atim, st.st_mtim};
  if (::utimensat(dst_dir, name, ts, AT_SYMLINK_NOFOLLOW) != 0)
    return ErrnoFail("utimens " + rel);
  return Ok();
}

Status CopyDir(CopyContext& cx, int src_fd, int dst_fd, const std::string& rel) {
  // fdopendir takes ownership of the fd it is given; keep ours.
  int dup_fd = ::fcntl(src_fd, F_DUPFD_CLOEXEC, 0);
  if (dup_fd < 0) return ErrnoFail("dup");
  DIR* d = ::fdopendir(dup_fd);
  if (!d) {
    ::close(dup_fd);
    return ErrnoFail("opendir " + rel);
  }
  std::vector<std::string> names;
  errno = 0;
  while (dirent* e = ::readdir(d)) {
    if (!std::strcmp(e->d_name, ".") || !std::strcmp(e->d_name, "..")) continue;
    names.emplace_back(e->d_name);
  }
  int err = errno;
  ::closedir(d);
  if (err != 0) return ErrnoFail("readdir " + rel, err);
  for (const auto& n : names) {
    SPACE_TRY(CopyEntry(cx, src_fd, dst_fd, n.c_str(), Join(rel, n.c_str())));
  }
  return Ok();
}

struct UsageContext {
  dev_t dev = 0;
  int64_t bytes = 0;
  std::set<std::pair<dev_t, ino_t>> seen;   // inodes with several links, counted once
};

Status UsageDir(UsageContext& cx, int dir_fd, const std::string& rel, int depth) {
  // Far deeper than any real tree; a guard against running out of fds (one per level).
  if (depth > 512) return Fail(Errc::kInternal, "disk usage: " + rel + ": tree too deep");
  int dup_fd = ::fcntl(dir_fd, F_DUPFD_CLOEXEC, 0);
  if (dup_fd < 0) return ErrnoFail("dup");
  DIR* d = ::fdopendir(dup_fd);
  if (!d) {
    ::close(dup_fd);
    return ErrnoFail("opendir " + rel);
  }
  std::vector<std::string> subdirs;
  Status st = Ok();
  errno = 0;
  while (dirent* e = ::readdir(d)) {
    if (!std::strcmp(e->d_name, ".") || !std::strcmp(e->d_name, "..")) continue;
    struct stat sb;
    if (::fstatat(dir_fd, e->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0) {
      st = ErrnoFail("stat " + Join(rel, e->d_name));
      break;
    }
    if (sb.st_dev != cx.dev) continue;   // another filesystem or subvolume: like du -x
    if (!S_ISDIR(sb.st_mode) && sb.st_nlink > 1 &&
        !cx.seen.emplace(sb.st_dev, sb.st_ino).second) {
      continue;
    }
    cx.bytes += static_cast<int64_t>(sb.st_blocks) * 512;
    if (S_ISDIR(sb.st_mode)) subdirs.emplace_back(e->d_name);
    errno = 0;
  }
  if (st && errno != 0) st = ErrnoFail("readdir " + rel);
  ::closedir(d);
  SPACE_TRY(st);
  // Recursing after closedir keeps one open fd per level, not two.
  for (const auto& name : subdirs) {
    sys::UniqueFd sub(
        ::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!sub) return ErrnoFail("open " + Join(rel, name.c_str()));
    SPACE_TRY(UsageDir(cx, sub.get(), Join(rel, name.c_str()), depth + 1));
  }
  return Ok();
}

}  // namespace

Status CopyTree(const std::string& src, const std::string& dst, uint32_t uid_shift) {
  sys::UniqueFd s(::open(src.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!s) return ErrnoFail("open " + src);
  sys::UniqueFd d(::open(dst.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!d) return ErrnoFail("open " + dst);
  struct stat st;
  if (::fstat(s.get(), &st) != 0) return ErrnoFail("stat " + src);
  CopyContext cx;
  cx.shift = uid_shift;
  cx.dst_root_fd = d.get();
  auto ids = Shifted(cx, st, ".");
  if (!ids) return tl::unexpected(ids.error());
  SPACE_TRY_WRAP(CopyDir(cx, s.get(), d.get(), ""), "copy " + src + " to " + dst);
  SPACE_TRY_WRAP(SetMeta(d.get(), st, ids->first, ids->second, "."), "copy to " + dst);
  return Ok();
}

Result<int64_t> DiskUsage(const std::string& dir) {
  sys::UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return ErrnoFail("open " + dir);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoFail("stat " + dir);
  UsageContext cx;
  cx.dev = st.st_dev;
  cx.bytes = static_cast<int64_t>(st.st_blocks) * 512;
  SPACE_TRY_WRAP(UsageDir(cx, fd.get(), "", 0), "disk usage of " + dir);
  return cx.bytes;
}

std::vector<MountEntry> ReadMountInfo() {
  std::vector<MountEntry> out;
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ss(line);
    MountEntry m;
    std::string opts, field;
    ss >> m.id >> m.parent >> m.devno >> m.root >> m.mount_point >> opts;
    // Optional fields ("shared:N", "master:N", ...) up to the "-" separator.
    while (ss >> field && field != "-") {
      if (StartsWith(field, "shared:")) m.shared = true;
    }
    ss >> m.fstype >> m.source;
    m.root = sys::UnescapeMountField(m.root);
    m.mount_point = sys::UnescapeMountField(m.mount_point);
    m.source = sys::UnescapeMountField(m.source);
    out.push_back(std::move(m));
  }
  return out;
}

const MountEntry* FindMount(const std::vector<MountEntry>& mounts, const std::string& path) {
  const MountEntry* found = nullptr;
  for (const auto& m : mounts) {
    if (m.mount_point == path) found = &m;   // later lines are mounted on top
  }
  return found;
}

bool IsValidName(std::string_view name) {
  if (name.empty() || name.size() > 128) return false;
  auto ok = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '-' || c == '.';
  };
  if (name[0] == '.' || name[0] == '-') return false;
  return std::all_of(name.begin(), name.end(), ok);
}

Status CheckName(std::string_view what, std::string_view name) {
  if (IsValidName(name)) return Ok();
  return Fail(Errc::kInvalidArgument,
              std::string(what) + " \"" + std::string(name.substr(0, 200)) + "\": invalid name");
}

std::vector<std::string> ListAllNames(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    if (!std::strcmp(e->d_name, ".") || !std::strcmp(e->d_name, "..")) continue;
    out.emplace_back(e->d_name);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> ListNames(const std::string& dir) {
  auto all = ListAllNames(dir);
  std::vector<std::string> out;
  for (auto& n : all) {
    if (!n.empty() && n[0] != '.') out.push_back(std::move(n));
  }
  return out;
}

std::string RandomSuffix() {
  std::string id = NewId("x");
  return id.substr(2);
}

int64_t FsType(const std::string& path) {
  struct statfs sfs;
  if (::statfs(path.c_str(), &sfs) != 0) return 0;
  return static_cast<int64_t>(sfs.f_type);
}

uint64_t ParseSize(std::string_view s) {
  if (s.empty()) return 0;
  uint64_t n = 0;
  size_t i = 0;
  for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i) {
    if (n > (UINT64_MAX - 9) / 10) return 0;
    n = n * 10 + static_cast<uint64_t>(s[i] - '0');
  }
  if (i == 0) return 0;
  std::string_view unit = s.substr(i);
  if (!unit.empty() && (unit.back() == 'B' || unit.back() == 'b')) unit.remove_suffix(1);
  if (!unit.empty() && (unit.back() == 'i')) unit.remove_suffix(1);
  int shift = 0;
  if (unit.empty()) {
    shift = 0;
  } else if (unit.size() == 1) {
    switch (unit[0]) {
      case 'K': case 'k': shift = 10; break;
      case 'M': case 'm': shift = 20; break;
      case 'G': case 'g': shift = 30; break;
      case 'T': case 't': shift = 40; break;
      default: return 0;
    }
  } else {
    return 0;
  }
  if (shift && n > (UINT64_MAX >> shift)) return 0;
  return n << shift;
}

}  // namespace space::storage::internal
