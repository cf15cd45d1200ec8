// The route table: one line per METHOD and path that spaced's API port serves.
#include "api/route_table.h"

#include <cstdint>
#include <cstdio>

namespace space::api {

namespace {

constexpr RouteEntry kRoutes[] = {
    {"GET", "/healthz", Surface::kHealth},
    {"GET", "/readyz", Surface::kHealth},
    {"GET", "/openapi.json", Surface::kOpenApi},
    {"POST", "/mcp", Surface::kMcp},
    // Prometheus metrics and one sandbox's figures (metrics.cc, docs/metrics.md).
    {"GET", "/metrics", Surface::kV1},
    {"GET", "/v1/sandboxes/{id}/metrics", Surface::kV1},
    // E2B control plane (e2b/routes_e2b_control.cc, docs/e2b-compat.md).
    {"GET", "/sandboxes", Surface::kE2b},
    {"POST", "/sandboxes", Surface::kE2b},
    {"GET", "/v2/sandboxes", Surface::kE2b},
    {"POST", "/v2/sandboxes", Surface::kE2b},
    {"GET", "/sandboxes/metrics", Surface::kE2b},
    {"GET", "/sandboxes/{sandboxID}", Surface::kE2b},
    {"DELETE", "/sandboxes/{sandboxID}", Surface::kE2b},
    {"POST", "/sandboxes/{sandboxID}/pause", Surface::kE2b},
    {"POST", "/sandboxes/{sandboxID}/resume", Surface::kE2b},
    {"POST", "/sandboxes/{sandboxID}/connect", Surface::kE2b},
    {"POST", "/sandboxes/{sandboxID}/timeout", Surface::kE2b},
    {"POST", "/sandboxes/{sandboxID}/refreshes", Surface::kE2b},
    {"PUT", "/sandboxes/{sandboxID}/network", Surface::kE2b},
    {"GET", "/sandboxes/{sandboxID}/metrics", Surface::kE2b},
    {"GET", "/sandboxes/{sandboxID}/logs", Surface::kE2b},
    {"POST", "/sandboxes/{sandboxID}/snapshots", Surface::kE2b},
    {"POST", "/sandboxes/{sandboxID}/fork", Surface::kE2b},
    {"GET", "/v2/sandboxes/{sandboxID}/logs", Surface::kE2b},
    {"POST", "/v2/sandboxes/{sandboxID}/connect", Surface::kE2b},
    {"GET", "/snapshots", Surface::kE2b},
    {"DELETE", "/templates/{templateID}", Surface::kE2b},
    // E2B's template builds (e2b/routes_e2b_templates.cc, docs/e2b-compat.md).
    {"POST", "/v3/templates", Surface::kE2b},
    {"GET", "/templates/{templateID}/files/{hash}", Surface::kE2b},
    {"PUT", "/e2b-template-files/{hash}", Surface::kE2b},
    {"POST", "/v2/templates/{templateID}/builds/{buildID}", Surface::kE2b},
    {"GET", "/templates/{templateID}/builds/{buildID}/status", Surface::kE2b},
    {"GET", "/templates/aliases/{alias}", Surface::kE2b},
    // E2B's template tags (e2b/routes_e2b_tags.cc).
    {"POST", "/templates/tags", Surface::kE2b},
    {"DELETE", "/templates/tags", Surface::kE2b},
    {"GET", "/templates/{templateID}/tags", Surface::kE2b},
    // E2B volumes (e2b/routes_e2b_volumes.cc, docs/volumes.md).
    {"GET", "/volumes", Surface::kE2b},
    {"POST", "/volumes", Surface::kE2b},
    {"GET", "/volumes/{volumeID}", Surface::kE2b},
    {"DELETE", "/volumes/{volumeID}", Surface::kE2b},
    {"GET", "/volumecontent/{volumeID}/dir", Surface::kE2b},
    {"POST", "/volumecontent/{volumeID}/dir", Surface::kE2b},
    {"GET", "/volumecontent/{volumeID}/path", Surface::kE2b},
    {"PATCH", "/volumecontent/{volumeID}/path", Surface::kE2b},
    {"DELETE", "/volumecontent/{volumeID}/path", Surface::kE2b},
    {"GET", "/volumecontent/{volumeID}/file", Surface::kE2b},
    {"PUT", "/volumecontent/{volumeID}/file", Surface::kE2b},
    // v1: access (routes_access.cc).
    // Runtimes, built in and plugins (routes_runtimes.cc, docs/runtime-plugins.md).
    {"GET", "/v1/runtimes", Surface::kV1},
    {"GET", "/v1/whoami", Surface::kV1},
    {"GET", "/v1/keys", Surface::kV1},
    {"POST", "/v1/keys", Surface::kV1},
    {"DELETE", "/v1/keys/{key}", Surface::kV1},
    {"POST", "/v1/sandboxes/{id}/tokens", Surface::kV1},
    // Sandboxes and their lifecycle (routes_sandboxes.cc).
    {"GET", "/v1/sandboxes", Surface::kV1},
    {"POST", "/v1/sandboxes", Surface::kV1},
    {"DELETE", "/v1/sandboxes", Surface::kV1},
    {"GET", "/v1/sandboxes/{id}", Surface::kV1},
    {"PATCH", "/v1/sandboxes/{id}", Surface::kV1},
    {"DELETE", "/v1/sandboxes/{id}", Surface::kV1},
    {"POST", "/v1/sandboxes/{id}/pause", Surface::kV1},
    {"POST", "/v1/sandboxes/{id}/resume", Surface::kV1},
    {"POST", "/v1/sandboxes/{id}/suspend", Surface::kV1},
    {"POST", "/v1/sandboxes/{id}/wake", Surface::kV1},
    {"POST", "/v1/sandboxes/{id}/timeout", Surface::kV1},
    {"GET", "/v1/sandboxes/{id}/network", Surface::kV1},
    {"PUT", "/v1/sandboxes/{id}/network", Surface::kV1},
    {"POST", "/v1/sandboxes/{id}/fork", Surface::kV1},
    {"GET", "/v1/sandboxes/{id}/snapshots", Surface::kV1},
    {"POST", "/v1/sandboxes/{id}/snapshots", Surface::kV1},
    {"GET", "/v1/snapshots", Surface::kV1},
    {"GET", "/v1/snapshots/{snapshot_id}", Surface::kV1},
    {"DELETE", "/v1/snapshots/{snapshot_id}", Surface::kV1},
    {"GET", "/v1/operations", Surface::kV1},
    {"GET", "/v1/operations/{operation_id}", Surface::kV1},
    // Server-sent events of sandbox and operation changes (routes_events.cc, docs/console.md).
    {"GET", "/v1/events", Surface::kV1},
    // Commands (routes_commands.cc).
    {"GET", "/v1/sandboxes/{id}/commands", Surface::kV1},
    {"POST", "/v1/sandboxes/{id}/commands", Surface::kV1},
    {"GET", "/v1/sandboxes/{id}/commands/{command_id}", Surface::kV1},
    {"GET", "/v1/sandboxes/{id}/commands/{command_id}/output", Surface::kV1},
    {"DELETE", "/v1/sandboxes/{id}/commands/{command_id}/output", Surface::kV1},
    {"POST", "/v1/sandboxes/{id}/commands/{command_id}/stdin", Surface::kV1},
    {"POST", "/v1/sandboxes/{id}/commands/{command_id}/resize", Surface::kV1},
    {"POST", "/v1/sandboxes/{id}/commands/{command_id}/signal", Surface::kV1},
    // A WebSocket to a command's terminal (routes_terminal.cc, docs/console.md).
    {"GET", "/v1/sandboxes/{id}/commands/{command_id}/terminal", Surface::kV1},
    // Code cells and contexts (routes_code.cc).
    {"POST", "/v1/sandboxes/{id}/code", Surface::kV1},
    {"GET", "/v1/sandboxes/{id}/code/contexts", Surface::kV1},
    {"POST", "/v1/sandboxes/{id}/code/contexts", Surface::kV1},
    {"DELETE", "/v1/sandboxes/{id}/code/contexts/{context_id}", Surface::kV1},
    {"POST", "/v1/sandboxes/{id}/code/contexts/{context_id}/restart", Surface::kV1},
    {"POST", "/v1/sandboxes/{id}/code/contexts/{context_id}/interrupt", Surface::kV1},
    {"GET", "/v1/sandboxes/{id}/code/{command_id}", Surface::kV1},
    {"POST", "/v1/sandboxes/{id}/code/{command_id}/interrupt", Surface::kV1},
    // Files (routes_files.cc).
    {"GET", "/v1/sandboxes/{id}/files", Surface::kV1},
    {"PUT", "/v1/sandboxes/{id}/files", Surface::kV1},
    {"DELETE", "/v1/sandboxes/{id}/files", Surface::kV1},
    {"GET", "/v1/sandboxes/{id}/files:list", Surface::kV1},
    {"GET", "/v1/sandboxes/{id}/files:stat", Surface::kV1},
    {"POST", "/v1/sandboxes/{id}/files:mkdir", Surface::kV1},
    {"POST", "/v1/sandboxes/{id}/files:rename", Surface::kV1},
    // Templates (routes_templates.cc).
    {"GET", "/v1/templates", Surface::kV1},
    {"POST", "/v1/templates", Surface::kV1},
    {"GET", "/v1/templates/builds/{operation_id}/log", Surface::kV1},
    {"PUT", "/v1/templates/{name_tag}", Surface::kV1},
    {"DELETE", "/v1/templates/{name_tag}", Surface::kV1},
    {"GET", "/v1/templates/{ref}/archive", Surface::kV1},
    {"GET", "/v1/snapshots/{snapshot_id}/archive", Surface::kV1},
    // Named volumes and their files (routes_volumes.cc, docs/volumes.md).
    {"GET", "/v1/volumes", Surface::kV1},
    {"POST", "/v1/volumes", Surface::kV1},
    {"GET", "/v1/volumes/{volume}", Surface::kV1},
    {"DELETE", "/v1/volumes/{volume}", Surface::kV1},
    {"GET", "/v1/volumes/{volume}/files", Surface::kV1},
    {"PUT", "/v1/volumes/{volume}/files", Surface::kV1},
    {"DELETE", "/v1/volumes/{volume}/files", Surface::kV1},
    {"GET", "/v1/volumes/{volume}/files:list", Surface::kV1},
    {"GET", "/v1/volumes/{volume}/files:stat", Surface::kV1},
    {"POST", "/v1/volumes/{volume}/files:mkdir", Surface::kV1},
    {"POST", "/v1/volumes/{volume}/files:rename", Surface::kV1},
    // Ports (routes_ports.cc): signed URLs, and the API path to a port (any method).
    {"POST", "/v1/sandboxes/{id}/urls", Surface::kV1},
#define SPACE_PORT_ROUTES(m)                                      \
  {m, "/v1/sandboxes/{id}/ports/{port}", Surface::kV1},           \
  {m, "/v1/sandboxes/{id}/ports/{port}/{path}", Surface::kV1}
    SPACE_PORT_ROUTES("GET"),
    SPACE_PORT_ROUTES("HEAD"),
    SPACE_PORT_ROUTES("POST"),
    SPACE_PORT_ROUTES("PUT"),
    SPACE_PORT_ROUTES("PATCH"),
    SPACE_PORT_ROUTES("DELETE"),
    SPACE_PORT_ROUTES("OPTIONS"),
#undef SPACE_PORT_ROUTES
};

bool PathMatches(std::string_view pattern, const std::vector<std::string>& s) {
  size_t i = 0, pos = 1;  // patterns start with '/'
  while (pos <= pattern.size()) {
    size_t next = pattern.find('/', pos);
    if (next == std::string_view::npos) next = pattern.size();
    std::string_view seg = pattern.substr(pos, next - pos);
    pos = next + 1;
    const bool last = pos > pattern.size();
    if (seg == "{path}" && last) return i < s.size();
    if (i >= s.size()) return false;
    const bool param = seg.size() > 2 && seg.front() == '{' && seg.back() == '}';
    if (param ? s[i].empty() : s[i] != seg) return false;
    ++i;
  }
  return i == s.size();
}

}  // namespace

std::span<const RouteEntry> RouteTable() { return kRoutes; }

const RouteEntry* MatchRoute(std::string_view method, const std::vector<std::string>& segments,
                             std::vector<std::string>* allowed) {
  allowed->clear();
  const RouteEntry* found = nullptr;
  for (const RouteEntry& r : kRoutes) {
    if (!PathMatches(r.pattern, segments)) continue;
    if (method == r.method) {
      if (!found) found = &r;
    } else {
      allowed->push_back(r.method);
    }
  }
  return found;
}

const std::string& OpenApiEtag() {
  static const std::string etag = [] {
    std::string_view spec = OpenApiJson();
    // FNV-1a 64: stable across builds of the same text (std::hash need not be).
    uint64_t h = 1469598103934665603ull;
    for (char c : spec) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    char buf[24];
    std::snprintf(buf, sizeof buf, "\"%016llx\"", static_cast<unsigned long long>(h));
    return std::string(buf);
  }();
  return etag;
}

}  // namespace space::api
