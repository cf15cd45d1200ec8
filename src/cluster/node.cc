#include "cluster/node.h"

#include <spdlog/spdlog.h>

#include <set>

namespace space::cluster {

Result<std::unique_ptr<NodeAgent>> NodeAgent::Start(Store& store, NodeAgentOptions opts) {
  std::unique_ptr<NodeAgent> a(new NodeAgent(store, std::move(opts)));
  NodeOptions m = a->opts_.membership;
  NodeAgent* self = a.get();
  m.owned = [self] { return self->Reconcile(); };
  m.on_given_up = [self](const std::vector<std::string>& ids) {
    spdlog::warn("cluster: {} sandbox(es) here were given to another node meanwhile; deleting them",
                 ids.size());
    if (self->opts_.kill) self->opts_.kill(ids);
  };
  auto joined = NodeMembership::Join(store, std::move(m));
  if (!joined) return tl::unexpected(joined.error());
  a->owner_ = std::move(*joined);
  a->membership_ = a->owner_.get();
  a->sweeper_ = std::thread([self] { self->Sweep(); });
  return a;
}

NodeAgent::~NodeAgent() {
  {
    std::lock_guard l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (sweeper_.joinable()) sweeper_.join();
  membership_ = nullptr;
  owner_.reset();
}

// Records of this node without a sandbox here, older than a create takes: gone.
void NodeAgent::Sweep() {
  constexpr int64_t kMinAgeMs = 60'000;
  const std::string prefix = opts_.membership.prefix + "sandboxes/";
  std::unique_lock l(mu_);
  while (!stop_) {
    cv_.wait_for(l, std::chrono::seconds(opts_.sweep_interval_s), [&] { return stop_; });
    if (stop_) break;
    l.unlock();
    auto all = store_.List(prefix);
    if (all) {
      std::set<std::string> here;
      for (auto& id : opts_.local_sandboxes ? opts_.local_sandboxes() : std::vector<std::string>{})
        here.insert(id);
      for (const auto& kv : *all) {
        const std::string id = kv.key.substr(prefix.size());
        auto j = ParseJson(kv.value);
        if (!j || JsonStringOr(*j, "node", "") != name() || here.count(id)) continue;
        if (NowUnixMillis() - JsonIntOr(*j, "created_ms", 0) < kMinAgeMs) continue;
        spdlog::info("cluster: record of {} names this node, which has no such sandbox; removing it", id);
        (void)store_.CompareAndDelete(kv.key, kv.mod_revision);
      }
    }
    l.lock();
  }
}

bool NodeAgent::fenced() const {
  NodeMembership* m = membership_.load();
  return !m || m->fenced();
}

// The sandboxes here whose records say they are still this node's; the others (lost,
// another node's, or no record: deleted through a gateway while this node was away) are
// the cluster's loss, deleted here.
std::vector<std::string> NodeAgent::Reconcile() {
  std::vector<std::string> keep, lost;
  for (const std::string& id : opts_.local_sandboxes ? opts_.local_sandboxes() : std::vector<std::string>{}) {
    auto rec = store_.Get(RecordKey(id));
    if (!rec) {
      keep.push_back(id);  // unknown: keep it (claimed again below, or later)
      continue;
    }
    auto j = *rec ? ParseJson((*rec)->value) : std::optional<Json>();
    if (j && JsonStringOr(*j, "node", "") == name() && JsonStringOr(*j, "state", "") != "lost") {
      keep.push_back(id);
    } else {
      lost.push_back(id);
      // A lost record of ours is forgotten here: the delete below may end before this
      // agent is live to hear of it (sandbox_gone runs only then).
      if (j && JsonStringOr(*j, "node", "") == name()) (void)store_.CompareAndDelete((*rec)->key, (*rec)->mod_revision);
    }
  }
  if (!lost.empty()) {
    spdlog::warn("cluster: the cluster gave up {} sandbox(es) of this node while it was away; deleting them",
                 lost.size());
    if (opts_.kill) opts_.kill(lost);
  }
  return keep;
}

Status NodeAgent::Admit(const std::string& id, const Json& summary) {
  NodeMembership* m = membership_.load();
  if (!m) return Fail(Errc::kUnavailable, "node " + name() + " has not joined the cluster yet");
  if (m->fenced()) return Fail(Errc::kUnavailable, "node " + name() + " is cut off from the cluster");
  Json rec = summary.is_object() ? summary : Json::object();
  rec["node"] = name();
  rec["state"] = "live";
  const std::string key = RecordKey(id);
  auto put = store_.CompareAndSet(key, 0, rec.dump());
  if (!put) return tl::unexpected(put.error());
  // Taken already, even by this node: every id is admitted once (two creates racing for
  // one id on one node must not both pass).
  if (!*put) return Fail(Errc::kConflict, "sandbox id " + id + " is taken in the cluster");
  const int64_t written = **put;
  if (auto c = m->ClaimRoute(id); !c) {
    (void)store_.CompareAndDelete(key, written);
    return c;
  }
  return Ok();
}

void NodeAgent::Gone(const std::string& id) {
  if (NodeMembership* m = membership_.load()) {
    if (auto r = m->ReleaseRoute(id); !r)
      spdlog::warn("cluster: route of {}: {}", id, r.error().message);
  }
  const std::string key = RecordKey(id);
  auto cur = store_.Get(key);
  if (!cur || !*cur) return;
  auto j = ParseJson((*cur)->value);
  if (!j || JsonStringOr(*j, "node", "") != name()) return;  // not ours to remove
  if (auto d = store_.CompareAndDelete(key, (*cur)->mod_revision); !d)
    spdlog::warn("cluster: record of {}: {}", id, d.error().message);
}

}  // namespace space::cluster
