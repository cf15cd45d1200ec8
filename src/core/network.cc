// Platform: sandbox networking — attaching a sandbox's network as its instance starts,
// releasing it with the instance, live policy changes, and rebuilding the data plane
// after a restart. The data plane itself is net/.
#include <spdlog/spdlog.h>

#include "core/internal.h"

namespace space::core {

net::Policy Platform::StoredPolicy(const store::SandboxRecord& rec) {
  const Json* n = JsonField(rec.spec, "network");
  if (!n) return {};
  auto p = net::ParsePolicy(*n, net::Presets{}, /*stored=*/true);
  if (!p) {
    spdlog::warn("sandbox {}: stored network policy unreadable ({}); treating it as none", rec.id,
                 p.error().message);
    return {};
  }
  return *p;
}

namespace {

// The stored policy with presets expanded by this daemon's current presets.
net::Policy LivePolicy(const store::SandboxRecord& rec, const net::Network* network) {
  const Json* n = JsonField(rec.spec, "network");
  if (!n || !network) return Platform::StoredPolicy(rec);
  auto p = net::ParsePolicy(*n, network->presets(), /*stored=*/true);
  return p ? *p : Platform::StoredPolicy(rec);
}

}  // namespace

Status Platform::Impl::StartInstance(Sandbox& sb, runtime::Runtime* rt, runtime::InstanceSpec spec) {
  net::Policy policy = LivePolicy(sb.rec, network.get());
  if (!policy.internet()) return rt->Start(spec);
  if (!network) return Fail(Errc::kUnavailable, "spaced runs without networking (see spaced --help)");
  int slot = -1;
  if (const Json* n = JsonField(sb.rec.spec, "net")) slot = static_cast<int>(JsonIntOr(*n, "slot", -1));
  auto attached = network->Attach(sb.rec.id, policy, slot);
  if (!attached) return tl::unexpected(attached.error());
  sb.rec.spec["net"] = {{"slot", attached->slot},
                        {"sandbox_ip", attached->sandbox_ip},
                        {"gateway_ip", attached->gateway_ip}};
  Json& env = sb.rec.spec["env"];
  if (!env.is_object()) env = Json::object();
  for (const auto& [k, v] : attached->env) env[k] = v;
  spec.network = true;
  spec.netns_path = attached->netns_path;
  spec.resolv_conf = attached->resolv_conf;
  auto st = rt->Start(spec);
  if (!st) (void)network->Detach(sb.rec.id);
  return st;
}

Status Platform::Impl::DestroyInstance(runtime::Runtime* rt, const std::string& id) {
  Status st = rt ? rt->Destroy(id) : Ok();
  if (network) {
    auto d = network->Detach(id);
    if (!d && st) st = d;
  }
  return st;
}

void Platform::Impl::ReconcileNetwork() {
  if (!network) return;
  std::map<std::string, net::LiveSandbox> live;
  {
    std::lock_guard lock(mu);
    for (const auto& [id, sb] : sandboxes) {
      std::lock_guard l(sb->mu);
      const std::string& s = sb->rec.state;
      if (s != "running" && s != "paused") continue;
      net::Policy p = LivePolicy(sb->rec, network.get());
      const Json* n = JsonField(sb->rec.spec, "net");
      if (!p.internet() || !n) continue;
      live[id] = {static_cast<int>(JsonIntOr(*n, "slot", 0)), p};
    }
  }
  auto st = network->Reconcile(live);
  if (!st) spdlog::error("recovery: network: {}", st.error().message);
  else if (!live.empty()) spdlog::info("recovery: network rules rebuilt for {} sandboxes", live.size());
}

Result<Json> Platform::GetNetwork(const std::string& id) {
  auto sb = impl_->Find(id);
  if (!sb) return Fail(Errc::kNotFound, "no sandbox " + id);
  store::SandboxRecord rec;
  {
    std::lock_guard l(sb->mu);
    rec = sb->rec;
  }
  Json out = StoredPolicy(rec).ToJson(false);
  if (impl_->network) {
    Json live = impl_->network->Describe(id);
    if (!live.is_null()) {
      for (auto& [k, v] : live.items()) out[k] = v;
    }
  }
  if (!out.contains("decisions")) out["decisions"] = Json::array();
  return out;
}

Result<Json> Platform::SetNetwork(const std::string& id, const Json& body) {
  auto sb = impl_->Find(id);
  if (!sb) return Fail(Errc::kNotFound, "no sandbox " + id);
  if (!impl_->network) return Fail(Errc::kUnavailable, "spaced runs without networking");
  std::lock_guard l(sb->mu);
  if (!sb->busy_op.empty())
    return Fail(Errc::kConflict, "sandbox " + id + " has an operation in progress; try again");
  net::Policy current = LivePolicy(sb->rec, impl_->network.get());
  if (!current.internet() || !JsonField(sb->rec.spec, "net"))
    return Fail(Errc::kConflict, "sandbox " + id +
                                     " was created without networking (network.mode none): its "
                                     "namespace has no route out; create it with mode internet");
  if (sb->rec.state != "running" && sb->rec.state != "paused")
    return Fail(Errc::kConflict, "sandbox " + id + " is " + sb->rec.state);
  auto next = net::ParsePolicyUpdate(body, current, impl_->network->presets());
  if (!next) return tl::unexpected(next.error());
  SPACE_TRY(impl_->network->Update(id, *next));
  sb->rec.spec["network"] = next->ToJson(true);
  if (auto st = impl_->SaveSandbox(*sb); !st) {
    // The data plane already follows the new policy; keep the record saying so in memory
    // and report the failure (a restart reapplies the stored one).
    spdlog::error("sandbox {}: network policy applied but not saved: {}", id, st.error().message);
    return tl::unexpected(st.error());
  }
  return next->ToJson(false);
}

}  // namespace space::core
