// cluster/membership: a node's place in the cluster (docs/cluster.md), and the gateways'
// view of every node and route.
//
// Keys (under the cluster's prefix, "/space/" unless told otherwise):
//   nodes/{name}         the node's record (JSON: address, runtimes, labels, load), on its lease
//   routes/{sandbox_id}  {"node": name, "lease": id}, on the owning node's lease
// A route exists while its node's lease lives: a node that dies or is cut off from etcd
// loses its lease, and with it every route; a sandbox id is never routed to two nodes
// because a route is only ever created by compare-and-set on its absence.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "cluster/store.h"
#include "common/json.h"

namespace space::cluster {

struct NodeOptions {
  std::string prefix = "/space/";
  std::string name;         // unique in the cluster: a DNS name (labels of [a-z0-9-], dots)
  int64_t lease_ttl_s = 5;  // liveness: the node is gone this long after its last renewal
  // The node's record as it is now (address, runtimes, labels, load); published at
  // registration and every publish_interval_ms.
  std::function<Json()> describe;
  int64_t publish_interval_ms = 2000;
  // At every registration (joining, and again after the lease was lost): the sandbox ids
  // this node runs, whose routes are claimed (again). The ids whose routes another node
  // holds now are passed to on_given_up (the cluster gave them up: the node kills them).
  // A node name is one machine's: a node registering under a name already registered
  // replaces that registration (its earlier life) and revokes its lease.
  std::function<std::vector<std::string>()> owned;
  std::function<void(const std::vector<std::string>&)> on_given_up;
};

// Node names are DNS names, as Kubernetes names nodes ("ip-10-0-1-2.ec2.internal").
[[nodiscard]] Status CheckNodeName(const std::string& name);

// A node's registration: keeps its lease alive on a thread of its own.
class NodeMembership {
 public:
  // Registers (takes a lease, writes the node record, claims `owned`) before returning.
  [[nodiscard]] static Result<std::unique_ptr<NodeMembership>> Join(Store& store, NodeOptions opts);
  ~NodeMembership();  // stops renewing and revokes the lease: the node leaves at once

  // Routes this sandbox id to this node; kConflict when another node holds it.
  [[nodiscard]] Status ClaimRoute(const std::string& sandbox_id);
  [[nodiscard]] Status ReleaseRoute(const std::string& sandbox_id);
  // Self-fencing: true while the lease may have expired (no renewal for lease_ttl_s):
  // the node must not accept creates then, since it may no longer be routed to.
  bool fenced() const;
  int64_t lease() const { return lease_.load(); }

 private:
  NodeMembership(Store& store, NodeOptions opts);
  Status Register();
  void Loop();

  Store& store_;
  NodeOptions opts_;
  std::atomic<int64_t> lease_{0};
  std::atomic<int64_t> renewed_ms_{0};  // monotonic ms of the last renewal (or registration)
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

// A gateway's cache of nodes and routes: listed once, then kept current by watches.
class ClusterView {
 public:
  [[nodiscard]] static Result<std::unique_ptr<ClusterView>> Open(Store& store,
                                                                 std::string prefix = "/space/");
  // The node a sandbox id is routed to; nullopt when no live node holds it.
  std::optional<std::string> RouteOf(const std::string& sandbox_id) const;
  // Every live node's record, by name.
  std::map<std::string, Json> Nodes() const;
  // Blocks until the view has seen the store's revision `rev` (tests; placement after a write).
  bool WaitForRevision(int64_t rev, int64_t timeout_ms) const;

 private:
  explicit ClusterView(std::string prefix) : prefix_(std::move(prefix)) {}
  void Apply(const std::vector<WatchEvent>& events);

  std::string prefix_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::map<std::string, Json> nodes_;
  std::map<std::string, std::string> routes_;  // sandbox id -> node
  int64_t revision_ = 0;
  std::unique_ptr<Watch> watch_;
};

}  // namespace space::cluster
