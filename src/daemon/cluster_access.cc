#include "daemon/cluster_access.h"

#include <spdlog/spdlog.h>

#include "auth/auth.h"
#include "common/json.h"

namespace space::daemon {

namespace {

tl::unexpected<Error> NotJoined() {
  return Fail(Errc::kUnavailable, "this node has not joined its cluster yet: the cluster's keys "
                                  "and console sessions are out of reach");
}

// A name's claim older than this whose key never appeared is a create that died halfway.
constexpr int64_t kOrphanClaimMs = 60'000;

std::optional<store::ApiKeyRecord> KeyFrom(const std::string& hash, const cluster::KeyValue& kv) {
  auto j = ParseJson(kv.value);
  if (!j || !j->is_object()) return std::nullopt;
  store::ApiKeyRecord r;
  r.hash = hash;
  r.id = JsonStringOr(*j, "id", "");
  r.name = JsonStringOr(*j, "name", "");
  r.hint = JsonStringOr(*j, "hint", "");
  r.created_ms = JsonIntOr(*j, "created_ms", 0);
  r.scope = "cluster";
  if (r.id.empty() || r.name.empty()) return std::nullopt;
  return r;
}

// Sessions are filed under a hash of their id: the cookie itself is in no store.
std::string SessionName(std::string_view id) {
  return "sessions/" + auth::HashApiKey("console-session:" + std::string(id));
}

}  // namespace

// ---------------------------------------------------------------- keys

Result<cluster::Directory*> ClusterKeys::Dir() const {
  cluster::Directory* d = dir_.load();
  if (!d) return NotJoined();
  return d;
}

Status ClusterKeys::Add(const store::ApiKeyRecord& rec) {
  auto d = Dir();
  if (!d) return tl::unexpected(d.error());
  const std::string claim_name = "key-names/" + rec.name;
  const std::string claim = Json{{"hash", rec.hash}, {"created_ms", rec.created_ms}}.dump();
  for (int attempt = 0;; ++attempt) {
    auto claimed = (*d)->Create(claim_name, claim);
    if (!claimed) return tl::unexpected(claimed.error().Wrap("claim key name"));
    if (*claimed) break;
    // Taken: by a key, or by a create that died between its two writes.
    auto held = (*d)->Get(claim_name);
    if (!held) return tl::unexpected(held.error());
    if (*held && attempt == 0) {
      auto j = ParseJson((*held)->value);
      std::string hash = j && j->is_object() ? JsonStringOr(*j, "hash", "") : "";
      auto key = (*d)->Get("keys/" + hash);
      if (!key) return tl::unexpected(key.error());
      if (!*key && NowUnixMillis() - (j ? JsonIntOr(*j, "created_ms", 0) : 0) > kOrphanClaimMs) {
        spdlog::info("cluster: the claim of key name {} has no key; taking it over", rec.name);
        auto gone = (*d)->Remove(claim_name, (*held)->mod_revision);
        if (!gone) return tl::unexpected(gone.error());
        continue;
      }
    }
    if (*held || attempt > 0) return Fail(Errc::kConflict, "an API key named " + rec.name + " exists");
  }
  const std::string value = Json{{"id", rec.id},
                                 {"name", rec.name},
                                 {"hint", rec.hint},
                                 {"created_ms", rec.created_ms}}.dump();
  auto made = (*d)->Create("keys/" + rec.hash, value);
  if (!made || !*made) {
    (void)(*d)->Remove(claim_name);
    if (!made) return tl::unexpected(made.error().Wrap("store key"));
    return Fail(Errc::kConflict, "this key exists already");
  }
  return Ok();
}

Result<std::vector<store::ApiKeyRecord>> ClusterKeys::List() {
  auto d = Dir();
  if (!d) return tl::unexpected(d.error());
  std::vector<store::ApiKeyRecord> out;
  for (const auto& [name, kv] : (*d)->List("keys/")) {
    if (auto r = KeyFrom(name.substr(5), kv)) out.push_back(std::move(*r));
  }
  return out;
}

Result<std::optional<store::ApiKeyRecord>> ClusterKeys::FindByHash(const std::string& hash) {
  auto d = Dir();
  if (!d) return tl::unexpected(d.error());
  if (hash.empty() || hash.find('/') != std::string::npos) return std::optional<store::ApiKeyRecord>();
  auto kv = (*d)->Get("keys/" + hash);
  if (!kv) return tl::unexpected(kv.error());
  if (!*kv) return std::optional<store::ApiKeyRecord>();
  return KeyFrom(hash, **kv);
}

Status ClusterKeys::Remove(const store::ApiKeyRecord& rec) {
  auto d = Dir();
  if (!d) return tl::unexpected(d.error());
  // The key first: once it is gone no node accepts it, whatever happens next.
  auto gone = (*d)->Remove("keys/" + rec.hash);
  if (!gone) return tl::unexpected(gone.error().Wrap("revoke key"));
  if (auto name = (*d)->Remove("key-names/" + rec.name); !name)
    spdlog::warn("cluster: key {} revoked, but its name stays claimed for now: {}", rec.name,
                 name.error().message);
  return Ok();
}

// ---------------------------------------------------------------- console sessions

ClusterSessions::ClusterSessions() : renewer_([this] { Renewals(); }) {}

ClusterSessions::~ClusterSessions() {
  {
    std::lock_guard l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  renewer_.join();
}

Status ClusterSessions::Put(const api::ConsoleSession& s, int64_t idle_s) {
  cluster::Directory* d = dir_.load();
  if (!d) return NotJoined();
  auto lease = d->store().GrantLease(idle_s);
  if (!lease) return tl::unexpected(lease.error());
  const std::string value = Json{{"csrf", s.csrf},
                                 {"key_hash", s.key_hash},
                                 {"key_name", s.key_name},
                                 {"created_s", s.created_s}}.dump();
  auto made = d->Create(SessionName(s.id), value, *lease);
  if (!made || !*made) {
    (void)d->store().RevokeLease(*lease);
    if (!made) return tl::unexpected(made.error());
    return Fail(Errc::kConflict, "session id in use");
  }
  std::lock_guard l(mu_);
  renewed_s_[SessionName(s.id)] = s.created_s;
  return Ok();
}

Result<std::optional<api::ConsoleSession>> ClusterSessions::Get(std::string_view id) {
  cluster::Directory* d = dir_.load();
  if (!d) return NotJoined();
  auto kv = d->Get(SessionName(id));
  if (!kv) return tl::unexpected(kv.error());
  if (!*kv) return std::optional<api::ConsoleSession>();
  auto j = ParseJson((*kv)->value);
  if (!j || !j->is_object()) return std::optional<api::ConsoleSession>();
  api::ConsoleSession s;
  s.id = std::string(id);
  s.csrf = JsonStringOr(*j, "csrf", "");
  s.key_hash = JsonStringOr(*j, "key_hash", "");
  s.key_name = JsonStringOr(*j, "key_name", "");
  s.created_s = JsonIntOr(*j, "created_s", 0);
  s.last_used_s = s.created_s;
  if (s.csrf.empty() || s.key_hash.empty()) return std::optional<api::ConsoleSession>();
  return std::optional<api::ConsoleSession>(std::move(s));
}

void ClusterSessions::Touch(const api::ConsoleSession& s, int64_t now_s) {
  cluster::Directory* d = dir_.load();
  if (!d) return;
  const std::string name = SessionName(s.id);
  {
    std::lock_guard l(mu_);
    auto it = renewed_s_.find(name);
    if (it != renewed_s_.end() && now_s - it->second < 60) return;
    if (renewed_s_.size() > 4096) renewed_s_.clear();  // only a rate limit: forgetting is safe
    renewed_s_[name] = now_s;
  }
  auto kv = d->Get(name);
  if (!kv || !*kv || (*kv)->lease == 0) return;
  std::lock_guard l(mu_);
  if (leases_.size() < 4096) leases_.push_back((*kv)->lease);
  cv_.notify_all();
}

void ClusterSessions::Renewals() {
  std::unique_lock l(mu_);
  while (!stop_) {
    cv_.wait(l, [&] { return stop_ || !leases_.empty(); });
    if (stop_) break;
    int64_t lease = leases_.front();
    leases_.pop_front();
    cluster::Directory* d = dir_.load();
    l.unlock();
    if (d) {
      auto ttl = d->store().KeepAlive(lease);
      if (!ttl && ttl.error().code != Errc::kNotFound)
        spdlog::debug("cluster: renewing a console session: {}", ttl.error().message);
    }
    l.lock();
  }
}

void ClusterSessions::Remove(std::string_view id) {
  cluster::Directory* d = dir_.load();
  if (!d) return;
  const std::string name = SessionName(id);
  auto kv = d->Get(name);
  if (kv && *kv && (*kv)->lease != 0) (void)d->store().RevokeLease((*kv)->lease);
  (void)d->Remove(name);
  std::lock_guard l(mu_);
  renewed_s_.erase(name);
}

}  // namespace space::daemon
