// Platform: operator API keys — the store holds their hashes, Impl caches them by hash.
#include <algorithm>

#include "auth/auth.h"
#include "core/internal.h"

namespace space::core {
namespace {

Status ValidateKeyName(const std::string& name) {
  bool ok = !name.empty() && name.size() <= 64 && !StartsWith(name, "key-") &&
            std::all_of(name.begin(), name.end(), [](char c) {
              return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' ||
                     c == '-';
            });
  if (!ok) {
    return Fail(Errc::kInvalidArgument, "bad key name \"" + name +
                                            "\": want 1-64 of [A-Za-z0-9._-], not starting "
                                            "with \"key-\"");
  }
  return Ok();
}

// The setting that remembers which key was imported under a name, so a revoked bootstrap
// key is not brought back by the next start-up.
std::string ImportedSetting(const std::string& name) { return "imported_key_hash:" + name; }

}  // namespace

Status Platform::Impl::LoadKeysLocked() {
  if (keys_loaded) return Ok();
  auto list = store->ListApiKeys();
  if (!list) return tl::unexpected(list.error().Wrap("load api keys"));
  keys_by_hash.clear();
  for (auto& k : *list) keys_by_hash[k.hash] = std::move(k);
  keys_loaded = true;
  return Ok();
}

Result<Platform::CreatedApiKey> Platform::CreateApiKey(const std::string& name, bool e2b) {
  SPACE_TRY(ValidateKeyName(name));
  std::lock_guard lock(impl_->keys_mu);
  SPACE_TRY(impl_->LoadKeysLocked());
  for (const auto& [h, k] : impl_->keys_by_hash) {
    if (k.name == name) return Fail(Errc::kConflict, "an API key named " + name + " exists");
  }
  CreatedApiKey out;
  out.key = auth::NewApiKey(e2b);
  out.record.id = NewId("key");
  out.record.name = name;
  out.record.hash = auth::HashApiKey(out.key);
  out.record.hint = auth::KeyHint(out.key);
  out.record.created_ms = NowUnixMillis();
  if (const auto& shared = config_.shared_keys) {
    SPACE_TRY(shared->Add(out.record));
    out.record.scope = "cluster";
    return out;
  }
  SPACE_TRY(impl_->store->PutApiKey(out.record));
  impl_->keys_by_hash[out.record.hash] = out.record;
  return out;
}

Result<std::vector<store::ApiKeyRecord>> Platform::ListApiKeys() {
  std::vector<store::ApiKeyRecord> out;
  {
    std::lock_guard lock(impl_->keys_mu);
    SPACE_TRY(impl_->LoadKeysLocked());
    for (const auto& [h, k] : impl_->keys_by_hash) out.push_back(k);
  }
  if (const auto& shared = config_.shared_keys) {
    for (auto& k : out) k.scope = "node";
    auto theirs = shared->List();
    if (!theirs) return tl::unexpected(theirs.error());
    for (auto& k : *theirs) {
      k.scope = "cluster";
      out.push_back(std::move(k));
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.created_ms != b.created_ms ? a.created_ms < b.created_ms : a.id < b.id;
  });
  return out;
}

Result<store::ApiKeyRecord> Platform::DeleteApiKey(const std::string& id_or_name) {
  std::lock_guard lock(impl_->keys_mu);
  SPACE_TRY(impl_->LoadKeysLocked());
  auto it = std::find_if(impl_->keys_by_hash.begin(), impl_->keys_by_hash.end(),
                         [&](const auto& e) {
                           return e.second.id == id_or_name || e.second.name == id_or_name;
                         });
  if (const auto& shared = config_.shared_keys) {
    if (it != impl_->keys_by_hash.end()) {
      return Fail(Errc::kConflict, "API key " + it->second.name +
                                       " is this node's own (its --api-key-file), which every node "
                                       "of the cluster has: change that file on each node instead");
    }
    auto theirs = shared->List();
    if (!theirs) return tl::unexpected(theirs.error());
    for (auto& k : *theirs) {
      if (k.id != id_or_name && k.name != id_or_name) continue;
      SPACE_TRY(shared->Remove(k));
      k.scope = "cluster";
      return k;
    }
    return Fail(Errc::kNotFound, "no API key " + id_or_name);
  }
  if (it == impl_->keys_by_hash.end()) return Fail(Errc::kNotFound, "no API key " + id_or_name);
  if (impl_->keys_by_hash.size() == 1) {
    return Fail(Errc::kConflict, "API key " + it->second.name +
                                     " is the last operator key; create another one first");
  }
  store::ApiKeyRecord rec = it->second;
  SPACE_TRY(impl_->store->DeleteApiKey(rec.id));
  impl_->keys_by_hash.erase(it);
  return rec;
}

Status Platform::ImportApiKey(const std::string& name, const std::string& key) {
  SPACE_TRY(ValidateKeyName(name));
  std::string hash = auth::HashApiKey(key);
  std::lock_guard lock(impl_->keys_mu);
  SPACE_TRY(impl_->LoadKeysLocked());
  if (impl_->keys_by_hash.count(hash)) return Ok();
  auto imported = impl_->store->GetSetting(ImportedSetting(name));
  if (!imported) return tl::unexpected(imported.error());
  if (*imported == hash) {
    return Fail(Errc::kPermissionDenied,
                "this " + name + " key was revoked; remove its file to have a new one made");
  }
  store::ApiKeyRecord rec;
  for (const auto& [h, k] : impl_->keys_by_hash) {
    if (k.name == name) rec = k;  // the file changed: its new key replaces the old
  }
  if (rec.id.empty()) {
    rec.id = NewId("key");
    rec.name = name;
  }
  std::string old_hash = rec.hash;
  rec.hash = hash;
  rec.hint = auth::KeyHint(key);
  rec.created_ms = NowUnixMillis();
  SPACE_TRY(impl_->store->PutApiKey(rec));
  SPACE_TRY(impl_->store->PutSetting(ImportedSetting(name), hash));
  if (!old_hash.empty()) impl_->keys_by_hash.erase(old_hash);
  impl_->keys_by_hash[hash] = rec;
  return Ok();
}

std::optional<store::ApiKeyRecord> Platform::FindApiKey(std::string_view key) {
  return FindApiKeyByHash(auth::HashApiKey(key));
}

std::optional<store::ApiKeyRecord> Platform::FindApiKeyByHash(const std::string& hash) {
  {
    std::lock_guard lock(impl_->keys_mu);
    if (!impl_->LoadKeysLocked()) return std::nullopt;
    auto it = impl_->keys_by_hash.find(hash);
    if (it != impl_->keys_by_hash.end()) return it->second;
  }
  if (const auto& shared = config_.shared_keys) {
    auto found = shared->FindByHash(hash);
    if (found && *found) return **found;
  }
  return std::nullopt;
}

}  // namespace space::core
