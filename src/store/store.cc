// Store: SQLite-backed records. See store.h for the contract.
//
// Every statement is prepared with bound parameters; nothing from a record is ever spliced
// into SQL text. One connection, serialised by mu_; statements are prepared per call (a few
// microseconds, negligible next to the fsync that synchronous=FULL costs every commit).
#include "store/store.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <iterator>
#include <string_view>
#include <utility>

#include "store/sqlite.h"

namespace space::store {

using namespace sql;  // NOLINT: the store's own SQLite helpers (sqlite.h)

namespace {

// Schema migrations. Entry i brings the schema from user_version i to i + 1; each runs in
// one transaction together with the user_version bump, so a crash leaves either the old
// or the new schema. Never edit an entry once released: append a new one.
constexpr const char* kMigrations[] = {
    // 1: initial schema.
    R"sql(
CREATE TABLE sandboxes (
  id              TEXT PRIMARY KEY NOT NULL,
  template_ref    TEXT NOT NULL,
  template_digest TEXT NOT NULL,
  runtime         TEXT NOT NULL,
  state           TEXT NOT NULL,
  reason          TEXT NOT NULL,
  spec            TEXT NOT NULL,
  metadata        TEXT NOT NULL,
  next_stream     INTEGER NOT NULL,
  created_ms      INTEGER NOT NULL,
  updated_ms      INTEGER NOT NULL
) STRICT;
CREATE INDEX sandboxes_created ON sandboxes (created_ms);

CREATE TABLE commands (
  id          TEXT PRIMARY KEY NOT NULL,
  sandbox_id  TEXT NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
  stream      INTEGER NOT NULL,
  spec        TEXT NOT NULL,
  state       TEXT NOT NULL,
  exit_code   INTEGER,
  signal      INTEGER,
  timed_out   INTEGER NOT NULL,
  reason      TEXT NOT NULL,
  pid         INTEGER NOT NULL,
  started_ms  INTEGER NOT NULL,
  ended_ms    INTEGER NOT NULL
) STRICT;
CREATE INDEX commands_sandbox ON commands (sandbox_id);

CREATE TABLE operations (
  id            TEXT PRIMARY KEY NOT NULL,
  kind          TEXT NOT NULL,
  target        TEXT NOT NULL,
  state         TEXT NOT NULL,
  request       TEXT NOT NULL,
  result        TEXT NOT NULL,
  error_code    TEXT NOT NULL,
  error_message TEXT NOT NULL,
  created_ms    INTEGER NOT NULL,
  updated_ms    INTEGER NOT NULL
) STRICT;
CREATE INDEX operations_created ON operations (created_ms);
CREATE INDEX operations_state ON operations (state, created_ms);

CREATE TABLE templates (
  name       TEXT NOT NULL,
  tag        TEXT NOT NULL,
  digest     TEXT NOT NULL,
  config     TEXT NOT NULL,
  created_ms INTEGER NOT NULL,
  PRIMARY KEY (name, tag)
) STRICT;
CREATE INDEX templates_digest ON templates (digest);

CREATE TABLE settings (
  key   TEXT PRIMARY KEY NOT NULL,
  value TEXT NOT NULL
) STRICT;
)sql",
    // 2: sandbox snapshots. No FK to sandboxes: a snapshot outlives its sandbox.
    R"sql(
CREATE TABLE snapshots (
  id         TEXT PRIMARY KEY NOT NULL,
  sandbox_id TEXT NOT NULL,
  kind       TEXT NOT NULL,
  state      TEXT NOT NULL,
  source     TEXT NOT NULL,
  size       INTEGER NOT NULL,
  created_ms INTEGER NOT NULL
) STRICT;
CREATE INDEX snapshots_sandbox ON snapshots (sandbox_id, created_ms);
)sql",
    // 3: operator API keys (hashes only; see auth::HashApiKey).
    R"sql(
CREATE TABLE api_keys (
  id         TEXT PRIMARY KEY NOT NULL,
  name       TEXT NOT NULL UNIQUE,
  hash       TEXT NOT NULL UNIQUE,
  hint       TEXT NOT NULL,
  created_ms INTEGER NOT NULL
) STRICT;
)sql",
    // 4: named volumes (docs/volumes.md). No FK to sandboxes: a volume outlives them.
    R"sql(
CREATE TABLE volumes (
  id         TEXT PRIMARY KEY NOT NULL,
  name       TEXT NOT NULL UNIQUE,
  size_bytes INTEGER NOT NULL,
  state      TEXT NOT NULL,
  created_ms INTEGER NOT NULL
) STRICT;
)sql",
};
constexpr int kSchemaVersion = static_cast<int>(std::size(kMigrations));

Status Migrate(sqlite3* db) {
  auto version = QueryInt(db, "PRAGMA user_version", "read schema version");
  if (!version) return tl::unexpected(std::move(version).error());
  if (*version > kSchemaVersion) {
    return Fail(Errc::kInternal, "database schema version " + std::to_string(*version) +
                                     " is newer than this build understands (" +
                                     std::to_string(kSchemaVersion) + ")");
  }
  if (*version < 0) {
    return Fail(Errc::kInternal,
                "database schema version " + std::to_string(*version) + " is invalid");
  }
  for (int v = static_cast<int>(*version); v < kSchemaVersion; ++v) {
    std::string ctx = "migrate schema to version " + std::to_string(v + 1);
    Transaction tx(db);
    SPACE_TRY(tx.Begin(ctx));
    // Re-check under the write lock: another process may have migrated meanwhile.
    auto now = QueryInt(db, "PRAGMA user_version", ctx);
    if (!now) return tl::unexpected(std::move(now).error());
    if (*now != v) continue;  // tx rolls back; the final check below verifies the result
    SPACE_TRY(ExecSql(db, kMigrations[v], ctx));
    // PRAGMA cannot take bound parameters; the value is our own integer, not input.
    std::string bump = "PRAGMA user_version = " + std::to_string(v + 1);
    SPACE_TRY(ExecSql(db, bump.c_str(), ctx));
    SPACE_TRY(tx.Commit(ctx));
  }
  auto final_version = QueryInt(db, "PRAGMA user_version", "read schema version");
  if (!final_version) return tl::unexpected(std::move(final_version).error());
  if (*final_version != kSchemaVersion) {
    return Fail(Errc::kInternal, "schema version is " + std::to_string(*final_version) +
                                     " after migration, want " + std::to_string(kSchemaVersion));
  }
  return Ok();
}

// Creates the database file (if missing) with mode 0600 before SQLite does: SQLite creates
// its -wal and -shm files with the main file's permissions, so this keeps all three private.
// Existing files are tightened to 0600 as well.
Status PrepareDbFiles(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0)
    SPACE_TRY(sys::MkdirAll(path.substr(0, slash), 0700));
  auto fd = sys::Open(path, O_RDWR | O_CREAT | O_NOFOLLOW, 0600);
  if (!fd) return tl::unexpected(std::move(fd).error());
  if (::fchmod(fd->get(), 0600) != 0) return ErrnoFail("chmod " + path);
  for (const char* suffix : {"-wal", "-shm"}) {
    std::string p = path + suffix;
    if (::chmod(p.c_str(), 0600) != 0 && errno != ENOENT) return ErrnoFail("chmod " + p);
  }
  return Ok();
}

}  // namespace

Result<std::unique_ptr<Store>> Store::Open(const std::string& path) {
  const std::string ctx = "open database " + path;
  if (path.empty()) return Fail(Errc::kInvalidArgument, ctx + ": empty path");
  SPACE_TRY_WRAP(PrepareDbFiles(path), ctx);

  sqlite3* raw = nullptr;
  // NOMUTEX: Store serialises all use of the connection with mu_.
  int rc =
      sqlite3_open_v2(path.c_str(), &raw,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    auto err = SqliteFail(raw, rc, ctx);
    sqlite3_close_v2(raw);
    return err;
  }
  // From here on the Store owns the handle and closes it on every path.
  std::unique_ptr<Store> store(new Store(raw));
  sqlite3* db = store->db_;
  sqlite3_extended_result_codes(db, 1);
  rc = sqlite3_busy_timeout(db, 5000);
  if (rc != SQLITE_OK) return SqliteFail(db, rc, ctx + ": busy_timeout");

  auto mode = QueryText(db, "PRAGMA journal_mode = WAL", ctx + ": journal_mode");
  if (!mode) return tl::unexpected(std::move(mode).error());
  if (*mode != "wal")
    return Fail(Errc::kInternal, ctx + ": journal_mode is " + *mode + ", not wal");
  SPACE_TRY(ExecSql(db, "PRAGMA synchronous = FULL", ctx + ": synchronous"));
  SPACE_TRY(ExecSql(db, "PRAGMA foreign_keys = ON", ctx + ": foreign_keys"));
  auto fk = QueryInt(db, "PRAGMA foreign_keys", ctx + ": foreign_keys");
  if (!fk) return tl::unexpected(std::move(fk).error());
  if (*fk != 1) return Fail(Errc::kInternal, ctx + ": SQLite built without foreign key support");
  SPACE_TRY_WRAP(Migrate(db), ctx);
  return store;
}

Store::~Store() {
  // v2: closes even if a statement were somehow left unfinalized (none should be).
  sqlite3_close_v2(db_);
}

void Store::ReleaseMemory() {
  std::lock_guard lock(mu_);
  sqlite3_db_release_memory(db_);
}

// ---- sandboxes ----

Status Store::PutSandbox(const SandboxRecord& r) {
  std::lock_guard lock(mu_);
  return PutSandboxLocked(r);
}

Status Store::PutSandboxAndOperation(const SandboxRecord& sb, const OperationRecord& op) {
  std::lock_guard lock(mu_);
  const std::string ctx = "put sandbox " + sb.id + " and operation " + op.id;
  Transaction tx(db_);
  SPACE_TRY(tx.Begin(ctx));
  SPACE_TRY(PutSandboxLocked(sb));
  SPACE_TRY(PutOperationLocked(op));
  return tx.Commit(ctx);
}

Status Store::PutSandboxLocked(const SandboxRecord& r) {
  Stmt st(db_, "put sandbox " + r.id);
  // An upsert, not INSERT OR REPLACE: REPLACE deletes the old row first, which would fire
  // ON DELETE CASCADE and silently drop the sandbox's commands. next_stream never moves
  // backwards, so a Put of a record read before an AllocateStream cannot hand out a
  // stream id twice.
  STORE_PREPARE(st, R"sql(
INSERT INTO sandboxes (id, template_ref, template_digest, runtime, state, reason, spec, metadata,
                       next_stream, created_ms, updated_ms)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
ON CONFLICT (id) DO UPDATE SET
  template_ref = excluded.template_ref, template_digest = excluded.template_digest,
  runtime = excluded.runtime, state = excluded.state, reason = excluded.reason,
  spec = excluded.spec, metadata = excluded.metadata,
  next_stream = MAX(next_stream, excluded.next_stream),
  created_ms = excluded.created_ms, updated_ms = excluded.updated_ms)sql");
  std::string spec = DumpJson(r.spec), metadata = DumpJson(r.metadata);
  STORE_BIND(st, 1, r.id);
  STORE_BIND(st, 2, r.template_ref);
  STORE_BIND(st, 3, r.template_digest);
  STORE_BIND(st, 4, r.runtime);
  STORE_BIND(st, 5, r.state);
  STORE_BIND(st, 6, r.reason);
  STORE_BIND(st, 7, spec);
  STORE_BIND(st, 8, metadata);
  STORE_BIND(st, 9, static_cast<int64_t>(r.next_stream));
  STORE_BIND(st, 10, r.created_ms);
  STORE_BIND(st, 11, r.updated_ms);
  return st.Exec();
}

Result<SandboxRecord> Store::GetSandbox(const std::string& id) {
  std::lock_guard lock(mu_);
  Stmt st(db_, "get sandbox " + id);
  STORE_PREPARE(st, std::string("SELECT ") + kSandboxColumns + " FROM sandboxes WHERE id = ?1");
  STORE_BIND(st, 1, id);
  return ReadOne<SandboxRecord>(st, ReadSandbox, "sandbox " + id);
}

Result<std::vector<SandboxRecord>> Store::ListSandboxes() {
  std::lock_guard lock(mu_);
  Stmt st(db_, "list sandboxes");
  STORE_PREPARE(
      st, std::string("SELECT ") + kSandboxColumns + " FROM sandboxes ORDER BY created_ms, id");
  return ReadAll<SandboxRecord>(st, ReadSandbox);
}

Status Store::DeleteSandbox(const std::string& id) {
  std::lock_guard lock(mu_);
  const std::string ctx = "delete sandbox " + id;
  // The FK cascade already removes commands; deleting them explicitly as well keeps this
  // correct even on a connection where foreign keys were somehow off.
  Transaction tx(db_);
  SPACE_TRY(tx.Begin(ctx));
  {
    Stmt st(db_, ctx);
    STORE_PREPARE(st, "DELETE FROM commands WHERE sandbox_id = ?1");
    STORE_BIND(st, 1, id);
    SPACE_TRY(st.Exec());
  }
  {
    Stmt st(db_, ctx);
    STORE_PREPARE(st, "DELETE FROM sandboxes WHERE id = ?1");
    STORE_BIND(st, 1, id);
    SPACE_TRY(st.Exec());
  }
  return tx.Commit(ctx);
}

Result<uint32_t> Store::AllocateStream(const std::string& sandbox_id) {
  std::lock_guard lock(mu_);
  const std::string ctx = "allocate stream for sandbox " + sandbox_id;
  Stmt st(db_, ctx);
  // One statement, hence atomic. Stream 0 is reserved by the agent protocol, so a record
  // stored with next_stream 0 starts at 1. The WHERE guard keeps the u32 from wrapping.
  STORE_PREPARE(st, R"sql(
UPDATE sandboxes SET next_stream = MAX(next_stream, 1) + 1
WHERE id = ?1 AND next_stream < 4294967295
RETURNING next_stream - 1)sql");
  STORE_BIND(st, 1, sandbox_id);
  auto row = st.Step();
  if (!row) return tl::unexpected(std::move(row).error());
  if (*row) {
    int64_t stream = st.Int(0);
    // Run to completion so the implicit transaction commits before we return.
    auto done = st.Step();
    if (!done) return tl::unexpected(std::move(done).error());
    return static_cast<uint32_t>(stream);
  }
  // No row: either no such sandbox or its stream ids are used up.
  Stmt probe(db_, ctx);
  STORE_PREPARE(probe, "SELECT 1 FROM sandboxes WHERE id = ?1");
  STORE_BIND(probe, 1, sandbox_id);
  auto exists = probe.Step();
  if (!exists) return tl::unexpected(std::move(exists).error());
  if (!*exists) return Fail(Errc::kNotFound, ctx + ": sandbox " + sandbox_id + " not found");
  return Fail(Errc::kResourceExhausted, ctx + ": stream ids exhausted");
}

// ---- commands ----

Status Store::PutCommand(const CommandRecord& r) {
  std::lock_guard lock(mu_);
  Stmt st(db_, "put command " + r.id + " (sandbox " + r.sandbox_id + ")");
  STORE_PREPARE(st, R"sql(
INSERT INTO commands (id, sandbox_id, stream, spec, state, exit_code, signal, timed_out, reason,
                      pid, started_ms, ended_ms)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)
ON CONFLICT (id) DO UPDATE SET
  sandbox_id = excluded.sandbox_id, stream = excluded.stream, spec = excluded.spec,
  state = excluded.state, exit_code = excluded.exit_code, signal = excluded.signal,
  timed_out = excluded.timed_out, reason = excluded.reason, pid = excluded.pid,
  started_ms = excluded.started_ms, ended_ms = excluded.ended_ms)sql");
  std::string spec = DumpJson(r.spec);
  STORE_BIND(st, 1, r.id);
  STORE_BIND(st, 2, r.sandbox_id);
  STORE_BIND(st, 3, static_cast<int64_t>(r.stream));
  STORE_BIND(st, 4, spec);
  STORE_BIND(st, 5, r.state);
  STORE_BIND(st, 6, r.exit_code);
  STORE_BIND(st, 7, r.signal);
  STORE_BIND(st, 8, static_cast<int64_t>(r.timed_out ? 1 : 0));
  STORE_BIND(st, 9, r.reason);
  STORE_BIND(st, 10, r.pid);
  STORE_BIND(st, 11, r.started_ms);
  STORE_BIND(st, 12, r.ended_ms);
  return st.Exec();
}

Result<CommandRecord> Store::GetCommand(const std::string& sandbox_id, const std::string& id) {
  std::lock_guard lock(mu_);
  Stmt st(db_, "get command " + id + " (sandbox " + sandbox_id + ")");
  STORE_PREPARE(st, std::string("SELECT ") + kCommandColumns +
                        " FROM commands WHERE id = ?1 AND sandbox_id = ?2");
  STORE_BIND(st, 1, id);
  STORE_BIND(st, 2, sandbox_id);
  return ReadOne<CommandRecord>(st, ReadCommand, "command " + id + " in sandbox " + sandbox_id);
}

Result<std::vector<CommandRecord>> Store::ListCommands(const std::string& sandbox_id) {
  std::lock_guard lock(mu_);
  Stmt st(db_, "list commands of sandbox " + sandbox_id);
  STORE_PREPARE(st, std::string("SELECT ") + kCommandColumns +
                        " FROM commands WHERE sandbox_id = ?1 ORDER BY stream, id");
  STORE_BIND(st, 1, sandbox_id);
  return ReadAll<CommandRecord>(st, ReadCommand);
}

// ---- operations ----

Status Store::PutOperation(const OperationRecord& r) {
  std::lock_guard lock(mu_);
  return PutOperationLocked(r);
}

Status Store::PutOperationLocked(const OperationRecord& r) {
  Stmt st(db_, "put operation " + r.id);
  STORE_PREPARE(st, R"sql(
INSERT INTO operations (id, kind, target, state, request, result, error_code, error_message,
                        created_ms, updated_ms)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
ON CONFLICT (id) DO UPDATE SET
  kind = excluded.kind, target = excluded.target, state = excluded.state,
  request = excluded.request, result = excluded.result, error_code = excluded.error_code,
  error_message = excluded.error_message, created_ms = excluded.created_ms,
  updated_ms = excluded.updated_ms)sql");
  std::string request = DumpJson(r.request), result = DumpJson(r.result);
  STORE_BIND(st, 1, r.id);
  STORE_BIND(st, 2, r.kind);
  STORE_BIND(st, 3, r.target);
  STORE_BIND(st, 4, r.state);
  STORE_BIND(st, 5, request);
  STORE_BIND(st, 6, result);
  STORE_BIND(st, 7, r.error_code);
  STORE_BIND(st, 8, r.error_message);
  STORE_BIND(st, 9, r.created_ms);
  STORE_BIND(st, 10, r.updated_ms);
  return st.Exec();
}

Result<OperationRecord> Store::GetOperation(const std::string& id) {
  std::lock_guard lock(mu_);
  Stmt st(db_, "get operation " + id);
  STORE_PREPARE(st, std::string("SELECT ") + kOperationColumns + " FROM operations WHERE id = ?1");
  STORE_BIND(st, 1, id);
  return ReadOne<OperationRecord>(st, ReadOperation, "operation " + id);
}

Result<std::vector<OperationRecord>> Store::ListOperations(size_t limit, const std::string& state) {
  std::lock_guard lock(mu_);
  Stmt st(db_, "list operations");
  // Two fixed statements rather than one with "?2 = '' OR state = ?2", so the filtered
  // query can use the (state, created_ms) index. A negative LIMIT means "no limit".
  STORE_PREPARE(st, std::string("SELECT ") + kOperationColumns + " FROM operations" +
                        (state.empty() ? "" : " WHERE state = ?2") +
                        " ORDER BY created_ms DESC, id LIMIT ?1");
  int64_t lim = limit == 0 ? -1 : static_cast<int64_t>(std::min<size_t>(limit, size_t{INT64_MAX}));
  STORE_BIND(st, 1, lim);
  if (!state.empty()) STORE_BIND(st, 2, state);
  return ReadAll<OperationRecord>(st, ReadOperation);
}

// ---- templates ----

}  // namespace space::store
