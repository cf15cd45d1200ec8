// cluster/store: the state a SPACE cluster shares (docs/cluster.md), behind a small
// interface with etcd v3 behind it.
//
// Keys and values are opaque bytes. Every write returns the store's revision after it;
// compare-and-set compares a key's mod_revision (0: the key must not exist), so every
// transition of a record is a CAS against the revision it was read at. Leases give
// liveness: a key written with a lease disappears when the lease expires or is revoked.
// Watches deliver every change under a prefix after a revision, in order, on a thread of
// their own, reconnecting to another endpoint when one fails.
//
// Errors: kUnavailable when no endpoint answers (or the cluster has no quorum: etcd then
// times out the request), kNotFound for an expired or unknown lease, kInvalidArgument for
// bad arguments, kInternal for an answer the client cannot read. Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/common.h"

namespace space::cluster {

struct KeyValue {
  std::string key, value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t version = 0;
  int64_t lease = 0;
};

struct WatchEvent {
  enum class Type { kPut, kDelete };
  Type type = Type::kPut;
  KeyValue kv;  // for a delete: key and mod_revision only
};

// A running watch; destroying it stops the watch (and joins its thread).
class Watch {
 public:
  virtual ~Watch() = default;
};

struct WatchHandlers {
  // A batch of events, in revision order.
  std::function<void(const std::vector<WatchEvent>&)> on_events;
  // The watch cannot go on from where it was (the revision was compacted away): the
  // caller must List again and watch from the revision List returned. The watch ends.
  std::function<void(const Error&)> on_lost;
};

class Store {
 public:
  virtual ~Store() = default;

  [[nodiscard]] virtual Result<std::optional<KeyValue>> Get(const std::string& key) = 0;
  // Every key with `prefix`, in key order, and the store's revision they were read at.
  [[nodiscard]] virtual Result<std::vector<KeyValue>> List(const std::string& prefix,
                                                           int64_t* revision = nullptr) = 0;
  // Unconditional write; returns the new revision.
  [[nodiscard]] virtual Result<int64_t> Put(const std::string& key, const std::string& value,
                                            int64_t lease = 0) = 0;
  // Writes only when the key's mod_revision is `expected` (0: only when absent). The new
  // revision, or nullopt when the comparison failed (nothing written).
  [[nodiscard]] virtual Result<std::optional<int64_t>> CompareAndSet(const std::string& key,
                                                                     int64_t expected,
                                                                     const std::string& value,
                                                                     int64_t lease = 0) = 0;
  // Deletes only when the key's mod_revision is `expected`; false when it was not.
  [[nodiscard]] virtual Result<bool> CompareAndDelete(const std::string& key, int64_t expected) = 0;
  [[nodiscard]] virtual Status Delete(const std::string& key) = 0;

  // A lease of `ttl_s` seconds; its id.
  [[nodiscard]] virtual Result<int64_t> GrantLease(int64_t ttl_s) = 0;
  // Renews the lease once; returns its remaining TTL in seconds (kNotFound: expired).
  [[nodiscard]] virtual Result<int64_t> KeepAlive(int64_t lease) = 0;
  [[nodiscard]] virtual Status RevokeLease(int64_t lease) = 0;

  // Every change under `prefix` after `after_revision` (so List's revision is where to
  // start). The handlers run on the watch's thread.
  [[nodiscard]] virtual Result<std::unique_ptr<Watch>> WatchPrefix(const std::string& prefix,
                                                                   int64_t after_revision,
                                                                   WatchHandlers handlers) = 0;
};

struct EtcdOptions {
  std::vector<std::string> endpoints;  // "host:port" or "http://host:port"; tried in turn
  int64_t request_timeout_ms = 5000;
};

// A Store on etcd v3's JSON gateway (Debian's etcd-server 3.4). Fails with
// kInvalidArgument on a bad endpoint; it does not connect until the first request.
[[nodiscard]] Result<std::unique_ptr<Store>> OpenEtcd(const EtcdOptions& opts);

}  // namespace space::cluster
