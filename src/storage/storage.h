// storage: where template layers and sandbox root filesystems live on the host.
//
// Drivers: "btrfs" (subvolumes and snapshots; loop-backed pool image when the data dir is
// not on btrfs) and "overlay" (overlayfs; fallback). A template is imported once into a
// read-only layer keyed by its digest; each sandbox root is a writable copy-on-write view
// of one layer. All state is on disk under the data dir; Open() re-attaches to it after a
// restart (re-mounting the pool if needed). Thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/common.h"

namespace space::storage {

class Driver {
 public:
  virtual ~Driver() = default;
  // "auto" picks btrfs when it works here, else overlay. `data_dir` is absolute.
  [[nodiscard]] static Result<std::unique_ptr<Driver>> Open(const std::string& data_dir,
                                                            const std::string& kind = "auto");
  virtual std::string_view Name() const = 0;

  // Copies the tree at `src_dir` into a new read-only layer named `digest`
  // (a sha256 hex string). kConflict if it exists.
  [[nodiscard]] virtual Status ImportLayer(const std::string& digest, const std::string& src_dir) = 0;
  virtual bool HasLayer(const std::string& digest) const = 0;
  [[nodiscard]] virtual Status DeleteLayer(const std::string& digest) = 0;

  // Creates the writable root of sandbox `id` from layer `digest`; returns its absolute
  // path (a directory usable as an OCI root.path). quota_bytes 0 = none.
  [[nodiscard]] virtual Result<std::string> CreateRoot(const std::string& id, const std::string& digest,
                                                       int64_t quota_bytes) = 0;
  // Path of an existing root ("" if missing).
  virtual std::string RootPath(const std::string& id) const = 0;
  // Removes the root; ok if missing.
  [[nodiscard]] virtual Status DeleteRoot(const std::string& id) = 0;
  // Ids of every sandbox root present (for orphan cleanup).
  virtual std::vector<std::string> ListRoots() const = 0;
};

}  // namespace space::storage
