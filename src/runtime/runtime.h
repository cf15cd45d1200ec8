// runtime: the interface every sandbox backend implements (oci, microvm, plugins).
//
// A Runtime turns a prepared root filesystem into a running, isolated instance whose
// PID 1 is space-agent, and controls that instance's life. It holds no state that
// matters only in memory: everything it needs to find an instance again after a daemon
// restart is derived from the sandbox id and the runtime's state dir. Implementations
// must be thread-safe for calls on different ids; calls on one id are serialised by
// the caller (core/).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/common.h"

namespace space::runtime {

struct Limits {
  int64_t memory_bytes = 512ll << 20;   // 0 = unlimited
  int64_t pids = 512;                   // 0 = unlimited
  double cpus = 1.0;                    // 0 = unlimited
  int64_t disk_bytes = 0;               // enforced by the storage driver
  int64_t nofile = 4096;
};

struct InstanceSpec {
  std::string id;                        // sandbox id ("sb-...")
  std::string rootfs;                    // absolute path of a writable root prepared by storage
  std::vector<std::string> env;          // "K=V": the agent's environment (template + sandbox)
  std::string hostname;
  Limits limits;
  bool network = false;                  // false: a private netns with loopback only
};

enum class InstanceState { kRunning, kPaused, kStopped, kMissing };
std::string_view InstanceStateName(InstanceState s);

struct Capabilities {
  bool pause = true;
  bool pause_keeps_memory = true;
  bool suspend_keeps_processes = false;
  std::vector<std::string> snapshot_kinds;   // "filesystem", "full"
};

class Runtime {
 public:
  virtual ~Runtime() = default;
  virtual std::string_view Name() const = 0;
  virtual Capabilities Caps() const = 0;

  // Prepares and starts an instance (PID 1 = space-agent). Returns once the runtime says it
  // runs; the agent socket may appear a few ms later (the caller connects with retries).
  // Fails with kConflict if an instance with this id exists.
  [[nodiscard]] virtual Status Start(const InstanceSpec& spec) = 0;
  // Freezes / thaws every process of the instance.
  [[nodiscard]] virtual Status Pause(const std::string& id) = 0;
  [[nodiscard]] virtual Status Resume(const std::string& id) = 0;
  // Kills every process and releases every host resource of the instance (cgroups,
  // namespaces, runtime state, bundle), but not the rootfs (owned by storage).
  // Idempotent: destroying a missing instance succeeds.
  [[nodiscard]] virtual Status Destroy(const std::string& id) = 0;
  [[nodiscard]] virtual Result<InstanceState> Inspect(const std::string& id) = 0;
  // Ids of every instance this runtime knows on the host (for reconciling orphans).
  [[nodiscard]] virtual Result<std::vector<std::string>> List() = 0;
  // Host path of the unix socket the instance's agent listens on.
  virtual std::string AgentSocketPath(const std::string& id) const = 0;
};

}  // namespace space::runtime
