// The router: the route table decides what is served; the route groups serve it.
#include "api/router.h"

#include "api/e2b/e2b.h"
#include "api/route_table.h"

namespace space::api {

namespace {

std::string Join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) {
    if (out.find(s) != std::string::npos) continue;
    out += (out.empty() ? "" : ", ") + s;
  }
  return out;
}

// No entry: 404, or 405 with Allow when the path exists under other methods. The E2B
// control plane answers in its own error format ({"code","message"}).
Awaitable<void> NoRoute(Ctx& ctx, const std::vector<std::string>& allowed) {
  // E2B's paths answer 404 in E2B's shape whatever the method: E2B's API never says 405.
  const auto& s = ctx.segments;
  const bool e2b = !s.empty() && (s[0] == "sandboxes" || s[0] == "v2" || s[0] == "v3" ||
                                  s[0] == "snapshots" || s[0] == "templates" || s[0] == "volumes" ||
                                  s[0] == "volumecontent");
  const int status = allowed.empty() || e2b ? 404 : 405;
  const std::string message = allowed.empty() || e2b ? "no route " + ctx.method + " " + ctx.path
                                              : "method not allowed: " + ctx.path + " takes " + Join(allowed);
  std::vector<std::pair<std::string, std::string>> headers;
  if (!allowed.empty() && !e2b) headers.emplace_back("Allow", Join(allowed));
  Json body = e2b ? Json{{"code", status}, {"message", message}}
                  : ErrorBody(Error{allowed.empty() ? Errc::kNotFound : Errc::kInvalidArgument, 0, message});
  co_await ctx.Reply(status, body, headers);
}

Awaitable<void> ServeOpenApi(Ctx& ctx) {
  std::vector<std::pair<std::string, std::string>> headers = {{"ETag", OpenApiEtag()},
                                                              {"Cache-Control", "no-cache"}};
  if (ctx.Header(http::field::if_none_match) == OpenApiEtag()) {
    co_await ctx.ReplyBytes(304, "", "application/json", headers);
    co_return;
  }
  co_await ctx.ReplyBytes(200, std::string(OpenApiJson()), "application/json", headers);
}

}  // namespace

Awaitable<void> RouteRequest(Ctx& ctx) {
  // A sandbox's port (Host {port}-{id}.{domain}) is never spaced's own API, whatever the path.
  if (co_await RoutePortsHost(ctx)) {
    ctx.route = "{port}-{id}.{domain}";  // metrics' label: a sandbox's port, not spaced's API
    co_return;
  }
  // E2B's envd surface is chosen by a header, whatever the path; it authenticates its own
  // way (X-Access-Token).
  if (ctx.path != "/healthz" && e2b::IsEnvdRequest(ctx)) {
    co_await e2b::Route(ctx);
    co_return;
  }
  // The web console's pages and login (outside the table: not the API openapi.json describes).
  if (co_await RouteConsole(ctx)) co_return;
  std::vector<std::string> allowed;
  const RouteEntry* route = MatchRoute(ctx.method, ctx.segments, &allowed);
  if (!route) {
    co_await NoRoute(ctx, allowed);
    co_return;
  }
  // (Plain if-chains of co_await with co_return, as g++ 12 compiles them reliably: a
  // helper coroutine returning bool through such a chain died of SIGILL.)
  if (route->surface == Surface::kHealth && ctx.path == "/readyz") {
    const std::string why = ctx.opts->not_ready ? ctx.opts->not_ready() : std::string();
    Json body = {{"ready", why.empty()}};
    if (!why.empty()) body["reason"] = why;
    const int status = why.empty() ? 200 : 503;
    co_await ctx.Reply(status, body);
    co_return;
  }
  if (route->surface == Surface::kHealth) {
    Json ok = {{"ok", true}};
    co_await ctx.Reply(200, ok);
    co_return;
  }
  if (route->surface == Surface::kOpenApi) {
    co_await ServeOpenApi(ctx);
    co_return;
  }
  bool served = false;
  if (route->surface == Surface::kMcp) {
    served = co_await RouteMcp(ctx);
  } else if (route->surface == Surface::kE2b) {
    // The control plane checks X-API-KEY itself.
    served = co_await e2b::RouteVolumes(ctx);
    if (!served) served = co_await e2b::RouteTemplates(ctx);
    if (!served) served = co_await e2b::RouteControl(ctx);
  } else {
    if (!co_await Authorize(ctx)) co_return;
    if (co_await RouteMetrics(ctx)) co_return;
    if (co_await RouteEvents(ctx)) co_return;
    if (co_await RouteTerminal(ctx)) co_return;
    if (co_await RouteAccess(ctx)) co_return;
    if (co_await RoutePorts(ctx)) co_return;
    if (co_await RouteCommands(ctx)) co_return;
    if (co_await RouteCode(ctx)) co_return;
    if (co_await RouteFiles(ctx)) co_return;
    if (co_await RouteArchives(ctx)) co_return;
    if (co_await RouteSandboxes(ctx)) co_return;
    if (co_await RouteTemplates(ctx)) co_return;
    if (co_await RouteRuntimes(ctx)) co_return;
    if (co_await RouteVolumes(ctx)) co_return;
  }
  if (!served) {
    // The table names a route no group serves: a bug, which the route tests catch.
    co_await ctx.ReplyError(Error{Errc::kInternal, 0,
                                  std::string("route ") + route->method + " " + route->pattern +
                                      " is in the route table but nothing serves it"});
  }
}

}  // namespace space::api
