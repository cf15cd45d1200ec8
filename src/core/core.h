// core: the sandbox platform itself — sandboxes, command sessions, operations, templates.
//
// Platform owns the store, the storage driver and the runtimes handed to it, one
// AgentSession per live sandbox, and a small pool of worker threads that execute
// operations. Every public method is thread-safe and *blocking* (it may talk to an agent
// or the store); callers on an event loop run them on a blocking pool. Long waits are not
// done here: callers Watch() a key and re-check when notified.
//
// State that matters lives in the store: a sandbox's row is written before any runtime
// resource exists and removed only after they are all gone, so Recover() can always
// finish or roll back what a killed daemon left behind.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/common.h"
#include "common/json.h"
#include "core/metrics.h"
#include "core/template_build.h"
#include "net/net.h"
#include "runtime/runtime.h"
#include "store/store.h"
#include "storage/storage.h"

namespace space::core {

// Largest piece of a file moved in one agent round trip (ReadFileChunk/WriteFileChunk).
inline constexpr size_t kFileChunkBytes = 2u << 20;

// Operator keys a cluster's nodes share (docs/cluster.md), given by spaced --role node:
// keys made on a node are the cluster's, valid on every node; the keys of the node's own
// store (its --api-key-file) stay its own. Thread-safe. Errors: kUnavailable when the
// shared state is out of reach, kConflict for a name taken.
class SharedKeys {
 public:
  virtual ~SharedKeys() = default;
  [[nodiscard]] virtual Status Add(const store::ApiKeyRecord& rec) = 0;
  [[nodiscard]] virtual Result<std::vector<store::ApiKeyRecord>> List() = 0;
  [[nodiscard]] virtual Result<std::optional<store::ApiKeyRecord>> FindByHash(const std::string& hash) = 0;
  [[nodiscard]] virtual Status Remove(const store::ApiKeyRecord& rec) = 0;
};

struct Config {
  std::string data_dir;                      // absolute
  std::string default_runtime = "oci";
  std::string default_template = "base:latest";
  int64_t max_file_bytes = 1ll << 30;        // largest file write accepted
  int64_t agent_connect_timeout_ms = 15000;  // create: runtime started -> agent HELLO
  int64_t agent_request_timeout_ms = 30000;
  int worker_threads = 4;
  uint32_t uid_shift = 1000000;              // template files are owned by root + shift
  int64_t default_timeout_s = 300;           // sandbox lifetime unless asked otherwise
  int64_t reaper_interval_ms = 500;          // how often timeouts are checked
  // Warm pools: template ref ("base:latest") -> number of started, idle sandboxes kept
  // ready. A create that asks for nothing a started instance cannot take on claims one.
  std::map<std::string, int> warm_pools;
  // Creations in progress at once (warm claims aside); beyond it CreateSandbox fails with
  // kResourceExhausted (HTTP 429) instead of queueing without bound. 0 = no limit.
  int max_creating = 32;
  // Test hook: the daemon exits abruptly (like SIGKILL) when it reaches this named point
  // of an operation ("snapshot.frozen", "fork.parent_snapshot", "suspend.stopping", ...).
  std::string crash_point;
  // Test hook: the operation fails with an internal error at this named point
  // ("create.connect": a create whose agent never answered).
  std::string fail_point;
  // Test hook: the operation waits pause_ms at this named point and goes on
  // ("create.connect": a create between its end's commit and its agent's answer).
  std::string pause_point;
  int pause_ms = 2000;
  // Resource guards (guards.cc; docs/api.md "Resource guards").
  int64_t max_output_bytes = 2ll << 30;     // limits.output_bytes unless asked; 0 = unlimited
  int64_t default_disk_bytes = 10ll << 30;  // limits.disk_bytes unless asked; 0 = unlimited
  int64_t min_free_bytes = -1;              // host reserve of the data dir; -1 = max(2 GiB, 5 %)
  int64_t max_memory_commit = -1;           // sum of memory limits; -1 = RAM x 1.5, 0 = no limit
  // Finished commands' output is deleted once older than this (0 = kept) or, oldest first,
  // while a sandbox's stored output exceeds the byte budget (0 = no budget).
  int64_t output_retention_s = 0;
  int64_t output_retention_bytes = 0;
  // Built-in templates (builtin_templates.cc): the directory of the Spacefiles that ship with
  // SPACE (one subdirectory per template; "" = none), and the cache of built ones shared by
  // data dirs ("" = no cache).
  std::string builtin_templates_dir;
  std::string template_cache_dir = "/var/cache/space/templates";
  // Cluster membership (docs/cluster.md); unset on a single machine. admit_sandbox runs
  // before a sandbox's id reaches a client (a create, a warm hand-out, each child of a
  // fork), never with the platform's own lock held: an error refuses that sandbox (kUnavailable
  // when this node is cut off from the cluster, kConflict when the id is routed to
  // another node). sandbox_gone runs once a sandbox's record is removed.
  std::function<Status(const store::SandboxRecord&)> admit_sandbox;
  std::function<void(const std::string& id)> sandbox_gone;
  // A template a create names that this node lacks (and that is no built-in): fetched from
  // elsewhere in the cluster, by "name:tag" or "sha256:<hex>", and imported
  // (ImportTemplate) before it returns Ok; kNotFound when no node has it. Runs on the
  // caller's thread, with no lock of the platform's held. Unset on a single machine.
  std::function<Status(const std::string& ref)> fetch_template;
  // The same for a snapshot a restore names that this node lacks (ImportSnapshot).
  std::function<Status(const std::string& snapshot_id)> fetch_snapshot;
  // The cluster's shared operator keys (unset: every key is this node's own).
  std::shared_ptr<SharedKeys> shared_keys;
};

// Keys for Watch(): "op:<id>", "cmd:<sandbox>:<command>", "sb:<id>".
class Notifier {
 public:
  using Callback = std::function<void()>;
  // The callback runs (on some thread, possibly right away) once after the next
  // Notify(key). Returns a handle that cancels it when destroyed.
  std::shared_ptr<void> Watch(const std::string& key, Callback cb);
  void Notify(const std::string& key);
  // Every Notify(key) from now on, any key, until the handle is destroyed (GET /v1/events).
  // The callback runs on the notifying thread, often with core locks held: it must only
  // note the key and hand it elsewhere, never call back into the platform.
  using KeyCallback = std::function<void(const std::string& key)>;
  std::shared_ptr<void> Subscribe(KeyCallback cb);

 private:
  struct Entry;
  struct Subscriber;
  std::mutex mu_;
  std::multimap<std::string, std::shared_ptr<Entry>> entries_;
  std::vector<std::shared_ptr<Subscriber>> subscribers_;
};

// A named volume mounted into a sandbox at create (docs/volumes.md).
struct VolumeMount {
  std::string volume;      // the volume's name or id
  std::string path;        // absolute path inside the sandbox
  bool read_only = false;
};

struct CreateSandboxRequest {
  std::string id;                    // "" = a new one; else this id, unused (a cluster's pick)
  std::string template_ref;          // "" = default
  std::string snapshot_id;           // or start from this snapshot (template ignored)
  std::string runtime;               // "" = default
  runtime::Limits limits;
  int64_t output_bytes = -1;         // limits.output_bytes; -1 = Config::max_output_bytes
  std::map<std::string, std::string> env;
  std::map<std::string, std::string> metadata;
  Json network;                      // the API's `network` field as given (null = none)
  int64_t timeout_s = -1;            // -1 = Config::default_timeout_s; 0 = none
  std::string on_timeout;            // delete (default) | pause | suspend
  // Traffic to one of its port URLs resumes the sandbox when it is paused (in memory; a
  // suspended one waits for an explicit wake), as E2B's autoResume.
  bool auto_resume = false;
  int64_t idle_timeout_s = 0;        // 0 = none
  int64_t snapshot_every_s = 0;      // scheduled snapshots; 0 = none
  int64_t keep_last = 0;             // prune scheduled snapshots beyond this many; 0 = keep all
  // Named volumes; a create from a snapshot without any mounts the snapshot's sandbox's.
  std::vector<VolumeMount> volumes;
};

struct SandboxFilter {
  std::map<std::string, std::string> labels;   // all must match
  std::string state;                           // "" = any
};

struct CommandRequest {
  std::vector<std::string> argv;     // either argv ...
  std::string shell;                 // ... or a shell string
  std::map<std::string, std::string> env;
  std::string cwd;
  std::string user;
  bool stdin = false;
  int64_t timeout_ms = 0;
  // Run on a new pseudo-terminal of this size (1..4096 each): stdin, stdout and stderr are
  // the terminal, all output is on stdout, stdin is always open (WriteStdin; its eof is ^D).
  struct PtySize {
    int cols = 80;
    int rows = 24;
  };
  std::optional<PtySize> pty;
};

// A command's durable record plus its live output sizes.
struct CommandInfo {
  store::CommandRecord record;
  uint64_t stdout_size = 0;
  uint64_t stderr_size = 0;
  bool ended() const { return record.state != "running" && record.state != "starting"; }
};

struct FileEntry {
  Json json;   // as in docs/agent-protocol.md (ENTRY)
};

// Extended attributes a file write sets (docs/agent-protocol.md, "write"): names in the
// user namespace ("user.…"), values of at most 4 KiB; every attribute under `prefix` that
// `set` lacks is removed, so a rewrite leaves none of the old ones behind.
struct FileAttrs {
  std::string prefix;
  std::map<std::string, std::string> set;
};

class Platform {
 public:
  [[nodiscard]] static Result<std::unique_ptr<Platform>> Create(
      Config config, std::unique_ptr<store::Store> store, std::unique_ptr<storage::Driver> storage,
      std::map<std::string, std::unique_ptr<runtime::Runtime>> runtimes,
      std::unique_ptr<net::Network> network = nullptr);
  ~Platform();

  // Builds the built-in `base:latest` template (busybox) if it is missing.
  [[nodiscard]] Status EnsureBaseTemplate(const std::string& busybox_path);
  // Starts filling the warm pools in the background (call after Recover()).
  void FillPools();
  // Reconciles the store with what is really running: reattaches agents, finishes or
  // rolls back interrupted operations, removes orphans. Call once, before serving.
  [[nodiscard]] Status Recover();
  // Stops worker threads and agent sessions; sandboxes keep running.
  void Shutdown();

  Notifier& notifier() { return notifier_; }
  const Config& config() const { return config_; }

  // Sandboxes. Create and Delete return the operation (already queued).
  [[nodiscard]] Result<std::pair<store::OperationRecord, store::SandboxRecord>> CreateSandbox(
      const CreateSandboxRequest& req);
  [[nodiscard]] Result<std::vector<store::SandboxRecord>> ListSandboxes(const SandboxFilter& f);
  [[nodiscard]] Result<store::SandboxRecord> GetSandbox(const std::string& id);
  [[nodiscard]] Result<store::OperationRecord> DeleteSandbox(const std::string& id);
  // Lifecycle transitions, each an operation: "pause" (running -> paused, processes
  // frozen), "resume" (paused -> running), "suspend" (running|paused -> suspended: the
  // filesystem stays on disk, processes are stopped — see Capabilities), "wake"
  // (suspended -> running). kConflict for an illegal transition or while another
  // operation on the sandbox is in progress.
  [[nodiscard]] Result<store::OperationRecord> Transition(const std::string& id,
                                                          const std::string& kind);
  // Sets a sandbox's timeout: it expires `timeout_s` from now (0 = never), then
  // `on_timeout` ("" keeps the current action) is applied.
  [[nodiscard]] Result<store::SandboxRecord> SetTimeout(const std::string& id, int64_t timeout_s,
                                                        const std::string& on_timeout);
  // Snapshots. Taking one is an operation (result {"snapshot_id"}); the sandbox is frozen
  // for the instant the snapshot is taken. A snapshot outlives its sandbox.
  [[nodiscard]] Result<store::OperationRecord> SnapshotSandbox(const std::string& id);
  [[nodiscard]] Result<std::vector<store::SnapshotRecord>> ListSnapshots(const std::string& sandbox_id);
  [[nodiscard]] Result<store::SnapshotRecord> GetSnapshot(const std::string& snapshot_id);
  [[nodiscard]] Status DeleteSnapshot(const std::string& snapshot_id);
  // Forks a running (or paused) sandbox into `count` new ones from its current state. The
  // new sandboxes exist (state creating) when this returns; each succeeds or fails on its
  // own; the operation's result lists them.
  [[nodiscard]] Result<std::pair<store::OperationRecord, std::vector<store::SandboxRecord>>> Fork(
      const std::string& id, int count);
  // Deletes a sandbox and, when asked, its snapshots.
  [[nodiscard]] Result<store::OperationRecord> DeleteSandbox(const std::string& id,
                                                             bool delete_snapshots);
  // Networking (network.cc). The policy ({mode, allow_out, deny_out, public_traffic,
  // secrets: names and hosts only}), the sandbox's addresses and its recent egress
  // decisions.
  [[nodiscard]] Result<Json> GetNetwork(const std::string& id);
  // Replaces the egress part of a running (or paused) sandbox's policy ({mode, allow_out,
  // deny_out}); new flows follow it at once and flows it refuses are cut. kInvalidArgument
  // for a bad policy (nothing changes), kConflict for a sandbox in another state or
  // without networking (mode none at create), kUnavailable when spaced has none.
  [[nodiscard]] Result<Json> SetNetwork(const std::string& id, const Json& body);
  // The parsed policy stored in a sandbox record (mode none for records without one).
  static net::Policy StoredPolicy(const store::SandboxRecord& rec);
  // Every runtime, built-in and plugin, in name order: {name, kind, default, available,
  // why_not (when not), capabilities, limitations, path (plugins)}; GET /v1/runtimes.
  [[nodiscard]] Json ListRuntimes() const;
  // What a sandbox's runtime (its record's) can keep across pause/suspend/snapshot. Takes
  // no lock: a read of a sandbox does not wait for an operation holding it.
  [[nodiscard]] Result<runtime::Capabilities> CapabilitiesOf(const store::SandboxRecord& rec) const;
  // A path to a running sandbox's network namespace on the host, for ingress (docs/ports.md;
  // see Runtime::NetNamespacePath for why callers re-check after opening it). kNotFound;
  // kConflict when the sandbox is not running (paused, suspended, creating...);
  // kUnavailable when its runtime has none on the host (microvm).
  [[nodiscard]] Result<std::string> SandboxNetNamespace(const std::string& id);
  // For a runtime whose guest loopback the host cannot enter (microvm, gvisor): asks the
  // sandbox's agent for a relay listening on the sandbox's own `address` that joins each
  // connection to loopback `port` inside; returns the relay's port on `address`.
  // kNotFound when nothing listens on that loopback port, kConflict when not running.
  [[nodiscard]] Result<int> ForwardLoopbackPort(const std::string& id, int port,
                                                const std::string& address);

  // Operations.
  [[nodiscard]] Result<store::OperationRecord> GetOperation(const std::string& id);
  [[nodiscard]] Result<std::vector<store::OperationRecord>> ListOperations(size_t limit,
                                                                         const std::string& state);
  [[nodiscard]] Result<std::vector<store::TemplateRecord>> ListTemplates();
  // Template tags (template_tags.cc): gives the build `target` ("name:tag" or
  // "sha256:<hex>") the further name `name_tag` (a name:tag naming another build moves to
  // this one). kNotFound for an unknown target, kInvalidArgument for a bad reference.
  [[nodiscard]] Result<store::TemplateRecord> TagTemplate(const std::string& target,
                                                          const std::string& name_tag);
  // Removes the name `name_tag` (kNotFound when there is none). The build stays, for the
  // sandboxes, snapshots and other names that use it.
  [[nodiscard]] Status UntagTemplate(const std::string& name_tag);
  // Template builds (template_build.cc). Validates the request synchronously (name:tag,
  // exactly one source, the spec's syntax — errors name the line —, that FROM exists,
  // host paths absolute and present), then queues an operation of kind "template_build"
  // with target "name:tag". Its result shows progress ({"step","steps","log_tail"}) while
  // it runs and {"template","digest"} once done.
  [[nodiscard]] Result<store::OperationRecord> BuildTemplate(const TemplateBuildRequest& req);
  // Built-in templates (builtin_templates.cc): "debian:bookworm" and one "NAME:latest" per
  // Spacefile shipped in Config::builtin_templates_dir.
  std::vector<std::string> BuiltinTemplateNames() const;
  // Starts the build of a built-in template and of what it is FROM (each imported from the
  // shared cache when it holds the same recipe, else built and saved there), or returns the
  // operation already building it. Builds run one at a time. Ok at once (an operation that
  // finds everything up to date) when nothing changed. `echo`: the build log's lines also go
  // to spaced's log. kNotFound if `ref` is not a built-in.
  [[nodiscard]] Result<store::OperationRecord> EnsureBuiltinTemplate(const std::string& ref,
                                                                     bool echo = false);
  // Templates and snapshots between a cluster's nodes (transfer.cc, docs/cluster.md).
  struct ArchiveFile {
    std::string path;    // a zstd tar of the tree (unshifted owners) under DATA/tmp: the
                         // caller removes it
    std::string sha256;  // hex, of that file
    int64_t size = 0;
  };
  struct TemplateArchive : ArchiveFile {
    store::TemplateRecord record;
  };
  // `ref`: "name:tag" or "sha256:<hex>". kNotFound when this node has no such template.
  [[nodiscard]] Result<TemplateArchive> ExportTemplate(const std::string& ref);
  // Stores a template another node exported: checks the archive's sha256 (kInvalidArgument
  // when it differs), unpacks it as the layer `record.digest` unless that layer is here
  // already, and records the template (kConflict when name:tag here is another build).
  [[nodiscard]] Status ImportTemplate(const store::TemplateRecord& record,
                                      const std::string& archive_path, const std::string& sha256);
  // The same for a ready filesystem snapshot (a full one, with memory, restores only where
  // it was taken: kConflict). Import stores it under the same id.
  struct SnapshotArchive : ArchiveFile {
    store::SnapshotRecord record;
  };
  [[nodiscard]] Result<SnapshotArchive> ExportSnapshot(const std::string& id);
  [[nodiscard]] Status ImportSnapshot(const store::SnapshotRecord& record,
                                      const std::string& archive_path, const std::string& sha256);
  // The full build log of a template build operation; kNotFound if there is none.
  [[nodiscard]] Result<std::string> TemplateBuildLog(const std::string& op_id);

  // Commands.
  [[nodiscard]] Result<CommandInfo> StartCommand(const std::string& sandbox_id,
                                                 const CommandRequest& req);
  [[nodiscard]] Result<CommandInfo> GetCommand(const std::string& sandbox_id, const std::string& cid);
  [[nodiscard]] Result<std::vector<CommandInfo>> ListCommands(const std::string& sandbox_id);
  // Reads up to `max` stored bytes of a stream at `offset` (never waits).
  [[nodiscard]] Result<std::string> ReadOutput(const std::string& sandbox_id, const std::string& cid,
                                               store::OutputStream s, uint64_t offset, size_t max);
  // A reader over a command's stored output that keeps its files open (for streams).
  [[nodiscard]] Result<std::unique_ptr<store::OutputReader>> OpenOutput(const std::string& sandbox_id,
                                                                        const std::string& cid);
  [[nodiscard]] Status WriteStdin(const std::string& sandbox_id, const std::string& cid,
                                  std::string_view bytes, bool eof);
  [[nodiscard]] Status Signal(const std::string& sandbox_id, const std::string& cid, int signal);
  // Sets the terminal size of a pty command (its programs get SIGWINCH). kInvalidArgument
  // for a command without a pty or a bad size, kConflict once it has ended.
  [[nodiscard]] Status ResizeCommand(const std::string& sandbox_id, const std::string& cid,
                                     int cols, int rows);
  // Deletes a finished command's stored output (kConflict while it runs); its space counts
  // against the sandbox's output quota no more (guards.cc).
  [[nodiscard]] Status DeleteOutput(const std::string& sandbox_id, const std::string& cid);
  // Changes a sandbox's limits in place; only "output_bytes" can change on a live sandbox
  // (kInvalidArgument for the others). Output held at the old quota goes on (guards.cc).
  [[nodiscard]] Result<store::SandboxRecord> SetLimits(const std::string& id, const Json& limits);

  // Files (paths absolute inside the sandbox). With `xattr_prefix` (e.g. "user.e2b."),
  // entries carry "xattrs": {name: value} of their extended attributes under it (E2B's
  // file metadata), when they have any.
  [[nodiscard]] Result<Json> StatFile(const std::string& sandbox_id, const std::string& path,
                                      const std::string& xattr_prefix = "");
  [[nodiscard]] Result<Json> ListFiles(const std::string& sandbox_id, const std::string& path,
                                       int depth, const std::string& xattr_prefix = "");
  // Reads a chunk; sets *eof and *size (file size).
  [[nodiscard]] Result<std::string> ReadFileChunk(const std::string& sandbox_id,
                                                  const std::string& path, uint64_t offset,
                                                  size_t length, bool* eof, uint64_t* size);
  // With `user` (a name or uid of the sandbox's /etc/passwd), what the write or mkdir
  // creates belongs to that user and their primary group; else to the agent (root).
  // With `attrs`, the first piece (offset 0) also sets the file's extended attributes.
  [[nodiscard]] Status WriteFileChunk(const std::string& sandbox_id, const std::string& path,
                                      uint64_t offset, std::string_view bytes, bool truncate,
                                      int mode, const std::string& user = "",
                                      const FileAttrs* attrs = nullptr);
  [[nodiscard]] Status MakeDir(const std::string& sandbox_id, const std::string& path,
                               const std::string& user = "");
  [[nodiscard]] Status RemoveFile(const std::string& sandbox_id, const std::string& path,
                                  bool recursive);
  [[nodiscard]] Status RenameFile(const std::string& sandbox_id, const std::string& from,
                                  const std::string& to);

  // Metrics (metrics.cc). The platform's figures now; never waits on a sandbox's lock.
  [[nodiscard]] PlatformMetrics Metrics();
  // One sandbox's resource use now (kNotFound; kConflict when it has no instance, e.g.
  // creating or deleted); UsageOfAll: every user sandbox with an instance.
  [[nodiscard]] Result<SandboxUsage> Usage(const std::string& id);
  [[nodiscard]] std::vector<SandboxUsage> UsageOfAll();

  // Named volumes (volumes.cc, docs/volumes.md): an ext4 filesystem of `size_bytes` each
  // (its quota), loop-mounted under DATA/volumes/<id>/, bound into the sandboxes that name
  // it at create. CreateVolume: kInvalidArgument for a bad name or size, kConflict when
  // the name is taken; size_bytes <= 0 = the default (1 GiB). Blocks (mkfs, mount).
  [[nodiscard]] Result<store::VolumeRecord> CreateVolume(const std::string& name, int64_t size_bytes);
  [[nodiscard]] Result<std::vector<store::VolumeRecord>> ListVolumes();
  [[nodiscard]] Result<store::VolumeRecord> GetVolume(const std::string& id_or_name);
  // What CreateSandbox checks of its volume mounts (paths, overlaps, volumes that exist),
  // for callers that must answer a bad mount before a long wait (a template's import).
  [[nodiscard]] Status CheckVolumeMounts(const std::vector<VolumeMount>& mounts);
  // The volume's usage {used_bytes, size_bytes, sandboxes: [ids of sandboxes naming it]}.
  [[nodiscard]] Result<Json> VolumeUsage(const std::string& id_or_name);
  // kConflict (naming them) while sandboxes other than failed ones name the volume.
  [[nodiscard]] Status DeleteVolume(const std::string& id_or_name);
  // One file operation on a volume without a sandbox: `op` and `req` as the agent
  // protocol's file ops (stat, list, read, write, mkdir, remove, rename; paths absolute
  // in the volume, resolved by the kernel inside it: neither ".." nor symlinks leave it).
  // Runs with the filesystem identity of the sandboxes' root (files it makes belong to
  // root inside them). Returns the reply JSON (uids and gids as sandboxes see them) and,
  // for read, the bytes.
  [[nodiscard]] Result<std::pair<Json, std::string>> VolumeFileOp(const std::string& id_or_name,
                                                                  const std::string& op,
                                                                  const Json& req,
                                                                  std::string_view body = {});

  // Operator API keys (access.cc). The platform keeps every key's hash in memory as well
  // as in the store, so FindApiKey never waits on the database. Keys are shown once:
  // CreateApiKey returns the key itself, nothing else ever does. On a cluster's node
  // (Config::shared_keys), keys made here are the cluster's, listed beside the node's own
  // (scope "cluster" and "node"), and a node's own key cannot be deleted through the API
  // (every node has it: its --api-key-file is changed on each node).
  struct CreatedApiKey {
    store::ApiKeyRecord record;
    std::string key;
  };
  // kInvalidArgument for a bad name ([A-Za-z0-9._-]{1,64}, not starting with "key-"),
  // kConflict when the name is taken. `e2b`: the key in E2B's shape (auth::NewApiKey).
  [[nodiscard]] Result<CreatedApiKey> CreateApiKey(const std::string& name, bool e2b = false);
  [[nodiscard]] Result<std::vector<store::ApiKeyRecord>> ListApiKeys();
  // Revokes the key with this id or name; returns it. kNotFound; kConflict when it is the
  // last key (spaced would be unreachable until its bootstrap key is regenerated).
  [[nodiscard]] Result<store::ApiKeyRecord> DeleteApiKey(const std::string& id_or_name);
  // Makes `key` (the bootstrap key file's content) an operator key named `name`, unless
  // this very key was imported before and has since been revoked — a revocation sticks
  // (returns kPermissionDenied then). A changed file replaces the key of that name.
  [[nodiscard]] Status ImportApiKey(const std::string& name, const std::string& key);
  // The key record whose hash matches `key`; nullopt if none. Thread-safe, never blocks on
  // the store (after the first call, which loads the keys).
  std::optional<store::ApiKeyRecord> FindApiKey(std::string_view key);
  // The same by the key's hash (auth::HashApiKey): what a console session remembers.
  std::optional<store::ApiKeyRecord> FindApiKeyByHash(const std::string& hash);

  // Implementation types (defined in core's .cc files).
  struct Sandbox;
  struct Impl;

 private:
  explicit Platform(Config config);
  Config config_;
  Notifier notifier_;          // before impl_: sessions notify until they are gone
  std::unique_ptr<Impl> impl_;
};

// Validates an absolute sandbox path: non-empty, starts with '/', no NUL, <= 4096 bytes.
[[nodiscard]] Status ValidateSandboxPath(const std::string& path);

}  // namespace space::core
