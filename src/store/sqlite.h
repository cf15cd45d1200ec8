// store/sqlite: the SQLite pieces the Store's files share (internal to store/): one
// prepared statement (Stmt), transactions, error mapping, JSON columns, and the readers of
// each record type's row. Not part of the store's interface (store.h).
#pragma once

#include <sqlite3.h>

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "store/store.h"

namespace space::store::sql {

inline Errc ErrcFromSqlite(int rc) {
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return Errc::kUnavailable;
    case SQLITE_CONSTRAINT:
      return Errc::kConflict;
    case SQLITE_FULL:
      return Errc::kResourceExhausted;
    default:
      return Errc::kInternal;
  }
}

// "context: <sqlite message> (<code name>)". Call with mu_ held, right after the failure,
// so sqlite3_errmsg still describes it.
inline tl::unexpected<Error> SqliteFail(sqlite3* db, int rc, std::string_view context) {
  std::string msg(context);
  msg += ": ";
  const char* detail = db ? sqlite3_errmsg(db) : nullptr;
  const char* name = sqlite3_errstr(rc);
  msg += detail ? detail : name;
  if (detail && name && std::string_view(detail) != name) {
    msg += " (";
    msg += name;
    msg += ")";
  }
  return tl::unexpected(Error{ErrcFromSqlite(rc), 0, std::move(msg)});
}

// One prepared statement, finalized on scope exit.
class Stmt {
 public:
  Stmt(sqlite3* db, std::string context) : db_(db), context_(std::move(context)) {}
  ~Stmt() { sqlite3_finalize(s_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  Status Prepare(std::string_view sql) {
    int rc = sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &s_, nullptr);
    if (rc != SQLITE_OK) return Fail(rc);
    return Ok();
  }

  // Binders; index is 1-based as in SQLite. Bound values must outlive Step() (they do:
  // every caller binds locals and steps within the same function), hence SQLITE_STATIC.
  Status Bind(int i, std::string_view v) {
    return Check(sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_STATIC));
  }
  Status Bind(int i, int64_t v) { return Check(sqlite3_bind_int64(s_, i, v)); }
  Status Bind(int i, std::optional<int> v) {
    return Check(v ? sqlite3_bind_int64(s_, i, *v) : sqlite3_bind_null(s_, i));
  }

  // Returns true when a row is available, false when done.
  Result<bool> Step() {
    int rc = sqlite3_step(s_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    return Fail(rc);
  }
  // Runs a statement that returns no rows.
  Status Exec() {
    auto r = Step();
    if (!r) return tl::unexpected(std::move(r).error());
    return Ok();
  }

  // Column readers. They never throw and tolerate NULL or mistyped values.
  std::string Text(int col) const {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(s_, col));
    int n = sqlite3_column_bytes(s_, col);
    return p ? std::string(p, static_cast<size_t>(n)) : std::string();
  }
  int64_t Int(int col) const { return sqlite3_column_int64(s_, col); }
  bool IsNull(int col) const { return sqlite3_column_type(s_, col) == SQLITE_NULL; }
  const char* ColumnName(int col) const { return sqlite3_column_name(s_, col); }

  tl::unexpected<Error> Fail(int rc) const { return SqliteFail(db_, rc, context_); }
  tl::unexpected<Error> Corrupt(int col, std::string_view what) const {
    return space::Fail(Errc::kInternal,
                       context_ + ": column " + ColumnName(col) + ": " + std::string(what));
  }
  const std::string& context() const { return context_; }

 private:
  Status Check(int rc) const {
    if (rc != SQLITE_OK) return Fail(rc);
    return Ok();
  }

  sqlite3* db_;
  sqlite3_stmt* s_ = nullptr;
  std::string context_;
};

// Prepares `sql`, propagating failure from the enclosing function.
#define STORE_PREPARE(stmt, sql) SPACE_TRY((stmt).Prepare(sql))
#define STORE_BIND(stmt, i, v) SPACE_TRY((stmt).Bind((i), (v)))

// Serialises a JSON field. The replace handler keeps dump() from throwing on strings that
// are not valid UTF-8 (possible for values our own code builds, e.g. from argv).
inline std::string DumpJson(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

inline Result<Json> JsonColumn(const Stmt& st, int col) {
  if (st.IsNull(col)) return st.Corrupt(col, "NULL instead of JSON");
  auto j = ParseJson(st.Text(col));
  if (!j) return st.Corrupt(col, "malformed JSON");
  return std::move(*j);
}

inline Result<std::optional<int>> OptIntColumn(const Stmt& st, int col) {
  if (st.IsNull(col)) return std::optional<int>();
  int64_t v = st.Int(col);
  if (v < INT_MIN || v > INT_MAX) return st.Corrupt(col, "integer out of range");
  return std::optional<int>(static_cast<int>(v));
}

// Runs a statement that takes no parameters and returns no rows (pragmas, BEGIN, ...).
inline Status ExecSql(sqlite3* db, const char* sql, std::string_view context) {
  char* err = nullptr;
  int rc = sqlite3_exec(db, sql, nullptr, nullptr, &err);
  if (rc == SQLITE_OK) return Ok();
  std::string msg = std::string(context) + ": " + (err ? err : sqlite3_errstr(rc));
  sqlite3_free(err);
  return tl::unexpected(Error{ErrcFromSqlite(rc), 0, std::move(msg)});
}

// Opens a transaction and rolls it back on scope exit unless Commit()ed.
class Transaction {
 public:
  explicit Transaction(sqlite3* db) : db_(db) {}
  ~Transaction() {
    if (open_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  // IMMEDIATE takes the write lock up front, so a concurrent writer (another process)
  // makes us wait in busy_timeout instead of failing at the first write.
  Status Begin(std::string_view context) {
    SPACE_TRY(ExecSql(db_, "BEGIN IMMEDIATE", context));
    open_ = true;
    return Ok();
  }
  Status Commit(std::string_view context) {
    SPACE_TRY(ExecSql(db_, "COMMIT", context));
    open_ = false;
    return Ok();
  }

 private:
  sqlite3* db_;
  bool open_ = false;
};

inline Result<int64_t> QueryInt(sqlite3* db, const char* sql, std::string_view context) {
  Stmt st(db, std::string(context));
  STORE_PREPARE(st, sql);
  auto row = st.Step();
  if (!row) return tl::unexpected(std::move(row).error());
  if (!*row) return Fail(Errc::kInternal, std::string(context) + ": no result");
  return st.Int(0);
}

inline Result<std::string> QueryText(sqlite3* db, const char* sql, std::string_view context) {
  Stmt st(db, std::string(context));
  STORE_PREPARE(st, sql);
  auto row = st.Step();
  if (!row) return tl::unexpected(std::move(row).error());
  if (!*row) return Fail(Errc::kInternal, std::string(context) + ": no result");
  return st.Text(0);
}

inline constexpr const char* kSandboxColumns =
    "id, template_ref, template_digest, runtime, state, reason, spec, metadata, next_stream, "
    "created_ms, updated_ms";

inline Result<SandboxRecord> ReadSandbox(const Stmt& st) {
  SandboxRecord r;
  r.id = st.Text(0);
  r.template_ref = st.Text(1);
  r.template_digest = st.Text(2);
  r.runtime = st.Text(3);
  r.state = st.Text(4);
  r.reason = st.Text(5);
  auto spec = JsonColumn(st, 6);
  if (!spec) return tl::unexpected(std::move(spec).error());
  r.spec = std::move(*spec);
  auto metadata = JsonColumn(st, 7);
  if (!metadata) return tl::unexpected(std::move(metadata).error());
  r.metadata = std::move(*metadata);
  int64_t ns = st.Int(8);
  if (ns < 0 || ns > UINT32_MAX) return st.Corrupt(8, "stream id out of range");
  r.next_stream = static_cast<uint32_t>(ns);
  r.created_ms = st.Int(9);
  r.updated_ms = st.Int(10);
  return r;
}

inline constexpr const char* kCommandColumns =
    "id, sandbox_id, stream, spec, state, exit_code, signal, timed_out, reason, pid, "
    "started_ms, ended_ms";

inline Result<CommandRecord> ReadCommand(const Stmt& st) {
  CommandRecord r;
  r.id = st.Text(0);
  r.sandbox_id = st.Text(1);
  int64_t stream = st.Int(2);
  if (stream < 0 || stream > UINT32_MAX) return st.Corrupt(2, "stream id out of range");
  r.stream = static_cast<uint32_t>(stream);
  auto spec = JsonColumn(st, 3);
  if (!spec) return tl::unexpected(std::move(spec).error());
  r.spec = std::move(*spec);
  r.state = st.Text(4);
  auto exit_code = OptIntColumn(st, 5);
  if (!exit_code) return tl::unexpected(std::move(exit_code).error());
  r.exit_code = *exit_code;
  auto signal = OptIntColumn(st, 6);
  if (!signal) return tl::unexpected(std::move(signal).error());
  r.signal = *signal;
  r.timed_out = st.Int(7) != 0;
  r.reason = st.Text(8);
  r.pid = st.Int(9);
  r.started_ms = st.Int(10);
  r.ended_ms = st.Int(11);
  return r;
}

inline constexpr const char* kOperationColumns =
    "id, kind, target, state, request, result, error_code, error_message, created_ms, "
    "updated_ms";

inline Result<OperationRecord> ReadOperation(const Stmt& st) {
  OperationRecord r;
  r.id = st.Text(0);
  r.kind = st.Text(1);
  r.target = st.Text(2);
  r.state = st.Text(3);
  auto request = JsonColumn(st, 4);
  if (!request) return tl::unexpected(std::move(request).error());
  r.request = std::move(*request);
  auto result = JsonColumn(st, 5);
  if (!result) return tl::unexpected(std::move(result).error());
  r.result = std::move(*result);
  r.error_code = st.Text(6);
  r.error_message = st.Text(7);
  r.created_ms = st.Int(8);
  r.updated_ms = st.Int(9);
  return r;
}

inline constexpr const char* kTemplateColumns = "name, tag, digest, config, created_ms";

inline Result<TemplateRecord> ReadTemplate(const Stmt& st) {
  TemplateRecord r;
  r.name = st.Text(0);
  r.tag = st.Text(1);
  r.digest = st.Text(2);
  auto config = JsonColumn(st, 3);
  if (!config) return tl::unexpected(std::move(config).error());
  r.config = std::move(*config);
  r.created_ms = st.Int(4);
  return r;
}

inline constexpr const char* kSnapshotColumns = "id, sandbox_id, kind, state, source, size, created_ms";

inline Result<SnapshotRecord> ReadSnapshot(const Stmt& st) {
  SnapshotRecord r;
  r.id = st.Text(0);
  r.sandbox_id = st.Text(1);
  r.kind = st.Text(2);
  r.state = st.Text(3);
  auto source = JsonColumn(st, 4);
  if (!source) return tl::unexpected(std::move(source).error());
  r.source = std::move(*source);
  r.size = st.Int(5);
  r.created_ms = st.Int(6);
  return r;
}

// Reads at most one row with `read`; kNotFound naming `what` when there is none.
template <class Rec, class ReadFn>
inline Result<Rec> ReadOne(Stmt& st, ReadFn read, const std::string& what) {
  auto row = st.Step();
  if (!row) return tl::unexpected(std::move(row).error());
  if (!*row) return Fail(Errc::kNotFound, what + " not found");
  return read(st);
}

template <class Rec, class ReadFn>
inline Result<std::vector<Rec>> ReadAll(Stmt& st, ReadFn read) {
  std::vector<Rec> out;
  for (;;) {
    auto row = st.Step();
    if (!row) return tl::unexpected(std::move(row).error());
    if (!*row) return out;
    auto rec = read(st);
    if (!rec) return tl::unexpected(std::move(rec).error());
    out.push_back(std::move(*rec));
  }
}

}  // namespace space::store::sql
