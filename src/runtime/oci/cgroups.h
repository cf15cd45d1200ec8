// cgroups: what the OCI backend needs to know about the host's cgroup mounts, and a
// last-resort killer for the processes of one container's cgroup.
//
// Stateless free functions; safe to call from any thread. Internal to runtime/oci (the
// tests use it to look at what crun configured).
#pragma once

#include <string>
#include <vector>

#include "common/common.h"

namespace space::runtime::oci {

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
};
// Every cgroup hierarchy mounted in this process's mount namespace.
std::vector<Hierarchy> CgroupHierarchies();
// The hierarchy carrying a v1 controller ("freezer"), else the v2 one; nullptr if none.
const Hierarchy* FindHierarchy(const std::vector<Hierarchy>& all, std::string_view controller);

// Kills every process in the cgroup `rel` ("/space/<id>") and its descendants, in every
// hierarchy, then removes those cgroup directories (deepest first). Freezes first so a
// fork bomb cannot outrun the kill, and so pids read from cgroup.procs cannot be reused
// before the SIGKILL lands. Ok if none exist. Blocks up to ~2 s waiting for exits.
[[nodiscard]] Status KillAndRemoveCgroup(const std::vector<Hierarchy>& hierarchies,
                                         const std::string& rel);

// Cgroup directories `rel` that still exist, over all hierarchies.
std::vector<std::string> ExistingCgroupDirs(const std::vector<Hierarchy>& hierarchies,
                                            const std::string& rel);

}  // namespace space::runtime::oci
