// api/route_table: the table of every route spaced serves on its API port, and the
// OpenAPI description of them (src/api/openapi.json, embedded at build time).
//
// The router (router.cc) serves nothing that is not in this table: a request whose method
// and path match no entry is answered 404 (405 when only the method is wrong) before any
// handler sees it. Tests hold the table and openapi.json to the same set of routes, both
// ways (api_routes_test), and hit every entry on a live spaced (tests/openapi).
// Outside the table, by design: requests whose Host names a sandbox port (routes_ports.cc,
// RoutePortsHost) and E2B envd calls (chosen by the E2b-Sandbox-Id header), which are the
// sandbox's own servers rather than spaced's API, and the web console under /ui/
// (routes_console.cc), a web app rather than part of the API. Pure data and string matching; no Beast.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace space::api {

// Which front end serves a route.
enum class Surface { kHealth, kOpenApi, kMcp, kE2b, kV1 };

struct RouteEntry {
  const char* method;   // GET, POST, ...
  const char* pattern;  // "/v1/sandboxes/{id}": a {name} is one segment; a final {path} is the rest (1+ segments)
  Surface surface;
};

std::span<const RouteEntry> RouteTable();

// The entry for this method and path (segments split on '/'), or null. Then *allowed gets
// the methods the path has under other methods (empty: the path is unknown).
const RouteEntry* MatchRoute(std::string_view method, const std::vector<std::string>& segments,
                             std::vector<std::string>* allowed);

// src/api/openapi.json as built in, and a strong ETag of it.
std::string_view OpenApiJson();
const std::string& OpenApiEtag();

}  // namespace space::api
