// Metrics: the platform's counters and gauges, and one sandbox's resource use.
//
// Everything here reads the store (SQLite, its own mutex) and the runtimes, never a
// sandbox's mutex: that is held for the whole of a create or a snapshot, and a scrape must
// not wait for those.
#include <algorithm>
#include <set>
#include <thread>

#include "core/internal.h"

namespace space::core {

void Histogram::Observe(double v) {
  std::lock_guard l(mu_);
  size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  counts_[i]++;
  sum_ += v;
  count_++;
}

Histogram::Snapshot Histogram::Read() const {
  std::lock_guard l(mu_);
  return Snapshot{bounds_, counts_, sum_, count_};
}

std::vector<double> LatencyBuckets() {
  return {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
}

void PlatformCounters::CountCreate(const std::string& runtime, const std::string& source,
                                   const std::string& result, double seconds) {
  std::lock_guard l(mu);
  creates[{runtime, source, result}]++;
  // Latency of the creates that worked: a failure's time says nothing about creating.
  if (result == "succeeded" && seconds >= 0) {
    create_seconds.try_emplace({runtime, source}, LatencyBuckets()).first->second.Observe(seconds);
  }
}

namespace {

bool HasInstance(const std::string& state) {
  return state == "running" || state == "paused" || state == "suspended";
}

}  // namespace

PlatformMetrics Platform::Metrics() {
  PlatformMetrics m;
  Impl& impl = *impl_;
  if (auto all = impl.store->ListSandboxes()) {
    std::set<std::string> ids;
    for (const auto& rec : *all) ids.insert(rec.id);
    {
      // Forget the CPU readings of sandboxes that are gone.
      std::lock_guard l(impl.counters.mu);
      for (auto it = impl.counters.last_cpu.begin(); it != impl.counters.last_cpu.end();) {
        it = ids.count(it->first) ? std::next(it) : impl.counters.last_cpu.erase(it);
      }
    }
    for (auto& rec : *all) {
      impl.Unannounced(rec);  // a create's end not yet announced counts as creating
      if (IsPoolMember(rec)) {
        if (rec.state == "running") m.warm_pool[JsonStringOr(rec.spec, "pool", "")]++;
        continue;
      }
      m.sandboxes[{rec.state, rec.runtime}]++;
    }
  }
  for (const auto& [ref, size] : impl.config.warm_pools) {
    m.warm_pool_target[ref] = size;
    m.warm_pool.try_emplace(ref, 0);
  }
  for (const auto& [name, rt] : impl.runtimes) {
    for (const auto& [key, n] : rt->ReadyPoolSizes()) m.restore_pool[{name, key}] = n;
  }
  {
    std::lock_guard l(impl.counters.mu);
    m.creates = impl.counters.creates;
    for (const auto& [key, h] : impl.counters.create_seconds) m.create_seconds.emplace(key, h.Read());
  }
  m.commands_started = impl.counters.commands_started.load();
  m.stdout_bytes = impl.counters.stdout_bytes.load();
  m.stderr_bytes = impl.counters.stderr_bytes.load();
  m.creating = impl.creating.load();
  m.disk_free_bytes = impl.disk_free.load();
  m.disk_reserve_bytes = impl.disk_reserve.load();
  m.disk_low = impl.disk_low.load();
  return m;
}

namespace {

Result<SandboxUsage> Measure(Platform::Impl& impl, const store::SandboxRecord& rec) {
  SandboxUsage u;
  u.id = rec.id;
  u.runtime = rec.runtime;
  u.state = rec.state;
  u.timestamp_ms = NowUnixMillis();
  const Json* limits = JsonField(rec.spec, "limits");
  const Json lj = limits ? *limits : Json::object();
  u.memory_limit_bytes = JsonIntOr(lj, "memory_bytes", 0);
  u.disk_limit_bytes = JsonIntOr(lj, "disk_bytes", 0);
  double cpus = 0;
  if (const Json* c = JsonField(lj, "cpus"); c && c->is_number()) cpus = c->get<double>();
  u.cpu_count = cpus > 0 ? cpus : std::max(1u, std::thread::hardware_concurrency());
  if (!HasInstance(rec.state))
    return Fail(Errc::kConflict, "sandbox " + rec.id + " is " + rec.state + ": nothing to measure");
  runtime::Runtime* rt = impl.RuntimeFor(rec);
  if (!rt) return Fail(Errc::kUnavailable, "runtime " + rec.runtime + " is not loaded");
  if (rec.state != "suspended" || rt->Caps().own_disk) {
    if (auto r = rt->ResourceUsage(rec.id)) {
      if (r->cpu_ns >= 0) u.cpu_seconds = static_cast<double>(r->cpu_ns) / 1e9;
      u.memory_bytes = r->memory_bytes;
      u.memory_cache_bytes = r->memory_cache_bytes;
      if (rt->Caps().own_disk) u.disk_bytes = r->disk_bytes;
    }
  }
  if (!rt->Caps().own_disk) {
    if (auto d = impl.storage->RootUsage(rec.id)) u.disk_bytes = *d;
  }
  if (rec.state == "suspended" && !rt->Caps().own_disk) {
    u.memory_bytes = 0;  // no processes: nothing in use
  }
  if (u.cpu_seconds >= 0) {
    const int64_t now = MonotonicNanos();
    std::lock_guard l(impl.counters.mu);
    auto it = impl.counters.last_cpu.find(rec.id);
    double cpu_delta, wall;
    if (it != impl.counters.last_cpu.end() && now > it->second.second &&
        u.cpu_seconds >= it->second.first) {
      cpu_delta = u.cpu_seconds - it->second.first;
      wall = (now - it->second.second) / 1e9;
    } else {
      cpu_delta = u.cpu_seconds;  // the first reading: the average since the sandbox started
      wall = std::max<double>(0.001, (u.timestamp_ms - rec.created_ms) / 1000.0);
    }
    u.cpu_used_pct = std::clamp(cpu_delta / wall / u.cpu_count * 100.0, 0.0, 100.0);
    impl.counters.last_cpu[rec.id] = {u.cpu_seconds, now};
  }
  return u;
}

}  // namespace

Result<SandboxUsage> Platform::Usage(const std::string& id) {
  auto rec = impl_->store->GetSandbox(id);
  if (!rec || IsPoolMember(*rec)) return Fail(Errc::kNotFound, "no sandbox " + id);
  return Measure(*impl_, *rec);
}

std::vector<SandboxUsage> Platform::UsageOfAll() {
  std::vector<SandboxUsage> out;
  auto all = impl_->store->ListSandboxes();
  if (!all) return out;
  for (const auto& rec : *all) {
    if (IsPoolMember(rec)) continue;
    if (!HasInstance(rec.state)) continue;
    if (auto u = Measure(*impl_, rec)) out.push_back(std::move(*u));
  }
  return out;
}

}  // namespace space::core
