// api/http: Beast plumbing shared by the server and its route files (api/ only).
//
// A Ctx is one request on one connection: it knows how to read the body (bounded, or as
// a stream), reply with JSON or an error, stream a chunked response, run a blocking core
// call on the server's pool, and wait for a core notification. Each connection runs on
// its own strand, so a Ctx is only touched by one thread at a time.
#pragma once

// Boost 1.74's awaitable.hpp uses std::exchange without including <utility>.
#include <utility>

#include <boost/asio.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <atomic>
#include <map>
#include <memory>
#include <set>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "api/api.h"
#include "api/parse.h"
#include "api/views.h"
#include "common/json.h"
#include "core/core.h"

namespace space::api {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
template <class T>
using Awaitable = asio::awaitable<T>;

// A create carrying this header makes the sandbox under that id (a cluster gateway picks
// ids, so a create retried on another node cannot make two sandboxes; docs/cluster.md).
inline constexpr char kSandboxIdHeader[] = "X-Space-Sandbox-Id";

class HttpMetrics;      // api/metrics.h
class ConsoleSessions;  // api/console_sessions.h

// The client's connection as spaced accepted it. Over TLS a handler's stream is the plaintext
// end of a socketpair (api/tls_front.h), not the client's socket: ask this for addresses.
struct Conn {
  tcp::endpoint remote;  // the client
  tcp::endpoint local;   // the address and port of spaced it reached
  bool tls = false;      // it came over TLS (spaced --tls-cert / --tls-self-signed)
  // Set by Serve when a handler threw ResetConnection, for the TLS front (which holds the
  // client's socket) to reset it too instead of closing it with close_notify. Only over TLS.
  std::shared_ptr<std::atomic<bool>> reset;
};

// Thrown by a handler to end its connection with a TCP reset instead of a clean close: a
// stream whose peer vanished mid-way (E2B's SDKs read a reset, not an EOF, as "the sandbox
// went away" and then probe it). Whatever was written before still reaches the client.
class ResetConnection : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Ctx {
  core::Platform* platform;
  asio::thread_pool* pool;
  const ServerOptions* opts;
  beast::tcp_stream* stream;
  beast::flat_buffer* buffer;
  http::request_parser<http::empty_body>* parser;   // header already read
  Conn conn;
  std::string method;
  std::string path;                                 // without the query
  std::vector<std::string> segments;                // path split on '/'
  std::multimap<std::string, std::string> query;  // api::Query
  bool keep_alive = true;
  bool body_consumed = false;
  Principal principal;
  int status = 0;                       // of the response, once started (for metrics)
  std::string route;                    // the route label, when not RouteLabel(segments)
  HttpMetrics* http_metrics = nullptr;  // the server's counters
  ConsoleSessions* sessions = nullptr;  // the web console's logins

  const http::request<http::empty_body>& req() const { return header ? *header : parser->get(); }
  // Reading the body moves the parser (and the header it holds): a copy of the header
  // is kept first, so req() and Header() still answer afterwards.
  void KeepHeader() {
    if (!header) header.emplace(parser->get());
  }
  std::optional<http::request<http::empty_body>> header;
  std::string Query(const std::string& key, const std::string& def = "") const;
  std::vector<std::string> QueryAll(const std::string& key) const;
  std::string Header(http::field f) const;
  std::string Header(std::string_view name) const;

  // Reads the whole body, up to `limit` bytes (413 beyond).
  Awaitable<Result<std::string>> ReadBody(size_t limit);
  // Reads the body in pieces, calling `sink` for each (which may fail and stop the read).
  // Answers 413 if the body is larger than `limit`.
  Awaitable<Status> ReadBodyStream(size_t limit,
                                   const std::function<Awaitable<Status>(std::string_view)>& sink);
  // Parses the body as a JSON object (empty body = {}).
  Awaitable<Result<Json>> ReadJson();

  Awaitable<void> Reply(int status, const Json& body,
                        const std::vector<std::pair<std::string, std::string>>& headers = {});
  Awaitable<void> ReplyBytes(int status, std::string body, const std::string& content_type,
                             const std::vector<std::pair<std::string, std::string>>& headers = {});
  Awaitable<void> ReplyError(const Error& e);

  // Chunked streaming responses.
  Awaitable<void> StartChunked(int status, const std::string& content_type,
                               const std::vector<std::pair<std::string, std::string>>& headers = {});
  Awaitable<void> WriteChunk(std::string_view data);
  // One chunk made of two pieces (e.g. a record header and its payload), without copying.
  Awaitable<void> WriteChunk(std::string_view head, std::string_view data);
  // One chunk of `head` and then bytes [offset, offset + length) of file `fd`, which must
  // exist: they go from the page cache to the socket with sendfile(2), never through user
  // space. A file that turns out shorter ends the connection (throws), as a failed write
  // does: a chunk that promised more cannot be finished.
  Awaitable<void> WriteChunkFromFile(std::string_view head, int fd, uint64_t offset,
                                     size_t length);
  Awaitable<void> EndChunked();

  // Runs fn() on the blocking pool and resumes on this connection's strand.
  // Deliberately not a coroutine itself: g++ 12 mis-destroys closure temporaries inside
  // co_await expressions of a coroutine, so the initiation lives in a plain function.
  template <class F>
  Awaitable<std::invoke_result_t<F>> Blocking(F fn) {
    using R = std::invoke_result_t<F>;
    return asio::async_initiate<decltype(asio::use_awaitable), void(R)>(
        [pool = pool, fn = std::move(fn)](auto handler) mutable {
          auto ex = asio::get_associated_executor(handler);
          asio::post(*pool, [ex, fn = std::move(fn), handler = std::move(handler)]() mutable {
            R r = fn();
            asio::post(ex, [handler = std::move(handler), r = std::move(r)]() mutable {
              handler(std::move(r));
            });
          });
        },
        asio::use_awaitable);
  }

  // Watches a notifier key: Arm() before checking a condition, then Wait() until the key
  // fires or the deadline passes (no lost wake-ups between the check and the wait).
  class Watcher {
   public:
    Watcher(Ctx& ctx, std::string key);
    void Arm();
    // Returns false when the deadline passed without a notification.
    Awaitable<bool> Wait(int64_t deadline_ns);

   private:
    Ctx& ctx_;
    std::string key_;
    std::shared_ptr<asio::steady_timer> timer_;
    std::shared_ptr<bool> fired_;
    std::shared_ptr<void> handle_;
  };

  std::optional<std::pair<http::response<http::empty_body>,
                          std::unique_ptr<http::response_serializer<http::empty_body>>>>
      chunked_;
};

// Replies {key: [view(item)...]}, or the list's error.
template <class T, class View>
Awaitable<void> ReplyList(Ctx& ctx, std::string key, Result<std::vector<T>> list, View view) {
  if (!list) {
    co_await ctx.ReplyError(list.error());
    co_return;
  }
  Json arr = Json::array();
  for (const auto& item : *list) arr.push_back(view(item));
  Json body = Json::object();
  body[key] = std::move(arr);
  co_await ctx.Reply(200, body);
}

bool Finished(const store::OperationRecord& op);
// Waits until an operation finishes or the deadline passes; returns its latest record.
Awaitable<Result<store::OperationRecord>> AwaitOperation(Ctx& ctx, const std::string& id,
                                                         int64_t wait_ms);

// With wait_ms > 0, waits for *op to finish (updating it); if it failed, replies with its
// error and returns true: the caller is done.
Awaitable<bool> AwaitOrFail(Ctx& ctx, store::OperationRecord* op, int64_t wait_ms);

// Streams both outputs of a command from the given offsets until it ends: `emit(stream,
// offset, bytes)` for data, then `finish(info)`; `keepalive()` after 15 s without output.
// Returns early (without finish) if the command cannot be read.
// With `emit_file`, data goes to it instead as (stream, offset, log file fd, length): the
// bytes are in that file at that offset, for Ctx::WriteChunkFromFile.
using OutputEmitFn = std::function<Awaitable<void>(store::OutputStream, uint64_t, std::string_view)>;
using OutputEmitFileFn =
    std::function<Awaitable<void>(store::OutputStream, uint64_t, int fd, size_t length)>;
using OutputFinishFn = std::function<Awaitable<void>(const core::CommandInfo&)>;
using OutputKeepaliveFn = std::function<Awaitable<void>()>;
Awaitable<void> StreamOutput(Ctx& ctx, std::string sb, std::string cid, uint64_t out_off,
                             uint64_t err_off, const OutputEmitFn& emit,
                             const OutputFinishFn& finish, const OutputKeepaliveFn& keepalive,
                             const OutputEmitFileFn* emit_file = nullptr);

// Parses ?wait=30s (capped at 5 minutes); 0 if absent; -1 if malformed. The request parsers
// (target, query values, bodies) are in api/parse.h.
int64_t WaitMillis(const Ctx& ctx);

// ---- access control (access.cc) ----
// Authenticates the request (operator key or token, 401 otherwise), then checks it against
// the route table kAccessRules: 403 when the caller's scope does not cover the route.
// Sets ctx.principal. Returns false when it has already replied (the request is done).
// Every request but /healthz goes through this once, before routing.
Awaitable<bool> Authorize(Ctx& ctx);
// For routes that find their sandbox or command only while running (e.g. a sandbox id
// in a request body): true if the caller may use `any_of` scopes on that sandbox
// (and command, for command-bound tokens). Operators always may. Pure; replies nothing.
bool MayAccess(const Principal& who, auth::Scopes any_of, const std::string& sandbox_id,
               const std::string& command_id = "");
// As MayAccess, but replies 403 itself when not; returns false then.
Awaitable<bool> RequireAccess(Ctx& ctx, auth::Scopes any_of, const std::string& sandbox_id,
                              const std::string& command_id = "");
// Mints a token for sandbox `sb` (generation = its created_ms): bound to `command_id` when
// non-empty, carrying `scopes`, valid for ttl_s (<= 0: the default) but never beyond the
// caller's own token. Returns {token, expires_s}.
std::pair<std::string, int64_t> MintToken(const Ctx& ctx, const store::SandboxRecord& sb,
                                          const std::string& command_id, auth::Scopes scopes,
                                          int64_t ttl_s = 0);

// Route groups (routes_*.cc). Each returns true if it handled the request.
Awaitable<bool> RouteSandboxes(Ctx& ctx);
Awaitable<bool> RouteCommands(Ctx& ctx);
Awaitable<bool> RouteCode(Ctx& ctx);
Awaitable<bool> RouteFiles(Ctx& ctx);
Awaitable<bool> RouteTemplates(Ctx& ctx);
Awaitable<bool> RouteArchives(Ctx& ctx);
Awaitable<bool> RouteRuntimes(Ctx& ctx);
// /v1/volumes and their files (routes_volumes.cc, docs/volumes.md).
Awaitable<bool> RouteVolumes(Ctx& ctx);
// Writes the request body, as it arrives, to `path` in volume `vol` (created, or truncated,
// with `mode`), in the agent's file chunks; an empty body makes an empty file. Returns the
// bytes written. Shared by the v1 and E2B volume routes.
Awaitable<Result<uint64_t>> WriteVolumeFileFromBody(Ctx& ctx, const std::string& vol,
                                                    const std::string& path, int mode,
                                                    bool create_parents);
// /v1/keys, /v1/sandboxes/{id}/tokens, /v1/whoami (routes_access.cc).
Awaitable<bool> RouteAccess(Ctx& ctx);
// Ports as URLs (routes_ports.cc, docs/ports.md). RoutePortsHost: if the Host names a
// sandbox port ({port}-{id}.{sandbox_domain}), proxies the request there (answering every
// error itself, with its own traffic credentials) and returns true; false for spaced's own
// API. Runs before anything else, /healthz and authentication included. RoutePorts:
// POST /v1/sandboxes/{id}/urls and ANY /v1/sandboxes/{id}/ports/{port}/... (after Authorize).
// RoutePortTraffic: proxies the request to `port` of the sandbox with the host form's rules
// (traffic credentials unless its traffic is public; plain-text errors), for E2B clients that
// name the port in the E2b-Sandbox-Port header (e2b/routes_e2b_envd.cc).
Awaitable<bool> RoutePortsHost(Ctx& ctx);
Awaitable<bool> RoutePorts(Ctx& ctx);
Awaitable<void> RoutePortTraffic(Ctx& ctx, const std::string& sandbox_id, int port);
// POST /mcp (routes_mcp.cc, docs/mcp.md): checks Origin, then authorizes itself.
Awaitable<bool> RouteMcp(Ctx& ctx);
// The web console under /ui/ (routes_console.cc): its pages, login, logout; outside the
// route table, before authorization (it authenticates its own way).
Awaitable<bool> RouteConsole(Ctx& ctx);
// GET /v1/events: server-sent events of sandbox and operation changes (routes_events.cc).
Awaitable<bool> RouteEvents(Ctx& ctx);
// GET /v1/sandboxes/{id}/commands/{command_id}/terminal: a WebSocket to a command's
// terminal (routes_terminal.cc). Before RouteCommands, which answers the rest of that path.
Awaitable<bool> RouteTerminal(Ctx& ctx);
// GET /metrics and GET /v1/sandboxes/{id}/metrics (metrics.cc, after Authorize).
Awaitable<bool> RouteMetrics(Ctx& ctx);

}  // namespace space::api
