// The btrfs storage driver (private to src/storage; use storage.h).
//
// Layout under its base directory B (DATA/storage/btrfs when the data dir is on btrfs,
// else the loop-mounted pool image at DATA/storage/pool):
//   B/layers/<digest>   read-only subvolume per template layer
//   B/roots/<id>        writable snapshot of a layer or snapshot, one per sandbox
//   B/snapshots/<id>    read-only snapshot of a root
//   B/tmp/<name>        imports in progress; removed by Open() after a crash
// Every other object is made by one snapshot ioctl straight under its final name: the
// kernel commits a new snapshot in one transaction (and writes back the source's dirty
// data first), so after a crash it exists complete or not at all, and needs no temporary.
// A qgroup limit is set in that same transaction (qgroup inherit), not after it.
// Holds no fds between calls, so Teardown() can unmount the pool while a driver exists.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "storage/storage.h"

namespace space::storage {

class BtrfsDriver final : public Driver {
 public:
  // `storage_dir` is the canonical DATA/storage, already a shared bind mount. Mounts (and
  // on first use creates) the pool if the directory is not on btrfs.
  [[nodiscard]] static Result<std::unique_ptr<Driver>> Open(const std::string& storage_dir,
                                                            const OpenOptions& opts);

  std::string_view Name() const override { return "btrfs"; }
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

  // Base directory (the pool mount point or DATA/storage/btrfs). For tests and tools.
  const std::string& base() const { return base_; }

 private:
  explicit BtrfsDriver(std::string base);
  Status EnsureQuota();
  // A writable snapshot of `src` (a layer or snapshot, described by `what` in errors) as
  // roots/<id>, with its qgroup limit.
  Result<std::string> CreateRootFrom(const std::string& id, const std::string& src,
                                     const std::string& what, int64_t quota_bytes);
  // A read-only snapshot of `src` as layers/<digest>.
  Status ImportLayerFrom(const std::string& digest, const std::string& src,
                         const std::string& what);

  const std::string base_, layers_, roots_, snapshots_, tmp_;
  std::mutex quota_mu_;
  bool quota_on_ = false;   // guarded by quota_mu_
};

}  // namespace space::storage
