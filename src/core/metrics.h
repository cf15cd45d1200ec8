// core/metrics: what the platform counts about itself (creates, commands, output) and what
// it can measure of one sandbox (CPU, memory, disk), for GET /metrics and
// GET /v1/sandboxes/{id}/metrics. Rendering (the Prometheus text format) is api/'s.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace space::core {

// A histogram with fixed upper bounds; thread-safe.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1) {}
  void Observe(double v);
  struct Snapshot {
    std::vector<double> bounds;     // upper bounds, ascending (+Inf is implied)
    std::vector<uint64_t> counts;   // per bucket, not cumulative; one more than bounds (+Inf)
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot Read() const;

 private:
  mutable std::mutex mu_;
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  double sum_ = 0;
  uint64_t count_ = 0;
};

// Seconds: 5 ms .. 2 min (a cold microvm create under TCG takes tens of seconds).
std::vector<double> LatencyBuckets();

// One sandbox's resource use, as measured now. Figures a runtime cannot give are -1.
struct SandboxUsage {
  std::string id, runtime, state;
  int64_t timestamp_ms = 0;
  double cpu_seconds = -1;       // cumulative CPU time of the sandbox's processes
  double cpu_used_pct = -1;      // since the previous reading (or since start): 100 = all of cpu_count
  double cpu_count = 0;          // its CPU limit (cores); the host's cores when unlimited
  int64_t memory_bytes = -1;     // in use, page cache that can be dropped excluded
  int64_t memory_cache_bytes = -1;
  int64_t memory_limit_bytes = 0;  // 0 = unlimited
  int64_t disk_bytes = -1;       // written by the sandbox (its own blocks, not the template's)
  int64_t disk_limit_bytes = 0;  // 0 = unlimited
};

// Counters kept while running (reset when spaced restarts, as Prometheus expects).
struct PlatformCounters {
  std::mutex mu;
  // (runtime, source: template|snapshot|warm_pool|fork, result: succeeded|failed|rejected)
  std::map<std::tuple<std::string, std::string, std::string>, uint64_t> creates;
  // (runtime, source) -> seconds from request to running
  std::map<std::pair<std::string, std::string>, Histogram> create_seconds;
  std::atomic<uint64_t> commands_started{0};
  std::atomic<uint64_t> stdout_bytes{0}, stderr_bytes{0};
  // Previous CPU reading per sandbox, for cpu_used_pct: id -> (cpu seconds, monotonic ns).
  std::map<std::string, std::pair<double, int64_t>> last_cpu;

  void CountCreate(const std::string& runtime, const std::string& source, const std::string& result,
                   double seconds);
};

// A snapshot of the platform's figures.
struct PlatformMetrics {
  std::map<std::pair<std::string, std::string>, int64_t> sandboxes;  // (state, runtime) -> n
  std::map<std::tuple<std::string, std::string, std::string>, uint64_t> creates;
  std::map<std::pair<std::string, std::string>, Histogram::Snapshot> create_seconds;
  uint64_t commands_started = 0;
  uint64_t stdout_bytes = 0, stderr_bytes = 0;
  int64_t creating = 0;                         // cold creates in progress
  std::map<std::string, int64_t> warm_pool;     // template -> idle started members
  std::map<std::string, int64_t> warm_pool_target;
  // (runtime, template snapshot) -> VMs restored and ready (microvm's restore pool)
  std::map<std::pair<std::string, std::string>, int64_t> restore_pool;
  int64_t disk_free_bytes = 0, disk_reserve_bytes = 0;
  bool disk_low = false;
};

}  // namespace space::core
