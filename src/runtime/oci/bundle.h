// bundle: builds the OCI runtime-spec 1.0 config.json for one sandbox.
//
// Pure functions (no I/O), so the hardening can be unit-tested without root. Internal to
// runtime/oci.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/json.h"
#include "runtime/runtime.h"

namespace space::runtime::oci {

// Where the agent lives and listens inside every container.
inline constexpr const char* kAgentDir = "/.space";
inline constexpr const char* kAgentPath = "/.space/bin/space-agent";
inline constexpr const char* kAgentRunDir = "/.space/run";
inline constexpr const char* kAgentSocketInside = "/.space/run/agent.sock";
inline constexpr const char* kDefaultPath =
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

struct BundleParams {
  std::string root_path;     // absolute host path of the container's root (root.path)
  std::string agent_binary;  // host path, bound read-only at kAgentPath
  std::string run_dir;       // host path, bound read-write at kAgentRunDir and at kAgentDir
  std::string cgroups_path;  // "/<parent>/<id>"
  bool user_namespace = true;
  uint32_t uid_shift = 1000000, uid_count = 65536;
  bool memory_swap = true;  // set memory.swap = memory.limit (v1 needs swap accounting)
  // Networked sandboxes: the namespace file to join (a bind of net/'s namespace inside the
  // bundle, so crun sees it in its helper mount namespace) and the resolv.conf to bind
  // read-only at /etc/resolv.conf. Empty: a fresh namespace with loopback only.
  std::string netns_path;
  std::string resolv_conf_path;
  std::vector<std::pair<std::string, std::string>> file_binds;  // host path -> path inside (ro)
  // Named volumes: host path (a bind inside the bundle) -> path inside, read-only or not.
  struct VolumeBind {
    std::string host, inside;
    bool read_only = false;
  };
  std::vector<VolumeBind> volume_binds;
  // Masked paths that are directories on this kernel (MaskedPaths()) become read-only binds
  // of `empty_dir`, an empty directory on the host, rather than a tmpfs each: every
  // superblock costs each memory cgroup a shrinker slot and a list_lru, so per-sandbox
  // superblocks make creates and deletes slower as sandboxes add up. Empty `empty_dir`:
  // crun masks every path itself.
  std::string empty_dir;
  std::vector<std::string> masked_dirs;
  // cgroup v1 (crun): /sys/fs/cgroup is a read-only bind of `cgroup_skeleton` (a host
  // directory with one empty subdirectory per hierarchy) and each hierarchy a read-only
  // bind of the sandbox's own cgroup there (host dir -> path inside), instead of the
  // `cgroup` mount for which crun makes a tmpfs: one superblock fewer per sandbox. The
  // runtime makes the cgroups before its mounts (crun joins them before it unshares the
  // cgroup namespace). Empty: the `cgroup` mount.
  std::string cgroup_skeleton;
  std::vector<std::pair<std::string, std::string>> cgroup_binds;
  // crun: /dev is `run_dir`/dev (DevDirEntries() made there by the runtime) bound
  // read-write, with the host's device nodes (DevNodes()) bound on its files, instead of a
  // tmpfs of its own: one superblock fewer per sandbox. The run tmpfs then needs
  // DevTmpfsBytes() of room. false: a tmpfs at /dev whose nodes the runtime binary makes.
  bool dev_in_run_dir = false;
  // Non-empty: /sys is a read-only bind of this host path, one sysfs that every sandbox
  // shares (the runtime's, from a network namespace with loopback only), instead of a
  // sysfs mount, a superblock, per sandbox. Empty: a sysfs of the sandbox's own.
  std::string sysfs_source;
  // Non-empty (crun): its precompiled filter, base64, for the annotation
  // run.oci.seccomp_bpf_data, which crun loads instead of compiling the JSON profile; the
  // profile is left out then (crun applies a filter when either is there), sparing every
  // start the profile's JSON (~350 syscall names) and config.json ~20 KB.
  std::string seccomp_bpf_b64;
};

// The size of a sandbox's /dev (its /dev/shm is a directory of it): a quarter of the
// memory limit, 1 MiB to 64 MiB. tmpfs pages are charged to the memory cgroup but belong to
// no process, so a full tmpfs at the limit would make the OOM killer pick any process.
int64_t DevTmpfsBytes(const Limits& limits);
// The device nodes every sandbox gets ("null", ...: /dev/<name> on the host and inside).
const std::vector<std::string>& DevNodes();

// Paths inside the sandbox that read as empty: files become /dev/null, directories an
// empty read-only directory.
const std::vector<std::string>& MaskedPaths();

// Docker's default capability set without CAP_NET_RAW (no raw or packet sockets: a
// sandbox has nothing to sniff or forge), "CAP_"-prefixed.
std::vector<std::string> DefaultCapabilities();
// An allow-list derived from Docker's default profile (see docs/security.md for the
// differences): unlisted syscalls answer ENOSYS, the ones a sandbox uses to reach the host
// (kernel modules, kexec, mounts, namespaces, keyrings, bpf, perf, clocks, io_uring, file
// handles, ...) EPERM; clone() with namespace flags, AF_VSOCK sockets, exotic
// personalities and btrfs subvolume/snapshot creation (which would escape the disk quota)
// are refused by argument.
Json SeccompProfile();
// The whole config.json. `spec.hostname` empty -> the id.
Json BuildOciConfig(const InstanceSpec& spec, const BundleParams& params);

}  // namespace space::runtime::oci
