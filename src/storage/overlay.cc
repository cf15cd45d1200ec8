#include "storage/overlay.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <spdlog/spdlog.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <set>

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

constexpr std::string_view kLowerLinkPrefix = "../lowers/";

// A lowers/ entry name: "<snapshot id>.<random suffix>".
bool IsLowerName(const std::string& name) {
  size_t dot = name.rfind('.');
  if (dot == std::string::npos || dot + 1 == name.size()) return false;
  for (size_t i = dot + 1; i < name.size(); ++i) {
    char c = name[i];
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))) return false;
  }
  return internal::IsValidName(std::string_view(name).substr(0, dot));
}

// The snapshot id a lowers/ entry was made for.
std::string SnapshotOfLower(const std::string& lower) {
  return lower.substr(0, lower.rfind('.'));
}

Result<std::string> ReadLink(const std::string& path) {
  char buf[512];
  ssize_t n = ::readlink(path.c_str(), buf, sizeof buf);
  if (n < 0) return ErrnoFail("readlink " + path);
  if (static_cast<size_t>(n) == sizeof buf)
    return Fail(Errc::kInternal, "readlink " + path + ": target too long");
  return std::string(buf, static_cast<size_t>(n));
}

Status FsyncDir(const std::string& dir) {
  auto fd = sys::Open(dir, O_RDONLY | O_DIRECTORY);
  if (!fd) return tl::unexpected(fd.error());
  if (::fsync(fd->get()) != 0) return ErrnoFail("fsync " + dir);
  return Ok();
}

}  // namespace

OverlayDriver::OverlayDriver(std::string base)
    : base_(std::move(base)),
      layers_(base_ + "/layers"),
      lowers_(base_ + "/lowers"),
      snapshots_(base_ + "/snapshots"),
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
  SPACE_TRY(MakeDir(d->lowers_, 0700));
  SPACE_TRY(MakeDir(d->snapshots_, 0700));
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
  // After the roots: a half-deleted root no longer keeps its snapshot data alive.
  SPACE_TRY(d->CleanLowers());
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

Status OverlayDriver::MountRoot(const std::string& dir, const std::string& lowerdir) {
  // A root with a quota keeps its writable layer on its own ext4 image of that size
  // (disk.img, loop-mounted at disk/): writes past it fail with ENOSPC.
  std::string rw = dir;
  if (sys::Exists(dir + "/disk.img")) {
    rw = dir + "/disk";
    if (!sys::Exists(rw + "/upper")) {
      // mount(8) sets the loop device up with LO_FLAGS_AUTOCLEAR: unmounting frees it.
      auto r = sys::RunChecked({.argv = {"mount", "-t", "ext4", "-o", "loop,noatime", dir + "/disk.img", rw}});
      if (!r) return tl::unexpected(std::move(r.error()).Wrap("mount the root's disk image"));
    }
  }
  std::string opts = "lowerdir=" + lowerdir + ",upperdir=" + rw + "/upper,workdir=" + rw +
                     "/work";
  std::string merged = dir + "/merged";
  if (::mount("overlay", merged.c_str(), "overlay", 0, opts.c_str()) != 0)
    return ErrnoFail("mount overlay at " + merged);
  return Ok();
}

Result<std::string> OverlayDriver::CreateRoot(const std::string& id, const std::string& digest,
                                              int64_t quota_bytes) {
  SPACE_TRY(CheckName("root", id));
  SPACE_TRY(CheckName("layer", digest));
  return CreateRootOver(id, layers_ + "/" + digest, "layer " + digest, "layer", digest,
                        quota_bytes);
}

Result<std::string> OverlayDriver::CreateRootOver(const std::string& id,
                                                  const std::string& lowerdir,
                                                  const std::string& what,
                                                  const std::string& record_name,
                                                  const std::string& record_value,
                                                  int64_t quota_bytes) {
  std::string ctx = "create root " + id;
  if (quota_bytes < 0) return Fail(Errc::kInvalidArgument, ctx + ": negative quota");
  struct stat lst;
  if (::stat(lowerdir.c_str(), &lst) != 0) {
    if (errno == ENOENT) return Fail(Errc::kNotFound, ctx + ": " + what + " not found");
    return ErrnoFail(ctx + ": stat " + lowerdir);
  }
  std::string dir = roots_ + "/" + id;
  if (sys::Exists(dir)) return Fail(Errc::kConflict, ctx + ": exists");

  // Built under a hidden name and renamed into place, so a crash never leaves a root
  // without its lower-layer record. The mount comes last; Remount() redoes it after a
  // reboot.
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
    if (quota_bytes > 0) {
      // The quota: an ext4 image holding upper/ and work/ (made with them, owners and
      // modes kept, by mkfs.ext4 -d; no journal: the image is the root's scratch layer,
      // and its fsyncs reach the host file anyway), sparse, mounted by MountRoot.
      int64_t bytes = std::max<int64_t>(quota_bytes, 8ll << 20);
      bytes = (bytes + 4095) / 4096 * 4096;
      std::string img = tmp + "/disk.img";
      auto fd = sys::Open(img, O_WRONLY | O_CREAT | O_EXCL, 0600);
      if (!fd) return tl::unexpected(fd.error());
      if (::ftruncate(fd->get(), bytes) != 0) return ErrnoFail("size " + img);
      fd->Reset();
      std::string seed = tmp + "/seed";
      if (::mkdir(seed.c_str(), 0700) != 0) return ErrnoFail("mkdir " + seed);
      if (::rename(upper.c_str(), (seed + "/upper").c_str()) != 0) return ErrnoFail("move upper");
      if (::rename((tmp + "/work").c_str(), (seed + "/work").c_str()) != 0) return ErrnoFail("move work");
      auto r = sys::RunChecked({.argv = {"mkfs.ext4", "-q", "-F", "-O", "^has_journal", "-m", "0",
                                         "-E", "lazy_itable_init=1,root_owner=0:0", "-d", seed, img}},
                               60000);
      if (!r) return tl::unexpected(std::move(r.error()).Wrap("make the root's disk image"));
      SPACE_TRY(sys::RemoveAll(seed));
      if (::mkdir((tmp + "/disk").c_str(), 0700) != 0) return ErrnoFail("mkdir disk");
    }
    // No fsync: it would cost milliseconds per sandbox on a busy disk, and a crash right
    // after creation loses at most a fresh, empty root (Remount then reports it).
    std::string record = tmp + "/" + record_name;
    auto rec = sys::Open(record, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (!rec) return tl::unexpected(rec.error());
    SPACE_TRY_WRAP(sys::WriteAll(rec->get(), record_value), "write " + record);
    return RenameNoReplace(tmp, dir);
  }();
  if (!st) {
    (void)sys::RemoveAll(tmp);
    auto e = std::move(st.error()).Wrap(ctx);
    if (e.sys_errno == EEXIST || e.sys_errno == ENOTEMPTY) e.code = Errc::kConflict;
    return tl::unexpected(std::move(e));
  }
  auto m = MountRoot(dir, lowerdir);
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

Result<int64_t> OverlayDriver::RootUsage(const std::string& id) const {
  SPACE_TRY(CheckName("root", id));
  std::string dir = roots_ + "/" + id;
  if (!sys::Exists(dir)) return Fail(Errc::kNotFound, "root " + id + " not found");
  // The upper directory holds exactly what the sandbox wrote (and whiteouts).
  auto du = internal::DiskUsage(dir + "/upper");
  if (!du) return tl::unexpected(std::move(du.error()).Wrap("disk usage of root " + id));
  return *du;
}

Status OverlayDriver::Remount(const std::string& id) {
  SPACE_TRY(CheckName("root", id));
  std::string ctx = "remount root " + id;
  std::string dir = roots_ + "/" + id;
  if (!sys::Exists(dir)) return Fail(Errc::kNotFound, "root " + id + " not found");
  if (IsOverlayMounted(dir + "/merged")) return Ok();
  std::string lowerdir;
  if (auto lower = sys::ReadFile(dir + "/lower")) {
    // Made from a snapshot: its data lives as long as this root does.
    if (!IsLowerName(*lower))
      return Fail(Errc::kInternal, ctx + ": bad lower record \"" + lower->substr(0, 200) + "\"");
    lowerdir = lowers_ + "/" + *lower;
    if (!sys::Exists(lowerdir))
      return Fail(Errc::kNotFound, ctx + ": snapshot data " + *lower + " not found");
  } else {
    auto digest = sys::ReadFile(dir + "/layer");
    if (!digest) return tl::unexpected(std::move(digest.error()).Wrap(ctx));
    SPACE_TRY_WRAP(CheckName("layer", *digest), ctx);
    if (!HasLayer(*digest)) return Fail(Errc::kNotFound, ctx + ": layer " + *digest + " not found");
    lowerdir = layers_ + "/" + *digest;
  }
  SPACE_TRY_WRAP(MountRoot(dir, lowerdir), ctx);
  return Ok();
}

Status OverlayDriver::DeleteRoot(const std::string& id) {
  SPACE_TRY(CheckName("root", id));
  std::string dir = roots_ + "/" + id;
  if (!sys::Exists(dir)) return Ok();
  auto lower = sys::ReadFile(dir + "/lower");
  SPACE_TRY_WRAP(RemoveRootDir(roots_, id), "delete root " + id);
  // The root may have been the last user of its snapshot's data.
  if (lower && IsLowerName(*lower)) {
    auto st = DropLowerIfUnused(*lower);
    if (!st) spdlog::warn("storage: delete root {}: {}", id, st.error().message);
  }
  return Ok();
}

std::vector<std::string> OverlayDriver::ListRoots() const { return internal::ListNames(roots_); }

Result<std::string> OverlayDriver::SnapshotLower(const std::string& snapshot_id) const {
  auto target = ReadLink(snapshots_ + "/" + snapshot_id);
  if (!target) {
    if (target.error().sys_errno == ENOENT)
      return Fail(Errc::kNotFound, "snapshot " + snapshot_id + " not found");
    return tl::unexpected(target.error());
  }
  std::string lower = StartsWith(*target, kLowerLinkPrefix)
                          ? target->substr(kLowerLinkPrefix.size())
                          : std::string();
  if (!IsLowerName(lower) || SnapshotOfLower(lower) != snapshot_id) {
    return Fail(Errc::kInternal,
                "snapshot " + snapshot_id + ": bad link target \"" + *target + "\"");
  }
  return lower;
}

bool OverlayDriver::RootLowers(std::set<std::string>* used) const {
  bool complete = true;
  for (const auto& id : ListRoots()) {
    std::string dir = roots_ + "/" + id;
    if (auto rec = sys::ReadFile(dir + "/lower"); rec && IsLowerName(*rec)) {
      used->insert(*rec);
      continue;
    }
    // Records are not fsynced (see CreateRootOver): a crash soon after a root was made
    // can leave one empty. Such a root might use any entry.
    auto layer = sys::ReadFile(dir + "/layer");
    if (!layer || layer->empty()) {
      spdlog::warn("storage: root {} has no readable lower-layer record", id);
      complete = false;
    }
  }
  return complete;
}

bool OverlayDriver::LowerInUseLocked(const std::string& lower) const {
  if (pins_.count(lower)) return true;
  auto linked = SnapshotLower(SnapshotOfLower(lower));
  if (linked && *linked == lower) return true;
  std::set<std::string> used;
  return !RootLowers(&used) || used.count(lower);
}

Status OverlayDriver::DropLowerIfUnused(const std::string& lower) {
  std::string doomed = lowers_ + "/.del-" + lower;
  {
    std::lock_guard lock(lowers_mu_);
    if (LowerInUseLocked(lower) || !sys::Exists(lowers_ + "/" + lower)) return Ok();
    // Renamed first so that a crash midway never leaves a half-deleted tree under a name
    // a root could still be remounted from; Open() finishes the job.
    SPACE_TRY(RenameNoReplace(lowers_ + "/" + lower, doomed));
  }
  return sys::RemoveAll(doomed);
}

Status OverlayDriver::CleanLowers() {
  // Runs in Open(), before the driver is shared: no lock needed, and one pass over the
  // roots instead of one per entry.
  std::set<std::string> used;
  bool complete = RootLowers(&used);
  for (const auto& name : internal::ListAllNames(lowers_)) {
    if (name[0] != '.' && IsLowerName(name)) {
      if (!complete || used.count(name)) continue;
      auto linked = SnapshotLower(SnapshotOfLower(name));
      if (linked && *linked == name) continue;
    }
    SPACE_TRY_WRAP(sys::RemoveAll(lowers_ + "/" + name), "remove leftover snapshot data");
    spdlog::info("storage: removed leftover snapshot data {}/{}", lowers_, name);
  }
  return Ok();
}

Status OverlayDriver::SnapshotRoot(const std::string& root_id, const std::string& snapshot_id) {
  SPACE_TRY(CheckName("root", root_id));
  SPACE_TRY(CheckName("snapshot", snapshot_id));
  std::string ctx = "snapshot root " + root_id + " as " + snapshot_id;
  // Checked first only to fail fast, before a long copy; the link below decides.
  if (HasSnapshot(snapshot_id)) return Fail(Errc::kConflict, ctx + ": " + snapshot_id + " exists");
  // The merged view is what the sandbox sees: the only complete picture (upper alone
  // holds whiteouts and opaque-directory xattrs, which CopyTree does not keep).
  SPACE_TRY_WRAP(Remount(root_id), ctx);
  std::string merged = roots_ + "/" + root_id + "/merged";
  std::string lower = snapshot_id + "." + internal::RandomSuffix();
  std::string tmp = lowers_ + "/.tmp-" + lower;
  std::string final_dir = lowers_ + "/" + lower;
  if (::mkdir(tmp.c_str(), 0700) != 0) return ErrnoFail(ctx + ": mkdir " + tmp);
  auto st = [&]() -> Status {
    // Owners are already shifted in a root: copy them unchanged.
    SPACE_TRY(internal::CopyTree(merged, tmp, 0));
    SPACE_TRY(SyncFs(tmp));
    return RenameNoReplace(tmp, final_dir);
  }();
  if (!st) {
    (void)sys::RemoveAll(tmp);
    return tl::unexpected(std::move(st.error()).Wrap(ctx));
  }
  // The link publishes the snapshot: symlink(2) creates it complete or not at all. A
  // crash before it leaves an unreferenced tree that Open() removes.
  std::string link = snapshots_ + "/" + snapshot_id;
  if (::symlink((std::string(kLowerLinkPrefix) + lower).c_str(), link.c_str()) != 0) {
    int err = errno;
    auto drop = DropLowerIfUnused(lower);
    if (!drop) spdlog::warn("storage: {}", drop.error().message);
    if (err == EEXIST) return Fail(Errc::kConflict, ctx + ": " + snapshot_id + " exists");
    return ErrnoFail(ctx + ": symlink " + link, err);
  }
  // Durable before returning, as a btrfs snapshot is: the caller records it next.
  SPACE_TRY_WRAP(FsyncDir(snapshots_), ctx);
  return Ok();
}

Result<std::string> OverlayDriver::CreateRootFromSnapshot(const std::string& root_id,
                                                          const std::string& snapshot_id,
                                                          int64_t quota_bytes) {
  SPACE_TRY(CheckName("root", root_id));
  SPACE_TRY(CheckName("snapshot", snapshot_id));
  // Held until the root's record exists, so DeleteSnapshot cannot drop the data between
  // reading the link and recording the new user.
  std::lock_guard lock(lowers_mu_);
  auto lower = SnapshotLower(snapshot_id);
  if (!lower) return tl::unexpected(std::move(lower.error()).Wrap("create root " + root_id));
  return CreateRootOver(root_id, lowers_ + "/" + *lower, "snapshot " + snapshot_id, "lower",
                        *lower, quota_bytes);
}

Status OverlayDriver::DeleteSnapshot(const std::string& snapshot_id) {
  SPACE_TRY(CheckName("snapshot", snapshot_id));
  std::string ctx = "delete snapshot " + snapshot_id;
  std::string link = snapshots_ + "/" + snapshot_id;
  std::string lower;
  {
    std::lock_guard lock(lowers_mu_);
    auto l = SnapshotLower(snapshot_id);
    if (!l && l.error().code == Errc::kNotFound) return Ok();
    if (l) lower = *l;   // a bad link is removed all the same; Open() sweeps its data
    if (::unlink(link.c_str()) != 0 && errno != ENOENT) return ErrnoFail(ctx + ": unlink " + link);
  }
  if (!lower.empty()) SPACE_TRY_WRAP(DropLowerIfUnused(lower), ctx);
  return Ok();
}

bool OverlayDriver::HasSnapshot(const std::string& snapshot_id) const {
  struct stat st;
  return internal::IsValidName(snapshot_id) &&
         ::lstat((snapshots_ + "/" + snapshot_id).c_str(), &st) == 0;
}

std::vector<std::string> OverlayDriver::ListSnapshots() const {
  return internal::ListNames(snapshots_);
}

Result<int64_t> OverlayDriver::SnapshotSize(const std::string& snapshot_id) const {
  SPACE_TRY(CheckName("snapshot", snapshot_id));
  std::string ctx = "size of snapshot " + snapshot_id;
  auto lower = SnapshotLower(snapshot_id);
  if (!lower) return tl::unexpected(std::move(lower.error()).Wrap(ctx));
  // Not pinned: a DeleteSnapshot racing with this walk makes it fail, nothing worse.
  auto du = internal::DiskUsage(lowers_ + "/" + *lower);
  if (!du) return tl::unexpected(std::move(du.error()).Wrap(ctx));
  return *du;
}

Status OverlayDriver::ImportLayerFromRoot(const std::string& digest,
                                          const std::string& root_id) {
  SPACE_TRY(CheckName("layer", digest));
  SPACE_TRY(CheckName("root", root_id));
  std::string ctx = "import layer " + digest + " from root " + root_id;
  if (HasLayer(digest)) return Fail(Errc::kConflict, ctx + ": exists");
  SPACE_TRY_WRAP(Remount(root_id), ctx);
  // Owners are already shifted in a root: copy them unchanged.
  SPACE_TRY_WRAP(ImportLayer(digest, roots_ + "/" + root_id + "/merged", 0),
                 "from root " + root_id);
  return Ok();
}

Status OverlayDriver::ImportLayerFromSnapshot(const std::string& digest,
                                              const std::string& snapshot_id) {
  SPACE_TRY(CheckName("layer", digest));
  SPACE_TRY(CheckName("snapshot", snapshot_id));
  std::string ctx = "import layer " + digest + " from snapshot " + snapshot_id;
  if (HasLayer(digest)) return Fail(Errc::kConflict, ctx + ": exists");
  std::string lower;
  {
    // Pinned for the copy, so that a concurrent DeleteSnapshot leaves the data in place.
    std::lock_guard lock(lowers_mu_);
    auto l = SnapshotLower(snapshot_id);
    if (!l) return tl::unexpected(std::move(l.error()).Wrap(ctx));
    lower = *l;
    ++pins_[lower];
  }
  auto st = ImportLayer(digest, lowers_ + "/" + lower, 0);
  {
    std::lock_guard lock(lowers_mu_);
    if (--pins_[lower] == 0) pins_.erase(lower);
  }
  auto drop = DropLowerIfUnused(lower);   // if the snapshot went meanwhile
  if (!drop) spdlog::warn("storage: {}", drop.error().message);
  if (!st) return tl::unexpected(std::move(st.error()).Wrap("from snapshot " + snapshot_id));
  return Ok();
}

Result<std::string> OverlayDriver::LayerPath(const std::string& digest) const {
  SPACE_TRY(CheckName("layer", digest));
  std::string path = layers_ + "/" + digest;
  if (!sys::Exists(path)) return Fail(Errc::kNotFound, "layer " + digest + " not found");
  return path;
}

}  // namespace space::storage
