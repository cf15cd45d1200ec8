// The Store's catalog tables: templates, snapshots, API keys, volumes and settings
// (store.cc has the schema, sandboxes, commands and operations).
#include "store/sqlite.h"

namespace space::store {

using namespace sql;  // NOLINT: the store's own SQLite helpers (sqlite.h)

Status Store::PutTemplate(const TemplateRecord& r) {
  std::lock_guard lock(mu_);
  Stmt st(db_, "put template " + r.name + ":" + r.tag);
  STORE_PREPARE(st, R"sql(
INSERT INTO templates (name, tag, digest, config, created_ms) VALUES (?1, ?2, ?3, ?4, ?5)
ON CONFLICT (name, tag) DO UPDATE SET
  digest = excluded.digest, config = excluded.config, created_ms = excluded.created_ms)sql");
  std::string config = DumpJson(r.config);
  STORE_BIND(st, 1, r.name);
  STORE_BIND(st, 2, r.tag);
  STORE_BIND(st, 3, r.digest);
  STORE_BIND(st, 4, config);
  STORE_BIND(st, 5, r.created_ms);
  return st.Exec();
}

Result<TemplateRecord> Store::GetTemplate(const std::string& name, const std::string& tag) {
  std::lock_guard lock(mu_);
  Stmt st(db_, "get template " + name + ":" + tag);
  STORE_PREPARE(st, std::string("SELECT ") + kTemplateColumns +
                        " FROM templates WHERE name = ?1 AND tag = ?2");
  STORE_BIND(st, 1, name);
  STORE_BIND(st, 2, tag);
  return ReadOne<TemplateRecord>(st, ReadTemplate, "template " + name + ":" + tag);
}

Result<TemplateRecord> Store::GetTemplateByDigest(const std::string& digest) {
  std::lock_guard lock(mu_);
  Stmt st(db_, "get template by digest " + digest);
  // Several tags may name one digest; answer deterministically with the newest.
  STORE_PREPARE(st, std::string("SELECT ") + kTemplateColumns +
                        " FROM templates WHERE digest = ?1"
                        " ORDER BY created_ms DESC, name, tag LIMIT 1");
  STORE_BIND(st, 1, digest);
  return ReadOne<TemplateRecord>(st, ReadTemplate, "template " + digest);
}

Result<std::vector<TemplateRecord>> Store::ListTemplates() {
  std::lock_guard lock(mu_);
  Stmt st(db_, "list templates");
  STORE_PREPARE(st,
                std::string("SELECT ") + kTemplateColumns + " FROM templates ORDER BY name, tag");
  return ReadAll<TemplateRecord>(st, ReadTemplate);
}

// ---- snapshots ----

Status Store::PutSnapshot(const SnapshotRecord& r) {
  std::lock_guard lock(mu_);
  Stmt st(db_, "put snapshot " + r.id);
  STORE_PREPARE(st, R"sql(
INSERT INTO snapshots (id, sandbox_id, kind, state, source, size, created_ms)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
ON CONFLICT (id) DO UPDATE SET
  sandbox_id = excluded.sandbox_id, kind = excluded.kind, state = excluded.state,
  source = excluded.source, size = excluded.size, created_ms = excluded.created_ms)sql");
  std::string source = DumpJson(r.source);
  STORE_BIND(st, 1, r.id);
  STORE_BIND(st, 2, r.sandbox_id);
  STORE_BIND(st, 3, r.kind);
  STORE_BIND(st, 4, r.state);
  STORE_BIND(st, 5, source);
  STORE_BIND(st, 6, r.size);
  STORE_BIND(st, 7, r.created_ms);
  return st.Exec();
}

Result<SnapshotRecord> Store::GetSnapshot(const std::string& id) {
  std::lock_guard lock(mu_);
  Stmt st(db_, "get snapshot " + id);
  STORE_PREPARE(st, std::string("SELECT ") + kSnapshotColumns + " FROM snapshots WHERE id = ?1");
  STORE_BIND(st, 1, id);
  return ReadOne<SnapshotRecord>(st, ReadSnapshot, "snapshot " + id);
}

Result<std::vector<SnapshotRecord>> Store::ListSnapshots(const std::string& sandbox_id) {
  std::lock_guard lock(mu_);
  Stmt st(db_, "list snapshots");
  if (sandbox_id.empty()) {
    STORE_PREPARE(st, std::string("SELECT ") + kSnapshotColumns +
                          " FROM snapshots ORDER BY created_ms, id");
  } else {
    STORE_PREPARE(st, std::string("SELECT ") + kSnapshotColumns +
                          " FROM snapshots WHERE sandbox_id = ?1 ORDER BY created_ms, id");
    STORE_BIND(st, 1, sandbox_id);
  }
  return ReadAll<SnapshotRecord>(st, ReadSnapshot);
}

Status Store::DeleteSnapshot(const std::string& id) {
  std::lock_guard lock(mu_);
  Stmt st(db_, "delete snapshot " + id);
  STORE_PREPARE(st, "DELETE FROM snapshots WHERE id = ?1");
  STORE_BIND(st, 1, id);
  return st.Exec();
}

Status Store::DeleteTemplate(const std::string& name, const std::string& tag) {
  std::lock_guard lock(mu_);
  Stmt st(db_, "delete template " + name + ":" + tag);
  STORE_PREPARE(st, "DELETE FROM templates WHERE name = ?1 AND tag = ?2");
  STORE_BIND(st, 1, name);
  STORE_BIND(st, 2, tag);
  return st.Exec();
}

// ---- operator API keys ----

Status Store::PutApiKey(const ApiKeyRecord& r) {
  std::lock_guard lock(mu_);
  Stmt st(db_, "put api key " + r.name);
  STORE_PREPARE(st,
                "INSERT INTO api_keys (id, name, hash, hint, created_ms) VALUES (?1, ?2, ?3, ?4, ?5)"
                " ON CONFLICT (id) DO UPDATE SET name = excluded.name, hash = excluded.hash,"
                " hint = excluded.hint, created_ms = excluded.created_ms");
  STORE_BIND(st, 1, r.id);
  STORE_BIND(st, 2, r.name);
  STORE_BIND(st, 3, r.hash);
  STORE_BIND(st, 4, r.hint);
  STORE_BIND(st, 5, r.created_ms);
  return st.Exec();
}

Result<std::vector<ApiKeyRecord>> Store::ListApiKeys() {
  std::lock_guard lock(mu_);
  Stmt st(db_, "list api keys");
  STORE_PREPARE(st, "SELECT id, name, hash, hint, created_ms FROM api_keys ORDER BY created_ms, id");
  return ReadAll<ApiKeyRecord>(st, [](const Stmt& s) -> Result<ApiKeyRecord> {
    return ApiKeyRecord{s.Text(0), s.Text(1), s.Text(2), s.Text(3), s.Int(4)};
  });
}

Status Store::DeleteApiKey(const std::string& id) {
  std::lock_guard lock(mu_);
  Stmt st(db_, "delete api key " + id);
  STORE_PREPARE(st, "DELETE FROM api_keys WHERE id = ?1");
  STORE_BIND(st, 1, id);
  return st.Exec();
}

// ---- volumes ----

namespace {
Result<VolumeRecord> ReadVolume(const Stmt& s) {
  return VolumeRecord{s.Text(0), s.Text(1), s.Int(2), s.Text(3), s.Int(4)};
}
constexpr const char* kVolumeColumns = "id, name, size_bytes, state, created_ms";
}  // namespace

Status Store::PutVolume(const VolumeRecord& r) {
  std::lock_guard lock(mu_);
  Stmt st(db_, "put volume " + r.name);
  STORE_PREPARE(st,
                "INSERT INTO volumes (id, name, size_bytes, state, created_ms) VALUES (?1, ?2, ?3, ?4, ?5)"
                " ON CONFLICT (id) DO UPDATE SET name = excluded.name, size_bytes = excluded.size_bytes,"
                " state = excluded.state, created_ms = excluded.created_ms");
  STORE_BIND(st, 1, r.id);
  STORE_BIND(st, 2, r.name);
  STORE_BIND(st, 3, r.size_bytes);
  STORE_BIND(st, 4, r.state);
  STORE_BIND(st, 5, r.created_ms);
  return st.Exec();
}

Result<VolumeRecord> Store::GetVolume(const std::string& id_or_name) {
  std::lock_guard lock(mu_);
  Stmt st(db_, "get volume " + id_or_name);
  STORE_PREPARE(st, std::string("SELECT ") + kVolumeColumns +
                        " FROM volumes WHERE id = ?1 OR name = ?1 ORDER BY id = ?1 DESC LIMIT 1");
  STORE_BIND(st, 1, id_or_name);
  return ReadOne<VolumeRecord>(st, ReadVolume, "volume " + id_or_name);
}

Result<std::vector<VolumeRecord>> Store::ListVolumes() {
  std::lock_guard lock(mu_);
  Stmt st(db_, "list volumes");
  STORE_PREPARE(st, std::string("SELECT ") + kVolumeColumns + " FROM volumes ORDER BY created_ms, id");
  return ReadAll<VolumeRecord>(st, ReadVolume);
}

Status Store::DeleteVolume(const std::string& id) {
  std::lock_guard lock(mu_);
  Stmt st(db_, "delete volume " + id);
  STORE_PREPARE(st, "DELETE FROM volumes WHERE id = ?1");
  STORE_BIND(st, 1, id);
  return st.Exec();
}

// ---- settings ----

Result<std::optional<std::string>> Store::GetSetting(const std::string& key) {
  std::lock_guard lock(mu_);
  Stmt st(db_, "get setting " + key);
  STORE_PREPARE(st, "SELECT value FROM settings WHERE key = ?1");
  STORE_BIND(st, 1, key);
  auto row = st.Step();
  if (!row) return tl::unexpected(std::move(row).error());
  if (!*row) return std::optional<std::string>();
  return std::optional<std::string>(st.Text(0));
}

Status Store::PutSetting(const std::string& key, const std::string& value) {
  std::lock_guard lock(mu_);
  Stmt st(db_, "put setting " + key);
  STORE_PREPARE(st,
                "INSERT INTO settings (key, value) VALUES (?1, ?2)"
                " ON CONFLICT (key) DO UPDATE SET value = excluded.value");
  STORE_BIND(st, 1, key);
  STORE_BIND(st, 2, value);
  return st.Exec();
}

}  // namespace space::store
