// The btrfs ioctls the btrfs driver uses, wrapped (private to src/storage). Each is
// documented where it is defined (btrfs_ioctl.cc).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/common.h"
#include "sys/sys.h"

namespace space::storage::btrfs {

Result<sys::UniqueFd> OpenDir(const std::string& path);
Status CreateSubvolume(int parent_fd, const std::string& name);
// A snapshot of the subvolume open at `src_fd` as `parent_fd`/`name`, committed in one
// transaction; `max_excl` > 0 limits its qgroup's exclusive bytes (quotas must be on).
Status Snapshot(int src_fd, int parent_fd, const std::string& name, bool read_only,
                uint64_t max_excl = 0);
// Opens the subvolume at `path` to snapshot it; kNotFound ("`what` not found") if missing.
Result<sys::UniqueFd> OpenSource(const std::string& path, const std::string& what);
// Snapshot() into the directory `parent`, with EEXIST reported as kConflict.
Status SnapshotInto(int src_fd, const std::string& parent, const std::string& name,
                    bool read_only, uint64_t max_excl = 0);
// One le64 field of subvolume `id`'s qgroup info item (8: referenced, 24: exclusive), if
// full qgroup accounting is on and consistent.
std::optional<int64_t> QgroupField(int fs_fd, uint64_t id, size_t field_offset);
std::optional<int64_t> QgroupReferenced(int fs_fd, uint64_t id);
Result<uint64_t> SubvolumeId(int fd);
void DestroyQgroup(int fs_fd, uint64_t id);
void ClearStaleQgroups(int fs_fd);
// Deletes `parent_fd`/`name` with every subvolume nested in it; ok if missing. Returns
// the deleted subvolume's id (0 if none).
Result<uint64_t> DeleteSubvolumeAt(int parent_fd, const std::string& parent,
                                   const std::string& name);

}  // namespace space::storage::btrfs
