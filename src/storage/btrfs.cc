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

#include "storage/fs_util.h"
#include "sys/sys.h"

namespace space::storage {

namespace {

using internal::CheckName;

constexpr uint64_t kDefaultPoolBytes = uint64_t{64} << 30;
// BTRFS_QUOTA_CTL_ENABLE_SIMPLE_QUOTA and BTRFS_QGROUP_STATUS_FLAG_SIMPLE_MODE
// (Linux 6.7); Debian 12's headers predate them.
constexpr uint64_t kQuotaCtlEnableSimple = 4;
constexpr uint64_t kQgroupStatusSimpleMode = uint64_t{1} << 3;

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
// crash it either exists complete or not at all. `max_excl` > 0 gives the new subvolume's
// qgroup that limit on exclusive bytes in the same transaction (quotas must be on), so
// that no crash can leave it without its limit.
Status Snapshot(int src_fd, int parent_fd, const std::string& name, bool read_only,
                uint64_t max_excl = 0) {
  btrfs_ioctl_vol_args_v2 args{};
  btrfs_qgroup_inherit inherit{};
  args.fd = src_fd;
  args.flags = read_only ? BTRFS_SUBVOL_RDONLY : 0;
  if (max_excl > 0) {
    // Exclusive bytes: what the sandbox writes, not the blocks it shares with its source
    // (with simple quotas, exclusive = bytes in extents the subvolume allocated).
    inherit.flags = BTRFS_QGROUP_INHERIT_SET_LIMITS;
    inherit.lim.flags = BTRFS_QGROUP_LIMIT_MAX_EXCL;
    inherit.lim.max_excl = max_excl;
    args.flags |= BTRFS_SUBVOL_QGROUP_INHERIT;
    args.size = sizeof inherit;
    args.qgroup_inherit = &inherit;
  }
  if (!CopyName(args.name, sizeof args.name, name))
    return Fail(Errc::kInvalidArgument, "subvolume name too long: " + name);
  if (::ioctl(parent_fd, BTRFS_IOC_SNAP_CREATE_V2, &args) != 0)
    return ErrnoFail("snapshot " + name);
  return Ok();
}

// Opens the subvolume at `path` to snapshot it; kNotFound ("`what` not found") if missing.
Result<sys::UniqueFd> OpenSource(const std::string& path, const std::string& what) {
  auto fd = OpenDir(path);
  if (!fd && fd.error().sys_errno == ENOENT) return Fail(Errc::kNotFound, what + " not found");
  return fd;
}

// Snapshot() into `parent`, with EEXIST reported as kConflict.
Status SnapshotInto(int src_fd, const std::string& parent, const std::string& name,
                    bool read_only, uint64_t max_excl = 0) {
  auto dst = OpenDir(parent);
  if (!dst) return tl::unexpected(dst.error());
  auto st = Snapshot(src_fd, dst->get(), name, read_only, max_excl);
  if (!st && st.error().sys_errno == EEXIST) {
    st.error().code = Errc::kConflict;
    st.error().message = name + " exists";
  }
  return st;
}

// Calls `fn(offset, item bytes)` for every item (objectid, type, offset) of `tree` with
// offset in [min_offset, max_offset], in key order, until it returns false. Errors: the
// tree does not exist (ENOENT: e.g. quotas off), or no CAP_SYS_ADMIN.
template <class Fn>
Status ForEachItem(int fs_fd, uint64_t tree, uint64_t objectid, uint32_t type,
                   uint64_t min_offset, uint64_t max_offset, Fn&& fn) {
  btrfs_ioctl_search_args args{};
  auto& sk = args.key;
  sk.tree_id = tree;
  sk.min_objectid = sk.max_objectid = objectid;
  sk.min_type = sk.max_type = type;
  sk.min_offset = min_offset;
  sk.max_offset = max_offset;
  sk.min_transid = 0;
  sk.max_transid = UINT64_MAX;
  for (;;) {
    sk.nr_items = 4096;
    if (::ioctl(fs_fd, BTRFS_IOC_TREE_SEARCH, &args) != 0) return ErrnoFail("tree search");
    if (sk.nr_items == 0) return Ok();
    size_t off = 0;
    uint64_t last = 0;
    for (uint32_t i = 0; i < sk.nr_items; ++i) {
      btrfs_ioctl_search_header hdr;
      if (off + sizeof hdr > sizeof args.buf) return Ok();
      std::memcpy(&hdr, args.buf + off, sizeof hdr);
      off += sizeof hdr;
      if (off + hdr.len > sizeof args.buf) return Ok();
      if (hdr.objectid == objectid && hdr.type == type &&
          !fn(hdr.offset, std::string(args.buf + off, hdr.len))) {
        return Ok();
      }
      off += hdr.len;
      last = hdr.offset;
    }
    if (last >= max_offset) return Ok();
    sk.min_offset = last + 1;
  }
}

// The item with exactly this key, if any.
Result<std::optional<std::string>> SearchItem(int fs_fd, uint64_t tree, uint64_t objectid,
                                              uint32_t type, uint64_t offset) {
  std::optional<std::string> out;
  SPACE_TRY(ForEachItem(fs_fd, tree, objectid, type, offset, offset,
                        [&](uint64_t, std::string item) {
                          out = std::move(item);
                          return false;
                        }));
  return out;
}

uint64_t Le64At(const std::string& item, size_t off) {
  uint64_t v = 0;
  if (off + sizeof v <= item.size()) std::memcpy(&v, item.data() + off, sizeof v);
  return le64toh(v);
}

// The referenced bytes (exclusive + shared) of subvolume `id`'s qgroup, as of the last
// transaction commit; nullopt unless full qgroup accounting is on and consistent. Simple
// quotas charge an extent only to the subvolume that wrote it, so a snapshot's own count
// says nothing about its size.
// One le64 field of a subvolume's qgroup info item (8: referenced, 24: exclusive bytes).
std::optional<int64_t> QgroupField(int fs_fd, uint64_t id, size_t field_offset) {
  auto status = SearchItem(fs_fd, BTRFS_QUOTA_TREE_OBJECTID, 0, BTRFS_QGROUP_STATUS_KEY, 0);
  if (!status || !*status) return std::nullopt;   // quotas were never enabled (ENOENT)
  // btrfs_qgroup_status_item: version, generation, flags, rescan (le64 each).
  uint64_t flags = Le64At(**status, 16);
  if (!(flags & BTRFS_QGROUP_STATUS_FLAG_ON) ||
      (flags & (BTRFS_QGROUP_STATUS_FLAG_RESCAN | BTRFS_QGROUP_STATUS_FLAG_INCONSISTENT |
                kQgroupStatusSimpleMode))) {
    return std::nullopt;
  }
  auto info = SearchItem(fs_fd, BTRFS_QUOTA_TREE_OBJECTID, 0, BTRFS_QGROUP_INFO_KEY, id);
  if (!info || !*info || (*info)->size() < field_offset + 8) return std::nullopt;
  // btrfs_qgroup_info_item: generation, rfer, rfer_cmpr, excl, excl_cmpr (le64 each).
  return static_cast<int64_t>(Le64At(**info, field_offset));
}

std::optional<int64_t> QgroupReferenced(int fs_fd, uint64_t id) { return QgroupField(fs_fd, id, 8); }

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

// Removes the qgroups of deleted subvolumes that the kernel left behind: level-0 qgroups
// with no subvolume any more and nothing charged to them. With simple quotas an extent
// stays charged to the subvolume that wrote it, so a root deleted while a snapshot (or a
// root made from one) still shares its data keeps a charged qgroup; it empties only when
// the last sharer is cleaned, later, and nothing else would ever remove it. Best effort
// and cheap when quotas are off (one failed search).
void ClearStaleQgroups(int fs_fd) {
  std::vector<uint64_t> empty;
  auto st = ForEachItem(fs_fd, BTRFS_QUOTA_TREE_OBJECTID, 0, BTRFS_QGROUP_INFO_KEY, 0,
                        (uint64_t{1} << 48) - 1,   // level 0: subvolume qgroups
                        [&](uint64_t qgroupid, const std::string& item) {
                          // btrfs_qgroup_info_item: generation, rfer, rfer_cmpr, excl, ...
                          if (qgroupid >= BTRFS_FIRST_FREE_OBJECTID && Le64At(item, 8) == 0 &&
                              Le64At(item, 24) == 0) {
                            empty.push_back(qgroupid);
                          }
                          return true;
                        });
  if (!st) return;   // quotas off
  for (uint64_t id : empty) {
    // A subvolume exists (or awaits the cleaner) while its ROOT_ITEM does; the offset of
    // a snapshot's ROOT_ITEM is its creation transid, hence the range.
    bool exists = false;
    auto r = ForEachItem(fs_fd, BTRFS_ROOT_TREE_OBJECTID, id, BTRFS_ROOT_ITEM_KEY, 0,
                         UINT64_MAX, [&](uint64_t, const std::string&) {
                           exists = true;
                           return false;
                         });
    if (r && !exists) DestroyQgroup(fs_fd, id);
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
      snapshots_(base_ + "/snapshots"),
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
  SPACE_TRY(MakeDir(d->snapshots_, 0700));
  SPACE_TRY(MakeDir(d->tmp_, 0700));

  // Imports interrupted by a crash: never visible as layers, just reclaim the space.
  // (Nothing else needs cleaning: every other object is made by one atomic snapshot.)
  auto tmp_fd = OpenDir(d->tmp_);
  if (!tmp_fd) return tl::unexpected(tmp_fd.error());
  for (const auto& name : internal::ListAllNames(d->tmp_)) {
    auto r = DeleteSubvolumeAt(tmp_fd->get(), d->tmp_, name);
    if (!r) return tl::unexpected(std::move(r.error()).Wrap("remove leftover import"));
    spdlog::info("storage: removed leftover import {}/{}", d->tmp_, name);
  }
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
  auto fd = OpenDir(layers_);
  if (!fd) return tl::unexpected(fd.error());
  auto r = DeleteSubvolumeAt(fd->get(), layers_, digest);
  if (!r) return tl::unexpected(std::move(r.error()).Wrap("delete layer " + digest));
  if (*r) DestroyQgroup(fd->get(), *r);
  // Subvolumes deleted earlier have been cleaned meanwhile: their qgroups can go now.
  ClearStaleQgroups(fd->get());
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
  auto fd = OpenDir(roots_);
  if (!fd) return tl::unexpected(fd.error());
  auto r = DeleteSubvolumeAt(fd->get(), roots_, id);
  if (!r) return tl::unexpected(std::move(r.error()).Wrap("delete root " + id));
  if (*r) DestroyQgroup(fd->get(), *r);
  // Subvolumes deleted earlier have been cleaned meanwhile: their qgroups can go now.
  ClearStaleQgroups(fd->get());
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
  ClearStaleQgroups(fd->get());
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
