#include "storage/btrfs.h"

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

#include "storage/fs_util.h"
#include "sys/sys.h"

namespace space::storage {

namespace {

using internal::CheckName;

constexpr uint64_t kDefaultPoolBytes = uint64_t{64} << 30;
// BTRFS_QUOTA_CTL_ENABLE_SIMPLE_QUOTA (Linux 6.7); Debian 12's headers predate it.
constexpr uint64_t kQuotaCtlEnableSimple = 4;

Result<sys::UniqueFd> OpenDir(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return ErrnoFail("open " + path);
  return sys::UniqueFd(fd);
}

bool CopyName(char* dst, size_t cap, const std::string& name) {
  if (name.size() >= cap) return false;
  std::memcpy(dst, name.c_str(), name.size() + 1);
  return true;
}

Status CreateSubvolume(int parent_fd, const std::string& name) {
  btrfs_ioctl_vol_args args{};
  if (!CopyName(args.name, sizeof args.name, name))
    return Fail(Errc::kInvalidArgument, "subvolume name too long: " + name);
  if (::ioctl(parent_fd, BTRFS_IOC_SUBVOL_CREATE, &args) != 0)
    return ErrnoFail("create subvolume " + name);
  return Ok();
}

// Snapshots the subvolume open at `src_fd` as `parent_fd`/`name`. The kernel flushes the
// source's dirty data first and commits the snapshot in one transaction, so after a
// crash it either exists complete or not at all.
Status Snapshot(int src_fd, int parent_fd, const std::string& name, bool read_only) {
  btrfs_ioctl_vol_args_v2 args{};
  args.fd = src_fd;
  args.flags = read_only ? BTRFS_SUBVOL_RDONLY : 0;
  if (!CopyName(args.name, sizeof args.name, name))
    return Fail(Errc::kInvalidArgument, "subvolume name too long: " + name);
  if (::ioctl(parent_fd, BTRFS_IOC_SNAP_CREATE_V2, &args) != 0)
    return ErrnoFail("snapshot " + name);
  return Ok();
}

Result<uint64_t> SubvolumeId(int fd) {
  btrfs_ioctl_ino_lookup_args args{};
  args.treeid = 0;
  args.objectid = BTRFS_FIRST_FREE_OBJECTID;
  if (::ioctl(fd, BTRFS_IOC_INO_LOOKUP, &args) != 0) return ErrnoFail("subvolume id");
  return static_cast<uint64_t>(args.treeid);
}

// Subvolumes whose parent (in the subvolume tree) is `id`: the ROOT_REF items keyed
// (id, ROOT_REF, child) in the tree of tree roots.
Result<std::vector<uint64_t>> ChildSubvolumes(int fs_fd, uint64_t id) {
  std::vector<uint64_t> out;
  btrfs_ioctl_search_args args{};
  auto& sk = args.key;
  sk.tree_id = BTRFS_ROOT_TREE_OBJECTID;
  sk.min_objectid = sk.max_objectid = id;
  sk.min_type = sk.max_type = BTRFS_ROOT_REF_KEY;
  sk.min_offset = 0;
  sk.max_offset = UINT64_MAX;
  sk.min_transid = 0;
  sk.max_transid = UINT64_MAX;
  for (;;) {
    sk.nr_items = 4096;
    if (::ioctl(fs_fd, BTRFS_IOC_TREE_SEARCH, &args) != 0) return ErrnoFail("tree search");
    if (sk.nr_items == 0) break;
    size_t off = 0;
    uint64_t last = 0;
    for (uint32_t i = 0; i < sk.nr_items; ++i) {
      btrfs_ioctl_search_header hdr;
      std::memcpy(&hdr, args.buf + off, sizeof hdr);
      off += sizeof hdr + hdr.len;
      if (hdr.objectid == id && hdr.type == BTRFS_ROOT_REF_KEY) out.push_back(hdr.offset);
      last = hdr.offset;
    }
    if (last == UINT64_MAX) break;
    sk.min_offset = last + 1;
  }
  return out;
}

Status DestroyById(int fs_fd, uint64_t id) {
  btrfs_ioctl_vol_args_v2 args{};
  args.flags = BTRFS_SUBVOL_SPEC_BY_ID;
  args.subvolid = id;
  if (::ioctl(fs_fd, BTRFS_IOC_SNAP_DESTROY_V2, &args) != 0)
    return ErrnoFail("delete subvolume " + std::to_string(id));
  return Ok();
}

// Deletes subvolume `id` after every subvolume nested in it, deepest first (the kernel
// refuses to delete a subvolume that still contains others: ENOTEMPTY).
Status DestroyTreeById(int fs_fd, uint64_t id, int depth = 0) {
  if (depth > 64) return Fail(Errc::kInternal, "subvolumes nested too deep");
  auto kids = ChildSubvolumes(fs_fd, id);
  if (!kids) return tl::unexpected(kids.error());
  for (uint64_t k : *kids) SPACE_TRY(DestroyTreeById(fs_fd, k, depth + 1));
  return DestroyById(fs_fd, id);
}

// Best effort: the kernel (6.7+) also drops the qgroup of a fully cleaned subvolume on
// its own, and until the cleaner has run this fails with EBUSY.
void DestroyQgroup(int fs_fd, uint64_t id) {
  btrfs_ioctl_qgroup_create_args args{};
  args.create = 0;
  args.qgroupid = id;
  if (::ioctl(fs_fd, BTRFS_IOC_QGROUP_CREATE, &args) != 0 && errno != ENOTCONN &&
      errno != ENOENT && errno != EBUSY) {
    spdlog::debug("storage: destroy qgroup 0/{}: {}", id, std::strerror(errno));
  }
}

// Deletes `parent_fd`/`name` with everything nested inside it; ok if missing. Falls back
// to a plain recursive removal for a directory that is not a subvolume.
// Returns the deleted subvolume's id (0 if none).
Result<uint64_t> DeleteSubvolumeAt(int parent_fd, const std::string& parent,
                                   const std::string& name) {
  std::string path = parent + "/" + name;
  struct stat st;
  if (::fstatat(parent_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return uint64_t{0};
    return ErrnoFail("stat " + path);
  }
  if (!S_ISDIR(st.st_mode) || st.st_ino != BTRFS_FIRST_FREE_OBJECTID) {
    SPACE_TRY(sys::RemoveAll(path));
    return uint64_t{0};
  }
  uint64_t id;
  {
    auto fd = OpenDir(path);
    if (!fd) return tl::unexpected(fd.error());
    auto r = SubvolumeId(fd->get());
    if (!r) return tl::unexpected(std::move(r.error()).Wrap(path));
    id = *r;
  }
  SPACE_TRY_WRAP(DestroyTreeById(parent_fd, id), path);
  return id;
}

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

BtrfsDriver::BtrfsDriver(std::string base)
    : base_(std::move(base)),
      layers_(base_ + "/layers"),
      roots_(base_ + "/roots"),
      tmp_(base_ + "/tmp") {}

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
  std::unique_ptr<BtrfsDriver> d(new BtrfsDriver(base));
  SPACE_TRY(MakeDir(d->layers_, 0700));
  SPACE_TRY(MakeDir(d->roots_, 0711));
  SPACE_TRY(MakeDir(d->tmp_, 0700));

  // Imports interrupted by a crash: never visible as layers, just reclaim the space.
  auto tmp_fd = OpenDir(d->tmp_);
  if (!tmp_fd) return tl::unexpected(tmp_fd.error());
  for (const auto& name : internal::ListAllNames(d->tmp_)) {
    auto r = DeleteSubvolumeAt(tmp_fd->get(), d->tmp_, name);
    if (!r) return tl::unexpected(std::move(r.error()).Wrap("remove leftover import"));
    spdlog::info("storage: removed leftover import {}/{}", d->tmp_, name);
  }
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
  auto fd = OpenDir(layers_);
  if (!fd) return tl::unexpected(fd.error());
  auto r = DeleteSubvolumeAt(fd->get(), layers_, digest);
  if (!r) return tl::unexpected(std::move(r.error()).Wrap("delete layer " + digest));
  if (*r) DestroyQgroup(fd->get(), *r);
  return Ok();
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
  std::string ctx = "create root " + id;
  if (quota_bytes < 0) return Fail(Errc::kInvalidArgument, ctx + ": negative quota");
  // Quotas must be on before the snapshot so that its qgroup is created with it.
  if (quota_bytes > 0) SPACE_TRY_WRAP(EnsureQuota(), ctx);
  auto layer = OpenDir(layers_ + "/" + digest);
  if (!layer) {
    if (layer.error().sys_errno == ENOENT) {
      return Fail(Errc::kNotFound, ctx + ": layer " + digest + " not found");
    }
    return tl::unexpected(std::move(layer.error()).Wrap(ctx));
  }
  auto roots = OpenDir(roots_);
  if (!roots) return tl::unexpected(std::move(roots.error()).Wrap(ctx));
  auto snap = Snapshot(layer->get(), roots->get(), id, /*read_only=*/false);
  if (!snap) {
    auto e = std::move(snap.error()).Wrap(ctx);
    if (e.sys_errno == EEXIST) e.code = Errc::kConflict;
    return tl::unexpected(std::move(e));
  }
  std::string path = roots_ + "/" + id;
  if (quota_bytes > 0) {
    auto st = [&]() -> Status {
      auto fd = OpenDir(path);
      if (!fd) return tl::unexpected(fd.error());
      auto subvol = SubvolumeId(fd->get());
      if (!subvol) return tl::unexpected(subvol.error());
      btrfs_ioctl_qgroup_limit_args args{};
      args.qgroupid = *subvol;
      // Exclusive bytes: what the sandbox wrote, not the layer blocks it shares (with
      // simple quotas, exclusive = bytes in extents the sandbox allocated).
      args.lim.flags = BTRFS_QGROUP_LIMIT_MAX_EXCL;
      args.lim.max_excl = static_cast<uint64_t>(quota_bytes);
      if (::ioctl(fd->get(), BTRFS_IOC_QGROUP_LIMIT, &args) != 0)
        return ErrnoFail("qgroup limit 0/" + std::to_string(*subvol));
      return Ok();
    }();
    if (!st) {
      auto del = DeleteSubvolumeAt(roots->get(), roots_, id);
      if (!del) spdlog::warn("storage: {}", del.error().message);
      return tl::unexpected(std::move(st.error()).Wrap(ctx));
    }
  }
  return path;
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
  auto fd = OpenDir(roots_);
  if (!fd) return tl::unexpected(fd.error());
  auto r = DeleteSubvolumeAt(fd->get(), roots_, id);
  if (!r) return tl::unexpected(std::move(r.error()).Wrap("delete root " + id));
  if (*r) DestroyQgroup(fd->get(), *r);
  return Ok();
}

std::vector<std::string> BtrfsDriver::ListRoots() const { return internal::ListNames(roots_); }

}  // namespace space::storage
