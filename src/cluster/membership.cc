#include "cluster/membership.h"

#include <spdlog/spdlog.h>

#include <chrono>

namespace space::cluster {
namespace {

int64_t MonoMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A DNS name as Kubernetes names nodes ("ip-10-0-1-2.ec2.internal"): labels of
// [a-z0-9-] joined by dots, 253 at most.
bool ValidNodeName(const std::string& n) {
  if (n.empty() || n.size() > 253) return false;
  size_t label = 0;
  for (size_t i = 0; i < n.size(); ++i) {
    const char c = n[i];
    if (c == '.') {
      if (label == 0 || n[i - 1] == '-') return false;
      label = 0;
      continue;
    }
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
    if (c == '-' && label == 0) return false;
    if (++label > 63) return false;
  }
  return label > 0 && n.back() != '-';
}

}  // namespace

Status CheckNodeName(const std::string& name) {
  if (!ValidNodeName(name))
    return Fail(Errc::kInvalidArgument,
                "node name must be a DNS name (labels of [a-z0-9-] joined by dots): '" + name + "'");
  return Ok();
}

// ---------------------------------------------------------------- node side

NodeMembership::NodeMembership(Store& store, NodeOptions opts) : store_(store), opts_(std::move(opts)) {}

Result<std::unique_ptr<NodeMembership>> NodeMembership::Join(Store& store, NodeOptions opts) {
  SPACE_TRY(CheckNodeName(opts.name));
  if (opts.lease_ttl_s < 2) return Fail(Errc::kInvalidArgument, "node lease TTL must be at least 2 s");
  if (opts.prefix.empty() || opts.prefix.back() != '/')
    return Fail(Errc::kInvalidArgument, "cluster prefix must end in '/'");
  std::unique_ptr<NodeMembership> m(new NodeMembership(store, std::move(opts)));
  SPACE_TRY(m->Register());
  m->thread_ = std::thread([p = m.get()] { p->Loop(); });
  return m;
}

NodeMembership::~NodeMembership() {
  {
    std::lock_guard l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (int64_t lease = lease_.load()) (void)store_.RevokeLease(lease);
}

// A new lease and the node record on it, then the routes of what still runs here claimed
// again. A record already under this name is this node's earlier life (a restart, or a
// lease lost while cut off): its lease is revoked, which drops whatever routes it still
// held, and they are claimed back on the new one. Routes another node holds by now are the
// cluster's decision: on_given_up hears of them.
Status NodeMembership::Register() {
  const std::string key = opts_.prefix + "nodes/" + opts_.name;
  auto cur = store_.Get(key);
  if (!cur) return tl::unexpected(cur.error());
  if (*cur && (*cur)->lease != 0 && (*cur)->lease != lease_.load()) {
    auto r = store_.RevokeLease((*cur)->lease);
    if (!r && r.error().code != Errc::kNotFound) return tl::unexpected(r.error());
  }
  auto lease = store_.GrantLease(opts_.lease_ttl_s);
  if (!lease) return tl::unexpected(lease.error());
  Json rec = opts_.describe ? opts_.describe() : Json::object();
  rec["name"] = opts_.name;
  rec["lease"] = *lease;
  auto put = store_.Put(key, rec.dump(), *lease);
  if (!put) {
    (void)store_.RevokeLease(*lease);
    return tl::unexpected(put.error());
  }
  lease_ = *lease;
  renewed_ms_ = MonoMs();
  std::vector<std::string> given_up;
  for (const std::string& id : opts_.owned ? opts_.owned() : std::vector<std::string>{}) {
    auto c = ClaimRoute(id);
    if (!c && c.error().code == Errc::kConflict) given_up.push_back(id);
    else if (!c) return tl::unexpected(c.error());
  }
  if (!given_up.empty() && opts_.on_given_up) opts_.on_given_up(given_up);
  return Ok();
}

bool NodeMembership::fenced() const {
  return MonoMs() - renewed_ms_.load() >= opts_.lease_ttl_s * 1000;
}

Status NodeMembership::ClaimRoute(const std::string& sandbox_id) {
  if (fenced()) return Fail(Errc::kUnavailable, "node " + opts_.name + " is cut off from the cluster");
  const std::string key = opts_.prefix + "routes/" + sandbox_id;
  const int64_t lease = lease_.load();
  Json v = {{"node", opts_.name}, {"lease", lease}};
  auto r = store_.CompareAndSet(key, 0, v.dump(), lease);
  if (!r) return tl::unexpected(r.error());
  if (*r) return Ok();
  // Ours already (a retry, or a claim again after re-registering)?
  auto cur = store_.Get(key);
  if (!cur) return tl::unexpected(cur.error());
  if (*cur) {
    auto j = ParseJson((*cur)->value);
    if (j && JsonStringOr(*j, "node", "") == opts_.name && (*cur)->lease == lease) return Ok();
    return Fail(Errc::kConflict, "sandbox " + sandbox_id + " is routed to node " +
                                     (j ? JsonStringOr(*j, "node", "?") : std::string("?")));
  }
  return Fail(Errc::kConflict, "sandbox " + sandbox_id + ": route changed while claiming it");
}

Status NodeMembership::ReleaseRoute(const std::string& sandbox_id) {
  const std::string key = opts_.prefix + "routes/" + sandbox_id;
  auto cur = store_.Get(key);
  if (!cur) return tl::unexpected(cur.error());
  if (!*cur) return Ok();
  auto j = ParseJson((*cur)->value);
  if (!j || JsonStringOr(*j, "node", "") != opts_.name) return Ok();  // not ours to drop
  auto d = store_.CompareAndDelete(key, (*cur)->mod_revision);
  if (!d) return tl::unexpected(d.error());
  return Ok();
}

// Renews the lease about three times per TTL, publishes the record now and then, and after
// a lost lease registers again.
void NodeMembership::Loop() {
  const int64_t renew_ms = std::max<int64_t>(300, opts_.lease_ttl_s * 1000 / 3);
  int64_t next_publish = MonoMs() + opts_.publish_interval_ms;
  std::unique_lock l(mu_);
  while (!stop_) {
    cv_.wait_for(l, std::chrono::milliseconds(renew_ms), [&] { return stop_; });
    if (stop_) break;
    l.unlock();
    auto ttl = store_.KeepAlive(lease_.load());
    if (ttl) {
      renewed_ms_ = MonoMs();
      if (MonoMs() >= next_publish) {
        next_publish = MonoMs() + opts_.publish_interval_ms;
        Json rec = opts_.describe ? opts_.describe() : Json::object();
        rec["name"] = opts_.name;
        rec["lease"] = lease_.load();
        (void)store_.Put(opts_.prefix + "nodes/" + opts_.name, rec.dump(), lease_.load());
      }
    } else if (ttl.error().code == Errc::kNotFound) {
      // The cluster gave this node up (its lease expired while it was cut off): join
      // again and take back what is still here, unless someone else holds it now.
      spdlog::warn("cluster: node {} lost its lease; registering again", opts_.name);
      if (auto r = Register(); !r) spdlog::warn("cluster: node {}: {}", opts_.name, r.error().message);
    }
    // kUnavailable: etcd out of reach; fenced() turns true once the TTL has passed.
    l.lock();
  }
}

// ---------------------------------------------------------------- gateway side

Result<std::unique_ptr<ClusterView>> ClusterView::Open(Store& store, std::string prefix) {
  std::unique_ptr<ClusterView> v(new ClusterView(std::move(prefix)));
  int64_t rev = 0;
  auto all = store.List(v->prefix_, &rev);
  if (!all) return tl::unexpected(all.error());
  std::vector<WatchEvent> initial;
  for (auto& kv : *all) initial.push_back(WatchEvent{WatchEvent::Type::kPut, std::move(kv)});
  v->Apply(initial);
  {
    std::lock_guard l(v->mu_);
    v->revision_ = rev;
  }
  ClusterView* self = v.get();
  auto w = store.WatchPrefix(v->prefix_, rev,
                             {.on_events = [self](const std::vector<WatchEvent>& e) { self->Apply(e); },
                              .on_lost = [](const Error& e) {
                                spdlog::error("cluster view: {} (routing from what it last saw)", e.message);
                              }});
  if (!w) return tl::unexpected(w.error());
  v->watch_ = std::move(*w);
  return v;
}

void ClusterView::Apply(const std::vector<WatchEvent>& events) {
  std::lock_guard l(mu_);
  for (const WatchEvent& e : events) {
    const std::string& k = e.kv.key;
    if (k.rfind(prefix_, 0) != 0) continue;
    const std::string rest = k.substr(prefix_.size());
    const bool put = e.type == WatchEvent::Type::kPut;
    if (rest.rfind("nodes/", 0) == 0) {
      const std::string name = rest.substr(6);
      auto j = put ? ParseJson(e.kv.value) : std::optional<Json>();
      if (put && j && j->is_object()) nodes_[name] = *j;
      else nodes_.erase(name);
    } else if (rest.rfind("routes/", 0) == 0) {
      const std::string id = rest.substr(7);
      auto j = put ? ParseJson(e.kv.value) : std::optional<Json>();
      if (put && j && j->is_object()) routes_[id] = JsonStringOr(*j, "node", "");
      else routes_.erase(id);
    }
    revision_ = std::max(revision_, e.kv.mod_revision);
  }
  cv_.notify_all();
}

std::optional<std::string> ClusterView::RouteOf(const std::string& sandbox_id) const {
  std::lock_guard l(mu_);
  auto it = routes_.find(sandbox_id);
  if (it == routes_.end() || !nodes_.count(it->second)) return std::nullopt;
  return it->second;
}

std::map<std::string, Json> ClusterView::Nodes() const {
  std::lock_guard l(mu_);
  return nodes_;
}

bool ClusterView::WaitForRevision(int64_t rev, int64_t timeout_ms) const {
  std::unique_lock l(mu_);
  return cv_.wait_for(l, std::chrono::milliseconds(timeout_ms), [&] { return revision_ >= rev; });
}

}  // namespace space::cluster
