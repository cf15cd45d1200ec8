// storage: where template layers, sandbox root filesystems and their snapshots live on
// the host.
//
// Drivers: "btrfs" (subvolumes and snapshots; loop-backed pool image when the data dir is
// not on btrfs) and "overlay" (overlayfs; fallback). A template is imported once into a
// read-only layer keyed by its digest; each sandbox root is a writable copy-on-write view
// of one layer or of one snapshot. A snapshot is a read-only point-in-time copy of a root
// (for snapshot/suspend/fork); a new root can start from it, and a root or a snapshot can
// become a new layer (template builds, "template from snapshot"). Layers, roots and
// snapshots are independent once made: deleting one never deletes or changes another
// (except that overlay refuses to delete a layer while a root still uses it).
// btrfs makes each of these in milliseconds whatever the size (one snapshot ioctl);
// overlay copies the tree for snapshots and for layers made from roots or snapshots.
// All state is on disk under `DATA/storage/`; Open() re-attaches to it after a daemon
// restart (reusing what is mounted) or a reboot (mounting it again).
//
// Crash safety: every operation leaves, after a crash at any point, either nothing or a
// complete object under its final name; Open() removes whatever temporaries a crash left.
//
// Mount propagation: Open() makes `DATA/storage` a bind mount of itself with rshared
// propagation before mounting anything inside it, so that mounts made later under it (the
// btrfs pool, overlay roots) propagate into mount namespaces created as slaves of the host
// (the OCI runtime runs crun in one).
//
// Ownership: a Driver owns no kernel objects in memory (no fds, no mounts in RAII guards);
// everything it mounts stays mounted when it is destroyed. Use Teardown() to unmount.
// Thread-safety: all methods may be called concurrently. Concurrent calls for the same
// name are resolved by the filesystem: one wins, the other gets kConflict.
//
// Names (layer digests, root ids, snapshot ids) must match [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}.
// Layers, roots and snapshots are three separate namespaces.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/common.h"

namespace space::storage {

// Containers map root inside to this host uid (and gid), with 65536 ids; layers are
// imported with their owners shifted by it so that files look root-owned inside.
inline constexpr uint32_t kDefaultUidShift = 1000000;

// A new root is new inodes (a snapshot of the template's layer) with nothing in their page
// cache, so the first command's exec of the shell read the binary from the disk: 1.5 ms of
// execve against 0.2 ms for the next one (strace of the agent), and the first `echo` in a
// warm-pool sandbox took ~1 ms longer than later ones. ReadAhead starts reading
// `rel_path` of `root` into the page cache (asynchronously; cheap when it is there
// already: a root claimed from the btrfs spares was read ahead when it was made).
// Resolved inside the root: a template's /bin/sh may be a symlink, and must never lead out
// of it; anything but a regular file is left alone. Best effort.
inline constexpr const char* kFirstExec = "bin/sh";
void ReadAhead(const std::string& root, const char* rel_path);

struct OpenOptions {
  // Size of the sparse btrfs pool image created when the data dir is not on btrfs.
  // 0: $SPACE_POOL_SIZE ("68719476736", "64G", "512M"), else 64 GiB. Only used when the
  // image is first created; an existing image is never resized.
  uint64_t pool_bytes = 0;
  // Directories (names in a root's top directory, mode 0755) made in each spare root as it
  // is made (btrfs): the mount points a runtime makes in every new root, whose first write
  // to a new subvolume cost a start 0.15-0.35 ms. An entry that exists is left alone.
  std::vector<std::string> spare_dirs;
};

class Driver {
 public:
  virtual ~Driver() = default;

  // Opens (creating on first use) the storage under `data_dir` (absolute). `kind`:
  // "btrfs", "overlay" or "auto". "auto" reuses the driver recorded in
  // DATA/storage/driver by an earlier Open, else picks btrfs when it works here, else
  // overlay. Idempotent: already-mounted pools/binds are reused. Blocks (mkfs, mount).
  // Removes leftovers of imports, snapshots, root creations and deletes interrupted by a
  // crash.
  [[nodiscard]] static Result<std::unique_ptr<Driver>> Open(const std::string& data_dir,
                                                            const std::string& kind = "auto",
                                                            const OpenOptions& opts = {});

  // Unmounts everything the drivers mounted under DATA/storage (overlay roots, the btrfs
  // pool, which frees its loop device, and the DATA/storage bind mount). Deletes no data;
  // a later Open() mounts it all again. Busy mounts are detached lazily (MNT_DETACH).
  // Drivers opened on `data_dir` must not be used afterwards. Ok if nothing is mounted.
  [[nodiscard]] static Status Teardown(const std::string& data_dir);

  virtual std::string_view Name() const = 0;

  // Copies the tree at `src_dir` into a new read-only layer named `digest` (a sha256 hex
  // string). Modes, symlinks, hard links, device nodes, timestamps and ownership are kept
  // (xattrs, ACLs and file capabilities are not); every inode's uid and gid get
  // `uid_shift` added (0: unchanged). Atomic: a crash never leaves a partial layer under
  // `digest`. kConflict if it exists; kInvalidArgument for a bad name or a shifted id
  // that overflows. Blocks for the duration of the copy.
  [[nodiscard]] virtual Status ImportLayer(const std::string& digest, const std::string& src_dir,
                                           uint32_t uid_shift) = 0;
  virtual bool HasLayer(const std::string& digest) const = 0;
  // Digests of every layer present.
  virtual std::vector<std::string> ListLayers() const = 0;
  // Removes a layer; ok if missing. btrfs: roots made from it stay valid (they are
  // independent snapshots). overlay: kConflict while a root still uses it.
  [[nodiscard]] virtual Status DeleteLayer(const std::string& digest) = 0;

  // Creates the writable root of sandbox `id` from layer `digest`; returns its absolute
  // path (a directory usable as an OCI root.path). kNotFound if the layer is missing,
  // kConflict if the root exists. quota_bytes > 0 limits the bytes the sandbox may write
  // (btrfs: qgroup limit on exclusive bytes; writes past it fail with EDQUOT; overlay: the
  // writable layer lives on an ext4 image of that size, ENOSPC past it). 0 = no quota.
  [[nodiscard]] virtual Result<std::string> CreateRoot(const std::string& id,
                                                       const std::string& digest,
                                                       int64_t quota_bytes) = 0;
  // As CreateRoot, but the root may have been made ahead (btrfs keeps a few snapshots of
  // recently used layers ready and hands one out by a rename), and then its name is not
  // yet safe from a power loss: call SettleRoot(id) before telling anyone of the root.
  // The default is CreateRoot.
  [[nodiscard]] virtual Result<std::string> ClaimRoot(const std::string& id,
                                                      const std::string& digest,
                                                      int64_t quota_bytes) {
    return CreateRoot(id, digest, quota_bytes);
  }
  // Blocks until root `id`, made by ClaimRoot, survives a power loss. Ok at once for any
  // other root.
  [[nodiscard]] virtual Status SettleRoot(const std::string& id) { return Ok(); }
  // Path of an existing root ("" if missing). Does not mount: see Remount().
  virtual std::string RootPath(const std::string& id) const = 0;
  // Makes an existing root usable again after a reboot: overlay mounts it if it is not
  // mounted; btrfs has nothing to do. Cheap when already mounted. kNotFound if missing.
  [[nodiscard]] virtual Status Remount(const std::string& id) = 0;
  // Removes the root (and, on btrfs, any subvolumes the sandbox created inside it, and
  // its qgroup); ok if missing. Must not be called while a sandbox still runs in it.
  [[nodiscard]] virtual Status DeleteRoot(const std::string& id) = 0;
  // Bytes the sandbox wrote into its root (blocks of its own, not the layer's): btrfs, the
  // qgroup's exclusive bytes when quotas are consistent, else a walk of the whole root;
  // overlay, a walk of the upper directory. kNotFound if missing. Blocks.
  [[nodiscard]] virtual Result<int64_t> RootUsage(const std::string& id) const {
    return Fail(Errc::kUnavailable, "root usage is not measured by this driver");
  }
  // Ids of every sandbox root present (for orphan cleanup).
  virtual std::vector<std::string> ListRoots() const = 0;

  // --- Snapshots ---

  // Stores a read-only point-in-time copy of root `root_id` as snapshot `snapshot_id`.
  // The caller keeps the sandbox frozen for the duration, so that the copy is consistent;
  // the driver does not freeze anything. The snapshot does not depend on the root: either
  // can be deleted or written (the root) without affecting the other.
  // btrfs: a read-only subvolume snapshot, milliseconds whatever the root's size (the
  // kernel first writes back the root's dirty page cache, so a root with much unwritten
  // data costs that flush). Subvolumes the sandbox created inside its root are NOT
  // included: they appear in the snapshot as empty directories.
  // overlay: a full copy of the root's merged view (mounts the root first if it is not
  // mounted); seconds for large roots; read-only by contract only, and xattrs are not
  // copied (as for ImportLayer).
  // kNotFound if the root is missing, kConflict if the snapshot exists, kInvalidArgument
  // for a bad name. Blocks.
  [[nodiscard]] virtual Status SnapshotRoot(const std::string& root_id,
                                            const std::string& snapshot_id) = 0;
  // Creates the writable root of sandbox `root_id` from snapshot `snapshot_id`; otherwise
  // exactly as CreateRoot (returned path, atomicity, quota semantics). The new root does
  // not depend on the snapshot (btrfs: a writable snapshot of it; overlay: an overlay
  // whose lower layer outlives DeleteSnapshot for as long as a root uses it).
  // kNotFound if the snapshot is missing, kConflict if the root exists.
  [[nodiscard]] virtual Result<std::string> CreateRootFromSnapshot(
      const std::string& root_id, const std::string& snapshot_id, int64_t quota_bytes) = 0;
  // Removes a snapshot; ok if missing. Roots and layers made from it stay valid.
  [[nodiscard]] virtual Status DeleteSnapshot(const std::string& snapshot_id) = 0;
  virtual bool HasSnapshot(const std::string& snapshot_id) const = 0;
  // Ids of every snapshot present (sorted; for orphan cleanup).
  virtual std::vector<std::string> ListSnapshots() const = 0;
  // Bytes the snapshot references (its whole content, shared blocks included).
  // btrfs: the qgroup's referenced bytes (exclusive + shared) when full qgroup accounting
  // is on and consistent; otherwise (no quotas, or simple quotas, which charge extents
  // only to the subvolume that wrote them, so a snapshot's own count is ~0) a walk that
  // counts allocated blocks like `du -sx --block-size=1`. overlay: always that walk.
  // The walk is O(files) and blocks. kNotFound if missing.
  [[nodiscard]] virtual Result<int64_t> SnapshotSize(const std::string& snapshot_id) const = 0;

  // --- Layers made from roots and snapshots (template builds, templates from snapshots) ---

  // Makes root `root_id` / snapshot `snapshot_id` into a new read-only layer `digest`.
  // Ownership is kept as stored (a root's inodes are already shifted), so no uid shift.
  // The source is not changed and stays independent of the new layer. As with
  // SnapshotRoot, the caller must keep a running sandbox frozen during ImportLayerFromRoot,
  // and btrfs leaves out subvolumes nested in the root. btrfs: a read-only snapshot, no
  // copy (milliseconds); overlay: a copy (of the root's merged view). Atomic.
  // kConflict if the layer exists; kNotFound if the source is missing.
  [[nodiscard]] virtual Status ImportLayerFromRoot(const std::string& digest,
                                                   const std::string& root_id) = 0;
  [[nodiscard]] virtual Status ImportLayerFromSnapshot(const std::string& digest,
                                                       const std::string& snapshot_id) = 0;
  // Absolute path of layer `digest`'s tree (read-only by contract; on btrfs also by the
  // kernel). kNotFound if missing, kInvalidArgument for a bad name.
  [[nodiscard]] virtual Result<std::string> LayerPath(const std::string& digest) const = 0;
};

}  // namespace space::storage
