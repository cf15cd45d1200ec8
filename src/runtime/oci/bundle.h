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
  std::string run_dir;       // host path, bound read-write at kAgentRunDir
  std::string cgroups_path;  // "/<parent>/<id>"
  bool user_namespace = true;
  uint32_t uid_shift = 1000000, uid_count = 65536;
  bool memory_swap = true;  // set memory.swap = memory.limit (v1 needs swap accounting)
};

// Docker's default capability set, "CAP_"-prefixed.
std::vector<std::string> DefaultCapabilities();
// defaultAction allow, EPERM for the syscalls a sandbox never needs (kernel modules,
// kexec, mounts, namespaces, keyrings, bpf, perf, clock setting, ...).
Json SeccompProfile();
// The whole config.json. `spec.hostname` empty -> the id.
Json BuildOciConfig(const InstanceSpec& spec, const BundleParams& params);

}  // namespace space::runtime::oci
