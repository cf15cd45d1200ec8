// core/internal: the in-memory side of Platform, shared by core's .cc files only.
//
// Locking order (never take them the other way round):
//   Impl::mu  ->  Sandbox::mu  ->  Sandbox::cmd_mu  ->  Command::mu
// The agent reader thread takes only cmd_mu and Command::mu, so a thread holding
// Sandbox::mu may block on an agent Call().
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/agent_session.h"
#include "core/core.h"

namespace space::core {

// A started, unclaimed warm-pool sandbox (hidden from users).
bool IsPoolMember(const store::SandboxRecord& rec);

// The runtime spec of a sandbox's instance, from its record and root filesystem.
runtime::InstanceSpec InstanceSpecFor(const store::SandboxRecord& rec, const std::string& rootfs);

struct Command {
  std::mutex mu;
  store::CommandRecord rec;
  std::unique_ptr<store::OutputLog> log;
};

struct Platform::Sandbox {
  std::mutex mu;  // serialises lifecycle transitions; guards rec and session
  store::SandboxRecord rec;
  std::shared_ptr<AgentSession> session;
  uint32_t next_stream = 1;
  std::string busy_op;  // id of the queued/running transition, guarded by mu
  std::atomic<int64_t> last_activity_ms{0};  // idle timeout (in memory; reset on restart)

  std::mutex cmd_mu;  // guards the maps below
  std::map<uint32_t, std::shared_ptr<Command>> by_stream;       // live commands
  std::map<std::string, std::shared_ptr<Command>> commands;     // live commands by id
};

struct Platform::Impl {
  Platform* self = nullptr;
  Config config;
  std::unique_ptr<store::Store> store;
  std::unique_ptr<storage::Driver> storage;
  std::atomic<int> creating{0};  // cold creates accepted and not yet finished
  std::map<std::string, std::unique_ptr<runtime::Runtime>> runtimes;
  std::unique_ptr<net::Network> network;  // null: no networking on this daemon

  std::mutex mu;  // guards sandboxes
  std::map<std::string, std::shared_ptr<Sandbox>> sandboxes;

  // Operator API keys by hash (access.cc); loaded from the store on first use.
  std::mutex keys_mu;
  bool keys_loaded = false;
  std::map<std::string, store::ApiKeyRecord> keys_by_hash;
  Status LoadKeysLocked();  // caller holds keys_mu

  // Operation workers.
  std::mutex q_mu;
  std::condition_variable q_cv;
  std::deque<std::function<void()>> queue;
  std::vector<std::thread> workers;
  bool stopping = false;

  // Crash-test hook (Config::crash_point): exits the process at once when `point` matches.
  void CrashPoint(const char* point) const;

  void Enqueue(std::function<void()> job);
  void WorkerLoop();

  // Timeouts: a reaper thread applies each expired sandbox's on_timeout action.
  std::thread reaper;
  std::condition_variable reaper_cv;  // separate from q_cv: a notify_one must reach a worker
  void ReaperLoop();
  void ReapOnce();

  std::shared_ptr<Sandbox> Find(const std::string& id);
  runtime::Runtime* RuntimeFor(const store::SandboxRecord& rec);
  std::string LogDir(const std::string& sandbox_id) const;

  // Persists rec (with updated_ms) and notifies "sb:<id>". Caller holds sb->mu.
  Status SaveSandbox(Sandbox& sb);
  // Persists op and notifies "op:<id>".
  void SaveOperation(store::OperationRecord& op);
  void FinishOperation(store::OperationRecord& op, const Status& st, Json result = Json::object());

  // Connects the agent session of a sandbox and reconciles its commands with the agent's
  // HELLO. Caller holds sb->mu.
  Status ConnectAgent(const std::shared_ptr<Sandbox>& sb, int64_t timeout_ms);
  void OnAgentLost(const std::weak_ptr<Sandbox>& weak, const Error& why);
  // Marks every live command of the sandbox lost with `reason` (persisted).
  void LoseCommands(Sandbox& sb, const std::string& reason);
  // Loads a sandbox's running commands from the store into its live maps.
  Status LoadLiveCommands(Sandbox& sb);

  // Builds (does not persist) a new sandbox from a request; sets the source: a template
  // layer digest or a snapshot id.
  Result<std::shared_ptr<Sandbox>> NewSandbox(const CreateSandboxRequest& req,
                                              std::string* source_digest,
                                              std::string* source_snapshot);
  void RunCreate(std::shared_ptr<Sandbox> sb, store::OperationRecord op, std::string digest,
                 std::string snapshot);
  // Warm pools (pools.cc). Members are ordinary sandbox rows with spec.pool = template ref,
  // hidden from listings until claimed.
  std::mutex pool_mu;            // guards refilling (one refill at a time)
  bool refill_queued = false;    // guarded by pool_mu
  bool refill_again = false;     // guarded by pool_mu: a claim happened during a refill
  // A claim schedules the refill a moment later (the reaper starts it), so starting the
  // replacement does not compete with the claimer's first commands for the CPU.
  std::atomic<int64_t> refill_due_ms{0};
  void RefillPools();
  void RefillPoolsOnce();
  // Claims a pool member for `req` if one fits; nullptr if none.
  std::shared_ptr<Sandbox> ClaimFromPool(const CreateSandboxRequest& req);
  // Root filesystem + instance + agent for a sandbox in state creating; on failure
  // releases what it made and marks the sandbox error. Caller holds sb->mu. With `done`,
  // success commits the running sandbox and *done (finished as succeeded with `result`)
  // in one transaction; without, the sandbox alone.
  Status BringUp(const std::shared_ptr<Sandbox>& sb, const std::string& digest,
                 const std::string& snapshot, store::OperationRecord* done = nullptr,
                 Json result = {});
  void RunSnapshot(std::shared_ptr<Sandbox> sb, store::OperationRecord op, std::string snap_id);
  void RunFork(std::shared_ptr<Sandbox> sb, store::OperationRecord op,
               std::vector<std::shared_ptr<Sandbox>> children);
  // Takes a storage snapshot of a sandbox's root with its processes frozen for the instant
  // (a runtime that owns its disk takes a full snapshot itself). Caller holds sb->mu.
  Status FrozenSnapshot(Sandbox& sb, const std::string& snap_id);
  // The runtime whose own snapshots hold snapshots of sandboxes of runtime `rt_name`
  // (Capabilities::own_disk), or nullptr when the storage driver holds them.
  runtime::Runtime* SnapshotRuntime(const std::string& rt_name);
  // Snapshot data, wherever it is kept (storage driver or runtime).
  Status DeleteSnapshotData(const std::string& rt_name, const std::string& snap_id);
  // Scheduled snapshots and pruning (reaper).
  void ScheduledSnapshots(const std::shared_ptr<Sandbox>& sb, int64_t now);
  void RunDelete(std::shared_ptr<Sandbox> sb, store::OperationRecord op);
  // pause / resume / suspend / wake (lifecycle.cc). Caller marked sb busy.
  void RunTransition(std::shared_ptr<Sandbox> sb, store::OperationRecord op);
  // Releases every resource of a sandbox and deletes its records. Caller holds sb->mu.
  Status Teardown(Sandbox& sb);

  // Networking (network.cc). Starts the sandbox's instance from `spec`, attaching its
  // network first when its policy asks for one (the attachment is recorded in
  // rec.spec["net"] and its proxy variables in rec.spec["env"]). Caller holds sb->mu.
  Status StartInstance(Sandbox& sb, runtime::Runtime* rt, runtime::InstanceSpec spec);
  // Destroys a sandbox's instance and then its network (idempotent; rt may be null).
  Status DestroyInstance(runtime::Runtime* rt, const std::string& id);
  // After recovery: the data plane for every sandbox whose instance still runs.
  void ReconcileNetwork();
};

}  // namespace space::core
