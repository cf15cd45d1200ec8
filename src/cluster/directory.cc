#include "cluster/directory.h"

#include <spdlog/spdlog.h>

namespace space::cluster {

Result<std::unique_ptr<Directory>> Directory::Open(Store& store, std::string prefix, int misses_per_s) {
  std::unique_ptr<Directory> d(new Directory(store, std::move(prefix), misses_per_s));
  int64_t rev = 0;
  auto all = store.List(d->prefix_, &rev);
  if (!all) return tl::unexpected(all.error());
  for (auto& kv : *all) {
    std::string name = kv.key.substr(d->prefix_.size());
    d->entries_[name] = std::move(kv);
  }
  Directory* self = d.get();
  auto w = store.WatchPrefix(d->prefix_, rev,
                             {.on_events = [self](const std::vector<WatchEvent>& e) { self->Apply(e); },
                              .on_lost = [self](const Error& e) {
                                spdlog::warn("cluster directory {}: {}; reading from etcd from now on",
                                             self->prefix_, e.message);
                                std::lock_guard l(self->mu_);
                                self->watch_lost_ = true;
                              }});
  if (!w) return tl::unexpected(w.error());
  d->watch_ = std::move(*w);
  return d;
}

Directory::~Directory() { watch_.reset(); }

void Directory::Apply(const std::vector<WatchEvent>& events) {
  std::lock_guard l(mu_);
  for (const WatchEvent& e : events) {
    if (e.kv.key.rfind(prefix_, 0) != 0) continue;
    std::string name = e.kv.key.substr(prefix_.size());
    auto it = entries_.find(name);
    // A store read on a miss may already hold a newer version than a late event, and an
    // entry removed here must not come back with the event of its last write.
    if (it != entries_.end() && it->second.mod_revision > e.kv.mod_revision) continue;
    auto gone = removed_.find(name);
    if (e.type == WatchEvent::Type::kPut) {
      if (gone != removed_.end() && e.kv.mod_revision <= gone->second) continue;
      entries_[name] = e.kv;
    } else {
      if (it != entries_.end()) entries_.erase(it);
      if (gone != removed_.end()) removed_.erase(gone);
    }
  }
}

bool Directory::TakeMissBudget() {
  const int64_t second = MonotonicNanos() / 1000000000;
  if (second != budget_second_) {
    budget_second_ = second;
    misses_ = 0;
  }
  return misses_++ < misses_per_s_;
}

Result<std::optional<KeyValue>> Directory::Get(const std::string& name) {
  {
    std::lock_guard l(mu_);
    auto it = entries_.find(name);
    if (!watch_lost_ && it != entries_.end()) return std::optional<KeyValue>(it->second);
    // The store just failed: the cache answers for a while, so that requests with
    // unknown credentials do not each wait out etcd's timeout.
    if (MonotonicNanos() < quiet_until_ns_) {
      if (it != entries_.end()) return std::optional<KeyValue>(it->second);
      return Fail(Errc::kUnavailable, "the cluster's etcd is out of reach");
    }
    if (!watch_lost_ && !TakeMissBudget()) return std::optional<KeyValue>();
  }
  auto got = store_.Get(prefix_ + name);
  if (!got) {
    // Out of reach: what the cache last saw.
    std::lock_guard l(mu_);
    quiet_until_ns_ = MonotonicNanos() + 2'000'000'000;
    auto it = entries_.find(name);
    if (it != entries_.end()) return std::optional<KeyValue>(it->second);
    return tl::unexpected(got.error());
  }
  std::lock_guard l(mu_);
  if (*got) {
    auto it = entries_.find(name);
    if (it == entries_.end() || it->second.mod_revision < (*got)->mod_revision) entries_[name] = **got;
  } else if (watch_lost_) {
    entries_.erase(name);
  }
  return std::move(*got);
}

std::map<std::string, KeyValue> Directory::List(const std::string& under) {
  bool lost;
  {
    std::lock_guard l(mu_);
    lost = watch_lost_;
  }
  if (lost) {
    if (auto all = store_.List(prefix_ + under)) {
      std::lock_guard l(mu_);
      for (auto it = entries_.lower_bound(under); it != entries_.end() && it->first.rfind(under, 0) == 0;)
        it = entries_.erase(it);
      for (auto& kv : *all) entries_[kv.key.substr(prefix_.size())] = std::move(kv);
    }
  }
  std::lock_guard l(mu_);
  std::map<std::string, KeyValue> out;
  for (auto it = entries_.lower_bound(under); it != entries_.end() && it->first.rfind(under, 0) == 0; ++it)
    out.insert(*it);
  return out;
}

Result<bool> Directory::Create(const std::string& name, const std::string& value, int64_t lease) {
  auto rev = store_.CompareAndSet(prefix_ + name, 0, value, lease);
  if (!rev) return tl::unexpected(rev.error());
  if (!*rev) return false;
  KeyValue kv;
  kv.key = prefix_ + name;
  kv.value = value;
  kv.create_revision = kv.mod_revision = **rev;
  kv.version = 1;
  kv.lease = lease;
  std::lock_guard l(mu_);
  auto it = entries_.find(name);
  if (it == entries_.end() || it->second.mod_revision < kv.mod_revision) entries_[name] = std::move(kv);
  return true;
}

Result<bool> Directory::Remove(const std::string& name, int64_t revision) {
  if (revision == 0) {
    SPACE_TRY(store_.Delete(prefix_ + name));
  } else {
    auto done = store_.CompareAndDelete(prefix_ + name, revision);
    if (!done) return tl::unexpected(done.error());
    if (!*done) {
      auto now = store_.Get(prefix_ + name);
      if (!now) return tl::unexpected(now.error());
      if (*now) return false;  // changed, not gone
    }
  }
  std::lock_guard l(mu_);
  if (auto it = entries_.find(name); it != entries_.end()) {
    removed_[name] = it->second.mod_revision;
    entries_.erase(it);
  }
  return true;
}

}  // namespace space::cluster
