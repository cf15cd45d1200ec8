// cluster/placement: which node a new sandbox goes to (docs/cluster.md, "Placement").
//
// Best-of-K, as E2B places: among the live nodes that can take the request at all (the
// runtime it names works there, every label it asks for matches, its memory fits in what
// the node last published minus what this gateway has placed there since), K are
// sampled at random and ordered by load (the mean of the shares of memory, CPU and
// sandbox slots in use once the request is placed; the slots tell apart nodes on equal
// machines whose sandboxes ask for no limits), least loaded first. The gateway asks them in
// that order; a node may still refuse (it has the last word), and the next is tried.
// A node that already has the request's template is preferred (kPullPenalty), and the
// sample always holds the least loaded such node when there is one, so a template built
// on one node does not send creates to nodes that must pull it while it has room.
// In-flight reservations keep two creates from this gateway landing on one node's last
// free gigabyte before the node publishes its load again. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/json.h"

namespace space::cluster {

struct PlacementRequest {
  int64_t memory_bytes = 0;
  int64_t cpu_millis = 0;
  std::string runtime;                        // empty: the node's default
  std::map<std::string, std::string> labels;  // every one must match the node's
  // The template it is made from ("name:tag", "name" meaning its latest, or a digest);
  // empty: the default, which every node has. Nodes that have it rank ahead of nodes that
  // would pull it first, unless they are more loaded by kPullPenalty.
  std::string template_ref;
};

// What a node without the request's template is ranked at on top of its own load (a share
// in 0..1, the mean of memory, CPU and slots): a pull costs seconds (docs/benchmarks.md),
// so a node that has the template wins unless it is a tenth of its capacity busier.
inline constexpr double kPullPenalty = 0.1;

// What a node publishes (its record in nodes/{name}) that placement reads:
//   {"free_memory": bytes, "total_memory": bytes, "free_cpu_millis": n,
//    "total_cpu_millis": n (default cpus x 1000), "cpus": n,
//    "sandboxes": n, "max_sandboxes": n, "runtimes": ["oci", ...],
//    "labels": {...}, "accepting": bool, "load_seq": n,
//    "templates": {"name:tag": {"digest": "sha256:..."}, ...}}
// load_seq increases with every publication, so reservations made before it are dropped.
struct NodeLoad {
  std::string name;
  int64_t free_memory = 0;
  int64_t total_memory = 0;
  int64_t free_cpu_millis = 0;
  int64_t cpus = 1;
  int64_t total_cpu_millis = 0;  // 0: cpus x 1000
  int64_t sandboxes = 0;        // running there now
  int64_t max_sandboxes = 1000; // what the node means to hold at most
  std::vector<std::string> runtimes;
  std::map<std::string, std::string> labels;
  bool accepting = true;
  int64_t load_seq = 0;
  std::set<std::string> templates;  // "name:tag" and digests of the templates it has
  bool HasTemplate(const std::string& ref) const;
  static NodeLoad FromRecord(const std::string& name, const Json& rec);
};

class Placer {
 public:
  explicit Placer(int k = 3, uint64_t seed = std::random_device{}()) : k_(k), rng_(seed) {}

  // Up to K candidates, least loaded first; empty when no node can take the request
  // (`why` then says what was missing: no node runs the runtime, none has the labels, none
  // has the room).
  std::vector<std::string> Candidates(const std::vector<NodeLoad>& nodes, const PlacementRequest& req,
                                      std::string* why);
  // The gateway sent the request to `node`: count it there until the node's next load.
  void Reserve(const std::string& node, int64_t load_seq, const PlacementRequest& req);
  // The node refused, or the create failed: its reservation goes. A sandbox placed stays
  // reserved until the node publishes a newer load (which counts it).
  void Release(const std::string& node, const PlacementRequest& req);

 private:
  struct Reserved {
    int64_t load_seq = 0;
    int64_t memory = 0, cpu = 0, sandboxes = 0;
  };
  int k_;
  std::mutex mu_;
  std::mt19937_64 rng_;
  std::map<std::string, Reserved> reserved_;
};

}  // namespace space::cluster
