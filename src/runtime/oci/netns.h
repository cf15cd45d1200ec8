// netns: where a running container's network namespace is, for Runtime::NetNamespacePath.
//
// Stateless; safe from any thread. Internal to runtime/oci.
#pragma once

#include <string>

#include "common/common.h"

namespace space::runtime::oci {

// The host pid of the container's init, read from the runtime's state
// file `state_dir`/status (crun and runc both keep {"pid": N} there, crun in `status`, runc
// in `state.json`). The pid is trusted only while /proc/<pid>/cgroup places it in the
// container's cgroup `cgroup_rel` ("/space/<id>") and it is not a zombie: a pid reused by
// any other process fails the check. kConflict when the container does not run.
[[nodiscard]] Result<int64_t> InitPid(const std::string& state_dir, const std::string& cgroup_rel);
// "/proc/<pid>/ns/net" of that init.
[[nodiscard]] Result<std::string> InitNetNamespace(const std::string& state_dir,
                                                   const std::string& cgroup_rel);

}  // namespace space::runtime::oci
