// spaced's cluster roles (docs/cluster.md): --role node (today's daemon, registered in
// etcd) and --role gateway (stateless, in front of the nodes). Wiring only.
#pragma once

#include <atomic>
#include <future>
#include <mutex>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cluster/directory.h"
#include "cluster/node.h"
#include "cluster/peer.h"
#include "cluster/store.h"
#include "core/core.h"
#include "daemon/cluster_access.h"

namespace space::daemon {

struct ClusterFlags {
  std::string role = "single";           // single | node | gateway
  std::vector<std::string> etcd;         // endpoints
  std::string prefix = "/space/";
  std::string node_name;                 // default: the host name
  std::string advertise;                 // host:port the gateways dial; default: --listen
  std::vector<std::string> node_labels;  // key=value
  int64_t lease_ttl_s = 5;
  int64_t lost_after_s = 60;
};

// Checks the flags of the role (a node needs etcd and an address gateways can dial).
[[nodiscard]] Status ValidateClusterFlags(ClusterFlags& f, const std::string& listen);

// The node side: hooks for core::Config, then Join once the platform has recovered.
class NodeRole {
 public:
  explicit NodeRole(ClusterFlags flags) : flags_(std::move(flags)) {}
  ~NodeRole();
  // Sets config.admit_sandbox / sandbox_gone (they refuse creates until Join), the
  // cluster's keys, and fetch_template (pulls with `peer_key`, the operator key every
  // node shares).
  void Hook(core::Config& config, std::string peer_key);
  // Opens etcd and joins in the background, trying again each second until it has joined
  // (sandboxes run meanwhile; creates are refused until then). kInvalidArgument at once
  // for flags etcd or the membership refuse.
  [[nodiscard]] Status StartJoining(core::Platform* platform);
  // GET /readyz: "" once joined and not cut off, else why not.
  std::string NotReady() const;
  // The console sessions every node shares (for api::ServerOptions).
  std::shared_ptr<api::SessionBacking> sessions() const { return sessions_; }

 private:
  Json Describe();
  void OpenAccess();
  // Config::fetch_template: pulls `ref` from a live node that has it, once per digest.
  Status FetchTemplate(const std::string& ref);
  Status PullFrom(const std::string& node, const std::string& address, const std::string& ref,
                  const std::string& digest);
  // Config::fetch_snapshot: asks the live nodes in turn for the snapshot's archive.
  Status FetchSnapshot(const std::string& id);
  struct PulledArchive {
    std::string path;
    cluster::PeerFile answer;
    ~PulledArchive();
  };
  [[nodiscard]] Result<std::unique_ptr<PulledArchive>> Pull(const std::string& address, const std::string& what,
                                                           int64_t max_bytes, int64_t timeout_ms);
  // `fn` once for `key` however many callers want it at once; they all get its Status.
  Status Once(const std::string& key, const std::function<Status()>& fn);
  ClusterFlags flags_;
  core::Platform* platform_ = nullptr;
  std::unique_ptr<cluster::Store> store_;
  std::unique_ptr<cluster::NodeAgent> agent_;
  std::unique_ptr<cluster::Directory> access_;  // PREFIX/access/: keys and sessions
  std::shared_ptr<ClusterKeys> keys_ = std::make_shared<ClusterKeys>();
  std::shared_ptr<ClusterSessions> sessions_ = std::make_shared<ClusterSessions>();
  std::atomic<cluster::NodeAgent*> live_{nullptr};
  std::atomic<int64_t> load_seq_{0};
  std::map<std::string, std::string> labels_;
  std::atomic<bool> stop_{false};
  std::string peer_key_, data_dir_;
  std::mutex pulls_mu_;
  std::map<std::string, std::shared_future<Status>> pulls_;  // digest -> the pull under way
  std::thread joiner_;
};

// spaced --role gateway: serves until SIGINT/SIGTERM; returns the exit code.
int RunGateway(const ClusterFlags& flags, const std::string& address, int port,
               const std::string& sandbox_domain, sigset_t* stop);

}  // namespace space::daemon
