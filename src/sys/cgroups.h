// cgroups: what the runtimes need to know about the host's cgroup mounts, a way to put a
// process in a cgroup of its own (microVMs' QEMU), and a last-resort killer for the
// processes of one sandbox's cgroup.
//
// Stateless free functions; safe to call from any thread. The tests use them to look at
// what crun configured.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "common/common.h"

namespace space::sys {

enum class CgroupLayout {
  kV1,      // only v1 hierarchies (/sys/fs/cgroup/<controller>)
  kV2,      // cgroup2 mounted at /sys/fs/cgroup
  kHybrid,  // v1 controllers plus a cgroup2 at /sys/fs/cgroup/unified
};
std::string_view CgroupLayoutName(CgroupLayout l);

// Looks at /sys/fs/cgroup with statfs.
[[nodiscard]] Result<CgroupLayout> DetectCgroupLayout();

struct Hierarchy {
  std::string mount_point;  // e.g. /sys/fs/cgroup/memory, or /sys/fs/cgroup/unified
  bool v2 = false;
  std::vector<std::string> controllers;  // v1 only: "memory", "name=systemd", ...
  std::vector<std::string> options;      // v2 only: the superblock's ("nsdelegate", ...)
};
// Every cgroup hierarchy mounted in this process's mount namespace.
std::vector<Hierarchy> CgroupHierarchies();
// The hierarchy carrying a v1 controller ("freezer"), else the v2 one; nullptr if none.
const Hierarchy* FindHierarchy(const std::vector<Hierarchy>& all, std::string_view controller);

// The kernel's `favordynmods` of the cgroup2 hierarchy (since Linux 6.0, cgroup-v2.rst):
// on, moving a task into another cgroup (every container start) no longer waits for an
// RCU grace period (~5-10 ms on an otherwise idle host), and forks and exits take the
// global threadgroup lock's slower reader path. Host-wide; it outlives the caller.
// Set by mounting cgroup2 with the options its superblock has, plus or minus
// favordynmods, in a private mount namespace of a short-lived child: no mount of the
// host's changes. Returns whether it is on afterwards; false, not an error, on a host
// without a cgroup2 mount or outside the initial cgroup namespace (the kernel takes the
// mount and ignores its options). Fails where the kernel refuses the option (before 6.0)
// or the caller may not mount.
[[nodiscard]] Result<bool> SetCgroupFavorDynmods(bool on);
// Whether it is on, by the cgroup2 hierarchy among `all` (false without one).
bool CgroupFavorDynmods(const std::vector<Hierarchy>& all);

// Kills every process in the cgroup `rel` ("/space/<id>") and its descendants, in every
// hierarchy, then removes those cgroup directories (deepest first). Freezes first so a
// fork bomb cannot outrun the kill, and so pids read from cgroup.procs cannot be reused
// before the SIGKILL lands. Ok if none exist. Blocks up to ~2 s waiting for exits.
[[nodiscard]] Status KillAndRemoveCgroup(const std::vector<Hierarchy>& hierarchies,
                                         const std::string& rel);

// Moves `pid` into the cgroup `rel` ("/space-vm/<id>") of every hierarchy, made if missing
// (a v1 cpuset one inherits its parent's cpus and mems). The process then no longer belongs
// to the caller's cgroup, so whatever kills that one (a container runtime replacing spaced's
// container) leaves it running. An error names the hierarchies that refused it.
[[nodiscard]] Status JoinCgroup(const std::vector<Hierarchy>& hierarchies, const std::string& rel, pid_t pid);

// Gives the v1 cpuset cgroup `dir` the cpus and mems of `parent` (both directories) where
// its own are empty, as a v1 cpuset needs before it can take a task. False if a read or
// write failed.
bool InheritCpusetSets(const std::string& parent, const std::string& dir);

// Cgroup directories `rel` that still exist, over all hierarchies.
std::vector<std::string> ExistingCgroupDirs(const std::vector<Hierarchy>& hierarchies,
                                            const std::string& rel);

}  // namespace space::sys
