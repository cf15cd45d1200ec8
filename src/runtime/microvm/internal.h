// Internal to the microvm runtime: the runtime class and its helpers, split by concern
// over microvm_runtime.cc (lifecycle, snapshots, suspend), boot.cc (QEMU's command line,
// boot and restore, the agent handshake, acceleration), disk.cc (template images, disk
// overlays, template snapshots), pool.cc (the restore pool) and volumes.cc (named volumes
// through virtiofsd). See microvm.h.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>

#include "agent/protocol.h"
#include "common/json.h"
#include "runtime/microvm/microvm.h"
#include "runtime/microvm/qmp.h"
#include "sys/cgroups.h"
#include "sys/sys.h"

namespace space::runtime::microvm {

// The guest's root disk (sparse) where limits.disk_bytes is 0 (unlimited).
inline constexpr uint64_t kImageBytes = 16ull << 30;
inline constexpr int64_t kDefaultMemMiB = 512;

bool ValidName(const std::string& s);
std::string Fnv64(std::string_view s);
std::string FileIdentity(const std::string& path);
// The last `max` bytes of a file, for error messages.
std::string Tail(const std::string& path, size_t max = 600);
// Host TSC frequency for tsc_early_khz: under TCG the guest kernel otherwise hangs in TSC
// calibration in a good share of boots.
int64_t HostTscKhz();
bool PidAlive(pid_t pid, const std::string& marker);
Status CopySparse(const std::string& from, const std::string& to);
// Runs argv in a new user namespace where host uids/gids shift..shift+65535 appear as
// 0..65535 and the program runs as that namespace's root, so tools that record ownership
// (mkfs.ext4 -d) see a shifted tree as root's.
Status RunInShiftedUserNs(const std::vector<std::string>& argv, uint32_t shift);

// A networked VM's side of its attachment (InstanceSpec::tap and the addresses).
struct GuestNet {
  std::string netns_path, tap;           // where the NIC's tap lives on the host
  std::string address, gateway;          // the guest's eth0: address/prefix_len, default route
  int prefix_len = 31;
  bool enabled() const { return !tap.empty(); }
  static GuestNet FromSpec(const InstanceSpec& spec) {
    GuestNet g;
    if (!spec.network || spec.tap.empty()) return g;
    g.netns_path = spec.netns_path;
    g.tap = spec.tap;
    g.address = spec.sandbox_ip;
    g.gateway = spec.gateway_ip;
    g.prefix_len = spec.prefix_len;
    return g;
  }
  Json ToJson() const {
    return {{"netns", netns_path}, {"tap", tap}, {"address", address}, {"gateway", gateway},
            {"prefix_len", prefix_len}};
  }
  static GuestNet FromJson(const Json& j) {
    GuestNet g;
    g.netns_path = JsonStringOr(j, "netns", "");
    g.tap = JsonStringOr(j, "tap", "");
    g.address = JsonStringOr(j, "address", "");
    g.gateway = JsonStringOr(j, "gateway", "");
    g.prefix_len = static_cast<int>(JsonIntOr(j, "prefix_len", 31));
    return g;
  }
};

// Opens the tap `g.tap` in the namespace `g.netns_path` (as a queue of that persistent
// device) for QEMU's `-netdev tap,fd=`.
Result<sys::UniqueFd> OpenTap(const GuestNet& g);

struct VmConfig {
  uint32_t uid = 0;
  int64_t mem_mib = kDefaultMemMiB;
  int cpus = 1;
  std::string accel;
  std::string hostname = "sandbox";
  bool suspended = false;
  std::string marker;  // QEMU's -name; "" = space-vm-<id> (a pooled VM keeps its slot's)
  // The VM has a virtio-net NIC (every VM made since guest networking; its state is in
  // every snapshot of it, so a restore needs the same device). Its backend is the tap of
  // the sandbox's namespace when the sandbox has network, else a hub port that goes
  // nowhere.
  bool nic = true;
  GuestNet net;        // the guest's address (told on every boot, restore and wake)
  // Named volumes, served by the VM's virtiofsd (volumes.cc). Such a VM boots cold with
  // shared memory (memfd) and modern virtio-mmio, and can never be migrated: QEMU 7.2's
  // vhost-user-fs device is unmigratable (no snapshot, suspend or fork).
  std::vector<InstanceSpec::VolumeBind> volumes;
  Json ToJson() const {
    Json j = {{"uid", uid}, {"mem_mib", mem_mib}, {"cpus", cpus}, {"accel", accel},
              {"hostname", hostname}, {"suspended", suspended}, {"nic", nic}};
    if (!marker.empty()) j["marker"] = marker;
    if (net.enabled()) j["net"] = net.ToJson();
    if (!volumes.empty()) {
      Json vs = Json::array();
      for (const auto& v : volumes)
        vs.push_back({{"host_path", v.host_path}, {"path", v.path}, {"read_only", v.read_only}});
      j["volumes"] = vs;
    }
    return j;
  }
  static VmConfig FromJson(const Json& j) {
    VmConfig c;
    c.uid = static_cast<uint32_t>(JsonIntOr(j, "uid", 0));
    c.mem_mib = JsonIntOr(j, "mem_mib", kDefaultMemMiB);
    c.cpus = static_cast<int>(JsonIntOr(j, "cpus", 1));
    c.accel = JsonStringOr(j, "accel", "tcg");
    c.hostname = JsonStringOr(j, "hostname", "sandbox");
    c.suspended = JsonBoolOr(j, "suspended", false);
    c.marker = JsonStringOr(j, "marker", "");
    c.nic = JsonBoolOr(j, "nic", false);  // VMs made before guest networking have none
    if (const Json* n = JsonField(j, "net")) c.net = GuestNet::FromJson(*n);
    if (const Json* vs = JsonField(j, "volumes"); vs && vs->is_array()) {
      for (const auto& v : *vs)
        c.volumes.push_back({JsonStringOr(v, "host_path", ""), JsonStringOr(v, "path", ""),
                             JsonBoolOr(v, "read_only", false)});
    }
    return c;
  }
};

// How a QEMU process gets its memory and initial state.
struct Launch {
  std::string mem_file;        // memory-backend-file path ("" = memory-backend-ram)
  bool mem_shared = false;     // share=on (template boot) / off (copy-on-write clone)
  std::string incoming_state;  // restore from this migration stream ("" = cold boot)
  bool ignore_shared = false;  // x-ignore-shared on the migration
  bool pool = false;           // a restore-pool VM (lower priority; see MakePooled)
  int tap_fd = -1;             // the NIC's tap (cfg.net enabled), passed to QEMU as fd 3
  // Written inside the guest by the first sync (resolv.conf, the CA trust bundle).
  const std::map<std::string, std::string>* files = nullptr;
};

// A VM of the restore pool: restored from a template snapshot, run once through the
// agent's handshake and a throwaway command (which warms TCG's translation cache for the
// paths every first command takes), then stopped. Its QMP and agent connections stay
// open, so taking it is `cont` + `sync` on connections already made.
struct PoolVm {
  std::string slot;  // vms/<slot>, a dot name (hidden from List) until taken
  pid_t pid = 0;
  QmpClient qmp;
  sys::UniqueFd agent;
};

class MicrovmRuntime final : public Runtime {
 public:
  explicit MicrovmRuntime(MicrovmOptions o) : opts_(std::move(o)) {}

  // The restore pool's VMs belong to no sandbox: they go with the runtime.
  ~MicrovmRuntime() override;

  Status Init();

  std::string_view Name() const override { return "microvm"; }

  Capabilities Caps() const override;
  // Unavailable when Init found no guest kernel, initramfs or QEMU (GET /v1/runtimes).
  RuntimeDescription Describe() const override {
    RuntimeDescription d;
    if (!unavailable_.empty()) {
      d.available = false;
      d.why_not = unavailable_;
    }
    if (std::string why = VolumesUnavailable(); !why.empty()) {
      d.limitations.push_back("no volumes: " + why);
    } else {
      d.limitations.push_back(
          "a VM with volumes boots cold (no template snapshot) and cannot be snapshotted, "
          "forked or suspended (virtiofs devices cannot be migrated)");
    }
    return d;
  }

  std::string AgentSocketPath(const std::string& id) const override { return VmDir(id) + "/agent.sock"; }

  // Seen from the host: the VM's QEMU process (CPU time of every vCPU and device thread;
  // resident memory = the guest RAM it has touched plus QEMU's own), and the blocks of its
  // disk overlay (what the guest wrote on top of the template's image). The guest's own
  // view (its free memory, its page cache) is not asked.
  Result<Usage> ResourceUsage(const std::string& id) override;
  std::map<std::string, int64_t> ReadyPoolSizes() const override;

  Status Start(const InstanceSpec& spec) override;

  Status Pause(const std::string& id) override { return Qmp(id, "stop"); }
  Status Resume(const std::string& id) override { return Qmp(id, "cont"); }

  Status Destroy(const std::string& id) override;

  Result<InstanceState> Inspect(const std::string& id) override;

  Result<std::vector<std::string>> List() override { return ListDir(opts_.state_dir + "/vms"); }

  // --- snapshots, suspend, wake

  Status Snapshot(const std::string& id, const std::string& snapshot_id) override;

  Status DeleteSnapshot(const std::string& snapshot_id) override {
    if (!ValidName(snapshot_id)) return Fail(Errc::kInvalidArgument, "bad snapshot id");
    return sys::RemoveAll(SnapshotDir(snapshot_id));
  }
  bool HasSnapshot(const std::string& snapshot_id) const override {
    return ValidName(snapshot_id) && sys::Exists(SnapshotDir(snapshot_id) + "/meta.json");
  }
  std::vector<std::string> ListSnapshots() const override {
    auto l = ListDir(opts_.state_dir + "/snapshots");
    return l ? *l : std::vector<std::string>{};
  }
  Result<int64_t> SnapshotSize(const std::string& snapshot_id) const override;

  Status Suspend(const std::string& id) override;

  Status Wake(const InstanceSpec& spec) override;

 private:
  std::string VmDir(const std::string& id) const { return opts_.state_dir + "/vms/" + id; }
  std::string SnapshotDir(const std::string& id) const { return opts_.state_dir + "/snapshots/" + id; }
  // The name QEMU runs under (its command line proves a pid is this VM's): space-vm-<id>,
  // or for a VM taken from the restore pool the name of its slot (vm.json says which).
  std::string Marker(const std::string& id) const;

  Status Available() const {
    if (!unavailable_.empty()) return Fail(Errc::kUnavailable, "microvm runtime unavailable: " + unavailable_);
    return Ok();
  }

  pid_t Pid(const std::string& id) const {
    auto s = sys::ReadFile(VmDir(id) + "/qemu.pid");
    return s ? static_cast<pid_t>(std::atoi(s->c_str())) : 0;
  }

  static Result<std::vector<std::string>> ListDir(const std::string& path, bool hidden = false);

  Status Qmp(const std::string& id, const std::string& cmd);

  // Kills the instance's QEMU (verified by its command line) and waits for it to go.
  Status Kill(const std::string& id);

  // The lowest VM uid no other instance of this runtime uses.
  Result<uint32_t> AllocateUid(const std::string& id);

  Status ChownToVm(const std::string& path, uint32_t uid) {
    if (uid != 0 && ::chown(path.c_str(), uid, uid) != 0) return ErrnoFail("chown " + path);
    return ::chmod(path.c_str(), 0600) == 0 ? Ok() : ErrnoFail("chmod " + path);
  }

  Status CreateOverlay(const std::string& image, const std::string& path);

  // images/<digest>[-<MiB>m].ext4, built once per template digest and disk size: the
  // guest's disk is that size (ENOSPC inside at the limit).
  Result<std::string> EnsureImage(const std::string& tree, const std::string& digest, int64_t disk_bytes);

  std::mutex& KeyMutex(const std::string& key);

  // templates/<key>/: boots the template once, waits for its agent, saves it with RAM in
  // a shared file; later instances restore it copy-on-write.
  Result<std::string> EnsureTemplateSnapshot(const std::string& image, const std::string& digest,
                                             const VmConfig& want);

  // Saves the (stopped) VM's state into `path` through a descriptor the daemon opened.
  Status SaveState(QmpClient& q, const std::string& path, bool ignore_shared);

  Status WaitMigration(QmpClient& q, const std::string& what);

  std::vector<std::string> QemuArgs(const std::string& id, const VmConfig& cfg, const Launch& l);

  // What Boot leaves open for a caller that asks (the template and restore-pool VMs).
  struct Handles {
    pid_t pid = 0;
    QmpClient qmp;
    sys::UniqueFd agent;
  };

  // Starts QEMU detached, restores its state if asked, and waits for the agent's HELLO
  // (and, with `sync`, hands the agent the time and identity). On failure the caller
  // kills the process.
  Status Boot(const std::string& id, const VmConfig& cfg, const Launch& l, bool sync,
              Handles* keep = nullptr);

  // The agent's `sync` request: real time, this VM's identity, fresh entropy.
  std::string SyncFrame(const std::string& id, const VmConfig& cfg, uint32_t request,
                        const std::map<std::string, std::string>* files = nullptr);

  // Reads frames from an agent connection until `done` accepts one. Fails when the
  // connection ends, the VM's QEMU is gone, or at the deadline.
  Status AgentAwait(const std::string& id, int fd, agent::FrameDecoder& dec, int64_t deadline_ns,
                    const std::function<bool(const agent::Frame&)>& done);

  // Connects to the agent channel, waits for HELLO and optionally sends `sync`; then
  // disconnects (core connects next) unless `keep` takes the connection. A restored guest
  // may not notice a connection made in the instant its state was loaded, so without
  // HELLO in a short while we reconnect.
  Status AgentHandshake(const std::string& id, const VmConfig& cfg, bool sync, bool restored,
                        sys::UniqueFd* keep = nullptr,
                        const std::map<std::string, std::string>* files = nullptr);

  // --- named volumes (volumes.cc)

  // Why VMs cannot mount volumes here ("" = they can): no virtiofsd, or no uid shift.
  std::string VolumesUnavailable() const;

  // Starts the VM's virtiofsd for cfg.volumes (before QEMU, which connects to fs.sock).
  Status StartVirtiofsd(const std::string& id, const VmConfig& cfg);

  // Ends the VM's virtiofsd, if it has one (verified by its command line). Idempotent.
  Status StopVirtiofsd(const std::string& id);

  // kConflict for a VM with volumes: `what` needs a migration, which virtiofs forbids.
  static Status RefuseWithVolumes(const std::string& id, const VmConfig& cfg, const std::string& what);

  // --- the restore pool

  static constexpr char kPoolPrefix[] = ".pool-";

  // Pools are kept for this many template snapshots, the most recently started ones (a
  // pool VM holds ~30 MiB of private memory while it waits).
  static constexpr size_t kPoolTemplates = 4;

  // Asks the pool thread to keep `restore_pool` VMs of this template snapshot ready; the
  // pool of the template started least recently goes if that makes too many.
  void WantPool(const std::string& tpl, const VmConfig& cfg);

  std::optional<PoolVm> TakePooled(const std::string& tpl);

  // Makes the pool's VMs, one at a time, while a wanted template has fewer than
  // restore_pool ready. A failure drops the template until its next start asks again.
  void PoolLoop();

  // Restores the template snapshot into a hidden VM dir, lets the agent handshake and
  // run a throwaway command (warming TCG's translation cache for the paths a first
  // command takes), and stops the VM, keeping its QMP and agent connections.
  Result<PoolVm> MakePooled(const std::string& tpl, VmConfig cfg);

  // Runs `/bin/sh -c :` through the agent (any outcome will do: a template without a
  // shell still went through the agent's fork and exec) and lets the agent forget it.
  Status WarmUp(const std::string& slot, int fd);

  // Hands a pooled VM to instance `id`: its dir is renamed, the guest continues and gets
  // its identity (`sync`) on the connection the pool kept.
  Status StartPooled(PoolVm vm, const std::string& id, const std::string& hostname);

  void DiscardPooled(const std::string& slot) {
    const std::string marker = Marker(slot);
    (void)Kill(slot);
    ReleaseCgroup(marker);
    (void)sys::RemoveAll(VmDir(slot));
  }

  // QEMU's own cgroup, /space-vm/<id of its -name> in every hierarchy: outside spaced's, so
  // that a container runtime ending spaced's container (a node Pod's restart) does not end
  // the VMs (docs/kubernetes.md). Joined right after QEMU starts, removed with the VM.
  static std::string CgroupOf(const std::string& marker) {
    return "/space-vm/" + (StartsWith(marker, "space-vm-") ? marker.substr(9) : marker);
  }
  void ReleaseCgroup(const std::string& marker) {
    if (auto k = sys::KillAndRemoveCgroup(hierarchies_, CgroupOf(marker)); !k)
      spdlog::warn("microvm: cgroup {}: {}", CgroupOf(marker), k.error().message);
  }

  Result<std::string> Accel();

  // Boots a throwaway VM under KVM on a tiny empty disk and waits for its agent.
  Status ProbeKvm();

  MicrovmOptions opts_;
  std::vector<sys::Hierarchy> hierarchies_;
  std::atomic<bool> cgroup_warned_{false};
  std::string unavailable_;
  int64_t tsc_khz_ = 0;
  std::mutex accel_mu_;
  std::string accel_;
  std::mutex uid_mu_;
  std::set<uint32_t> reserved_uids_;
  std::mutex keys_mu_;
  std::map<std::string, std::unique_ptr<std::mutex>> key_mutexes_;
  // The restore pool, per template snapshot dir (PoolLoop).
  mutable std::mutex pool_mu_;
  std::condition_variable pool_cv_;
  bool pool_stop_ = false;
  std::map<std::string, VmConfig> pool_want_;
  std::deque<std::string> pool_lru_;  // templates with a pool, most recently started first
  std::map<std::string, std::deque<PoolVm>> pool_;
  std::thread pool_thread_;
};

}  // namespace space::runtime::microvm
