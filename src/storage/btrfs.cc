#include "storage/btrfs.h"

#include <endian.h>
#include <fcntl.h>
#include <linux/btrfs.h>
#include <linux/btrfs_tree.h>
#include <linux/magic.h>
#include <spdlog/spdlog.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <optional>

#include "storage/btrfs_ioctl.h"
#include "storage/fs_util.h"
#include "sys/sys.h"

namespace space::storage {

namespace {

using internal::CheckName;
using namespace btrfs;  // NOLINT: the ioctl wrappers of btrfs_ioctl.h

constexpr uint64_t kDefaultPoolBytes = uint64_t{64} << 30;
// BTRFS_QUOTA_CTL_ENABLE_SIMPLE_QUOTA (Linux 6.7); Debian 12's headers predate it.
constexpr uint64_t kQuotaCtlEnableSimple = 4;

Status MakeDir(const std::string& path, mode_t mode) {
  SPACE_TRY(sys::MkdirAll(path, mode));
  if (::chmod(path.c_str(), mode) != 0) return ErrnoFail("chmod " + path);
  return Ok();
}

uint64_t PoolBytes(const OpenOptions& opts) {
  if (opts.pool_bytes) return opts.pool_bytes;
  if (const char* env = std::getenv("SPACE_POOL_SIZE")) {
    uint64_t n = internal::ParseSize(env);
    if (n) return n;
    spdlog::warn("storage: ignoring bad SPACE_POOL_SIZE \"{}\"", env);
  }
  return kDefaultPoolBytes;
}

// Creates the sparse pool image and makes a btrfs in it. Built under a temporary name so
// that a crash mid-mkfs never leaves a half-made image under the final one.
Status CreatePoolImage(const std::string& image, uint64_t bytes) {
  std::string tmp = image + ".tmp";
  (void)::unlink(tmp.c_str());
  {
    auto fd = sys::Open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (!fd) return tl::unexpected(fd.error());
    if (::ftruncate(fd->get(), static_cast<off_t>(bytes)) != 0) {
      int e = errno;
      (void)::unlink(tmp.c_str());
      return ErrnoFail("truncate " + tmp, e);
    }
  }
  // Single metadata copy: DUP on one loop file adds write cost and no real redundancy.
  auto r = sys::RunChecked(
      {.argv = {"mkfs.btrfs", "-q", "-f", "-m", "single", "-L", "space-pool", tmp}});
  if (!r) {
    (void)::unlink(tmp.c_str());
    return tl::unexpected(r.error());
  }
  if (::rename(tmp.c_str(), image.c_str()) != 0) return ErrnoFail("rename " + tmp);
  return Ok();
}

// Mounts the pool at `mnt` unless it is mounted already (daemon restart).
Status MountPool(const std::string& image, const std::string& mnt, const OpenOptions& opts) {
  SPACE_TRY(sys::MkdirAll(mnt, 0711));
  auto mounts = internal::ReadMountInfo();
  if (const auto* m = internal::FindMount(mounts, mnt)) {
    if (m->fstype == "btrfs") return Ok();
    return Fail(Errc::kConflict, mnt + ": a " + m->fstype + " filesystem is mounted there");
  }
  bool created = false;
  if (!sys::Exists(image)) {
    uint64_t bytes = PoolBytes(opts);
    SPACE_TRY_WRAP(CreatePoolImage(image, bytes), "create btrfs pool");
    created = true;
    spdlog::info("storage: created btrfs pool {} ({} MiB sparse)", image, bytes >> 20);
  }
  // mount(8) sets up the loop device with LO_FLAGS_AUTOCLEAR, so unmounting the pool also
  // frees the loop device.
  auto r = sys::RunChecked({.argv = {"mount", "-t", "btrfs", "-o", "loop,noatime", image, mnt}});
  if (!r) {
    // A pool that never held data is not worth keeping (e.g. no loop devices here).
    if (created) (void)::unlink(image.c_str());
    return tl::unexpected(std::move(r.error()).Wrap("mount btrfs pool"));
  }
  return Ok();
}

}  // namespace

BtrfsDriver::BtrfsDriver(std::string base, std::vector<std::string> spare_dirs)
    : base_(std::move(base)),
      layers_(base_ + "/layers"),
      roots_(base_ + "/roots"),
      snapshots_(base_ + "/snapshots"),
      tmp_(base_ + "/tmp"),
      spare_(base_ + "/spare"),
      spare_dirs_(std::move(spare_dirs)) {}

Result<std::unique_ptr<Driver>> BtrfsDriver::Open(const std::string& storage_dir,
                                                  const OpenOptions& opts) {
  std::string base;
  if (internal::FsType(storage_dir) == BTRFS_SUPER_MAGIC) {
    base = storage_dir + "/btrfs";
    SPACE_TRY(MakeDir(base, 0711));
  } else {
    base = storage_dir + "/pool";
    SPACE_TRY(MountPool(storage_dir + "/pool.img", base, opts));
  }
  if (internal::FsType(base) != BTRFS_SUPER_MAGIC)
    return Fail(Errc::kUnavailable, base + ": not on btrfs");
  // The container's user-namespace root must be able to walk to roots/<id>.
  if (::chmod(base.c_str(), 0711) != 0) return ErrnoFail("chmod " + base);
  for (const auto& dir : opts.spare_dirs) {
    if (dir.empty() || dir.size() > 255 || dir == "." || dir == ".." ||
        dir.find('/') != std::string::npos || dir.find('\0') != std::string::npos)
      return Fail(Errc::kInvalidArgument, "storage: bad spare directory name \"" + dir + "\"");
  }
  std::unique_ptr<BtrfsDriver> d(new BtrfsDriver(base, opts.spare_dirs));
  SPACE_TRY(MakeDir(d->layers_, 0700));
  SPACE_TRY(MakeDir(d->roots_, 0711));
  SPACE_TRY(MakeDir(d->snapshots_, 0700));
  SPACE_TRY(MakeDir(d->tmp_, 0700));
  SPACE_TRY(MakeDir(d->spare_, 0700));

  // Imports interrupted by a crash: never visible as layers, just reclaim the space.
  // (Nothing else needs cleaning but spares, below: every other object is made by one
  // atomic snapshot.)
  auto tmp_fd = OpenDir(d->tmp_);
  if (!tmp_fd) return tl::unexpected(tmp_fd.error());
  for (const auto& name : internal::ListAllNames(d->tmp_)) {
    auto r = DeleteSubvolumeAt(tmp_fd->get(), d->tmp_, name);
    if (!r) return tl::unexpected(std::move(r.error()).Wrap("remove leftover import"));
    spdlog::info("storage: removed leftover import {}/{}", d->tmp_, name);
  }
  // Spares of an earlier daemon: made for layers and quotas that may have changed since.
  d->RemoveSpares(internal::ListAllNames(d->spare_));
  ClearStaleQgroups(tmp_fd->get());
  return std::unique_ptr<Driver>(std::move(d));
}

Status BtrfsDriver::ImportLayer(const std::string& digest, const std::string& src_dir,
                                uint32_t uid_shift) {
  SPACE_TRY(CheckName("layer", digest));
  if (HasLayer(digest)) return Fail(Errc::kConflict, "layer " + digest + " exists");
  std::string tmp_name = digest + "." + internal::RandomSuffix();
  std::string tmp_path = tmp_ + "/" + tmp_name;
  auto tmp_fd = OpenDir(tmp_);
  if (!tmp_fd) return tl::unexpected(tmp_fd.error());
  SPACE_TRY_WRAP(CreateSubvolume(tmp_fd->get(), tmp_name), "import layer " + digest);

  auto st = [&]() -> Status {
    SPACE_TRY(internal::CopyTree(src_dir, tmp_path, uid_shift));
    auto src = OpenDir(tmp_path);
    if (!src) return tl::unexpected(src.error());
    auto dst = OpenDir(layers_);
    if (!dst) return tl::unexpected(dst.error());
    // A read-only snapshot into place, because a read-only subvolume cannot be renamed
    // (EROFS: its ".." would change) and a writable one could be seen before it is final.
    return Snapshot(src->get(), dst->get(), digest, /*read_only=*/true);
  }();
  auto del = DeleteSubvolumeAt(tmp_fd->get(), tmp_, tmp_name);
  if (!del) spdlog::warn("storage: {}", del.error().message);
  if (!st) {
    auto e = std::move(st.error()).Wrap("import layer " + digest);
    if (e.sys_errno == EEXIST) e.code = Errc::kConflict;
    return tl::unexpected(std::move(e));
  }
  return Ok();
}

bool BtrfsDriver::HasLayer(const std::string& digest) const {
  return internal::IsValidName(digest) && sys::Exists(layers_ + "/" + digest);
}

std::vector<std::string> BtrfsDriver::ListLayers() const {
  return internal::ListNames(layers_);
}

Status BtrfsDriver::DeleteLayer(const std::string& digest) {
  SPACE_TRY(CheckName("layer", digest));
  DropSpares(digest);
  auto fd = OpenDir(layers_);
  if (!fd) return tl::unexpected(fd.error());
  auto r = DeleteSubvolumeAt(fd->get(), layers_, digest);
  if (!r) return tl::unexpected(std::move(r.error()).Wrap("delete layer " + digest));
  if (*r) DestroyQgroup(fd->get(), *r);
  // Subvolumes deleted earlier have been cleaned meanwhile: their qgroups can go now.
  SweepStaleQgroups(fd->get());
  return Ok();
}

void BtrfsDriver::SweepStaleQgroups(int fs_fd) {
  const int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
  int64_t due = next_qgroup_sweep_ns_.load(std::memory_order_relaxed);
  const int64_t next =
      now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(kQgroupSweepInterval)
                .count();
  // One caller per interval sweeps; concurrent deletions skip.
  if (now < due || !next_qgroup_sweep_ns_.compare_exchange_strong(due, next)) return;
  ClearStaleQgroups(fs_fd);
}

Status BtrfsDriver::EnsureQuota() {
  std::lock_guard lock(quota_mu_);
  if (quota_on_) return Ok();
  auto fd = OpenDir(base_);
  if (!fd) return tl::unexpected(fd.error());
  // Simple quotas (kernel 6.7+) charge each extent to the subvolume that allocated it:
  // exactly "bytes the sandbox wrote", and snapshots skip the extra commit that full
  // qgroup accounting needs (measured here: snapshot ~6 ms with squota or no quota,
  // ~10 ms with full qgroups). Older kernels reject the command: use full qgroups.
  // Either is a no-op when quotas are already on (e.g. after a restart).
  btrfs_ioctl_quota_ctl_args args{};
  args.cmd = kQuotaCtlEnableSimple;
  if (::ioctl(fd->get(), BTRFS_IOC_QUOTA_CTL, &args) != 0) {
    if (errno != EINVAL && errno != EOPNOTSUPP)
      return ErrnoFail("enable btrfs simple quota on " + base_);
    args = {};
    args.cmd = BTRFS_QUOTA_CTL_ENABLE;
    if (::ioctl(fd->get(), BTRFS_IOC_QUOTA_CTL, &args) != 0)
      return ErrnoFail("enable btrfs quota on " + base_);
    spdlog::info("storage: btrfs simple quotas unsupported; using full qgroups on {}", base_);
  }
  quota_on_ = true;
  return Ok();
}

Result<std::string> BtrfsDriver::CreateRoot(const std::string& id, const std::string& digest,
                                            int64_t quota_bytes) {
  SPACE_TRY(CheckName("root", id));
  SPACE_TRY(CheckName("layer", digest));
  return CreateRootFrom(id, layers_ + "/" + digest, "layer " + digest, quota_bytes);
}

Result<std::string> BtrfsDriver::CreateRootFrom(const std::string& id, const std::string& src,
                                                const std::string& what,
                                                int64_t quota_bytes) {
  std::string ctx = "create root " + id;
  if (quota_bytes < 0) return Fail(Errc::kInvalidArgument, ctx + ": negative quota");
  // Quotas must be on before the snapshot so that its qgroup is created with it.
  if (quota_bytes > 0) SPACE_TRY_WRAP(EnsureQuota(), ctx);
  auto src_fd = OpenSource(src, what);
  if (!src_fd) return tl::unexpected(std::move(src_fd.error()).Wrap(ctx));
  SPACE_TRY_WRAP(SnapshotInto(src_fd->get(), roots_, id, /*read_only=*/false,
                              static_cast<uint64_t>(quota_bytes)),
                 ctx);
  return roots_ + "/" + id;
}

std::string BtrfsDriver::RootPath(const std::string& id) const {
  if (!internal::IsValidName(id)) return "";
  std::string path = roots_ + "/" + id;
  return sys::Exists(path) ? path : "";
}

Status BtrfsDriver::Remount(const std::string& id) {
  SPACE_TRY(CheckName("root", id));
  if (!sys::Exists(roots_ + "/" + id)) return Fail(Errc::kNotFound, "root " + id + " not found");
  return Ok();   // subvolumes need no mount of their own
}

Status BtrfsDriver::DeleteRoot(const std::string& id) {
  SPACE_TRY(CheckName("root", id));
  {
    std::lock_guard l(spare_mu_);
    unsettled_.erase(id);
  }
  auto fd = OpenDir(roots_);
  if (!fd) return tl::unexpected(fd.error());
  auto r = DeleteSubvolumeAt(fd->get(), roots_, id);
  if (!r) return tl::unexpected(std::move(r.error()).Wrap("delete root " + id));
  if (*r) DestroyQgroup(fd->get(), *r);
  // Subvolumes deleted earlier have been cleaned meanwhile: their qgroups can go now.
  SweepStaleQgroups(fd->get());
  return Ok();
}

std::vector<std::string> BtrfsDriver::ListRoots() const { return internal::ListNames(roots_); }

Status BtrfsDriver::SnapshotRoot(const std::string& root_id, const std::string& snapshot_id) {
  SPACE_TRY(CheckName("root", root_id));
  SPACE_TRY(CheckName("snapshot", snapshot_id));
  std::string ctx = "snapshot root " + root_id + " as " + snapshot_id;
  auto src = OpenSource(roots_ + "/" + root_id, "root " + root_id);
  if (!src) return tl::unexpected(std::move(src.error()).Wrap(ctx));
  // No qgroup limit: a read-only snapshot never grows.
  SPACE_TRY_WRAP(SnapshotInto(src->get(), snapshots_, snapshot_id, /*read_only=*/true), ctx);
  return Ok();
}

Result<std::string> BtrfsDriver::CreateRootFromSnapshot(const std::string& root_id,
                                                        const std::string& snapshot_id,
                                                        int64_t quota_bytes) {
  SPACE_TRY(CheckName("root", root_id));
  SPACE_TRY(CheckName("snapshot", snapshot_id));
  return CreateRootFrom(root_id, snapshots_ + "/" + snapshot_id, "snapshot " + snapshot_id,
                        quota_bytes);
}

Status BtrfsDriver::DeleteSnapshot(const std::string& snapshot_id) {
  SPACE_TRY(CheckName("snapshot", snapshot_id));
  auto fd = OpenDir(snapshots_);
  if (!fd) return tl::unexpected(fd.error());
  // A read-only snapshot holds no nested subvolumes, so this is one atomic deletion.
  auto r = DeleteSubvolumeAt(fd->get(), snapshots_, snapshot_id);
  if (!r) return tl::unexpected(std::move(r.error()).Wrap("delete snapshot " + snapshot_id));
  if (*r) DestroyQgroup(fd->get(), *r);
  // Subvolumes deleted earlier have been cleaned meanwhile: their qgroups can go now.
  SweepStaleQgroups(fd->get());
  return Ok();
}

bool BtrfsDriver::HasSnapshot(const std::string& snapshot_id) const {
  return internal::IsValidName(snapshot_id) && sys::Exists(snapshots_ + "/" + snapshot_id);
}

std::vector<std::string> BtrfsDriver::ListSnapshots() const {
  return internal::ListNames(snapshots_);
}

Result<int64_t> BtrfsDriver::SnapshotSize(const std::string& snapshot_id) const {
  SPACE_TRY(CheckName("snapshot", snapshot_id));
  std::string ctx = "size of snapshot " + snapshot_id;
  std::string path = snapshots_ + "/" + snapshot_id;
  auto fd = OpenSource(path, "snapshot " + snapshot_id);
  if (!fd) return tl::unexpected(std::move(fd.error()).Wrap(ctx));
  auto id = SubvolumeId(fd->get());
  if (!id) return tl::unexpected(std::move(id.error()).Wrap(ctx));
  if (auto rfer = QgroupReferenced(fd->get(), *id)) return *rfer;
  auto du = internal::DiskUsage(path);
  if (!du) return tl::unexpected(std::move(du.error()).Wrap(ctx));
  return *du;
}

Result<int64_t> BtrfsDriver::RootUsage(const std::string& id) const {
  SPACE_TRY(CheckName("root", id));
  std::string ctx = "disk usage of root " + id;
  std::string path = roots_ + "/" + id;
  auto fd = OpenSource(path, "root " + id);
  if (!fd) return tl::unexpected(std::move(fd.error()).Wrap(ctx));
  auto sv = SubvolumeId(fd->get());
  if (!sv) return tl::unexpected(std::move(sv.error()).Wrap(ctx));
  // What the quota charges: blocks shared with the layer are not the sandbox's.
  if (auto excl = QgroupField(fd->get(), *sv, 24)) return *excl;
  auto du = internal::DiskUsage(path);
  if (!du) return tl::unexpected(std::move(du.error()).Wrap(ctx));
  return *du;
}

Status BtrfsDriver::ImportLayerFrom(const std::string& digest, const std::string& src,
                                    const std::string& what) {
  std::string ctx = "import layer " + digest + " from " + what;
  auto src_fd = OpenSource(src, what);
  if (!src_fd) return tl::unexpected(std::move(src_fd.error()).Wrap(ctx));
  // Read-only like every layer; shares all blocks with the source, which stays writable
  // (a root) and independent.
  SPACE_TRY_WRAP(SnapshotInto(src_fd->get(), layers_, digest, /*read_only=*/true), ctx);
  return Ok();
}

Status BtrfsDriver::ImportLayerFromRoot(const std::string& digest, const std::string& root_id) {
  SPACE_TRY(CheckName("layer", digest));
  SPACE_TRY(CheckName("root", root_id));
  return ImportLayerFrom(digest, roots_ + "/" + root_id, "root " + root_id);
}

Status BtrfsDriver::ImportLayerFromSnapshot(const std::string& digest,
                                            const std::string& snapshot_id) {
  SPACE_TRY(CheckName("layer", digest));
  SPACE_TRY(CheckName("snapshot", snapshot_id));
  return ImportLayerFrom(digest, snapshots_ + "/" + snapshot_id, "snapshot " + snapshot_id);
}

Result<std::string> BtrfsDriver::LayerPath(const std::string& digest) const {
  SPACE_TRY(CheckName("layer", digest));
  std::string path = layers_ + "/" + digest;
  if (!sys::Exists(path)) return Fail(Errc::kNotFound, "layer " + digest + " not found");
  return path;
}

}  // namespace space::storage
