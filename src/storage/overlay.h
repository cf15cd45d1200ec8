// The overlayfs storage driver (private to src/storage; use storage.h). The fallback
// where btrfs is unavailable: roots are cheap to create, but quotas are not enforced.
//
// Layout under DATA/storage/overlay:
//   layers/<digest>          plain directory tree per template layer (lowerdir)
//   roots/<id>/layer         the digest the root was made from (to remount after reboot)
//   roots/<id>/upper, work   the root's writable layer and overlayfs scratch dir
//   roots/<id>/merged        the overlayfs mount: the sandbox root
//   tmp/<name>               imports in progress; removed by Open() after a crash
//   roots/.tmp-*, .del-*     roots being created/deleted; removed by Open() after a crash
#pragma once

#include <atomic>
#include <memory>
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

 private:
  explicit OverlayDriver(std::string base);
  Status MountRoot(const std::string& dir, const std::string& digest);

  const std::string base_, layers_, roots_, tmp_;
  std::atomic<bool> quota_warned_{false};
};

}  // namespace space::storage
