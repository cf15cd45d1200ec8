// store: SPACE's durable state — SQLite records and per-command output logs.
//
// Store wraps one SQLite database (WAL, synchronous=FULL, foreign keys on) holding
// sandboxes, commands, operations, templates and settings. Every Put is durable when it
// returns. Thread-safe: one connection guarded by a mutex (SQLite work here is tiny).
//
// OutputLog is the append-only record of one command's output: one file per stream
// (`<dir>/<command>.stdout`, `.stderr`). Append() is idempotent with respect to offsets
// (re-sent bytes are skipped), which is what makes the agent's retransmission after a
// daemon restart safe. Not thread-safe: one writer (the sandbox's agent reader) and any
// number of readers that open the files themselves (ReadOutput()).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/common.h"
#include "common/json.h"
#include "sys/sys.h"

struct sqlite3;

namespace space::store {

struct SandboxRecord {
  std::string id;
  std::string template_ref;      // as asked, e.g. "base:latest"
  std::string template_digest;   // resolved
  std::string runtime;           // "oci", "microvm"
  std::string state;             // creating|running|paused|suspended|deleting|deleted|error
  std::string reason;            // for error (and other states when useful)
  Json spec = Json::object();    // limits, env, network, workdir, user, timeout...
  Json metadata = Json::object();  // user labels, string -> string
  uint32_t next_stream = 1;      // next agent stream id to hand out
  int64_t created_ms = 0;
  int64_t updated_ms = 0;
};

struct CommandRecord {
  std::string id;                // "cmd-..."
  std::string sandbox_id;
  uint32_t stream = 0;           // agent stream id
  Json spec = Json::object();    // argv/shell, env, cwd, user, stdin, timeout_ms
  std::string state;             // starting|running|exited|failed|lost
  std::optional<int> exit_code;
  std::optional<int> signal;
  bool timed_out = false;
  std::string reason;            // for failed/lost
  int64_t pid = 0;
  int64_t started_ms = 0;
  int64_t ended_ms = 0;
};

struct OperationRecord {
  std::string id;                // "op-..."
  std::string kind;              // create|delete|pause|...
  std::string target;            // sandbox id (or template ref)
  std::string state;             // pending|running|succeeded|failed
  Json request = Json::object(); // what was asked (for finishing after a restart)
  Json result = Json::object();
  std::string error_code;        // ErrcName when failed
  std::string error_message;
  int64_t created_ms = 0;
  int64_t updated_ms = 0;
};

struct TemplateRecord {
  std::string name;              // "base"
  std::string tag;               // "latest"
  std::string digest;            // "sha256:<hex>"
  Json config = Json::object();  // env, workdir, user
  int64_t created_ms = 0;
};

struct SnapshotRecord {
  std::string id;                // "snap-..."
  std::string sandbox_id;        // the sandbox it was taken from (may be deleted since)
  std::string kind;              // "filesystem" | "full"
  std::string state;             // creating|ready|deleting
  Json source = Json::object();  // what a sandbox created from it inherits: template, runtime, spec
  int64_t size = 0;              // bytes, when known
  int64_t created_ms = 0;
};

// An operator API key. Only its hash is stored; the key itself is shown once, at creation.
struct ApiKeyRecord {
  std::string id;                // "key-..."
  std::string name;              // unique, [A-Za-z0-9._-]{1,64}
  std::string hash;              // auth::HashApiKey(key), unique
  std::string hint;              // the key's first characters, for listings
  int64_t created_ms = 0;
  std::string scope;             // not stored: "" on a single machine, else "node"/"cluster"
};

// A named volume (docs/volumes.md): an ext4 image of size_bytes under DATA/volumes/<id>/.
struct VolumeRecord {
  std::string id;                // "vol-..."
  std::string name;              // unique, [a-z0-9][a-z0-9._-]{0,62}
  int64_t size_bytes = 0;        // the quota: the filesystem's size
  std::string state;             // creating|ready|deleting
  int64_t created_ms = 0;
};

class Store {
 public:
  // Opens (creating if needed) the database at `path` and applies migrations.
  [[nodiscard]] static Result<std::unique_ptr<Store>> Open(const std::string& path);
  ~Store();

  // Hands SQLite's unused page cache back to the allocator (sqlite3_db_release_memory),
  // e.g. after many deletes: those pages sit between other objects on the heap and keep
  // it from shrinking. The cache refills as the database is read again.
  void ReleaseMemory();

  // Insert or update (an upsert: an update never touches the sandbox's commands).
  // next_stream never moves backwards: a stale record cannot re-issue a stream id.
  [[nodiscard]] Status PutSandbox(const SandboxRecord& r);
  // A sandbox and an operation in one transaction (one fsync): the create path's records.
  [[nodiscard]] Status PutSandboxAndOperation(const SandboxRecord& sb, const OperationRecord& op);
  [[nodiscard]] Result<SandboxRecord> GetSandbox(const std::string& id);   // kNotFound
  [[nodiscard]] Result<std::vector<SandboxRecord>> ListSandboxes();        // by created_ms
  [[nodiscard]] Status DeleteSandbox(const std::string& id);        // also its commands; ok if missing
  // Atomically returns next_stream and increments it.
  [[nodiscard]] Result<uint32_t> AllocateStream(const std::string& sandbox_id);

  // Insert or update; kConflict when r.sandbox_id names no sandbox (foreign key).
  [[nodiscard]] Status PutCommand(const CommandRecord& r);
  [[nodiscard]] Result<CommandRecord> GetCommand(const std::string& sandbox_id, const std::string& id);
  // In stream order (= creation order).
  [[nodiscard]] Result<std::vector<CommandRecord>> ListCommands(const std::string& sandbox_id);

  [[nodiscard]] Status PutOperation(const OperationRecord& r);
  [[nodiscard]] Result<OperationRecord> GetOperation(const std::string& id);
  // Newest first; `limit` 0 = all. Filter by state when non-empty.
  [[nodiscard]] Result<std::vector<OperationRecord>> ListOperations(size_t limit = 0,
                                                                   const std::string& state = "");

  [[nodiscard]] Status PutTemplate(const TemplateRecord& r);        // key (name, tag)
  [[nodiscard]] Result<TemplateRecord> GetTemplate(const std::string& name, const std::string& tag);
  [[nodiscard]] Result<TemplateRecord> GetTemplateByDigest(const std::string& digest);
  [[nodiscard]] Result<std::vector<TemplateRecord>> ListTemplates();
  [[nodiscard]] Status DeleteTemplate(const std::string& name, const std::string& tag);  // no row: Ok

  [[nodiscard]] Status PutSnapshot(const SnapshotRecord& r);         // insert or update
  [[nodiscard]] Result<SnapshotRecord> GetSnapshot(const std::string& id);  // kNotFound
  // Oldest first; all snapshots when sandbox_id is empty.
  [[nodiscard]] Result<std::vector<SnapshotRecord>> ListSnapshots(const std::string& sandbox_id = "");
  [[nodiscard]] Status DeleteSnapshot(const std::string& id);       // ok if missing

  // Operator API keys. Put is insert-or-update by id; kConflict when another key has the
  // same name or hash. Lists are oldest first.
  [[nodiscard]] Status PutApiKey(const ApiKeyRecord& r);
  [[nodiscard]] Result<std::vector<ApiKeyRecord>> ListApiKeys();
  [[nodiscard]] Status DeleteApiKey(const std::string& id);        // ok if missing

  // Volumes. Put is insert-or-update by id (kConflict when another volume has the name);
  // Get finds a volume by id or by name (kNotFound); List is oldest first.
  [[nodiscard]] Status PutVolume(const VolumeRecord& r);
  [[nodiscard]] Result<VolumeRecord> GetVolume(const std::string& id_or_name);
  [[nodiscard]] Result<std::vector<VolumeRecord>> ListVolumes();
  [[nodiscard]] Status DeleteVolume(const std::string& id);        // ok if missing

  [[nodiscard]] Result<std::optional<std::string>> GetSetting(const std::string& key);
  [[nodiscard]] Status PutSetting(const std::string& key, const std::string& value);

 private:
  explicit Store(sqlite3* db) : db_(db) {}
  Status PutSandboxLocked(const SandboxRecord& r);      // caller holds mu_
  Status PutOperationLocked(const OperationRecord& r);  // caller holds mu_
  std::mutex mu_;
  sqlite3* db_;
};

enum class OutputStream : uint8_t { kStdout = 1, kStderr = 2 };
std::string_view OutputStreamName(OutputStream s);   // "stdout" / "stderr"

// Output bytes on their way into an OutputLog: in memory, or the next size() bytes queued
// on a socket (the agent's connection), which OutputLog::Append moves into the log file with
// splice(2) so that they never pass through user space. Consumed front to back, once; what
// the consumer leaves is dropped by whoever made the object (Drop()). Not thread-safe; a
// socket's bytes must be read on the thread that owns the socket's reads.
class OutputBytes {
 public:
  explicit OutputBytes(std::string_view memory) : memory_(memory), size_(memory.size()) {}
  // The next `size` bytes of stream socket `fd`, which must already be queued (FIONREAD):
  // nothing here waits for more.
  OutputBytes(int fd, size_t size) : socket_(fd), size_(size) {}
  OutputBytes(const OutputBytes&) = delete;
  OutputBytes& operator=(const OutputBytes&) = delete;

  size_t size() const { return size_; }
  size_t left() const { return size_ - pos_; }
  // The bytes not consumed yet, in memory (read from the socket first if they are there):
  // for consumers that look at them (template build logs, tests). Valid while this lives.
  [[nodiscard]] Result<std::string_view> View();
  // Consumes the next n (<= left()) bytes without storing them.
  [[nodiscard]] Status Skip(size_t n);
  // Consumes the next n (<= left()) bytes by writing them into file `fd` at `at` (pwrite,
  // or splice from the socket through a pipe of the calling thread). On an error (ENOSPC,
  // say) the bytes it took are gone, some of them perhaps written (the file's size
  // tells), and left() counts the rest.
  [[nodiscard]] Status WriteTo(int fd, uint64_t at, size_t n);
  // Consumes whatever is left (a socket's bytes are read and thrown away).
  [[nodiscard]] Status Drop() { return Skip(left()); }

 private:
  std::string_view memory_;  // the bytes, or those read from the socket by View()
  std::string read_;         // View()'s copy of a socket's bytes
  int socket_ = -1;          // -1: memory_ holds all size_ bytes
  size_t size_ = 0;
  size_t pos_ = 0;           // consumed
  size_t mem_base_ = 0;      // memory_[0] is byte mem_base_ (View() read from there)
};

class OutputLog {
 public:
  // Opens (creating) `<dir>/<command_id>.stdout|.stderr`; `dir` is created if missing.
  [[nodiscard]] static Result<std::unique_ptr<OutputLog>> Open(const std::string& dir,
                                                               const std::string& command_id);
  // Stores bytes that start at `offset` of the stream, up to stream position `end` at most
  // (the rest is left in `bytes`). Bytes below the current size are skipped (already
  // stored); offset > size is an error (a gap). Returns the new size.
  // Data is written (to the page cache) before this returns: it survives a daemon crash.
  [[nodiscard]] Result<uint64_t> Append(OutputStream s, uint64_t offset, OutputBytes& bytes,
                                        uint64_t end = UINT64_MAX);
  [[nodiscard]] Result<uint64_t> Append(OutputStream s, uint64_t offset, std::string_view bytes);
  uint64_t Size(OutputStream s) const;
  // fdatasync both files (called when the command ends).
  [[nodiscard]] Status Sync();

 private:
  std::string dir_, command_id_;
  sys::UniqueFd fds_[2];   // opened (created) on the first Append of each stream
  uint64_t sizes_[2] = {0, 0};
};

// Path of a command's log file for stream s.
std::string OutputPath(const std::string& dir, const std::string& command_id, OutputStream s);
// Reads up to `max` bytes at `offset` from a stream's log file; empty at/after EOF;
// a missing file reads as empty.
[[nodiscard]] Result<std::string> ReadOutput(const std::string& dir, const std::string& command_id,
                                             OutputStream s, uint64_t offset, size_t max);
// Reads a command's output logs, keeping the files open between reads (for streaming).
// Not thread-safe; one per reader.
class OutputReader {
 public:
  OutputReader(std::string dir, std::string command_id);
  // As ReadOutput(); a file that does not exist yet reads as empty.
  [[nodiscard]] Result<std::string> Read(OutputStream s, uint64_t offset, size_t max);
  // Where up to `max` stored bytes from `offset` are, without reading them: the open log
  // file (owned by the reader, valid while it lives) and how many bytes it holds there
  // now; {-1, 0} while the file does not exist yet. For sendfile(2).
  struct Extent {
    int fd = -1;
    size_t length = 0;
  };
  [[nodiscard]] Result<Extent> Find(OutputStream s, uint64_t offset, size_t max);

 private:
  // The stream's log file, opened on first use; -1 while it does not exist.
  Result<int> File(OutputStream s);
  std::string dir_, command_id_;
  sys::UniqueFd fds_[2];
};

// Current size of a stream's log file (0 if missing).
uint64_t OutputSize(const std::string& dir, const std::string& command_id, OutputStream s);

}  // namespace space::store
