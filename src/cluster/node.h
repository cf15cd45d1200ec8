// cluster/node: the node side of a cluster (docs/cluster.md), as spaced --role node runs
// it: its membership (lease, record, routes) and the durable record of each sandbox.
//
//   sandboxes/{id}  {"node", "state": "live"|"lost", "template", "runtime", "created_ms",
//                    "metadata"}  no lease: it outlives the node, so gateways can say what
//                    became of a sandbox whose node is gone (unavailable, then lost).
//
// Admit (before a sandbox id reaches a client) writes the record, by compare-and-set on
// its absence, and claims the route; Gone removes both. At every registration the
// sandboxes still here are reconciled against their records: those the cluster gave up
// (record lost, missing, or another node's; route held elsewhere) go to `kill`. Every
// few seconds, records that name this node but no sandbox here (a write etcd applied
// after answering the node that it timed out) are removed.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <memory>
#include <string>
#include <vector>

#include "cluster/membership.h"
#include "cluster/store.h"
#include "common/json.h"

namespace space::cluster {

struct NodeAgentOptions {
  NodeOptions membership;  // its owned and on_given_up are the agent's own
  // The ids of the sandboxes this node runs (at every registration).
  std::function<std::vector<std::string>()> local_sandboxes;
  // Deletes sandboxes the cluster gave up (on the membership's thread; must not block long).
  std::function<void(const std::vector<std::string>&)> kill;
  int64_t sweep_interval_s = 10;
};

class NodeAgent {
 public:
  [[nodiscard]] static Result<std::unique_ptr<NodeAgent>> Start(Store& store, NodeAgentOptions opts);
  ~NodeAgent();  // leaves the cluster (routes go; records stay)

  // Records and routes sandbox `id` here; `summary` holds template, runtime, created_ms,
  // metadata. kUnavailable when cut off, kConflict when the id is another node's (or lost).
  [[nodiscard]] Status Admit(const std::string& id, const Json& summary);
  void Gone(const std::string& id);
  bool fenced() const;
  const std::string& name() const { return opts_.membership.name; }

 private:
  NodeAgent(Store& store, NodeAgentOptions opts) : store_(store), opts_(std::move(opts)) {}
  std::vector<std::string> Reconcile();
  std::string RecordKey(const std::string& id) const {
    return opts_.membership.prefix + "sandboxes/" + id;
  }

  Store& store_;
  NodeAgentOptions opts_;
  void Sweep();

  std::unique_ptr<NodeMembership> owner_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread sweeper_;
  std::atomic<NodeMembership*> membership_{nullptr};  // set once Join has returned
};

}  // namespace space::cluster
