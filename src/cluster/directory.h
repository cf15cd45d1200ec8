// cluster/directory: what a cluster's nodes share besides sandboxes (docs/cluster.md) —
// operator API keys and the web console's sessions — as a prefix of the store that every
// node caches and watches.
//
//   keys/{hash}        {"id", "name", "hint", "created_ms"}; hash = auth::HashApiKey(key)
//   key-names/{name}   {"hash", "created_ms"}: the name's claim, made first, by CAS
//   sessions/{digest}  {"csrf", "key_hash", "key_name", "created_s"}, on a lease of the
//                      session's idle time; digest = a hash of the session id (the cookie
//                      itself is in no store)
//
// Reads come from the cache the watch keeps; a miss asks the store (another node may have
// written a moment ago, before its event arrived), at most `misses_per_s` times a second
// so a flood of bad credentials cannot flood etcd, and not at all for two seconds after
// the store failed to answer. While the store is out of reach the cache answers: keys and sessions seen before keep working, and a revocation made
// meanwhile takes effect once the watch catches up. Thread-safe.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "cluster/store.h"

namespace space::cluster {

class Directory {
 public:
  // Lists `prefix` and watches it (kUnavailable while the store is out of reach).
  [[nodiscard]] static Result<std::unique_ptr<Directory>> Open(Store& store, std::string prefix,
                                                               int misses_per_s = 50);
  ~Directory();

  // The entry `name` (a key under the prefix), or nullopt.
  [[nodiscard]] Result<std::optional<KeyValue>> Get(const std::string& name);
  // Every entry whose name starts with `under`, by name (from the cache).
  std::map<std::string, KeyValue> List(const std::string& under);
  // Writes `name` only if absent: false when it exists.
  [[nodiscard]] Result<bool> Create(const std::string& name, const std::string& value,
                                    int64_t lease = 0);
  // Removes `name` if its mod_revision is `revision` (0: whatever it is). False when it
  // changed meanwhile (nothing removed); true when removed or already gone.
  [[nodiscard]] Result<bool> Remove(const std::string& name, int64_t revision = 0);
  Store& store() { return store_; }

 private:
  Directory(Store& store, std::string prefix, int misses_per_s)
      : store_(store), prefix_(std::move(prefix)), misses_per_s_(misses_per_s) {}
  void Apply(const std::vector<WatchEvent>& events);
  bool TakeMissBudget();

  Store& store_;
  const std::string prefix_;
  const int misses_per_s_;
  std::mutex mu_;
  std::map<std::string, KeyValue> entries_;  // by name (key without the prefix)
  // Removed here, by the revision they had: their late put events are stale (until the
  // delete's own event comes).
  std::map<std::string, int64_t> removed_;
  bool watch_lost_ = false;                  // then every read asks the store
  int64_t quiet_until_ns_ = 0;              // after a failed read: cache only until then
  int64_t budget_second_ = 0;
  int misses_ = 0;
  std::unique_ptr<Watch> watch_;
};

}  // namespace space::cluster
