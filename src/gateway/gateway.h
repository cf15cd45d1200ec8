// gateway: spaced --role gateway (docs/cluster.md). Stateless: it serves SPACE's whole
// public surface on one port and sends every request to the node that can answer it —
// a sandbox's requests (its API paths, E2B's control and envd calls, its port URLs,
// streams and WebSockets) to the node its route names, creates to a node chosen by
// best-of-K placement, lists to every node (merged). What it knows comes from etcd
// (cluster/membership.h's ClusterView, kept current by a watch).
//
// Nodes authenticate every request themselves (a cluster's nodes share the operator key
// and token signing keys); the gateway passes credentials through untouched.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "cluster/store.h"
#include "common/common.h"

namespace space::gateway {

struct Options {
  std::string address = "127.0.0.1";
  uint16_t port = 7070;                 // 0: any free port (tests)
  cluster::Store* store = nullptr;      // not owned; outlives the gateway
  std::string prefix = "/space/";
  std::string sandbox_domain = "localhost";
  int placement_k = 3;
  // A sandbox whose node is gone answers 503 "node unavailable" at once, and is marked
  // lost this long after (by whichever gateway sees it first).
  int64_t lost_after_s = 60;
  // Without etcd, requests are routed from what the gateway last saw for at most this
  // long; creates fail at once.
  int64_t stale_routes_s = 30;
  int io_threads = 2;
};

class Gateway {
 public:
  [[nodiscard]] static Result<std::unique_ptr<Gateway>> Start(Options opts);
  ~Gateway();
  uint16_t port() const;
  void Stop();
  struct Impl;

 private:
  explicit Gateway(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace space::gateway
