// gateway (gateway.h): sending requests to nodes — relayed by route, placed, merged, found.
#include <sodium.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "api/parse.h"
#include "api/relay.h"
#include "gateway/internal.h"

namespace space::gateway {

namespace {

constexpr auto kConnectTimeout = std::chrono::seconds(5);
constexpr auto kLookupTimeout = std::chrono::seconds(30);

int64_t MonoMs() { return MonotonicNanos() / 1000000; }

Errc CodeFor(int status) {
  switch (status) {
    case 400: return Errc::kInvalidArgument;
    case 401: return Errc::kUnauthenticated;
    case 403: return Errc::kPermissionDenied;
    case 404: return Errc::kNotFound;
    case 409: return Errc::kConflict;
    case 429: return Errc::kResourceExhausted;
    case 504: return Errc::kDeadlineExceeded;
    case 507: return Errc::kInsufficientStorage;
    case 500: return Errc::kInternal;
    default: return Errc::kUnavailable;
  }
}

}  // namespace

// A node's answer, passed on as it came (its hop-by-hop headers aside).
std::vector<std::pair<std::string, std::string>> PassedHeaders(const Answer& a) {
  std::vector<std::pair<std::string, std::string>> headers;
  for (const auto& f : a.res) {
    const auto name = f.name();
    if (name == http::field::connection || name == http::field::keep_alive ||
        name == http::field::content_length || name == http::field::transfer_encoding ||
        name == http::field::server || name == http::field::date || name == http::field::content_type)
      continue;
    headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
  }
  return headers;
}

Awaitable<void> ReplyAnswer(Ctx& ctx, const Answer& a) {
  std::string type(a.res[http::field::content_type]);
  if (type.empty()) type = "application/json";
  auto headers = PassedHeaders(a);
  const int status = static_cast<int>(a.res.result_int());
  std::string body = a.res.body();
  co_await ctx.ReplyBytes(status, std::move(body), type, headers);
}

Awaitable<void> ReplyFail(Ctx& ctx, Surface form, int status, const std::string& message) {
  std::vector<std::pair<std::string, std::string>> headers;
  if (status == 503 || status == 429) headers.emplace_back("Retry-After", "1");
  if (form == Surface::kV1) {
    Json body = api::ErrorBody(Error(CodeFor(status), 0, message));
    if (status == 501) body["error"]["code"] = "unimplemented";
    co_await ctx.Reply(status, body, headers);
  } else if (form == Surface::kE2b) {
    Json body = {{"code", status}, {"message", message}};
    co_await ctx.Reply(status, body, headers);
  } else {
    std::string reason(http::obsolete_reason(static_cast<http::status>(status)));
    co_await ctx.ReplyBytes(status, std::to_string(status) + " " + reason + ": " + message + "\n",
                            "text/plain; charset=utf-8", headers);
  }
}

http::request<http::string_body> Outgoing(const Ctx& ctx, std::string body) {
  const auto& in = ctx.req();
  http::request<http::string_body> r;
  r.method_string(in.method_string());
  r.target(in.target());
  r.version(11);
  for (const auto& f : in) {
    const auto name = f.name();
    if (name == http::field::connection || name == http::field::keep_alive ||
        name == http::field::content_length || name == http::field::transfer_encoding ||
        name == http::field::expect || name == http::field::upgrade || name == http::field::te)
      continue;
    r.insert(f.name_string(), f.value());
  }
  if (ctx.conn.remote.port() != 0) {
    std::string xff(r["X-Forwarded-For"]);
    r.set("X-Forwarded-For", (xff.empty() ? "" : xff + ", ") + ctx.conn.remote.address().to_string());
  }
  r.body() = std::move(body);
  r.keep_alive(false);
  r.prepare_payload();
  return r;
}

std::string TokenSandbox(std::string_view token) {
  if (!StartsWith(token, "st1.") && !StartsWith(token, "tt1.")) return "";
  auto a = token.find('.', 4);
  auto b = a == std::string_view::npos ? a : token.find('.', a + 1);
  if (b == std::string_view::npos) return "";
  std::string_view claims = token.substr(a + 1, b - a - 1);
  std::string raw(claims.size(), '\0');
  size_t len = 0;
  if (sodium_base642bin(reinterpret_cast<unsigned char*>(raw.data()), raw.size(), claims.data(),
                        claims.size(), nullptr, &len, nullptr,
                        sodium_base64_VARIANT_URLSAFE_NO_PADDING) != 0)
    return "";
  raw.resize(len);
  auto j = ParseJson(raw);
  return j && j->is_object() ? JsonStringOr(*j, "sb", "") : "";
}

bool Gateway::Impl::StoreFresh(int64_t within_ms) const { return MonoMs() - store_ok_ms.load() <= within_ms; }

std::vector<std::string> Gateway::Impl::LiveNodes() const {
  std::vector<std::string> out;
  for (const auto& [name, rec] : view->Nodes()) out.push_back(name);
  return out;  // in name order
}

std::optional<tcp::endpoint> Gateway::Impl::NodeEndpoint(const std::string& node) const {
  auto nodes = view->Nodes();
  auto it = nodes.find(node);
  if (it == nodes.end()) return std::nullopt;
  std::string addr = JsonStringOr(it->second, "address", "");
  auto colon = addr.rfind(':');
  if (colon == std::string::npos) return std::nullopt;
  std::string host = addr.substr(0, colon);
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  if (host == "localhost") host = "127.0.0.1";
  beast::error_code ec;
  auto ip = asio::ip::make_address(host, ec);
  int port = std::atoi(addr.c_str() + colon + 1);
  if (ec || port <= 0 || port > 65535) return std::nullopt;
  return tcp::endpoint(ip, static_cast<uint16_t>(port));
}

Awaitable<Answer> Gateway::Impl::Exchange(const std::string& node, const http::request<http::string_body>& req,
                                          std::chrono::seconds timeout) {
  Answer a;
  auto ep = NodeEndpoint(node);
  if (!ep) {
    a.error = "node " + node + " is not in the cluster";
    co_return a;
  }
  beast::tcp_stream s(co_await asio::this_coro::executor);
  beast::error_code ec;
  s.expires_after(kConnectTimeout);
  co_await s.async_connect(*ep, asio::redirect_error(asio::use_awaitable, ec));
  if (!ec) {
    s.socket().set_option(tcp::no_delay(true), ec);
    s.expires_after(timeout);
    co_await http::async_write(s, req, asio::redirect_error(asio::use_awaitable, ec));
  }
  if (!ec) {
    beast::flat_buffer buf;
    http::response_parser<http::string_body> p;
    p.body_limit(64u << 20);
    co_await http::async_read(s, buf, p, asio::redirect_error(asio::use_awaitable, ec));
    if (!ec) {
      a.res = p.release();
      a.status = static_cast<int>(a.res.result_int());
    }
  }
  if (ec) a.error = "node unavailable: node " + node + " does not answer (" + ec.message() + ")";
  s.socket().close(ec);
  co_return a;
}

Awaitable<void> Gateway::Impl::RelayTo(Ctx& ctx, Surface form, const std::string& node) {
  std::vector<std::string> one;
  if (!node.empty()) one.push_back(node);
  co_await RelayToFirst(ctx, form, one);
}

// Relays to the first of `nodes` that takes the connection.
Awaitable<void> Gateway::Impl::RelayToFirst(Ctx& ctx, Surface form, const std::vector<std::string>& nodes) {
  std::string why = "node unavailable: no node is live in the cluster";
  for (const std::string& node : nodes) {
    auto ep = NodeEndpoint(node);
    if (!ep) {
      why = "node unavailable: node " + node + " left the cluster";
      continue;
    }
    beast::tcp_stream up(ctx.stream->get_executor());
    beast::error_code ec;
    up.expires_after(kConnectTimeout);
    co_await up.async_connect(*ep, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      why = "node unavailable: node " + node + " does not answer (" + ec.message() + ")";
      continue;
    }
    up.socket().set_option(tcp::no_delay(true), ec);
    api::RelayPolicy policy;
    policy.upstream = "node " + node;
    policy.fail = [&ctx, form](int status, std::string message) -> Awaitable<void> {
      co_await ReplyFail(ctx, form, status, message);
    };
    const std::string target(ctx.req().target());
    co_await api::Relay(ctx, up, target, policy);
    co_return;
  }
  co_await ReplyFail(ctx, form, 503, why);
}

// The node a sandbox is routed to: the view's, or (not seen yet: just created; or gone)
// etcd's own answer.
Awaitable<std::optional<std::string>> Gateway::Impl::RouteNode(Ctx& ctx, const std::string& id) {
  std::optional<std::string> node = view->RouteOf(id);
  if (node) co_return node;
  cluster::Store* st = opts.store;
  const std::string key = opts.prefix + "routes/" + id;
  auto route = co_await ctx.Blocking([&] { return st->Get(key); });
  if (route && *route) {
    auto j = ParseJson((*route)->value);
    std::string n = j ? JsonStringOr(*j, "node", "") : "";
    if (!n.empty() && NodeEndpoint(n)) node = n;
  }
  co_return node;
}

Awaitable<void> Gateway::Impl::ToSandbox(Ctx& ctx, Surface form, const std::string& id) {
  if (!StoreFresh(opts.stale_routes_s * 1000)) {
    co_await ReplyFail(ctx, form, 503, "the cluster store (etcd) has not answered for more than " +
                                           std::to_string(opts.stale_routes_s) + " s: routing stopped");
    co_return;
  }
  std::optional<std::string> node = co_await RouteNode(ctx, id);
  if (node) {
    co_await RelayTo(ctx, form, *node);
    co_return;
  }
  cluster::Store* st = opts.store;
  const std::string key = opts.prefix + "sandboxes/" + id;
  auto rec = co_await ctx.Blocking([&] { return st->Get(key); });
  if (rec && *rec) {
    auto j = ParseJson((*rec)->value);
    std::string n = j ? JsonStringOr(*j, "node", "?") : "?";
    std::string state = j ? JsonStringOr(*j, "state", "") : "";
    // Deleting a sandbox whose node is gone forgets it: the node, if it comes back, finds
    // no record and deletes the sandbox itself.
    const bool whole = (form == Surface::kV1 && ctx.segments.size() == 3) ||
                       (form == Surface::kE2b && ctx.segments.size() == (ctx.segments[0] == "v2" ? 3u : 2u));
    if (ctx.method == "DELETE" && whole) {
      int who = co_await Authenticate(*this, ctx, id);
      if (who != 200) {
        std::string m = who == 503 ? "no node of the cluster can check the credential"
                                   : "the credential does not cover sandbox " + id;
        co_await ReplyFail(ctx, form, who, m);
        co_return;
      }
      const int64_t rev = (*rec)->mod_revision;
      auto del = co_await ctx.Blocking([&] { return st->CompareAndDelete(key, rev); });
      if (!del || !*del) {
        co_await ReplyFail(ctx, form, 409, "sandbox " + id + " changed while deleting it; try again");
        co_return;
      }
      spdlog::info("gateway: sandbox {} of unavailable node {} forgotten (deleted by a client)", id, n);
      if (form == Surface::kE2b) {
        co_await ctx.ReplyBytes(204, "", "application/json");
      } else {
        Json body = {{"deleted", id}, {"node", n}, {"state", state == "lost" ? "lost" : "unavailable"}};
        co_await ctx.Reply(200, body);
      }
      co_return;
    }
    if (state == "lost") {
      co_await ReplyFail(ctx, form, 503, "node unavailable: sandbox " + id + " was lost with node " + n);
    } else {
      co_await ReplyFail(ctx, form, 503, "node unavailable: sandbox " + id + " is on node " + n +
                                             ", which is not answering");
    }
    co_return;
  }
  if (!rec) {
    co_await ReplyFail(ctx, form, 503, "the cluster store (etcd) is unavailable: " + rec.error().message);
    co_return;
  }
  co_await ReplyFail(ctx, form, 404, "no sandbox " + id);
}

Awaitable<Gateway::Impl::Gathered> Gateway::Impl::AskEveryNode(Ctx& ctx, std::chrono::seconds timeout) {
  Gathered g;
  for (const std::string& node : LiveNodes()) {
    auto req = Outgoing(ctx, "");
    Answer a = co_await Exchange(node, req, timeout);
    if (a.status == 0) continue;
    if (a.status != 200) {
      g.refused = std::move(a);
      break;
    }
    g.answers.emplace_back(node, std::move(a));
  }
  co_return g;
}

Awaitable<void> Gateway::Impl::Find(Ctx& ctx, Surface form) {
  std::optional<Answer> last;
  for (const std::string& node : LiveNodes()) {
    auto req = Outgoing(ctx, "");
    Answer a = co_await Exchange(node, req, kLookupTimeout);
    if (a.status == 0) continue;
    if (a.status != 404) {
      co_await ReplyAnswer(ctx, a);
      co_return;
    }
    last = std::move(a);
  }
  if (last) {
    co_await ReplyAnswer(ctx, *last);
    co_return;
  }
  co_await ReplyFail(ctx, form, 503, "no node of the cluster answered");
}

Awaitable<void> Gateway::Impl::ToAnyNode(Ctx& ctx, Surface form) {
  auto nodes = LiveNodes();
  co_await RelayToFirst(ctx, form, nodes);
}

}  // namespace space::gateway
