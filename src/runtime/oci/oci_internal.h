// Internals of the `oci` Runtime (oci.h), shared by its source files: oci_runtime.cc
// (set-up, pause, destroy, inspection), oci_start.cc (bundles and starts) and oci_usage.cc
// (resource figures). Not a public header: only runtime/oci includes it.
#pragma once

#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/json.h"
#include "runtime/oci/agent_copies.h"
#include "runtime/oci/memcg_pool.h"
#include "runtime/oci/mount_ns.h"
#include "runtime/oci/netns.h"
#include "runtime/oci/oci.h"
#include "sys/cgroups.h"
#include "sys/sys.h"

namespace space::runtime::oci_impl {

constexpr int64_t kRunTimeoutMs = 60000;
constexpr int64_t kCmdTimeoutMs = 30000;
constexpr size_t kConsoleTail = 4096;
constexpr int64_t kRunTmpfsBytes = 4 << 20;

// Ids become path components and cgroup names.
bool ValidName(std::string_view id);
bool ValidHostname(std::string_view h);

std::string Basename(const std::string& p);

// Finds an executable by name in PATH (or checks an explicit path).
Result<std::string> FindExecutable(const std::string& name);

// With a user namespace the runtime resolves bind-mount sources as the container's root,
// an unprivileged host uid: `dir` and every directory above it must be searchable by
// "other".
Status CheckOtherSearchable(const std::string& dir, const std::string& what);

std::string Dirname(const std::string& p);
std::string Trim(std::string s);

// The last bytes of a file the container can write to: opened without following
// symlinks and capped, so a hostile sandbox cannot make us read a host file into an error.
std::string ReadTail(const std::string& path, size_t max);

// Waits for a child with a deadline (pidfd + poll; the daemon has no SIGCHLD handler to
// rely on). On timeout the ChildProcess destructor kills and reaps it.
Result<int> WaitWithTimeout(sys::ChildProcess& child, int64_t timeout_ms);

class OciRuntime final : public Runtime {
 public:
  static Result<std::unique_ptr<Runtime>> Create(const OciOptions& opts);

  std::string_view Name() const override { return "oci"; }
  Capabilities Caps() const override {
    Capabilities c;
    c.pause = true;
    c.pause_keeps_memory = true;
    c.suspend_keeps_processes = false;
    c.snapshot_kinds = {"filesystem"};
    c.network = true;
    c.volumes = true;
    c.adopt_interrupted_start = true;
    return c;
  }

  Status Start(const InstanceSpec& spec) override;
  Status Pause(const std::string& id) override { return PauseResume(id, true); }
  Status Resume(const std::string& id) override { return PauseResume(id, false); }
  Status Destroy(const std::string& id) override;
  Result<InstanceState> Inspect(const std::string& id) override;
  Result<std::vector<std::string>> List() override;
  Result<int64_t> OomKills(const std::string& id) override;
  Result<Usage> ResourceUsage(const std::string& id) override;
  std::string AgentSocketPath(const std::string& id) const override {
    return RunDir(id) + "/agent.sock";
  }
  Result<std::string> NetNamespacePath(const std::string& id) override {
    if (!ValidName(id)) return Fail(Errc::kInvalidArgument, "oci: bad instance id '" + id + "'");
    return oci::InitNetNamespace(StateDirOf(id), CgroupRel(id));
  }

 private:
  explicit OciRuntime(OciOptions opts) : opts_(std::move(opts)) {}

  std::string StateDirOf(const std::string& id) const { return runtime_root_ + "/" + id; }
  std::string BundleDir(const std::string& id) const { return bundles_dir_ + "/" + id; }
  std::string RunDir(const std::string& id) const { return run_dir_ + "/" + id; }
  std::string CgroupRel(const std::string& id) const {
    return "/" + opts_.cgroup_parent + "/" + id;
  }

  sys::SpawnOptions RuntimeCmd(std::vector<std::string> args) const {
    sys::SpawnOptions so;
    so.argv = {binary_, "--root", runtime_root_};
    so.argv.insert(so.argv.end(), args.begin(), args.end());
    so.mount_ns_fd = ns_ ? ns_->fd() : -1;
    if (sealed_) {
      // From the sealed copy: the runtime then skips copying itself before it runs.
      if (auto fd = sealed_->Current()) {
        so.exec_fd = (*fd)->get();
        so.exec_keep = *fd;
      }
    }
    return so;
  }
  Result<sys::RunResult> RunRuntime(std::vector<std::string> args,
                                    int64_t timeout = kCmdTimeoutMs) const {
    return sys::Run(RuntimeCmd(std::move(args)), timeout);
  }
  std::string CmdError(const std::string& what, const sys::RunResult& r) const {
    std::string how =
        r.signal ? "signal " + std::to_string(r.signal) : "exit " + std::to_string(r.exit_code);
    std::string text = Trim(r.err.empty() ? r.out : r.err);
    return Basename(binary_) + " " + what + ": " + how + (text.empty() ? "" : ": " + text);
  }

  Status StartSteps(const InstanceSpec& spec);
  void WarmCgroupMigration();
  Status PauseResume(const std::string& id, bool pause);
  Status FreezeDirect(const std::string& id, bool freeze);
  void ShieldAgentFromOom(const std::string& id);
  void Adopted(const std::string& id) override;
  Status MakeDevDir(const std::string& dev, uint32_t owner);
  static Status UnmountAll(const std::string& path);

  OciOptions opts_;
  std::string binary_;        // resolved path of crun/runc
  // binary_ in a sealed memfd (sys.h); null if none could be made (then binary_ is run).
  std::unique_ptr<sys::SealedExecutable> sealed_;
  std::string runtime_root_;  // state_dir/<crun|runc>
  std::string bundles_dir_, run_dir_;
  std::vector<sys::Hierarchy> hierarchies_;
  bool memory_swap_ = true;
  std::optional<oci::HelperMountNs> ns_;
  // crun only: the seccomp profile compiled once, base64, for run.oci.seccomp_bpf_data
  // (crun would otherwise compile it on every start); empty = let the runtime compile.
  std::string seccomp_bpf_b64_;
  // BundleParams::empty_dir and masked_dirs, fixed at Open.
  // cgroup v1 with crun: /sys/fs/cgroup inside is a bind of this skeleton (one empty
  // directory per v1 hierarchy, named as on the host) with each hierarchy's sandbox cgroup
  // bound on its directory (BundleParams::cgroup_skeleton). Empty otherwise.
  std::string cgroup_skeleton_;
  std::vector<std::string> cgroup_bound_;  // the v1 hierarchies' mount points
  std::string empty_dir_;
  std::vector<std::string> masked_dirs_;
  std::string sysfs_;  // BundleParams::sysfs_source: the shared read-only sysfs ("" = none)
  // The agent binary's file for each start (state_dir/agent: copies, a file per 64 sandboxes).
  std::unique_ptr<AgentCopies> agent_copies_;
  // Memory cgroups of deleted sandboxes for new ones (crun on cgroup v1); null = none.
  std::unique_ptr<MemcgPool> memcg_pool_;

  // The first cgroup migration after an idle spell waits for an RCU grace period (the
  // kernel's global cgroup_threadgroup_rwsem): 5-20 ms of crun joining the container's
  // first cgroup. A no-op migration of spaced's own process into the cgroup it is already
  // in, started as a create begins, absorbs that wait in parallel with the create's other
  // steps; crun's migrations a few ms later find the semaphore ready.
  std::string own_procs_;  // spaced's own cgroup.procs ("" = not found, or favordynmods on: no warming)
  std::mutex warm_mu_;
  std::condition_variable warm_cv_;
  bool warm_kick_ = false, warm_stop_ = false;
  std::thread warm_thread_;

 public:
  ~OciRuntime() override {
    {
      std::lock_guard l(warm_mu_);
      warm_stop_ = true;
    }
    warm_cv_.notify_all();
    if (warm_thread_.joinable()) warm_thread_.join();
  }
};

}  // namespace space::runtime::oci_impl
