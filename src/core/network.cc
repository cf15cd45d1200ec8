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

// Where the runtime's instances meet their namespace (see net::Link).
net::Link LinkFor(const runtime::Runtime* rt) {
  return rt->Caps().network_tap ? net::Link::kTap : net::Link::kNamespace;
}

net::Link StoredLink(const Json& net) {
  return JsonStringOr(net, "link", "") == "tap" ? net::Link::kTap : net::Link::kNamespace;
}

void SpecNetwork(runtime::InstanceSpec& spec, const net::Attachment& a) {
  spec.network = true;
  spec.netns_path = a.netns_path;
  spec.resolv_conf = a.resolv_conf;
  spec.tap = a.tap;
  spec.sandbox_ip = a.sandbox_ip;
  spec.gateway_ip = a.gateway_ip;
  spec.prefix_len = a.prefix_len;
}

}  // namespace

Status Platform::Impl::StartInstance(Sandbox& sb, runtime::Runtime* rt, runtime::InstanceSpec spec) {
  net::Policy policy = LivePolicy(sb.rec, network.get());
  if (!policy.internet()) return rt->Start(spec);
  if (!network) return Fail(Errc::kUnavailable, "spaced runs without networking (see spaced --help)");
  if (!rt->Caps().network)
    return Fail(Errc::kInvalidArgument, "the " + std::string(rt->Name()) +
                                            " runtime has no networking: create the sandbox with network mode none");
  int slot = -1;
  if (const Json* n = JsonField(sb.rec.spec, "net")) slot = static_cast<int>(JsonIntOr(*n, "slot", -1));
  const net::Link link = LinkFor(rt);
  auto attached = network->Attach(sb.rec.id, policy, slot, link);
  if (!attached) return tl::unexpected(attached.error());
  sb.rec.spec["net"] = {{"slot", attached->slot},
                        {"sandbox_ip", attached->sandbox_ip},
                        {"gateway_ip", attached->gateway_ip}};
  if (link == net::Link::kTap) sb.rec.spec["net"]["link"] = "tap";
  Json& env = sb.rec.spec["env"];
  if (!env.is_object()) env = Json::object();
  for (const auto& [k, v] : attached->env) {
    // The proxy's address is the attachment's own; the CA variables give way to the user's.
    bool proxy_var = k.find("proxy") != std::string::npos || k.find("PROXY") != std::string::npos;
    if (proxy_var || !env.contains(k)) env[k] = v;
  }
  spec.files = attached->files;
  SpecNetwork(spec, *attached);
  auto st = rt->Start(spec);
  if (!st) (void)network->Detach(sb.rec.id);
  return st;
}

Status Platform::Impl::WakeInstance(Sandbox& sb, runtime::Runtime* rt, runtime::InstanceSpec spec) {
  const Json* n = JsonField(sb.rec.spec, "net");
  net::Policy policy = LivePolicy(sb.rec, network.get());
  if (!policy.internet() || !n) return rt->Wake(spec);
  if (!network) return Fail(Errc::kUnavailable, "spaced runs without networking (see spaced --help)");
  // Attach keeps nothing of an earlier attach of the id: the same slot gives the guest the
  // address it already has.
  auto attached = network->Attach(sb.rec.id, policy, static_cast<int>(JsonIntOr(*n, "slot", -1)),
                                  StoredLink(*n));
  if (!attached) return tl::unexpected(attached.error());
  sb.rec.spec["net"]["slot"] = attached->slot;
  sb.rec.spec["net"]["sandbox_ip"] = attached->sandbox_ip;
  sb.rec.spec["net"]["gateway_ip"] = attached->gateway_ip;
  SpecNetwork(spec, *attached);
  return rt->Wake(spec);
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
      const Json* n = JsonField(sb->rec.spec, "net");
      // A sandbox suspended with its processes (a VM, gvisor's checkpoint) keeps its
      // network for its wake: the same namespace, slot and address.
      auto rt = runtimes.find(sb->rec.runtime);
      bool kept = n && s == "suspended" &&
                  (StoredLink(*n) == net::Link::kTap ||
                   (rt != runtimes.end() && rt->second->Caps().suspend_keeps_processes));
      if (s != "running" && s != "paused" && !kept) continue;
      net::Policy p = LivePolicy(sb->rec, network.get());
      if (!p.internet() || !n) continue;
      live[id] = {static_cast<int>(JsonIntOr(*n, "slot", 0)), StoredLink(*n), p};
    }
  }
  auto st = network->Reconcile(live);
  if (!st) spdlog::error("recovery: network: {}", st.error().message);
  else if (!live.empty()) spdlog::info("recovery: network rules rebuilt for {} sandboxes", live.size());
}

Result<Json> Platform::GetNetwork(const std::string& id) {
  auto sb = impl_->Find(id);
  if (!sb) return Fail(Errc::kNotFound, "no sandbox " + id);
  auto read = impl_->ReadRecord(*sb, id);
  if (!read) return tl::unexpected(read.error());
  const store::SandboxRecord& rec = *read;
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
