// runtime: the interface every sandbox backend implements (oci, microvm, plugins).
//
// A Runtime turns a prepared root filesystem into a running, isolated instance whose
// PID 1 is space-agent, and controls that instance's life. It holds no state that
// matters only in memory: everything it needs to find an instance again after a daemon
// restart is derived from the sandbox id and the runtime's state dir. Implementations
// must be thread-safe for calls on different ids; calls on one id are serialised by
// the caller (core/).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/common.h"
#include "common/json.h"

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
  // The template allows setuid programs (LABEL space.allow-setuid): its processes run
  // without no_new_privs, so sudo works (docs/security.md). Off by default.
  bool allow_setuid = false;
  // With network: the namespace to join (made by net/, with the sandbox's veth) and the
  // sandbox's /etc/resolv.conf.
  std::string netns_path;
  std::string resolv_conf;
  // Runtimes with Capabilities::network_tap: the tap device in that namespace to attach the
  // VM's NIC to, and the address the guest takes (sandbox_ip/prefix_len, default route via
  // gateway_ip; resolv_conf and files are written inside the guest).
  std::string tap;
  std::string sandbox_ip;
  std::string gateway_ip;
  int prefix_len = 31;
  // Files bound read-only into the sandbox: absolute path inside -> content (e.g. the
  // trust bundle with the sandbox's CA).
  std::map<std::string, std::string> files;
  // Named volumes (docs/volumes.md): a host directory (the volume's mounted filesystem)
  // bound at an absolute, cleaned path inside; read_only binds are read-only in the
  // kernel. Only runtimes with Capabilities::volumes get any.
  struct VolumeBind {
    std::string host_path;
    std::string path;
    bool read_only = false;
  };
  std::vector<VolumeBind> volumes;
  // Runtimes that keep the sandbox's disk themselves (Capabilities::own_disk; rootfs is
  // then unused): the template's read-only tree and content digest to build the disk
  // from, or a snapshot of this runtime to start from (memory, devices and disk).
  std::string template_dir;
  std::string template_digest;
  std::string snapshot_id;
};

enum class InstanceState { kRunning, kPaused, kStopped, kMissing };
std::string_view InstanceStateName(InstanceState s);

struct Capabilities {
  bool pause = true;
  bool pause_keeps_memory = true;
  bool suspend_keeps_processes = false;
  std::vector<std::string> snapshot_kinds;   // "filesystem", "full"
  // The runtime keeps each sandbox's disk and its snapshots itself (microvm): core then
  // creates no storage root and routes snapshots, fork and suspend through the runtime.
  bool own_disk = false;
  // Joins a network namespace made by net/ (InstanceSpec::netns_path): egress by policy.
  bool network = false;
  // With network: the instance is a VM whose NIC sits on a tap device in that namespace
  // (InstanceSpec::tap), not processes in it.
  bool network_tap = false;
  // A start cut short by a crash of spaced leaves either no running instance or one that
  // recovery can adopt as it adopts any (oci: `crun run -d` runs to its end without
  // spaced; only the agent's OOM shield, set just after, may be missing). Core then
  // commits a create's end while the start runs rather than after it. Not declared by
  // plugins: a plugin's start is whatever its script does.
  bool adopt_interrupted_start = false;
  // Binds named volumes (InstanceSpec::volumes) into the sandbox.
  bool volumes = false;
  // With volumes mounted, the instance can still be snapshotted, forked and suspended, and
  // a snapshot of this runtime can start with volumes. microvm: no (QEMU cannot migrate a
  // VM with a virtiofs device), so core refuses those with a sandbox's volumes up front.
  bool snapshot_with_volumes = true;
};

// Capabilities as JSON ({"pause":true,...}; the shape of GET /v1/runtimes and of a runtime
// plugin's `info`, docs/runtime-plugins.md), and back (absent fields keep the defaults).
Json CapabilitiesToJson(const Capabilities& c);
Capabilities CapabilitiesFromJson(const Json& j);

// Whether a runtime can start sandboxes on this host, and what it is (GET /v1/runtimes).
struct RuntimeDescription {
  std::string kind = "builtin";           // builtin | plugin
  std::string path;                       // a plugin's executable
  bool available = true;
  std::string why_not;                    // set when !available
  std::vector<std::string> limitations;   // what it cannot do, in words
};

class Runtime {
 public:
  virtual ~Runtime() = default;
  virtual std::string_view Name() const = 0;
  virtual Capabilities Caps() const = 0;
  virtual RuntimeDescription Describe() const { return {}; }

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
  // Recovery adopted the running instance `id` (its agent answered a restarted spaced):
  // restores what the start sets on the host after the runtime's own step, which a crash
  // in between would have skipped (Capabilities::adopt_interrupted_start). Best effort.
  virtual void Adopted(const std::string& id) {}
  // Ids of every instance this runtime knows on the host (for reconciling orphans).
  [[nodiscard]] virtual Result<std::vector<std::string>> List() = 0;
  // Host path of the unix socket the instance's agent listens on.
  virtual std::string AgentSocketPath(const std::string& id) const = 0;
  // How many processes the kernel's OOM killer has killed in the instance so far (its
  // memory cgroup's oom_kill count); kUnavailable where the runtime cannot tell.
  [[nodiscard]] virtual Result<int64_t> OomKills(const std::string& id) {
    return Fail(Errc::kUnavailable, "OOM kills are not counted by this runtime");
  }
  // What the instance uses now (for metrics). Fields the runtime cannot measure stay -1.
  // Default: kUnavailable.
  struct Usage {
    int64_t cpu_ns = -1;          // cumulative CPU time of its processes
    int64_t memory_bytes = -1;    // in use, reclaimable page cache excluded
    int64_t memory_cache_bytes = -1;
    int64_t disk_bytes = -1;      // runtimes that keep the disk themselves (own_disk)
  };
  [[nodiscard]] virtual Result<Usage> ResourceUsage(const std::string& id) {
    return Fail(Errc::kUnavailable, "resource usage is not measured by this runtime");
  }
  // Instances kept ready by the runtime itself (microvm's restore pool): key -> how many.
  virtual std::map<std::string, int64_t> ReadyPoolSizes() const { return {}; }
  // A path naming the network namespace of a running instance (e.g. /proc/<pid>/ns/net),
  // which the host may open to make sockets inside the sandbox (ingress, docs/ports.md).
  // Checked when called: kConflict when the instance does not run. A /proc path can name
  // another process once the instance dies, so callers call again after opening it and
  // keep the namespace only if the answer still holds. Default: kUnavailable (the
  // runtime's sandboxes have no network namespace on the host, e.g. microvm).
  [[nodiscard]] virtual Result<std::string> NetNamespacePath(const std::string& id);

  // --- Runtimes with Capabilities::own_disk (the defaults answer "not supported") ---

  // Saves the instance's whole state (memory, devices, disk) as snapshot `snapshot_id`;
  // a running instance is stopped for the instant and continues afterwards, a suspended
  // one is copied. Start() with InstanceSpec::snapshot_id starts a new instance from it.
  [[nodiscard]] virtual Status Snapshot(const std::string& id, const std::string& snapshot_id);
  [[nodiscard]] virtual Status DeleteSnapshot(const std::string& snapshot_id);  // ok if missing
  virtual bool HasSnapshot(const std::string& snapshot_id) const { return false; }
  virtual std::vector<std::string> ListSnapshots() const { return {}; }
  [[nodiscard]] virtual Result<int64_t> SnapshotSize(const std::string& snapshot_id) const;
  // Capabilities::suspend_keeps_processes: saves the instance's state to disk and ends
  // its process (Inspect then says kStopped); Wake() brings it back with its processes.
  // A failed Wake leaves the saved state in place.
  [[nodiscard]] virtual Status Suspend(const std::string& id);
  [[nodiscard]] virtual Status Wake(const InstanceSpec& spec);
};

}  // namespace space::runtime
