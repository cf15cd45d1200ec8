// oci: the `oci` runtime backend — runs each sandbox as a container under a real OCI
// runtime binary (crun by default, runc by configuration) with space-agent as PID 1.
//
// The backend keeps every piece of state on disk under OciOptions::state_dir:
//   bundles/<id>/config.json   the OCI bundle (bundles/<id>/rootfs: a bind of spec.rootfs)
//   run/<id>/                  a 4 MiB tmpfs bind-mounted at /.space/run in the container:
//                              agent.sock, and console.log (stdio of crun and the container)
//   crun/ (or runc/)           the runtime binary's own state (--root)
//   ns/mnt                     the helper mount namespace crun runs in on hybrid hosts
//   runtime                    which binary owns this state dir (one binary per state dir)
// so a second runtime object created on the same state_dir (a daemon restart) finds, pauses
// and destroys the instances of the first. Containers run detached in their own session:
// they survive the daemon's death. Destroy() leaves no process, cgroup, mount or file (but a parked memory cgroup:
// OciOptions::parked_memory_cgroups).
//
// Security note for callers: run/<id>/ is writable by the sandbox, so agent.sock may be
// replaced by a symlink to another socket on the host. Connect without following
// symlinks: open(path, O_PATH|O_NOFOLLOW), check S_ISSOCK with fstat, then connect to
// "/proc/self/fd/<fd>" (see ConnectOnce in oci_test.cc).
//
// Thread-safety: the runtime object is immutable after CreateOciRuntime(); calls for
// different ids may run concurrently; calls for one id must be serialised by the caller.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/common.h"
#include "runtime/runtime.h"

namespace space::runtime {

struct OciOptions {
  std::string state_dir;                // absolute; e.g. DATA/runtime/oci
  std::string runtime_binary = "crun";  // "crun", "runc" or a path to either
  std::string agent_binary;             // host path of the static space-agent executable
  std::string cgroup_parent = "space";  // cgroups at /<parent>/<id> in each hierarchy
  bool user_namespace = true;           // root inside -> host uid/gid uid_shift..+uid_count-1
  uint32_t uid_shift = 1000000, uid_count = 65536;
  // Running sandboxes per file of the agent binary: beyond it, starts run identical
  // copies under state_dir/agent (agent_copies.h says why).
  size_t sandboxes_per_agent_file = 64;
  // crun on cgroup v1: memory cgroups of deleted sandboxes kept for new ones, at most this
  // many (memcg_pool.h says why); 0 = each is removed with its sandbox.
  size_t parked_memory_cgroups = 512;
  // ... removed (a few at a time) once no start has taken one for this long.
  int64_t parked_memory_cgroups_idle_ms = 60000;
};

// Checks the host (runtime binary, agent binary, cgroup layout, permissions), creates the
// state directories and, on cgroup v1/v2 hybrid hosts with crun, the helper mount
// namespace (re-used if it survived from an earlier process). Blocks for a few ms.
// With user_namespace, every ancestor of state_dir and of agent_binary must be
// searchable by "other" (the runtime resolves bind sources as the container's root, which
// is an unprivileged host uid); kInvalidArgument says which one is not.
[[nodiscard]] Result<std::unique_ptr<Runtime>> CreateOciRuntime(const OciOptions& opts);

// The directories every start makes in a sandbox's root (the agent's mount point), for
// storage::OpenOptions::spare_dirs.
std::vector<std::string> OciRootMountPoints();

}  // namespace space::runtime
