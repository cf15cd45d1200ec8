// The btrfs storage driver (private to src/storage; use storage.h).
//
// Layout under its base directory B (DATA/storage/btrfs when the data dir is on btrfs,
// else the loop-mounted pool image at DATA/storage/pool):
//   B/layers/<digest>   read-only subvolume per template layer
//   B/roots/<id>        writable snapshot of a layer or snapshot, one per sandbox
//   B/snapshots/<id>    read-only snapshot of a root
//   B/tmp/<name>        imports in progress; removed by Open() after a crash
//   B/spare/<name>      writable snapshots of recently used layers, made ahead for
//                       ClaimRoot (btrfs_spares.cc); removed by Open() and on destruction
// Every other object is made by one snapshot ioctl straight under its final name: the
// kernel commits a new snapshot in one transaction (and writes back the source's dirty
// data first), so after a crash it exists complete or not at all, and needs no temporary.
// A qgroup limit is set in that same transaction (qgroup inherit), not after it.
// Holds no fds between calls, so Teardown() can unmount the pool while a driver exists
// (its spare-making thread holds them only while it makes or removes a spare).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "storage/storage.h"

namespace space::storage {

class BtrfsDriver final : public Driver {
 public:
  // `storage_dir` is the canonical DATA/storage, already a shared bind mount. Mounts (and
  // on first use creates) the pool if the directory is not on btrfs.
  [[nodiscard]] static Result<std::unique_ptr<Driver>> Open(const std::string& storage_dir,
                                                            const OpenOptions& opts);

  ~BtrfsDriver() override;
  std::string_view Name() const override { return "btrfs"; }
  Status ImportLayer(const std::string& digest, const std::string& src_dir,
                     uint32_t uid_shift) override;
  bool HasLayer(const std::string& digest) const override;
  std::vector<std::string> ListLayers() const override;
  Status DeleteLayer(const std::string& digest) override;
  Result<std::string> CreateRoot(const std::string& id, const std::string& digest,
                                 int64_t quota_bytes) override;
  Result<std::string> ClaimRoot(const std::string& id, const std::string& digest,
                                int64_t quota_bytes) override;
  Status SettleRoot(const std::string& id) override;
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
  BtrfsDriver(std::string base, std::vector<std::string> spare_dirs);
  Status EnsureQuota();
  // A writable snapshot of `src` (a layer or snapshot, described by `what` in errors) as
  // roots/<id>, with its qgroup limit.
  Result<std::string> CreateRootFrom(const std::string& id, const std::string& src,
                                     const std::string& what, int64_t quota_bytes);
  // A read-only snapshot of `src` as layers/<digest>.
  Status ImportLayerFrom(const std::string& digest, const std::string& src,
                         const std::string& what);

  // ClearStaleQgroups after a deletion, at most every kQgroupSweepInterval: a sweep reads
  // the qgroup of every subvolume, so one per deletion made deleting a sandbox cost time
  // in proportion to the sandboxes left (~1 ms each beside 5,000). Stale qgroups are rare
  // (a root deleted while a snapshot still shared its data) and harmless meanwhile; Open
  // sweeps unconditionally.
  static constexpr std::chrono::seconds kQgroupSweepInterval{10};
  void SweepStaleQgroups(int fs_fd);

  const std::string base_, layers_, roots_, snapshots_, tmp_, spare_;
  const std::vector<std::string> spare_dirs_;   // OpenOptions::spare_dirs
  std::mutex quota_mu_;
  bool quota_on_ = false;   // guarded by quota_mu_
  std::atomic<int64_t> next_qgroup_sweep_ns_{0};   // steady clock

  // --- Spare roots (btrfs_spares.cc) ---
  // A create pays for a snapshot's transaction commit (~2 ms here) before its sandbox can
  // start. A spare made ahead is handed out by a rename instead; the commit that makes the
  // rename safe from a power loss is the one that makes the next spare, off the create's
  // path, and SettleRoot waits for it.
  struct SpareKey {
    std::string digest;
    int64_t quota_bytes = 0;
    auto operator<=>(const SpareKey&) const = default;
  };
  static constexpr size_t kSparesPerKey = 2;
  static constexpr size_t kSpareKeys = 4;   // layers (and quotas) kept ready, most recent
  void RemoveSpares(const std::vector<std::string>& names);
  void DropSpares(const std::string& digest);   // the layer goes: its spares first
  void SpareLoop();
  std::mutex spare_mu_;
  std::condition_variable spare_cv_;
  // Guarded by spare_mu_:
  std::map<SpareKey, std::vector<std::string>> spares_;   // ready, by layer and quota
  std::vector<SpareKey> wanted_;                          // least recently claimed first
  std::vector<std::string> unwanted_;                     // spares to remove
  std::optional<SpareKey> making_;                        // the spare being made
  bool removing_ = false;                                 // SpareLoop removes unwanted ones
  uint64_t renamed_ = 0;   // claims so far; each claim's rename has this number
  uint64_t settled_ = 0;   // every rename up to this one is committed
  uint64_t failed_ = 0;    // a commit covering renames up to this one failed
  std::map<std::string, uint64_t> unsettled_;   // root id -> its rename's number
  bool stop_ = false;
  std::thread spare_thread_;   // started by the first claim
};

}  // namespace space::storage
