// MemcgPool: the v1 memory cgroups of deleted sandboxes, kept for new sandboxes.
//
// Removing a memory cgroup costs the kernel a walk of every memcg-aware list_lru on the
// host (`memcg_reparent_list_lrus`: two per superblock, and each sandbox mounts four), so
// it grows with the sandboxes running: beside 5,000 it was a third of the machine's time
// while deleting (~6 ms of CPU per delete). A memory cgroup whose processes are gone is
// instead renamed to a parked name in the same parent (cgroup v1 allows a rename within
// a parent; crun's delete takes a missing memory cgroup as removed), its limits reset to
// the parent's defaults, and a later start renames it to the new sandbox's name before
// crun makes the sandbox's cgroups, which then uses it as it is. The other controllers'
// cgroups are removed and made as before.
//
// Parked names start with '.', which no sandbox id can. At most `cap` are kept (beyond,
// the caller removes the cgroup as before). Each holds kernel memory (its per-cgroup
// structures, mostly a shrinker slot per superblock on the host: ~460 KiB each beside
// 5,000 sandboxes, a few KiB beside 50), so when no start has claimed one for `idle_ms`,
// a thread removes them, 64 every idle_ms/6. What a parked cgroup still has charged (a few
// hundred KiB of kernel objects of the sandbox it served) is counted in the next one's
// usage until freed. Only for cgroup v1 with `memory` in a hierarchy of its own: on v2 a
// sandbox's cgroup carries every controller, and its counters (CPU time) would carry over.
//
// Thread-safe.
#pragma once

#include <cstddef>
#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "sys/cgroups.h"

namespace space::runtime::oci_impl {

class MemcgPool {
 public:
  // `memory`: the v1 memory hierarchy, one of `all`; `parent_rel`: the sandboxes' parent
  // cgroup ("/space").
  MemcgPool(std::vector<sys::Hierarchy> all, const sys::Hierarchy& memory, std::string parent_rel,
            size_t cap, int64_t idle_ms)
      : all_(std::move(all)),
        parent_rel_(std::move(parent_rel)),
        parent_(memory.mount_point + parent_rel_),
        cap_(cap),
        idle_ns_(std::max<int64_t>(1, idle_ms) * 1'000'000) {}
  ~MemcgPool();   // removes the parked ones
  MemcgPool(const MemcgPool&) = delete;
  MemcgPool& operator=(const MemcgPool&) = delete;

  // Takes over what an earlier process left parked (one that crashed: the destructor
  // removes them): empty ones up to the cap; the others are removed. Call once, before the
  // first Claim.
  void Adopt();

  // Parks `id`'s memory cgroup (renames it); returns the parked name, or "" (nothing
  // changed) when the pool is full, the cgroup has children or the rename failed. Its
  // processes may still be running (the runtime's delete kills them), under its limits:
  // Settle with the name once they are gone.
  std::string Park(const std::string& id);
  // After the delete: resets `parked`'s limits and keeps it for Claim if no process is
  // left in it and little kernel memory is charged to it (≤ 8 MiB); else kills what is in
  // it and removes it. Returns whether it stays.
  bool Settle(const std::string& parked);

  // Renames a parked cgroup to `id`'s, for the runtime to use as `id`'s memory cgroup.
  // False if none was parked or the rename failed (then nothing changed for `id`).
  bool Claim(const std::string& id);

 private:
  static constexpr size_t kTrimBatch = 64;
  bool Reset(const std::string& dir) const;
  void Remove(const std::string& name) const;
  void StartTrimmer();   // with mu_ held
  void TrimLoop();

  const std::vector<sys::Hierarchy> all_;
  const std::string parent_rel_;
  const std::string parent_;   // the memory hierarchy's directory of parent_rel_
  const size_t cap_;
  const int64_t idle_ns_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> ready_;   // parked and settled, for Claim; oldest first
  size_t settling_ = 0;              // parked, not settled yet (counted against the cap)
  uint64_t next_ = 0;
  int64_t last_claim_ns_ = 0;        // MonotonicNanos of the last Claim (or the first park)
  bool stop_ = false;
  std::thread trimmer_;              // started with the first parked cgroup
};

}  // namespace space::runtime::oci_impl
