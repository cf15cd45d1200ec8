// Route: POST /mcp — the MCP server over streamable HTTP (docs/mcp.md), JSON responses only.
//
// The protocol is mcp/'s (the same code as `space mcp`). Its tools call spaced's own API
// over loopback with the caller's credential, so an MCP caller can do exactly what its
// operator key or sandbox token allows, checked in the one place that checks (access.cc).
// Those calls block, so they run on a pool of their own: on the server's blocking pool,
// a burst of MCP calls could take every thread while the API requests they wait for
// queue behind them.
#include "api/http.h"
#include "mcp/mcp.h"

namespace space::api {

namespace {

constexpr size_t kMaxMcpBody = 16 << 20;  // write_file carries whole files
constexpr int kMcpThreads = 8;

asio::thread_pool& McpPool() {
  // Never destroyed: a tool call still blocked in an API call must not hold up exit.
  static auto* pool = new asio::thread_pool(kMcpThreads);
  return *pool;
}

// Runs fn() on the MCP pool and resumes on the connection's strand (as Ctx::Blocking; not
// a coroutine itself, for the same g++ 12 reason).
template <class F>
Awaitable<std::invoke_result_t<F>> OnMcpPool(F fn) {
  using R = std::invoke_result_t<F>;
  return asio::async_initiate<decltype(asio::use_awaitable), void(R)>(
      [fn = std::move(fn)](auto handler) mutable {
        auto ex = asio::get_associated_executor(handler);
        asio::post(McpPool(), [ex, fn = std::move(fn), handler = std::move(handler)]() mutable {
          R r = fn();
          asio::post(ex, [handler = std::move(handler), r = std::move(r)]() mutable {
            handler(std::move(r));
          });
        });
      },
      asio::use_awaitable);
}

bool IsLoopbackHost(std::string_view host) {
  constexpr std::string_view kLocal = ".localhost";
  if (host == "localhost" || host == "[::1]" ||
      (host.size() > kLocal.size() && host.substr(host.size() - kLocal.size()) == kLocal))
    return true;
  // 127.0.0.0/8, written as a dotted quad.
  if (!StartsWith(host, "127.")) return false;
  return host.find_first_not_of("0123456789.") == std::string_view::npos;
}

// Browsers send Origin; other clients do not. An origin is allowed when it is on loopback
// (a local tool, or a page served by spaced itself on loopback) or names exactly the
// address spaced listens on; anything else (a web page elsewhere, a DNS-rebinding name,
// "null") is refused unless the operator named it: the spec requires it, as the defence against pages driving a local
// server from a user's browser.
bool OriginAllowed(const Ctx& ctx, const std::string& origin) {
  if (origin.empty()) return true;
  // Origins the operator allows (spaced --mcp-allow-origin), compared exactly.
  for (const auto& o : ctx.opts->mcp_allowed_origins) {
    if (origin == o) return true;
  }
  size_t scheme = origin.find("://");
  if (scheme == std::string::npos) return false;
  std::string_view rest = std::string_view(origin).substr(scheme + 3);
  if (rest.find('/') != std::string_view::npos) return false;
  std::string_view host = rest;
  if (!host.empty() && host[0] == '[') {
    host = host.substr(0, host.find(']') + 1);
  } else {
    host = host.substr(0, host.find(':'));
  }
  if (IsLoopbackHost(host)) return true;
  const std::string& listen = ctx.opts->address;
  return !listen.empty() && listen != "0.0.0.0" && listen != "::" &&
         (host == listen || host == "[" + listen + "]");
}

Awaitable<void> ReplyRpc(Ctx& ctx, int status, const Json& body,
                         const std::vector<std::pair<std::string, std::string>>& headers = {}) {
  co_await ctx.ReplyBytes(status, mcp::Dump(body) + "\n", "application/json", headers);
}

// The credential the request came with, passed on to the API unchanged.
std::string Credential(const Ctx& ctx) {
  std::string auth = ctx.Header(http::field::authorization);
  const std::string prefix = "Bearer ";
  if (auth.size() > prefix.size() && auth.compare(0, prefix.size(), prefix) == 0)
    return auth.substr(prefix.size());
  return ctx.Header(std::string_view("X-API-Key"));
}

// spaced's own API, as reached from here: the address this request came in on.
std::string SelfUrl(const Ctx& ctx) {
  // Plain HTTP, which spaced serves on the same port beside TLS.
  const auto& ep = ctx.conn.local;
  auto addr = ep.address();
  if (addr.is_unspecified()) addr = asio::ip::make_address("127.0.0.1");
  std::string host = addr.is_v6() ? "[" + addr.to_string() + "]" : addr.to_string();
  return "http://" + host + ":" + std::to_string(ep.port());
}

}  // namespace

Awaitable<bool> RouteMcp(Ctx& ctx) {
  if (ctx.path != "/mcp") co_return false;
  if (!OriginAllowed(ctx, ctx.Header(http::field::origin))) {
    Json body = mcp::ErrorResponse(nullptr, mcp::kInvalidRequest,
                                   "origin " + ctx.Header(http::field::origin) + " may not use this MCP server");
    co_await ReplyRpc(ctx, 403, body);
    co_return true;
  }
  if (ctx.method != "POST") {
    // No server-initiated stream (GET) and no sessions to end (DELETE): this server is
    // stateless and answers every request in its POST.
    Json body = mcp::ErrorResponse(nullptr, mcp::kInvalidRequest,
                                   "use POST /mcp (no SSE stream, no sessions)");
    std::vector<std::pair<std::string, std::string>> allow = {{"Allow", "POST"}};
    co_await ReplyRpc(ctx, 405, body, allow);
    co_return true;
  }
  if (!co_await Authorize(ctx)) co_return true;
  std::string type = ctx.Header(http::field::content_type);
  if (!StartsWith(type, "application/json")) {
    Json body = mcp::ErrorResponse(nullptr, mcp::kInvalidRequest,
                                   "Content-Type must be application/json");
    co_await ReplyRpc(ctx, 415, body);
    co_return true;
  }
  std::string version = ctx.Header(std::string_view("MCP-Protocol-Version"));
  if (!version.empty() && !mcp::SupportsProtocolVersion(version)) {
    Json body = mcp::ErrorResponse(nullptr, mcp::kInvalidRequest,
                                   "unsupported MCP-Protocol-Version " + version);
    co_await ReplyRpc(ctx, 400, body);
    co_return true;
  }
  // Before the body is read: reading it moves the request's parser (headers included).
  std::string url = SelfUrl(ctx), cred = Credential(ctx);
  auto text = co_await ctx.ReadBody(kMaxMcpBody);
  if (!text) {
    Json body = mcp::ErrorResponse(nullptr, mcp::kInvalidRequest, text.error().message);
    co_await ReplyRpc(ctx, HttpStatusFor(text.error().code), body);
    co_return true;
  }
  auto msg = ParseJson(*text);
  if (!msg || !(msg->is_object() || msg->is_array())) {
    Json body = mcp::ErrorResponse(nullptr, msg ? mcp::kInvalidRequest : mcp::kParseError,
                                   msg ? "a JSON-RPC message is an object" : "Parse error: not JSON");
    co_await ReplyRpc(ctx, 400, body);
    co_return true;
  }
  Json message = std::move(*msg);
  // By reference only (the locals live in the coroutine frame): g++ 12 destroys closure
  // temporaries of a co_await expression twice, harmless only when they own nothing.
  auto answer = co_await OnMcpPool([&]() -> std::optional<Json> {
    client::Client api(url, cred);
    return mcp::Handle(message, api);
  });
  if (!answer) {
    co_await ctx.ReplyBytes(202, "", "application/json");
    co_return true;
  }
  co_await ReplyRpc(ctx, 200, *answer);
  co_return true;
}

}  // namespace space::api
