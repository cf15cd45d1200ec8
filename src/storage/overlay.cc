#include "storage/overlay.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <spdlog/spdlog.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "storage/fs_util.h"
#include "sys/sys.h"

namespace space::storage {

namespace {

using internal::CheckName;

Status MakeDir(const std::string& path, mode_t mode) {
  SPACE_TRY(sys::MkdirAll(path, mode));
  if (::chmod(path.c_str(), mode) != 0) return ErrnoFail("chmod " + path);
  return Ok();
}

Status RenameNoReplace(const std::string& from, const std::string& to) {
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) != 0)
    return ErrnoFail("rename " + from + " to " + to);
  return Ok();
}

// Flushes the filesystem holding `path`, so that a rename done next cannot reach the
// disk before the data it publishes (ext4 does not order them).
Status SyncFs(const std::string& path) {
  auto fd = sys::Open(path, O_RDONLY | O_DIRECTORY);
  if (!fd) return tl::unexpected(fd.error());
  if (::syncfs(fd->get()) != 0) return ErrnoFail("syncfs " + path);
  return Ok();
}

bool IsOverlayMounted(const std::string& merged) {
  return internal::FsType(merged) == OVERLAYFS_SUPER_MAGIC;
}

// Unmounts everything at or below `dir` (deepest first), lazily if busy.
Status UnmountAll(const std::string& dir) {
  for (const auto& mp : sys::MountsUnder(dir)) {
    if (::umount2(mp.c_str(), UMOUNT_NOFOLLOW) == 0 || errno == EINVAL || errno == ENOENT)
      continue;
    if (errno == EBUSY && ::umount2(mp.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW) == 0) {
      spdlog::warn("storage: {} was busy; detached lazily", mp);
      continue;
    }
    return ErrnoFail("unmount " + mp);
  }
  return Ok();
}

// Removes a root directory: unmounts it, renames it out of the way (so a crash midway
// never leaves a half-deleted root under its id), then deletes the files.
Status RemoveRootDir(const std::string& roots, const std::string& name) {
  std::string dir = roots + "/" + name;
  std::string merged = dir + "/merged";
  // Fast path: one umount2 instead of scanning mountinfo (O(mounts)).
  if (::umount2(merged.c_str(), UMOUNT_NOFOLLOW) != 0 && errno == EBUSY) {
    if (::umount2(merged.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW) == 0)
      spdlog::warn("storage: {} was busy; detached lazily", merged);
  }
  if (IsOverlayMounted(merged)) SPACE_TRY(UnmountAll(dir));   // stacked mounts
  std::string doomed = dir;
  if (name[0] != '.') {
    doomed = roots + "/.del-" + name + "." + internal::RandomSuffix();
    SPACE_TRY(RenameNoReplace(dir, doomed));
  }
  // RemoveAll refuses to cross mount points; if something else is mounted below (rare),
  // unmount it all and try once more.
  if (sys::RemoveAll(doomed)) return Ok();
  SPACE_TRY(UnmountAll(doomed));
  return sys::RemoveAll(doomed);
}

}  // namespace

OverlayDriver::OverlayDriver(std::string base)
    : base_(std::move(base)),
      layers_(base_ + "/layers"),
      roots_(base_ + "/roots"),
      tmp_(base_ + "/tmp") {}

Result<std::unique_ptr<Driver>> OverlayDriver::Open(const std::string& storage_dir) {
  // overlayfs mount options use ',' and ':' as separators, and '\' escapes.
  if (storage_dir.find_first_of(",:\\") != std::string::npos) {
    return Fail(Errc::kInvalidArgument,
                "overlay storage: data dir path must not contain ',', ':' or '\\': " +
                    storage_dir);
  }
  std::unique_ptr<OverlayDriver> d(new OverlayDriver(storage_dir + "/overlay"));
  // The container's user-namespace root must be able to walk to roots/<id>/merged.
  SPACE_TRY(MakeDir(d->base_, 0711));
  SPACE_TRY(MakeDir(d->layers_, 0700));
  SPACE_TRY(MakeDir(d->roots_, 0711));
  SPACE_TRY(MakeDir(d->tmp_, 0700));
  for (const auto& name : internal::ListAllNames(d->tmp_)) {
    SPACE_TRY_WRAP(sys::RemoveAll(d->tmp_ + "/" + name), "remove leftover import");
    spdlog::info("storage: removed leftover import {}/{}", d->tmp_, name);
  }
  for (const auto& name : internal::ListAllNames(d->roots_)) {
    if (name[0] != '.') continue;
    SPACE_TRY_WRAP(RemoveRootDir(d->roots_, name), "remove leftover root");
    spdlog::info("storage: removed leftover root {}/{}", d->roots_, name);
  }
  return std::unique_ptr<Driver>(std::move(d));
}

Status OverlayDriver::ImportLayer(const std::string& digest, const std::string& src_dir,
                                  uint32_t uid_shift) {
  SPACE_TRY(CheckName("layer", digest));
  std::string ctx = "import layer " + digest;
  if (HasLayer(digest)) return Fail(Errc::kConflict, "layer " + digest + " exists");
  std::string tmp = tmp_ + "/" + digest + "." + internal::RandomSuffix();
  if (::mkdir(tmp.c_str(), 0700) != 0) return ErrnoFail(ctx + ": mkdir " + tmp);
  auto st = [&]() -> Status {
    SPACE_TRY(internal::CopyTree(src_dir, tmp, uid_shift));
    SPACE_TRY(SyncFs(tmp));
    return RenameNoReplace(tmp, layers_ + "/" + digest);
  }();
  if (!st) {
    (void)sys::RemoveAll(tmp);
    auto e = std::move(st.error()).Wrap(ctx);
    if (e.sys_errno == EEXIST || e.sys_errno == ENOTEMPTY) e.code = Errc::kConflict;
    return tl::unexpected(std::move(e));
  }
  return Ok();
}

bool OverlayDriver::HasLayer(const std::string& digest) const {
  return internal::IsValidName(digest) && sys::Exists(layers_ + "/" + digest);
}

std::vector<std::string> OverlayDriver::ListLayers() const {
  return internal::ListNames(layers_);
}

Status OverlayDriver::DeleteLayer(const std::string& digest) {
  SPACE_TRY(CheckName("layer", digest));
  std::string dir = layers_ + "/" + digest;
  if (!sys::Exists(dir)) return Ok();
  // A lower layer must not change under a mounted overlay.
  for (const auto& id : ListRoots()) {
    auto used = sys::ReadFile(roots_ + "/" + id + "/layer");
    if (used && *used == digest) {
      return Fail(Errc::kConflict, "delete layer " + digest + ": used by root " + id);
    }
  }
  std::string doomed = tmp_ + "/" + digest + ".del." + internal::RandomSuffix();
  SPACE_TRY_WRAP(RenameNoReplace(dir, doomed), "delete layer " + digest);
  SPACE_TRY_WRAP(sys::RemoveAll(doomed), "delete layer " + digest);
  return Ok();
}

Status OverlayDriver::MountRoot(const std::string& dir, const std::string& digest) {
  std::string opts = "lowerdir=" + layers_ + "/" + digest + ",upperdir=" + dir +
                     "/upper,workdir=" + dir + "/work";
  std::string merged = dir + "/merged";
  if (::mount("overlay", merged.c_str(), "overlay", 0, opts.c_str()) != 0)
    return ErrnoFail("mount overlay at " + merged);
  return Ok();
}

Result<std::string> OverlayDriver::CreateRoot(const std::string& id, const std::string& digest,
                                              int64_t quota_bytes) {
  SPACE_TRY(CheckName("root", id));
  SPACE_TRY(CheckName("layer", digest));
  std::string ctx = "create root " + id;
  if (quota_bytes < 0) return Fail(Errc::kInvalidArgument, ctx + ": negative quota");
  if (quota_bytes > 0 && !quota_warned_.exchange(true)) {
    spdlog::warn("storage: the overlay driver cannot enforce disk quotas; ignoring them");
  }
  std::string layer = layers_ + "/" + digest;
  struct stat lst;
  if (::stat(layer.c_str(), &lst) != 0) {
    if (errno == ENOENT) return Fail(Errc::kNotFound, ctx + ": layer " + digest + " not found");
    return ErrnoFail(ctx + ": stat " + layer);
  }
  std::string dir = roots_ + "/" + id;
  if (sys::Exists(dir)) return Fail(Errc::kConflict, ctx + ": exists");

  // Built under a hidden name and renamed into place, so a crash never leaves a root
  // without its layer record. The mount comes last; Remount() redoes it after a reboot.
  std::string tmp_name = ".tmp-" + id + "." + internal::RandomSuffix();
  std::string tmp = roots_ + "/" + tmp_name;
  auto st = [&]() -> Status {
    if (::mkdir(tmp.c_str(), 0711) != 0) return ErrnoFail("mkdir " + tmp);
    for (const char* sub : {"/upper", "/work", "/merged"}) {
      std::string p = tmp + sub;
      if (::mkdir(p.c_str(), 0700) != 0) return ErrnoFail("mkdir " + p);
    }
    // The merged root directory takes its owner and mode from upper's root.
    std::string upper = tmp + "/upper";
    if (::chown(upper.c_str(), lst.st_uid, lst.st_gid) != 0) return ErrnoFail("chown " + upper);
    if (::chmod(upper.c_str(), lst.st_mode & 07777) != 0) return ErrnoFail("chmod " + upper);
    // No fsync: it would cost milliseconds per sandbox on a busy disk, and a crash right
    // after creation loses at most a fresh, empty root (Remount then reports it).
    auto rec = sys::Open(tmp + "/layer", O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (!rec) return tl::unexpected(rec.error());
    SPACE_TRY_WRAP(sys::WriteAll(rec->get(), digest), "write " + tmp + "/layer");
    return RenameNoReplace(tmp, dir);
  }();
  if (!st) {
    (void)sys::RemoveAll(tmp);
    auto e = std::move(st.error()).Wrap(ctx);
    if (e.sys_errno == EEXIST || e.sys_errno == ENOTEMPTY) e.code = Errc::kConflict;
    return tl::unexpected(std::move(e));
  }
  auto m = MountRoot(dir, digest);
  if (!m) {
    auto del = RemoveRootDir(roots_, id);
    if (!del) spdlog::warn("storage: {}", del.error().message);
    return tl::unexpected(std::move(m.error()).Wrap(ctx));
  }
  return dir + "/merged";
}

std::string OverlayDriver::RootPath(const std::string& id) const {
  if (!internal::IsValidName(id)) return "";
  std::string dir = roots_ + "/" + id;
  return sys::Exists(dir) ? dir + "/merged" : "";
}

Status OverlayDriver::Remount(const std::string& id) {
  SPACE_TRY(CheckName("root", id));
  std::string dir = roots_ + "/" + id;
  if (!sys::Exists(dir)) return Fail(Errc::kNotFound, "root " + id + " not found");
  if (IsOverlayMounted(dir + "/merged")) return Ok();
  auto digest = sys::ReadFile(dir + "/layer");
  if (!digest) return tl::unexpected(std::move(digest.error()).Wrap("remount root " + id));
  SPACE_TRY_WRAP(CheckName("layer", *digest), "remount root " + id);
  if (!HasLayer(*digest)) {
    return Fail(Errc::kNotFound, "remount root " + id + ": layer " + *digest + " not found");
  }
  SPACE_TRY_WRAP(MountRoot(dir, *digest), "remount root " + id);
  return Ok();
}

Status OverlayDriver::DeleteRoot(const std::string& id) {
  SPACE_TRY(CheckName("root", id));
  if (!sys::Exists(roots_ + "/" + id)) return Ok();
  SPACE_TRY_WRAP(RemoveRootDir(roots_, id), "delete root " + id);
  return Ok();
}

std::vector<std::string> OverlayDriver::ListRoots() const { return internal::ListNames(roots_); }

}  // namespace space::storage
