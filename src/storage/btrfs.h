// The btrfs storage driver (private to src/storage; use storage.h).
//
// Layout under its base directory B (DATA/storage/btrfs when the data dir is on btrfs,
// else the loop-mounted pool image at DATA/storage/pool):
//   B/layers/<digest>   read-only subvolume per template layer
//   B/roots/<id>        writable snapshot of a layer, one per sandbox
//   B/tmp/<name>        imports in progress; removed by Open() after a crash
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

  // Base directory (the pool mount point or DATA/storage/btrfs). For tests and tools.
  const std::string& base() const { return base_; }

 private:
  explicit BtrfsDriver(std::string base);
  Status EnsureQuota();

  const std::string base_, layers_, roots_, tmp_;
  std::mutex quota_mu_;
  bool quota_on_ = false;   // guarded by quota_mu_
};

}  // namespace space::storage
