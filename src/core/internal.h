// core/internal: the in-memory side of Platform, shared by core's .cc files only.
//
// Locking order (never take them the other way round):
//   Impl::mu  ->  Sandbox::mu  ->  Sandbox::cmd_mu  ->  Command::mu
// Agent handlers (on a hub thread, agent_hub.h) take only cmd_mu and Command::mu, so a thread holding
// Sandbox::mu may block on an agent Call().
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <set>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/agent_session.h"
#include "core/core.h"

namespace space::core {

// A started, unclaimed warm-pool sandbox (hidden from users).
bool IsPoolMember(const store::SandboxRecord& rec);

// "sha256:<hex>" -> "<hex>" (what storage names layers by).
inline std::string DigestHex(const std::string& digest) {
  return StartsWith(digest, "sha256:") ? digest.substr(7) : digest;
}
// A sandbox's limits from the "limits" of its spec.
runtime::Limits LimitsFromJson(const Json& j);
// The runtime spec of a sandbox's instance, from its record and root filesystem.
runtime::InstanceSpec InstanceSpecFor(const store::SandboxRecord& rec, const std::string& rootfs);

struct Command {
  std::mutex mu;
  store::CommandRecord rec;
  std::unique_ptr<store::OutputLog> log;
  // Guards (guards.cc), under mu: why output is not being stored ("" = it is), and whether
  // frames were refused since the agent last retransmitted (later ones may start past the
  // log's end until it does).
  std::string held;
  bool refused = false;
  // The command has exited while its output was held by the quota: what its agent still
  // buffers (at most one window per stream) is stored past the quota, so it can end.
  bool exit_pending = false;
  bool drain = false;
  // Its output was deleted after its process ended (DeleteOutput): the rest the agent
  // holds is acknowledged and not stored.
  bool discard = false;
  // Its main process has ended (a HELLO said so) while held by the quota: the sandbox may
  // store up to this many bytes in all so the agent's last window can go in (0 = not set).
  int64_t drain_until = 0;
  bool process_ended = false;  // a HELLO said its main process was reaped
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

  // Output quota (guards.cc). Set by InitGuards when the agent connects; read by the agent
  // session's hub thread, hence atomics.
  std::atomic<int64_t> output_quota{0};    // limits.output_bytes; 0 = unlimited
  std::atomic<int64_t> output_stored{0};   // bytes in the sandbox's output logs
  std::atomic<bool> output_held{false};    // some command's output is held
  std::atomic<int64_t> oom_kills{-1};      // the instance's OOM kill count last seen
  std::atomic<int64_t> probe_due_ms{0};    // when GuardTick next asks a held agent for HELLO
};

struct Platform::Impl {
  Platform* self = nullptr;
  Config config;
  std::unique_ptr<store::Store> store;
  std::unique_ptr<storage::Driver> storage;
  std::atomic<int> creating{0};  // cold creates accepted and not yet finished
  // Creates whose end is committed ahead of its announcement (create.cc, end_early): the
  // operation as it was before (pending), by sandbox id. Readers of the store see these
  // as still creating (Unannounced), so nobody hears of the end before the agent answers.
  std::mutex unannounced_mu;
  std::map<std::string, store::OperationRecord> unannounced;
  void Unannounced(store::SandboxRecord& rec);
  void Unannounced(store::OperationRecord& op);
  PlatformCounters counters;     // metrics.cc
  std::map<std::string, std::unique_ptr<runtime::Runtime>> runtimes;
  std::unique_ptr<net::Network> network;  // null: no networking on this daemon

  std::mutex mu;  // guards sandboxes and pool_members
  std::map<std::string, std::shared_ptr<Sandbox>> sandboxes;
  // Warm pool ("name:tag") -> the ids of its unclaimed members: a claim and a refill look
  // at a pool's few members, not at every sandbox (a walk of all under mu made every
  // create, and every request waiting for mu, slower with each sandbox; issue 17).
  std::map<std::string, std::set<std::string>> pool_members;
  // Into sandboxes (and pool_members, for a pool member); out of both.
  void AddSandbox(const std::shared_ptr<Sandbox>& sb);
  void EraseSandbox(const std::string& id);

  // Operator API keys by hash (access.cc); loaded from the store on first use.
  std::mutex keys_mu;
  bool keys_loaded = false;
  std::map<std::string, store::ApiKeyRecord> keys_by_hash;
  Status LoadKeysLocked();  // caller holds keys_mu

  // Volumes (volumes.cc). Creates that name volumes hold volumes_mu shared from checking
  // them until the sandbox's record is stored; volume create and delete hold it exclusive.
  std::shared_mutex volumes_mu;
  std::string VolumeDir(const std::string& volume_id) const;
  // Checks a create's volume mounts (names, paths, the runtime can bind them) and returns
  // them as stored in the sandbox's spec: [{id, name, path, read_only, host_path}]. Caller
  // holds volumes_mu (shared at least).
  // any_runtime: checks names and paths only (the runtime is not chosen yet).
  Result<Json> ResolveVolumes(const std::vector<VolumeMount>& mounts, runtime::Runtime* rt,
                              bool any_runtime = false);
  // Recovery: finishes interrupted volume creates and deletes, mounts every ready volume.
  void RecoverVolumes();
  // kConflict when the sandbox mounts volumes and its runtime cannot save its memory with
  // them (Capabilities::snapshot_with_volumes): `what` ("snapshotted", "forked",
  // "suspended") is refused before anything starts. Caller holds the sandbox's mutex.
  Status RefuseWithVolumes(const store::SandboxRecord& rec, const std::string& what);

  // Operation workers.
  std::mutex q_mu;
  std::condition_variable q_cv;
  std::deque<std::function<void()>> queue;
  std::vector<std::thread> workers;
  bool stopping = false;

  // Starts a command in a running sandbox whose mu the caller holds (commands.cc).
  Result<CommandInfo> StartCommandLocked(Sandbox& sb, const CommandRequest& req);
  // Starts the template's start command (CMD) in a sandbox whose processes are new, then
  // waits for its readiness check (HEALTHCHECK CMD) to pass; Ok at once if it has none.
  // Caller holds sb.mu and the sandbox is running with its agent connected.
  Status RunStartCommand(Sandbox& sb);

  // Built-in templates (builtin_templates.cc): the operation building each one while it
  // runs, and the lock a build holds for its whole run (one at a time).
  std::mutex builtin_mu;
  std::map<std::string, std::string> builtin_ops;
  std::mutex builtin_run_mu;
  // The error for a create naming a template that is not stored: kNotFound, or, for a
  // built-in, kUnavailable naming the operation just started (or running) to build it.
  Error MissingTemplate(const std::string& name, const std::string& tag);
  // A create's template, fetched through Config::fetch_template when this node lacks it
  // (transfer.cc). Ok also when it is here, a built-in, or no node has it (the
  // create then says what is missing).
  Status FetchMissingTemplate(const CreateSandboxRequest& req);

  // Memory returned after deletes (issue 17): a sandbox's teardown frees many small blocks
  // that glibc keeps in its arenas; ReapOnce hands them back to the kernel (malloc_trim)
  // once deletes pause for a second, or every 10 s while they go on.
  std::atomic<int64_t> last_delete_ms{0};  // 0: nothing freed since the last trim
  int64_t last_trim_ms = 0;                // reaper thread only
  void TrimAfterDeletes(int64_t now_ms);

  // Resource guards (guards.cc).
  std::atomic<bool> disk_low{false};      // the data dir's free space is below the reserve
  std::atomic<int64_t> disk_free{0};      // bytes free there at the last look
  std::atomic<int64_t> disk_reserve{0};
  // Output that may still be stored before the reserve is reached, as of the last look,
  // and output stored since that look: StoreOutput looks again when the one runs out or
  // the other passes kDiskRecheckBytes, so a flood stops at the reserve, not at a full disk.
  std::atomic<int64_t> disk_budget{0};
  std::atomic<int64_t> disk_since_look{0};
  std::mutex admit_mu;                    // memory admission: check and commit as one
  // The memory each stored sandbox commits (guards.cc), kept beside the store so that
  // admission adds up a total instead of reading every record (60 ms at 5,000; issue 17):
  // filled from the store on first use, then updated after each write of a record.
  std::mutex commit_mu;
  bool commit_loaded = false;
  std::map<std::string, int64_t> commit_by_id;
  int64_t committed_total = 0;
  // After `rec` was written to the store / after its record was deleted.
  void NoteCommit(const store::SandboxRecord& rec);
  void ForgetCommit(const std::string& id);
  // Sets a sandbox's quota and counts its stored output. Caller holds sb.mu, before the
  // agent session exists (ConnectAgent).
  void InitGuards(Sandbox& sb);
  // Appends output within the quota and the host reserve; holds the command (and returns
  // the durable size, so the agent is not credited) when either is reached. Caller holds
  // cmd.mu.
  // Consumes what it stores from `bytes` (the session drops the rest).
  Result<uint64_t> StoreOutput(Sandbox& sb, Command& cmd, store::OutputStream s, uint64_t offset,
                               store::OutputBytes& bytes);
  // kResourceExhausted while an exiting command still has output held (the exit is then
  // left unacknowledged; the agent sends it again after the output). Caller holds cmd.mu.
  Status ExitComplete(Command& cmd, const Json& exit);
  // True if the instance's OOM killer struck since the last look (a SIGKILLed command's
  // exit then reports reason "oom_killed").
  bool OomKilled(Sandbox& sb);
  // The exit of `cmd` could not be recorded: on a full disk it is left unacknowledged
  // (kResourceExhausted) and the agent sends it again once there is room; other errors
  // are returned as they are.
  Status DeferExit(Sandbox& sb, Command& cmd, const Error& why);
  // A HELLO of a sandbox's agent (guards.cc): held commands whose main process has ended
  // may store their last window past the quota.
  void NoteHello(Sandbox& sb, const Json& hello);
  // Looks at the data dir's free space; true if below the reserve.
  bool RefreshDisk();
  // kInsufficientStorage (507) naming what is full when the host reserve is reached.
  Status AdmitDisk(const std::string& what);
  // Memory admission of `count` sandboxes with this memory limit: the returned lock is
  // held until their records are stored.
  Result<std::unique_lock<std::mutex>> AdmitMemory(int64_t memory_bytes, int count);
  // Reaper: refreshes the disk state, releases held output where there is room again,
  // applies output retention.
  void GuardTick();
  std::atomic<int64_t> retention_due_ms{0};

  // Crash-test hook (Config::crash_point): exits the process at once when `point` matches.
  void CrashPoint(const char* point) const;
  // Failure-test hook (Config::fail_point): an error when `point` matches.
  Status FailPoint(const char* point) const;
  // Pause-test hook (Config::pause_point): waits Config::pause_ms when `point` matches.
  void PausePoint(const char* point) const;

  void Enqueue(std::function<void()> job);
  void WorkerLoop();

  // Timeouts: a reaper thread applies each expired sandbox's on_timeout action.
  std::thread reaper;
  std::condition_variable reaper_cv;  // separate from q_cv: a notify_one must reach a worker
  void ReaperLoop();
  void ReapOnce();

  std::shared_ptr<Sandbox> Find(const std::string& id);
  // A sandbox's record for a reader, who never waits for an operation: the live one, or,
  // while an operation holds the sandbox, the one last committed (as Unannounced shows it).
  Result<store::SandboxRecord> ReadRecord(Sandbox& sb, const std::string& id);
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
  // `recorded` turns true once CreateSandbox has committed the sandbox's record, false if
  // that failed: the root filesystem is made meanwhile (see CreateSandbox).
  void RunCreate(std::shared_ptr<Sandbox> sb, store::OperationRecord op, std::string digest,
                 std::string snapshot, std::shared_future<bool> recorded);
  // A new sandbox's root filesystem, from the template layer `digest` or the snapshot.
  Result<std::string> MakeRoot(const store::SandboxRecord& rec, const std::string& digest,
                               const std::string& snapshot);
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
  // `root`: made already by MakeRoot (or its error), for runtimes without their own disk.
  // `recorded`: whether CreateSandbox stored the sandbox's record, if it may still be
  // storing it; BringUp starts the instance meanwhile and waits before it changes sb->rec.
  // Not stored: everything made is released, nothing is saved, and *unrecorded is set.
  Status BringUp(const std::shared_ptr<Sandbox>& sb, const std::string& digest,
                 const std::string& snapshot, store::OperationRecord* done = nullptr,
                 Json result = {}, std::optional<Result<std::string>> root = std::nullopt,
                 const std::shared_future<bool>* recorded = nullptr, bool* unrecorded = nullptr);
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
  // Wakes a suspended instance whose runtime kept its processes (microvm): its network
  // stayed attached while it slept (re-made if spaced lost it) and the guest is told its
  // address again. Caller holds sb->mu.
  Status WakeInstance(Sandbox& sb, runtime::Runtime* rt, runtime::InstanceSpec spec);
  // Destroys a sandbox's instance and then its network (idempotent; rt may be null).
  Status DestroyInstance(runtime::Runtime* rt, const std::string& id);
  // After recovery: the data plane for every sandbox whose instance still runs.
  void ReconcileNetwork();
};

}  // namespace space::core
