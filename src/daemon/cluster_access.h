// What a cluster's nodes share for access (docs/cluster.md): operator keys made on any
// node, and the web console's sessions, kept in the cluster's etcd through a
// cluster::Directory on PREFIX/access/. Both refuse (kUnavailable) until the node has
// joined its cluster and the directory is open. Wiring only.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "api/console_sessions.h"
#include "cluster/directory.h"
#include "core/core.h"

namespace space::daemon {

class ClusterKeys : public core::SharedKeys {
 public:
  void Attach(cluster::Directory* d) { dir_ = d; }
  Status Add(const store::ApiKeyRecord& rec) override;
  Result<std::vector<store::ApiKeyRecord>> List() override;
  Result<std::optional<store::ApiKeyRecord>> FindByHash(const std::string& hash) override;
  Status Remove(const store::ApiKeyRecord& rec) override;

 private:
  Result<cluster::Directory*> Dir() const;
  std::atomic<cluster::Directory*> dir_{nullptr};
};

class ClusterSessions : public api::SessionBacking {
 public:
  ClusterSessions();
  ~ClusterSessions() override;
  void Attach(cluster::Directory* d) { dir_ = d; }
  Status Put(const api::ConsoleSession& s, int64_t idle_s) override;
  Result<std::optional<api::ConsoleSession>> Get(std::string_view id) override;
  // Renews the session's lease, at most once a minute, on a thread of its own.
  void Touch(const api::ConsoleSession& s, int64_t now_s) override;
  void Remove(std::string_view id) override;

 private:
  void Renewals();
  std::atomic<cluster::Directory*> dir_{nullptr};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::map<std::string, int64_t> renewed_s_;  // session digest -> when last renewed
  std::deque<int64_t> leases_;                // to renew
  std::thread renewer_;
};

}  // namespace space::daemon
