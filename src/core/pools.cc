// Warm pools: started, idle sandboxes per template, claimed by creates.
#include <spdlog/spdlog.h>

#include "core/internal.h"
#include "core/templates.h"

namespace space::core {

namespace {

std::string PoolOf(const store::SandboxRecord& rec) { return JsonStringOr(rec.spec, "pool", ""); }

bool DefaultLimits(const runtime::Limits& l) {
  runtime::Limits d;
  return l.memory_bytes == d.memory_bytes && l.pids == d.pids && l.cpus == d.cpus &&
         l.disk_bytes == d.disk_bytes && l.nofile == d.nofile;
}

}  // namespace

bool IsPoolMember(const store::SandboxRecord& rec) { return !PoolOf(rec).empty(); }

void Platform::Impl::AddSandbox(const std::shared_ptr<Sandbox>& sb) {
  std::lock_guard lock(mu);
  sandboxes[sb->rec.id] = sb;
  if (std::string pool = PoolOf(sb->rec); !pool.empty()) pool_members[pool].insert(sb->rec.id);
}

void Platform::Impl::EraseSandbox(const std::string& id) {
  std::lock_guard lock(mu);
  sandboxes.erase(id);
  for (auto& [pool, ids] : pool_members) ids.erase(id);
}

std::shared_ptr<Platform::Sandbox> Platform::Impl::ClaimFromPool(const CreateSandboxRequest& req) {
  if (config.warm_pools.empty() || !req.snapshot_id.empty() || !req.volumes.empty() || [&] {
        auto p = net::ParsePolicy(req.network, net::Presets{});
        return !p || p->internet();
      }() ||
      (!req.runtime.empty() && req.runtime != config.default_runtime) || !DefaultLimits(req.limits))
    return nullptr;
  auto parsed = ParseTemplateRef(req.template_ref.empty() ? config.default_template : req.template_ref);
  if (!parsed) return nullptr;
  const std::string ref = parsed->first + ":" + parsed->second;
  if (!config.warm_pools.count(ref)) return nullptr;
  std::lock_guard lock(mu);
  auto pool = pool_members.find(ref);
  if (pool == pool_members.end()) return nullptr;
  for (auto it = pool->second.begin(); it != pool->second.end(); ++it) {
    auto found = sandboxes.find(*it);
    if (found == sandboxes.end()) continue;
    auto& sb = found->second;
    std::unique_lock l(sb->mu, std::try_to_lock);
    if (!l.owns_lock() || PoolOf(sb->rec) != ref || sb->rec.state != "running" ||
        !sb->busy_op.empty() || !sb->session || !sb->session->connected())
      continue;
    sb->rec.spec["pool"] = "";  // claimed: no other create can take it
    pool->second.erase(it);
    return sb;
  }
  return nullptr;
}

void Platform::FillPools() {
  if (impl_->config.warm_pools.empty()) return;
  impl_->Enqueue([impl = impl_.get()] { impl->RefillPools(); });
}

void Platform::Impl::RefillPools() {
  {
    std::lock_guard l(pool_mu);
    if (refill_queued) {
      refill_again = true;  // the worker at it will look again when it is done
      return;
    }
    refill_queued = true;
    refill_again = false;
  }
  for (;;) {
    RefillPoolsOnce();
    std::lock_guard l(pool_mu);
    if (!refill_again) {
      refill_queued = false;
      return;
    }
    refill_again = false;
  }
}

void Platform::Impl::RefillPoolsOnce() {
  for (const auto& [ref, size] : config.warm_pools) {
    // Count live members; members that broke are removed (they are internal).
    int have = 0;
    std::vector<std::string> broken;
    std::vector<std::shared_ptr<Sandbox>> members;
    {
      std::lock_guard lock(mu);
      if (auto pool = pool_members.find(ref); pool != pool_members.end()) {
        for (const auto& id : pool->second) {
          if (auto found = sandboxes.find(id); found != sandboxes.end()) members.push_back(found->second);
        }
      }
    }
    // Without mu: a member being deleted holds its own lock through the teardown.
    for (auto& sb : members) {
      std::lock_guard l(sb->mu);
      if (PoolOf(sb->rec) != ref) continue;  // claimed meanwhile
      if (sb->rec.state == "running" || sb->rec.state == "creating") {
        ++have;
      } else if (sb->rec.state != "deleting") {
        broken.push_back(sb->rec.id);
      }
    }
    for (const auto& id : broken) (void)self->DeleteSandbox(id);
    for (; have < size; ++have) {
      CreateSandboxRequest req;
      req.template_ref = ref;
      req.timeout_s = 0;  // members wait as long as it takes; a claim sets the timeout
      std::string digest, snapshot;
      auto made = NewSandbox(req, &digest, &snapshot);
      if (!made) {
        spdlog::warn("warm pool {}: {}", ref, made.error().message);
        break;
      }
      auto sb = *made;
      sb->rec.spec["pool"] = ref;
      if (!store->PutSandbox(sb->rec)) break;
      NoteCommit(sb->rec);
      AddSandbox(sb);
      Status st;
      {
        std::lock_guard l(sb->mu);
        st = BringUp(sb, digest, "");
      }
      if (!st) {
        spdlog::warn("warm pool {}: starting a member failed: {}", ref, st.error().message);
        (void)self->DeleteSandbox(sb->rec.id);
        break;  // try again on the next claim, not in a tight loop
      }
    }
  }
}

}  // namespace space::core
