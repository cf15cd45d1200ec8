#include "storage/btrfs_ioctl.h"

#include <endian.h>
#include <fcntl.h>
#include <linux/btrfs.h>
#include <linux/btrfs_tree.h>
#include <spdlog/spdlog.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

namespace space::storage::btrfs {

namespace {

// BTRFS_QGROUP_STATUS_FLAG_SIMPLE_MODE (Linux 6.7); Debian 12's headers predate it.
constexpr uint64_t kQgroupStatusSimpleMode = uint64_t{1} << 3;

bool CopyName(char* dst, size_t cap, const std::string& name) {
  if (name.size() >= cap) return false;
  std::memcpy(dst, name.c_str(), name.size() + 1);
  return true;
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

}  // namespace

Result<sys::UniqueFd> OpenDir(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return ErrnoFail("open " + path);
  return sys::UniqueFd(fd);
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
                uint64_t max_excl) {
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
                    bool read_only, uint64_t max_excl) {
  auto dst = OpenDir(parent);
  if (!dst) return tl::unexpected(dst.error());
  auto st = Snapshot(src_fd, dst->get(), name, read_only, max_excl);
  if (!st && st.error().sys_errno == EEXIST) {
    st.error().code = Errc::kConflict;
    st.error().message = name + " exists";
  }
  return st;
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

}  // namespace space::storage::btrfs
