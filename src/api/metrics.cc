// GET /metrics (Prometheus text format 0.0.4) and GET /v1/sandboxes/{id}/metrics.
//
// No Prometheus client library is packaged for C++ in Debian 12, and the text format is
// small: this file writes it, and tests/integration/metrics_test.cc has `promtool check
// metrics` (Debian's prometheus package) validate what it writes.
#include "api/metrics.h"

#include <fmt/format.h>

#include <cmath>

#include "api/http.h"

namespace space::api {

// ---------------------------------------------------------------- HTTP counters

HttpMetrics::HttpMetrics() : started_unix_ms_(NowUnixMillis()) {}

void HttpMetrics::Record(const std::string& method, const std::string& route, int status,
                         double seconds) {
  std::lock_guard l(mu_);
  requests_[{method, route, status}]++;
  durations_.try_emplace(route, core::LatencyBuckets()).first->second.Observe(seconds);
  if (status == 429) too_many_++;
  if (status == 507) insufficient_++;
}

HttpMetrics::Snapshot HttpMetrics::Read() const {
  std::lock_guard l(mu_);
  Snapshot s;
  s.requests = requests_;
  for (const auto& [route, h] : durations_) s.durations.emplace(route, h.Read());
  s.too_many_requests = too_many_;
  s.insufficient_storage = insufficient_;
  return s;
}

// ---------------------------------------------------------------- route patterns

namespace {

// Every route spaced serves, as '/'-separated segments: a literal, "{name}" (any one
// segment), "a|b|c" (one of these literals, kept as sent) or a final "**" (any rest).
constexpr const char* kRoutes[] = {
    "/healthz",
    "/readyz",
    "/metrics",
    "/openapi.json",
    "/mcp",
    "/v1/whoami",
    "/v1/keys",
    "/v1/keys/{id}",
    "/v1/sandboxes",
    "/v1/sandboxes/{id}",
    "/v1/sandboxes/{id}/pause|resume|suspend|wake|timeout|network|snapshots|fork|tokens|urls|metrics",
    "/v1/sandboxes/{id}/files|files:list|files:stat|files:mkdir|files:rename",
    "/v1/sandboxes/{id}/commands",
    "/v1/sandboxes/{id}/commands/{cid}",
    "/v1/sandboxes/{id}/commands/{cid}/output|stdin|resize|signal",
    "/v1/sandboxes/{id}/ports/{port}/**",
    "/v1/snapshots",
    "/v1/snapshots/{id}",
    "/v1/operations",
    "/v1/operations/{id}",
    "/v1/templates",
    "/v1/templates/builds/{id}/log",
    // The E2B-compatible surface (api/e2b).
    "/sandboxes",
    "/v2/sandboxes",
    "/sandboxes/{id}",
    "/sandboxes/{id}/resume|pause|timeout|metrics|connect|refreshes",
    "/v2/sandboxes/{id}/resume|pause|timeout|metrics|connect|logs",
    "/health",
    "/files",
    "/process.Process/Start|Connect|List|SendInput|StreamInput|CloseStdin|SendSignal|Update",
    "/filesystem.Filesystem/Stat|MakeDir|Move|ListDir|Remove|WatchDir|CreateWatcher|GetWatcherEvents|RemoveWatcher",
};

std::vector<std::string_view> Split(std::string_view p, char sep) {
  std::vector<std::string_view> out;
  size_t pos = 0;
  while (pos <= p.size()) {
    size_t next = p.find(sep, pos);
    if (next == std::string_view::npos) next = p.size();
    if (next > pos) out.push_back(p.substr(pos, next - pos));
    pos = next + 1;
  }
  return out;
}

bool MatchRoute(std::string_view pattern, const std::vector<std::string>& s, std::string* label) {
  auto pat = Split(pattern, '/');
  std::string out;
  size_t i = 0;
  for (; i < pat.size(); ++i) {
    if (pat[i] == "**") {
      if (i >= s.size()) return false;
      out += "/**";
      *label = out;
      return true;
    }
    if (i >= s.size()) return false;
    if (pat[i].front() == '{') {
      out += "/" + std::string(pat[i]);
      continue;
    }
    bool any = false;
    for (auto alt : Split(pat[i], '|')) any |= alt == s[i];
    if (!any) return false;
    out += "/" + s[i];
  }
  if (i != s.size()) return false;
  *label = out;
  return true;
}

}  // namespace

std::string RouteLabel(const std::vector<std::string>& segments) {
  std::string label;
  for (const char* r : kRoutes) {
    if (MatchRoute(r, segments, &label)) return label;
  }
  return "unmatched";
}

std::string MethodLabel(const std::string& method) {
  for (const char* m : {"GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"}) {
    if (method == m) return method;
  }
  return "other";
}

// ---------------------------------------------------------------- exposition

namespace {

class Exposition {
 public:
  // Starts a metric family: its HELP and TYPE lines.
  void Family(std::string_view name, std::string_view type, std::string_view help) {
    out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, EscapeHelp(help), name, type);
  }
  using Labels = std::vector<std::pair<std::string_view, std::string>>;
  void Sample(std::string_view name, const Labels& labels, double value) {
    out_ += name;
    if (!labels.empty()) {
      out_ += '{';
      for (size_t i = 0; i < labels.size(); ++i) {
        if (i) out_ += ',';
        out_ += fmt::format("{}=\"{}\"", labels[i].first, EscapeLabel(labels[i].second));
      }
      out_ += '}';
    }
    out_ += ' ';
    out_ += Number(value);
    out_ += '\n';
  }
  void Histogram(std::string_view name, Labels labels, const core::Histogram::Snapshot& h) {
    uint64_t cumulative = 0;
    const std::string bucket = std::string(name) + "_bucket";
    for (size_t i = 0; i <= h.bounds.size(); ++i) {
      cumulative += h.counts[i];
      Labels l = labels;
      l.emplace_back("le", i < h.bounds.size() ? Number(h.bounds[i]) : "+Inf");
      Sample(bucket, l, static_cast<double>(cumulative));
    }
    Sample(std::string(name) + "_sum", labels, h.sum);
    Sample(std::string(name) + "_count", labels, static_cast<double>(h.count));
  }
  std::string Take() { return std::move(out_); }

  static std::string Number(double v) {
    if (std::isnan(v)) return "NaN";
    if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
    if (v == std::floor(v) && std::fabs(v) < 1e15) return fmt::format("{}", static_cast<int64_t>(v));
    return fmt::format("{}", v);
  }

 private:
  static std::string EscapeLabel(std::string_view s) {
    std::string out;
    for (char c : s) {
      if (c == '\\') out += "\\\\";
      else if (c == '"') out += "\\\"";
      else if (c == '\n') out += "\\n";
      else out += c;
    }
    return out;
  }
  static std::string EscapeHelp(std::string_view s) {
    std::string out;
    for (char c : s) {
      if (c == '\\') out += "\\\\";
      else if (c == '\n') out += "\\n";
      else out += c;
    }
    return out;
  }
  std::string out_;
};

}  // namespace

std::string RenderMetrics(const core::PlatformMetrics& m, const HttpMetrics::Snapshot& http,
                          int inflight, int64_t started_unix_ms,
                          const std::vector<core::SandboxUsage>* sandboxes) {
  Exposition e;
  e.Family("spaced_start_time_seconds", "gauge", "When this spaced process started (Unix time).");
  e.Sample("spaced_start_time_seconds", {}, started_unix_ms / 1000.0);

  e.Family("spaced_sandboxes", "gauge", "Sandboxes by state and runtime (warm-pool members not included).");
  for (const auto& [key, n] : m.sandboxes) {
    e.Sample("spaced_sandboxes", {{"state", key.first}, {"runtime", key.second}}, static_cast<double>(n));
  }
  e.Family("spaced_sandboxes_creating_cold", "gauge", "Cold creates accepted and not yet finished.");
  e.Sample("spaced_sandboxes_creating_cold", {}, static_cast<double>(m.creating));

  e.Family("spaced_sandbox_creates_total", "counter",
           "Sandbox creates by runtime, source (template, snapshot, warm_pool, fork) and result "
           "(succeeded, failed, rejected: refused at the limit of creates in progress).");
  for (const auto& [key, n] : m.creates) {
    e.Sample("spaced_sandbox_creates_total",
             {{"runtime", std::get<0>(key)}, {"source", std::get<1>(key)}, {"result", std::get<2>(key)}},
             static_cast<double>(n));
  }
  e.Family("spaced_sandbox_create_duration_seconds", "histogram",
           "Time from a create request to its sandbox running, for creates that succeeded.");
  for (const auto& [key, h] : m.create_seconds) {
    e.Histogram("spaced_sandbox_create_duration_seconds", {{"runtime", key.first}, {"source", key.second}}, h);
  }

  e.Family("spaced_commands_started_total", "counter", "Commands started in sandboxes.");
  e.Sample("spaced_commands_started_total", {}, static_cast<double>(m.commands_started));
  e.Family("spaced_command_output_bytes_total", "counter", "Command output stored, by stream.");
  e.Sample("spaced_command_output_bytes_total", {{"stream", "stdout"}}, static_cast<double>(m.stdout_bytes));
  e.Sample("spaced_command_output_bytes_total", {{"stream", "stderr"}}, static_cast<double>(m.stderr_bytes));

  e.Family("spaced_warm_pool_sandboxes", "gauge", "Started, unclaimed sandboxes in each warm pool.");
  for (const auto& [ref, n] : m.warm_pool) {
    e.Sample("spaced_warm_pool_sandboxes", {{"template", ref}}, static_cast<double>(n));
  }
  e.Family("spaced_warm_pool_target_sandboxes", "gauge", "The size each warm pool is kept at.");
  for (const auto& [ref, n] : m.warm_pool_target) {
    e.Sample("spaced_warm_pool_target_sandboxes", {{"template", ref}}, static_cast<double>(n));
  }
  e.Family("spaced_restore_pool_vms", "gauge",
           "VMs restored from a template snapshot and kept ready, by runtime and template snapshot.");
  for (const auto& [key, n] : m.restore_pool) {
    e.Sample("spaced_restore_pool_vms", {{"runtime", key.first}, {"snapshot", key.second}}, static_cast<double>(n));
  }

  e.Family("spaced_data_dir_free_bytes", "gauge", "Free space in the data dir at the last look.");
  e.Sample("spaced_data_dir_free_bytes", {}, static_cast<double>(m.disk_free_bytes));
  e.Family("spaced_data_dir_reserve_bytes", "gauge", "Free space kept in reserve (below it: 507).");
  e.Sample("spaced_data_dir_reserve_bytes", {}, static_cast<double>(m.disk_reserve_bytes));
  e.Family("spaced_data_dir_low", "gauge", "1 while the data dir's free space is below its reserve.");
  e.Sample("spaced_data_dir_low", {}, m.disk_low ? 1 : 0);

  e.Family("spaced_http_requests_total", "counter", "HTTP requests by method, route pattern and status.");
  for (const auto& [key, n] : http.requests) {
    e.Sample("spaced_http_requests_total",
             {{"method", std::get<0>(key)}, {"route", std::get<1>(key)},
              {"status", std::to_string(std::get<2>(key))}},
             static_cast<double>(n));
  }
  e.Family("spaced_http_request_duration_seconds", "histogram",
           "HTTP request durations by route pattern (streams and long polls included).");
  for (const auto& [route, h] : http.durations) {
    e.Histogram("spaced_http_request_duration_seconds", {{"route", route}}, h);
  }
  e.Family("spaced_http_too_many_requests_total", "counter",
           "Requests answered 429 (a limit reached: concurrent requests or creates; retry later).");
  e.Sample("spaced_http_too_many_requests_total", {}, static_cast<double>(http.too_many_requests));
  e.Family("spaced_http_insufficient_storage_total", "counter",
           "Requests answered 507 (the data dir's disk reserve or a sandbox's quota reached).");
  e.Sample("spaced_http_insufficient_storage_total", {}, static_cast<double>(http.insufficient_storage));
  e.Family("spaced_http_inflight_requests", "gauge", "HTTP requests being served now (/healthz aside).");
  e.Sample("spaced_http_inflight_requests", {}, inflight);

  if (sandboxes) {
    auto labels = [](const core::SandboxUsage& u) {
      return Exposition::Labels{{"sandbox", u.id}, {"runtime", u.runtime}};
    };
    e.Family("spaced_sandbox_cpu_seconds_total", "counter", "CPU time used by a sandbox's processes.");
    for (const auto& u : *sandboxes) {
      if (u.cpu_seconds >= 0) e.Sample("spaced_sandbox_cpu_seconds_total", labels(u), u.cpu_seconds);
    }
    e.Family("spaced_sandbox_cpu_limit_cores", "gauge", "A sandbox's CPU limit in cores (the host's when unlimited).");
    for (const auto& u : *sandboxes) e.Sample("spaced_sandbox_cpu_limit_cores", labels(u), u.cpu_count);
    e.Family("spaced_sandbox_memory_bytes", "gauge", "Memory a sandbox uses (reclaimable page cache excluded).");
    for (const auto& u : *sandboxes) {
      if (u.memory_bytes >= 0) e.Sample("spaced_sandbox_memory_bytes", labels(u), static_cast<double>(u.memory_bytes));
    }
    e.Family("spaced_sandbox_memory_limit_bytes", "gauge", "A sandbox's memory limit (0: none).");
    for (const auto& u : *sandboxes) {
      e.Sample("spaced_sandbox_memory_limit_bytes", labels(u), static_cast<double>(u.memory_limit_bytes));
    }
    e.Family("spaced_sandbox_disk_bytes", "gauge", "Bytes a sandbox wrote to its disk (the template's not counted).");
    for (const auto& u : *sandboxes) {
      if (u.disk_bytes >= 0) e.Sample("spaced_sandbox_disk_bytes", labels(u), static_cast<double>(u.disk_bytes));
    }
    e.Family("spaced_sandbox_disk_limit_bytes", "gauge", "A sandbox's disk limit (0: none).");
    for (const auto& u : *sandboxes) {
      e.Sample("spaced_sandbox_disk_limit_bytes", labels(u), static_cast<double>(u.disk_limit_bytes));
    }
  }
  return e.Take();
}

Json UsageJson(const core::SandboxUsage& u) {
  auto num = [](double v) { return v < 0 ? Json(nullptr) : Json(v); };
  auto bytes = [](int64_t v) { return v < 0 ? Json(nullptr) : Json(v); };
  return {{"sandbox_id", u.id},
          {"runtime", u.runtime},
          {"state", u.state},
          {"timestamp", FormatRfc3339(u.timestamp_ms)},
          {"cpu_seconds", num(u.cpu_seconds)},
          {"cpu_used_pct", num(u.cpu_used_pct)},
          {"cpu_count", u.cpu_count},
          {"memory_bytes", bytes(u.memory_bytes)},
          {"memory_cache_bytes", bytes(u.memory_cache_bytes)},
          {"memory_limit_bytes", u.memory_limit_bytes},
          {"disk_bytes", bytes(u.disk_bytes)},
          {"disk_limit_bytes", u.disk_limit_bytes}};
}

// ---------------------------------------------------------------- routes

Awaitable<bool> RouteMetrics(Ctx& ctx) {
  const auto& s = ctx.segments;
  core::Platform* p = ctx.platform;
  if (s.size() == 1 && s[0] == "metrics") {
    if (ctx.method != "GET") {
      co_await ctx.ReplyError(Error{Errc::kInvalidArgument, 0, "method not allowed"});
      co_return true;
    }
    const std::string want = ctx.Query("sandboxes");
    if (!want.empty() && want != "0" && want != "1" && want != "true" && want != "false") {
      co_await ctx.ReplyError(Error{Errc::kInvalidArgument, 0, "sandboxes must be 0 or 1"});
      co_return true;
    }
    const bool with_sandboxes = want == "1" || want == "true";
    auto m = co_await ctx.Blocking([&] { return p->Metrics(); });
    std::vector<core::SandboxUsage> usage;
    if (with_sandboxes) usage = co_await ctx.Blocking([&] { return p->UsageOfAll(); });
    HttpMetrics* hm = ctx.http_metrics;
    std::string text = RenderMetrics(m, hm ? hm->Read() : HttpMetrics::Snapshot{},
                                     hm ? hm->inflight.load() : 0, hm ? hm->started_unix_ms() : 0,
                                     with_sandboxes ? &usage : nullptr);
    co_await ctx.ReplyBytes(200, std::move(text), "text/plain; version=0.0.4; charset=utf-8");
    co_return true;
  }
  if (s.size() == 4 && s[0] == "v1" && s[1] == "sandboxes" && s[3] == "metrics") {
    if (ctx.method != "GET") {
      co_await ctx.ReplyError(Error{Errc::kInvalidArgument, 0, "method not allowed"});
      co_return true;
    }
    const std::string id = s[2];
    auto u = co_await ctx.Blocking([&] { return p->Usage(id); });
    if (!u) {
      co_await ctx.ReplyError(u.error());
    } else {
      co_await ctx.Reply(200, UsageJson(*u));
    }
    co_return true;
  }
  co_return false;
}

}  // namespace space::api
