// The overlayfs storage driver (private to src/storage; use storage.h). The fallback
// where btrfs is unavailable: roots are cheap to create; a root with a quota keeps its
// writable layer on an ext4 image of that size (ENOSPC past it).
//
// Layout under DATA/storage/overlay:
//   layers/<digest>          plain directory tree per template layer (lowerdir)
//   lowers/<sid>.<random>    plain directory tree copied from a root's merged view by
//                            SnapshotRoot: the data of snapshot <sid>, and the lowerdir of
//                            roots made from it
//   snapshots/<sid>          symlink to ../lowers/<sid>.<random>
//   roots/<id>/layer         the digest the root was made from (to remount after reboot),
//   roots/<id>/lower         or the lowers/ entry it was made from
//   roots/<id>/upper, work   the root's writable layer and overlayfs scratch dir
//   roots/<id>/disk.img      with a quota: a sparse ext4 image of that size holding upper/
//   roots/<id>/disk/         and work/, loop-mounted here (instead of the two dirs above)
//   roots/<id>/merged        the overlayfs mount: the sandbox root
//   tmp/<name>               imports in progress; removed by Open() after a crash
//   roots/.tmp-*, .del-*     roots being created/deleted; removed by Open() after a crash
//   lowers/.tmp-*, .del-*    snapshot copies/deletions in progress; likewise
// Snapshots are a link to their data so that roots made from a snapshot outlive it: a
// lowers/ entry lives while its snapshot link or any root's `lower` record names it.
// DeleteSnapshot removes the link and the tree only if no root uses it; the last
// DeleteRoot of a root using it removes it then (or Open(), after a crash in between).
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "storage/storage.h"

namespace space::storage {

class OverlayDriver final : public Driver {
 public:
  // `storage_dir` is the canonical DATA/storage, already a shared bind mount.
  [[nodiscard]] static Result<std::unique_ptr<Driver>> Open(const std::string& storage_dir);

  std::string_view Name() const override { return "overlay"; }
  Status ImportLayer(const std::string& digest, const std::string& src_dir,
                     uint32_t uid_shift) override;
  bool HasLayer(const std::string& digest) const override;
  std::vector<std::string> ListLayers() const override;
  Status DeleteLayer(const std::string& digest) override;
  Result<std::string> CreateRoot(const std::string& id, const std::string& digest,
                                 int64_t quota_bytes) override;
  std::string RootPath(const std::string& id) const override;
  Status Remount(const std::string& id) override;
  Status DeleteRoot(const std::string& id) override;
  std::vector<std::string> ListRoots() const override;
  Result<int64_t> RootUsage(const std::string& id) const override;
  Status SnapshotRoot(const std::string& root_id, const std::string& snapshot_id) override;
  Result<std::string> CreateRootFromSnapshot(const std::string& root_id,
                                             const std::string& snapshot_id,
                                             int64_t quota_bytes) override;
  Status DeleteSnapshot(const std::string& snapshot_id) override;
  bool HasSnapshot(const std::string& snapshot_id) const override;
  std::vector<std::string> ListSnapshots() const override;
  Result<int64_t> SnapshotSize(const std::string& snapshot_id) const override;
  Status ImportLayerFromRoot(const std::string& digest, const std::string& root_id) override;
  Status ImportLayerFromSnapshot(const std::string& digest,
                                 const std::string& snapshot_id) override;
  Result<std::string> LayerPath(const std::string& digest) const override;

 private:
  explicit OverlayDriver(std::string base);
  Status MountRoot(const std::string& dir, const std::string& lowerdir);
  // Creates roots/<id> over `lowerdir` (described by `what` in errors), recording
  // `record_value` in roots/<id>/<record_name> for Remount.
  Result<std::string> CreateRootOver(const std::string& id, const std::string& lowerdir,
                                     const std::string& what, const std::string& record_name,
                                     const std::string& record_value, int64_t quota_bytes);
  // The lowers/ entry snapshot `snapshot_id` links to; kNotFound if there is no snapshot.
  Result<std::string> SnapshotLower(const std::string& snapshot_id) const;
  // Adds the lowers/ entries that roots use to `used`; false if some root's record is
  // unreadable (then any entry may be in use).
  bool RootLowers(std::set<std::string>* used) const;
  // Whether a snapshot link, a root or a running import uses lowers/<lower> (true when
  // unsure). Caller holds lowers_mu_.
  bool LowerInUseLocked(const std::string& lower) const;
  // Deletes lowers/<lower> unless it is still in use.
  Status DropLowerIfUnused(const std::string& lower);
  // Sweeps lowers/ after a crash: temporaries and trees nothing refers to any more.
  Status CleanLowers();

  const std::string base_, layers_, lowers_, snapshots_, roots_, tmp_;
  // Serialises what makes or drops references to lowers/ entries (snapshot links, root
  // records, pins) against the check that deletes an unreferenced entry.
  std::mutex lowers_mu_;
  std::map<std::string, int> pins_;   // lowers/ entries being copied from; guarded

};

}  // namespace space::storage
