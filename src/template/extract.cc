// Safe tar extraction (see template.h for the contract).
//
// Why not archive_write_disk with its SECURE_* flags: it resolves paths relative to the
// process cwd (a daemon cannot chdir per extraction with other threads running), and its
// symlink checks are lstat-then-open races by design. Here every entry is created with *at()
// calls on a directory fd reached from dest_dir one component at a time with O_NOFOLLOW, so a
// symlink anywhere in an entry's path is found and refused, whoever made it.
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <unordered_set>

#include "template/internal.h"
#include "template/template.h"

namespace space::tmpl {

namespace {

using internal::JoinPath;
using internal::Quote;
using sys::UniqueFd;

struct ArchiveDeleter {
  void operator()(archive* a) const { archive_read_free(a); }
};
using ArchivePtr = std::unique_ptr<archive, ArchiveDeleter>;

// Removes `name` in `dir_fd` and everything below it, never following symlinks.
Status RemoveAt(int dir_fd, const std::string& name, int depth = 0) {
  if (depth > static_cast<int>(internal::kMaxDepth) + 16)
    return Fail(Errc::kInvalidArgument, "directory tree too deep to remove");
  struct stat sb;
  if (::fstatat(dir_fd, name.c_str(), &sb, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return Ok();
    return ErrnoFail("stat " + name);
  }
  if (S_ISDIR(sb.st_mode)) {
    int fd = ::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return ErrnoFail("open " + name);
    UniqueFd child(fd);
    std::vector<std::string> names;
    {
      int dup_fd = ::fcntl(child.get(), F_DUPFD_CLOEXEC, 0);
      if (dup_fd < 0) return ErrnoFail("dup");
      DIR* d = ::fdopendir(dup_fd);
      if (!d) {
        ::close(dup_fd);
        return ErrnoFail("opendir " + name);
      }
      while (dirent* e = ::readdir(d)) {
        if (!std::strcmp(e->d_name, ".") || !std::strcmp(e->d_name, "..")) continue;
        names.emplace_back(e->d_name);
      }
      ::closedir(d);
    }
    for (const auto& n : names) SPACE_TRY_WRAP(RemoveAt(child.get(), n, depth + 1), name);
    if (::unlinkat(dir_fd, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT)
      return ErrnoFail("rmdir " + name);
    return Ok();
  }
  if (::unlinkat(dir_fd, name.c_str(), 0) != 0 && errno != ENOENT)
    return ErrnoFail("unlink " + name);
  return Ok();
}

struct DirMeta {
  mode_t mode;
  int64_t uid, gid;
  bool has_mtime;
  timespec mtime;
};

class Extractor {
 public:
  Extractor(archive* a, int root_fd, const ExtractOptions& opts)
      : a_(a), root_fd_(root_fd), opts_(opts) {}

  Result<ExtractStats> Run() {
    for (;;) {
      if (Cancelled()) return Fail(Errc::kDeadlineExceeded, "cancelled");
      archive_entry* e = nullptr;
      int r = archive_read_next_header(a_, &e);
      if (r == ARCHIVE_EOF) break;
      if (r == ARCHIVE_RETRY) continue;
      if (r < ARCHIVE_WARN) return ArchiveFail("read archive");
      // Names are used as raw bytes, so libarchive's "can't be converted to the current
      // locale" warnings (UTF-8 names under LANG=C) do not matter.
      if (r == ARCHIVE_WARN && !std::strstr(ErrorString(), "can't be converted"))
        Warn(std::string("archive: ") + ErrorString());
      if (++stats_.entries > opts_.max_entries) {
        return Fail(Errc::kTooLarge,
                    "archive has more than " + std::to_string(opts_.max_entries) + " entries");
      }
      SPACE_TRY(Entry(e));
    }
    // Directory metadata last: writing entries into a directory changes its mtime, and a
    // read-only mode would get in the way of a non-root extraction.
    for (const auto& [rel, meta] : dirs_) {
      auto comps = internal::SplitRelPath(rel, "entry");
      if (!comps) return tl::unexpected(comps.error());
      auto fd = OpenDir(*comps, comps->size(), /*create=*/false, rel);
      if (!fd) return tl::unexpected(fd.error());
      if (!fd->valid()) continue;  // replaced or whited out later in the archive
      SPACE_TRY_WRAP(
          ApplyMeta(fd->get(), meta.mode, meta.uid, meta.gid, meta.has_mtime, meta.mtime),
          "entry " + Quote(rel));
    }
    return std::move(stats_);
  }

 private:
  // Keeps the first kMaxWarnings, then counts the rest in a last line.
  void Warn(std::string w) {
    constexpr size_t kMaxWarnings = 100;
    if (stats_.warnings.size() < kMaxWarnings) {
      stats_.warnings.push_back(std::move(w));
      return;
    }
    ++dropped_warnings_;
    stats_.warnings.resize(kMaxWarnings + 1);
    stats_.warnings.back() = "... and " + std::to_string(dropped_warnings_) + " more warnings";
  }

  bool Cancelled() const { return opts_.cancel && opts_.cancel->load(std::memory_order_relaxed); }
  const char* ErrorString() const {
    const char* s = archive_error_string(a_);
    return s ? s : "unknown error";
  }
  tl::unexpected<Error> ArchiveFail(const std::string& what) const {
    int err = archive_errno(a_);
    Error e{Errc::kInvalidArgument, 0, what + ": " + ErrorString()};
    // Only real I/O errors become errno-coded; format errors stay kInvalidArgument.
    if (err == EIO || err == ENOSPC || err == ENOMEM) e = Error{ErrcFromErrno(err), err, e.message};
    return tl::unexpected(std::move(e));
  }

  // Opens the directory made of comps[0, n) below the root. Missing directories are created
  // (mode 0755) when `create`, otherwise an invalid fd is returned. A symlink or a
  // non-directory on the way is an error naming it (with create) or "missing" (without,
  // except symlinks, which are always an error: a whiteout through a symlink is hostile).
  Result<UniqueFd> OpenDir(const std::vector<std::string>& comps, size_t n, bool create,
                           const std::string& entry) {
    std::string key = JoinPath(comps, n);
    if (cache_fd_.valid() && cache_key_ == key) {
      int d = ::fcntl(cache_fd_.get(), F_DUPFD_CLOEXEC, 0);
      if (d < 0) return ErrnoFail("dup");
      return UniqueFd(d);
    }
    int d = ::fcntl(root_fd_, F_DUPFD_CLOEXEC, 0);
    if (d < 0) return ErrnoFail("dup");
    UniqueFd cur(d);
    for (size_t i = 0; i < n; ++i) {
      const std::string& c = comps[i];
      int fd = ::openat(cur.get(), c.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (fd < 0 && errno == ENOENT && create) {
        if (::mkdirat(cur.get(), c.c_str(), 0755) != 0 && errno != EEXIST)
          return ErrnoFail("entry " + Quote(entry) + ": mkdir " + Quote(JoinPath(comps, i + 1)));
        fd = ::openat(cur.get(), c.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      }
      if (fd < 0) {
        int err = errno;
        struct stat sb;
        bool exists = ::fstatat(cur.get(), c.c_str(), &sb, AT_SYMLINK_NOFOLLOW) == 0;
        if (exists && S_ISLNK(sb.st_mode)) {
          return Fail(Errc::kInvalidArgument, "entry " + Quote(entry) +
                                                  ": path goes through "
                                                  "symlink " +
                                                  Quote(JoinPath(comps, i + 1)));
        }
        if (!create && (!exists || !S_ISDIR(sb.st_mode))) return UniqueFd();
        if (exists && !S_ISDIR(sb.st_mode)) {
          return Fail(Errc::kInvalidArgument, "entry " + Quote(entry) + ": " +
                                                  Quote(JoinPath(comps, i + 1)) +
                                                  " is not a directory");
        }
        return ErrnoFail("entry " + Quote(entry) + ": open " + Quote(JoinPath(comps, i + 1)), err);
      }
      cur.Reset(fd);
    }
    int c = ::fcntl(cur.get(), F_DUPFD_CLOEXEC, 0);
    if (c >= 0) {
      cache_fd_.Reset(c);
      cache_key_ = key;
    }
    return cur;
  }

  void Invalidate() {
    cache_fd_.Reset();
    cache_key_.clear();
  }

  // Marks a path (and its ancestors) as written by this archive: whiteouts never remove those.
  void MarkOurs(const std::vector<std::string>& comps) {
    std::string p;
    for (size_t i = 0; i < comps.size(); ++i) {
      if (i) p += '/';
      p += comps[i];
      ours_.insert(p);
    }
  }

  // Makes room for a new entry `name` in dir_fd: anything already there goes, except a
  // directory when a directory is wanted (layers merge directories).
  Status Clear(int dir_fd, const std::string& name, bool want_dir, bool* is_dir) {
    *is_dir = false;
    struct stat sb;
    if (::fstatat(dir_fd, name.c_str(), &sb, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) return Ok();
      return ErrnoFail("stat " + Quote(name));
    }
    if (want_dir && S_ISDIR(sb.st_mode)) {
      *is_dir = true;
      return Ok();
    }
    Invalidate();
    return RemoveAt(dir_fd, name);
  }

  Status ApplyMeta(int fd, mode_t mode, int64_t uid, int64_t gid, bool has_mtime,
                   const timespec& mtime) {
    if (opts_.preserve_owner && ::fchown(fd, static_cast<uid_t>(uid), static_cast<gid_t>(gid)) != 0)
      return ErrnoFail("chown");
    // After chown, which clears setuid/setgid.
    if (::fchmod(fd, mode & 07777) != 0) return ErrnoFail("chmod");
    if (has_mtime) {
      timespec ts[2] = {mtime, mtime};
      if (::futimens(fd, ts) != 0) return ErrnoFail("set mtime");
    }
    return Ok();
  }

  Status Entry(archive_entry* e) {
    const char* raw = archive_entry_pathname(e);
    if (!raw) raw = archive_entry_pathname_utf8(e);
    if (!raw) return Fail(Errc::kInvalidArgument, "entry with an unreadable name");
    std::string what = "entry " + Quote(raw);
    auto comps_r = internal::SplitRelPath(raw, what);
    if (!comps_r) return tl::unexpected(comps_r.error());
    std::vector<std::string>& comps = *comps_r;
    std::string rel = JoinPath(comps, comps.size());
    mode_t type = archive_entry_filetype(e);
    const char* hardlink = archive_entry_hardlink(e);
    if (!hardlink) hardlink = archive_entry_hardlink_utf8(e);

    if (opts_.whiteouts && !comps.empty() && StartsWith(comps.back(), ".wh.")) {
      return Whiteout(comps, what);
    }

    int64_t uid = archive_entry_uid(e), gid = archive_entry_gid(e);
    if (uid < 0 || gid < 0 || uid >= 0xffffffffLL || gid >= 0xffffffffLL)
      return Fail(Errc::kInvalidArgument, what + ": uid/gid out of range");
    mode_t perm = archive_entry_perm(e) & 07777;
    bool has_mtime = archive_entry_mtime_is_set(e);
    timespec mtime{};
    if (has_mtime) {
      mtime.tv_sec = archive_entry_mtime(e);
      mtime.tv_nsec = archive_entry_mtime_nsec(e);
      if (mtime.tv_nsec < 0 || mtime.tv_nsec >= 1000000000) mtime.tv_nsec = 0;
    }

    if (comps.empty()) {
      // "./": the archive's root is dest_dir itself.
      if (hardlink || type != AE_IFDIR)
        return Fail(Errc::kInvalidArgument, what + ": the archive root must be a directory");
      dirs_[""] = DirMeta{perm, uid, gid, has_mtime, mtime};
      return Ok();
    }

    if (!hardlink && (type == AE_IFCHR || type == AE_IFBLK)) {
      const char* kind = type == AE_IFCHR ? "character device" : "block device";
      if (!opts_.skip_devices)
        return Fail(Errc::kInvalidArgument, what + ": " + kind + " not allowed");
      Warn(what + ": " + kind + " skipped");
      return Ok();
    }
    if (!hardlink && type != AE_IFDIR && type != AE_IFREG && type != AE_IFLNK && type != AE_IFIFO) {
      return Fail(Errc::kInvalidArgument,
                  what + ": unsupported file type (" +
                      (type == AE_IFSOCK ? std::string("socket") : std::to_string(type)) + ")");
    }

    auto parent = OpenDir(comps, comps.size() - 1, /*create=*/true, raw);
    if (!parent) return tl::unexpected(parent.error());
    int pfd = parent->get();
    const std::string& name = comps.back();
    MarkOurs(comps);

    if (hardlink) return Hardlink(e, what, comps, pfd, hardlink);

    bool is_dir = false;
    SPACE_TRY_WRAP(Clear(pfd, name, type == AE_IFDIR, &is_dir), what);
    switch (type) {
      case AE_IFDIR: {
        if (!is_dir && ::mkdirat(pfd, name.c_str(), 0755) != 0) return ErrnoFail(what + ": mkdir");
        dirs_[rel] = DirMeta{perm, uid, gid, has_mtime, mtime};
        return Ok();
      }
      case AE_IFREG:
        return Regular(e, what, pfd, name, perm, uid, gid, has_mtime, mtime);
      case AE_IFLNK: {
        const char* target = archive_entry_symlink(e);
        if (!target) target = archive_entry_symlink_utf8(e);
        if (!target || !*target)
          return Fail(Errc::kInvalidArgument, what + ": empty symlink target");
        if (std::strlen(target) >= internal::kMaxPathBytes)
          return Fail(Errc::kInvalidArgument, what + ": symlink target too long");
        // Any target is fine: symlinks are created, never followed here.
        if (::symlinkat(target, pfd, name.c_str()) != 0) return ErrnoFail(what + ": symlink");
        if (opts_.preserve_owner && ::fchownat(pfd, name.c_str(), static_cast<uid_t>(uid),
                                               static_cast<gid_t>(gid), AT_SYMLINK_NOFOLLOW) != 0)
          return ErrnoFail(what + ": chown");
        if (has_mtime) {
          timespec ts[2] = {mtime, mtime};
          if (::utimensat(pfd, name.c_str(), ts, AT_SYMLINK_NOFOLLOW) != 0)
            return ErrnoFail(what + ": set mtime");
        }
        return Ok();
      }
      case AE_IFIFO: {
        if (::mknodat(pfd, name.c_str(), S_IFIFO | 0600, 0) != 0)
          return ErrnoFail(what + ": mkfifo");
        // O_PATH cannot fchmod/fchown, and opening a FIFO for real would block; the node was
        // created just now in a directory nobody else writes, so the name is still it.
        if (opts_.preserve_owner && ::fchownat(pfd, name.c_str(), static_cast<uid_t>(uid),
                                               static_cast<gid_t>(gid), AT_SYMLINK_NOFOLLOW) != 0)
          return ErrnoFail(what + ": chown");
        if (::fchmodat(pfd, name.c_str(), perm, 0) != 0) return ErrnoFail(what + ": chmod");
        if (has_mtime) {
          timespec ts[2] = {mtime, mtime};
          if (::utimensat(pfd, name.c_str(), ts, AT_SYMLINK_NOFOLLOW) != 0)
            return ErrnoFail(what + ": set mtime");
        }
        return Ok();
      }
    }
    return Fail(Errc::kInternal, what + ": unreachable file type");
  }

  Status Regular(archive_entry* e, const std::string& what, int pfd, const std::string& name,
                 mode_t perm, int64_t uid, int64_t gid, bool has_mtime, const timespec& mtime) {
    int64_t size = archive_entry_size_is_set(e) ? archive_entry_size(e) : 0;
    if (size < 0) return Fail(Errc::kInvalidArgument, what + ": negative size");
    uint64_t usize = static_cast<uint64_t>(size);
    if (usize > opts_.max_bytes || stats_.bytes + usize > opts_.max_bytes) {
      return Fail(Errc::kTooLarge, what + ": declared size " + std::to_string(usize) +
                                       " bytes exceeds the archive limit of " +
                                       std::to_string(opts_.max_bytes) + " bytes");
    }
    stats_.bytes += usize;
    // O_EXCL on a name just cleared: a fresh inode, never an existing file or link target.
    int fd =
        ::openat(pfd, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return ErrnoFail(what + ": create");
    UniqueFd out(fd);
    for (;;) {
      if (Cancelled()) return Fail(Errc::kDeadlineExceeded, "cancelled");
      const void* buf = nullptr;
      size_t len = 0;
      la_int64_t off = 0;
      int r = archive_read_data_block(a_, &buf, &len, &off);
      if (r == ARCHIVE_EOF) break;
      if (r == ARCHIVE_RETRY) continue;
      if (r < ARCHIVE_WARN) return ArchiveFail(what + ": read data");
      if (off < 0 || static_cast<uint64_t>(off) + len > usize)
        return Fail(Errc::kInvalidArgument, what + ": more data than its declared size");
      const char* p = static_cast<const char*>(buf);
      while (len > 0) {
        ssize_t n = ::pwrite(out.get(), p, len, off);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return ErrnoFail(what + ": write");
        p += n;
        len -= static_cast<size_t>(n);
        off += n;
      }
    }
    // Sparse files may end in a hole that no data block covers.
    if (::ftruncate(out.get(), size) != 0) return ErrnoFail(what + ": truncate");
    SPACE_TRY_WRAP(ApplyMeta(out.get(), perm, uid, gid, has_mtime, mtime), what);
    return Ok();
  }

  Status Hardlink(archive_entry* e, const std::string& what, const std::vector<std::string>& comps,
                  int pfd, const char* target) {
    auto t = internal::SplitRelPath(target, what + ": hardlink target " + Quote(target));
    if (!t) return tl::unexpected(t.error());
    if (t->empty()) return Fail(Errc::kInvalidArgument, what + ": hardlink to the archive root");
    if (*t == comps) return Ok();  // a link to itself: nothing to do
    auto tdir = OpenDir(*t, t->size() - 1, /*create=*/false, target);
    if (!tdir) return tl::unexpected(std::move(tdir.error()).Wrap(what + ": hardlink target"));
    struct stat sb;
    if (!tdir->valid() ||
        ::fstatat(tdir->get(), t->back().c_str(), &sb, AT_SYMLINK_NOFOLLOW) != 0) {
      return Fail(Errc::kInvalidArgument,
                  what + ": hardlink target " + Quote(target) + " does not exist in the tree");
    }
    if (S_ISDIR(sb.st_mode))
      return Fail(Errc::kInvalidArgument, what + ": hardlink to a directory");
    const std::string& name = comps.back();
    struct stat cur;
    if (::fstatat(pfd, name.c_str(), &cur, AT_SYMLINK_NOFOLLOW) == 0 && cur.st_ino == sb.st_ino &&
        cur.st_dev == sb.st_dev)
      return Ok();  // already that inode (e.g. the link was in a lower layer too)
    bool is_dir = false;
    SPACE_TRY_WRAP(Clear(pfd, name, false, &is_dir), what);
    // flags 0: link the target itself, even if it is a symlink (never follow).
    if (::linkat(tdir->get(), t->back().c_str(), pfd, name.c_str(), 0) != 0)
      return ErrnoFail(what + ": hardlink");
    (void)e;
    return Ok();
  }

  Status Whiteout(const std::vector<std::string>& comps, const std::string& what) {
    const std::string& base = comps.back();
    size_t n = comps.size() - 1;
    if (base == ".wh..wh..opq") {
      // The directory exists in this layer (created if need be) and hides all lower content.
      auto dir = OpenDir(comps, n, /*create=*/true, JoinPath(comps, comps.size()));
      if (!dir) return tl::unexpected(dir.error());
      std::vector<std::string> parent(comps.begin(), comps.begin() + static_cast<long>(n));
      MarkOurs(parent);
      Invalidate();
      return PurgeLower(dir->get(), JoinPath(parent, n), 0);
    }
    if (StartsWith(base, ".wh..wh.")) return Ok();  // AUFS metadata (e.g. .wh..wh.plnk)
    std::string victim = base.substr(4);
    if (victim.empty() || victim == "." || victim == "..")
      return Fail(Errc::kInvalidArgument, what + ": whiteout of nothing");
    std::vector<std::string> vcomps(comps.begin(), comps.begin() + static_cast<long>(n));
    vcomps.push_back(victim);
    if (ours_.count(JoinPath(vcomps, vcomps.size()))) return Ok();  // same layer: kept
    auto dir = OpenDir(comps, n, /*create=*/false, JoinPath(comps, comps.size()));
    if (!dir) return tl::unexpected(dir.error());
    if (!dir->valid()) return Ok();  // nothing below to hide
    Invalidate();
    return RemoveAt(dir->get(), victim);
  }

  // Removes everything in dir_fd (path `rel`) that this archive did not write.
  Status PurgeLower(int dir_fd, const std::string& rel, int depth) {
    if (depth > static_cast<int>(internal::kMaxDepth))
      return Fail(Errc::kInvalidArgument, "opaque directory " + Quote(rel) + " too deep");
    std::vector<std::pair<std::string, bool>> names;
    int dup_fd = ::fcntl(dir_fd, F_DUPFD_CLOEXEC, 0);
    if (dup_fd < 0) return ErrnoFail("dup");
    DIR* d = ::fdopendir(dup_fd);
    if (!d) {
      ::close(dup_fd);
      return ErrnoFail("opendir " + Quote(rel));
    }
    ::rewinddir(d);
    while (dirent* ent = ::readdir(d)) {
      if (!std::strcmp(ent->d_name, ".") || !std::strcmp(ent->d_name, "..")) continue;
      names.emplace_back(ent->d_name, ent->d_type == DT_DIR);
    }
    ::closedir(d);
    for (const auto& [name, maybe_dir] : names) {
      std::string child = rel.empty() ? name : rel + "/" + name;
      if (!ours_.count(child)) {
        SPACE_TRY(RemoveAt(dir_fd, name));
        continue;
      }
      int fd = ::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (fd < 0) continue;  // ours and not a directory: kept as is
      UniqueFd c(fd);
      SPACE_TRY(PurgeLower(c.get(), child, depth + 1));
    }
    return Ok();
  }

  archive* a_;
  int root_fd_;
  const ExtractOptions& opts_;
  ExtractStats stats_;
  std::unordered_set<std::string> ours_;
  std::map<std::string, DirMeta> dirs_;
  UniqueFd cache_fd_;
  std::string cache_key_;
  uint64_t dropped_warnings_ = 0;
};

}  // namespace

Result<ExtractStats> ExtractTar(const std::string& archive_path, const std::string& dest_dir,
                                const ExtractOptions& opts) {
  auto in = sys::Open(archive_path, O_RDONLY);
  if (!in) return tl::unexpected(std::move(in.error()).Wrap("open archive"));
  struct stat sb;
  if (::fstat(in->get(), &sb) != 0) return ErrnoFail("stat " + archive_path);
  if (!S_ISREG(sb.st_mode))
    return Fail(Errc::kInvalidArgument, archive_path + " is not a regular file");
  auto root = sys::Open(dest_dir, O_RDONLY | O_DIRECTORY);
  if (!root) return tl::unexpected(std::move(root.error()).Wrap("open destination"));

  ArchivePtr a(archive_read_new());
  if (!a) return Fail(Errc::kInternal, "archive_read_new failed");
  // Only in-process decoders: support_filter_all could fall back to running external
  // programs (lrzip, lzop, grzip...) on hostile input. ARCHIVE_WARN means "via a program".
  if (archive_read_support_filter_gzip(a.get()) != ARCHIVE_OK ||
      archive_read_support_filter_zstd(a.get()) != ARCHIVE_OK ||
      archive_read_support_filter_xz(a.get()) != ARCHIVE_OK ||
      archive_read_support_filter_bzip2(a.get()) != ARCHIVE_OK ||
      archive_read_support_format_tar(a.get()) != ARCHIVE_OK ||
      archive_read_support_format_empty(a.get()) != ARCHIVE_OK) {
    return Fail(Errc::kInternal, std::string("libarchive lacks a built-in decoder: ") +
                                     (archive_error_string(a.get()) ?: "?"));
  }
  if (archive_read_open_fd(a.get(), in->get(), 1 << 16) != ARCHIVE_OK) {
    return Fail(Errc::kInvalidArgument, "open archive " + archive_path + ": " +
                                            (archive_error_string(a.get()) ?: "unknown format"));
  }
  Extractor x(a.get(), root->get(), opts);
  auto r = x.Run();
  if (!r) return tl::unexpected(std::move(r.error()).Wrap("extract " + archive_path));
  return r;
}

}  // namespace space::tmpl
