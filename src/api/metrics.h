// api/metrics: GET /metrics (the Prometheus text format, operator key) and
// GET /v1/sandboxes/{id}/metrics, plus the HTTP counters the server keeps for them.
// api/ only.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "common/json.h"
#include "core/metrics.h"

namespace space::api {

struct Ctx;

// Requests by method, route pattern and status; durations by route. Thread-safe.
class HttpMetrics {
 public:
  HttpMetrics();
  void Record(const std::string& method, const std::string& route, int status, double seconds);
  std::atomic<int> inflight{0};

  struct Snapshot {
    std::map<std::tuple<std::string, std::string, int>, uint64_t> requests;
    std::map<std::string, core::Histogram::Snapshot> durations;
    uint64_t too_many_requests = 0, insufficient_storage = 0;
  };
  Snapshot Read() const;
  int64_t started_unix_ms() const { return started_unix_ms_; }

 private:
  mutable std::mutex mu_;
  std::map<std::tuple<std::string, std::string, int>, uint64_t> requests_;
  std::map<std::string, core::Histogram> durations_;
  uint64_t too_many_ = 0, insufficient_ = 0;
  int64_t started_unix_ms_;
};

// The route pattern a request matched ("/v1/sandboxes/{id}/commands/{cid}/output"), so
// label values stay bounded whatever paths clients send; "unmatched" for anything else.
std::string RouteLabel(const std::vector<std::string>& segments);
// The method as a label: the standard ones, else "other".
std::string MethodLabel(const std::string& method);

// The Prometheus text exposition (format 0.0.4) of the platform's and the server's figures;
// with_sandboxes adds one series per sandbox and figure (CPU, memory, disk).
std::string RenderMetrics(const core::PlatformMetrics& m, const HttpMetrics::Snapshot& http,
                          int inflight, int64_t started_unix_ms,
                          const std::vector<core::SandboxUsage>* sandboxes);

// A sandbox's figures as the v1 API answers them (GET /v1/sandboxes/{id}/metrics).
Json UsageJson(const core::SandboxUsage& u);

}  // namespace space::api
