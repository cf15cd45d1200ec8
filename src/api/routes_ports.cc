// Ports as URLs (docs/ports.md): HTTP/1.1 requests whose Host is
// {port}-{sandbox_id}.{--sandbox-domain} are proxied to that port inside the sandbox, and
// so is the API path /v1/sandboxes/{id}/ports/{port}/...; POST /v1/sandboxes/{id}/urls
// mints the signed URLs `space url` prints.
//
// The upstream socket is made inside the sandbox's network namespace (net/ingress.h) and
// connects to 127.0.0.1:port there (then [::1]:port), so services bound to the sandbox's
// loopback are reachable. One upstream connection per request (Connection: close), the
// body relayed in pieces as it comes (streaming), and a 101 answer turns the connection
// into a byte tunnel both ways (WebSocket). Traffic credentials are not API credentials:
// the host form accepts only traffic tokens (tt1.…), the path form only API credentials,
// and every credential is stripped before the request goes on.
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include "api/http.h"
#include "net/ingress.h"

namespace space::api {

namespace {

constexpr auto kConnectTimeout = std::chrono::seconds(10);
constexpr auto kIdleTimeout = std::chrono::minutes(10);
constexpr size_t kRelayBuffer = 64 << 10;
constexpr int64_t kDefaultUrlTtlS = 3600;

const char kTrafficHeader[] = "Space-Traffic-Token";
const char kE2bTrafficHeader[] = "e2b-traffic-access-token";

// How errors are answered: plain text on sandbox hosts (browsers, curl users) and to E2B
// clients naming the port in headers (E2b-Sandbox-Port, whose SDKs read the body as text),
// the API's JSON errors on the API path.
enum class Form { kHost, kPath, kE2b };

Awaitable<void> ReplyFailure(Ctx& ctx, Form form, int status, const std::string& message,
                             std::vector<std::pair<std::string, std::string>> headers = {}) {
  if (form == Form::kPath) {
    Errc code = status == 400   ? Errc::kInvalidArgument
                : status == 401 ? Errc::kUnauthenticated
                : status == 403 ? Errc::kPermissionDenied
                : status == 404 ? Errc::kNotFound
                : status == 409 ? Errc::kConflict
                : status == 504 ? Errc::kDeadlineExceeded
                : status == 500 ? Errc::kInternal
                                : Errc::kUnavailable;
    co_await ctx.Reply(status, ErrorBody(Error(code, 0, message)), headers);
    co_return;
  }
  std::string reason(http::obsolete_reason(static_cast<http::status>(status)));
  co_await ctx.ReplyBytes(status, std::to_string(status) + " " + reason + ": " + message + "\n",
                          "text/plain; charset=utf-8", headers);
}

bool SandboxGone(const store::SandboxRecord& r) {
  return r.state == "deleting" || r.state == "deleted";
}

// ---------------------------------------------------------------- upstream connection

// (User-provided constructors: g++ 12 destroys aggregate temporaries of co_await
// expressions twice, see common.h's Error.)
struct Upstream {
  Upstream(sys::UniqueFd n, sys::UniqueFd s) : ns(std::move(n)), sock(std::move(s)) {}
  sys::UniqueFd ns;
  sys::UniqueFd sock;
};

// The sandbox's network namespace, opened and re-checked (the pid behind a /proc path may
// be reused once the sandbox stops), and a TCP socket of `family` made inside it.
Result<Upstream> OpenUpstream(core::Platform* p, const std::string& sb, int family) {
  auto path = p->SandboxNetNamespace(sb);
  if (!path) return tl::unexpected(path.error());
  auto ns = net::OpenNetNamespace(*path);
  if (!ns) return tl::unexpected(ns.error());
  auto again = p->SandboxNetNamespace(sb);
  if (!again || *again != *path || !net::SameNamespace(ns->get(), *again))
    return Fail(Errc::kConflict, "sandbox " + sb + " stopped while connecting");
  auto s = net::SocketInNamespace(ns->get(), family);
  if (!s) return tl::unexpected(s.error());
  return Upstream{std::move(*ns), std::move(*s)};
}

Result<sys::UniqueFd> SocketIn(int ns_fd, int family) { return net::SocketInNamespace(ns_fd, family); }

struct Connected {
  Connected() {}
  std::optional<beast::tcp_stream> stream;
  int status = 0;          // != 0: failed, answer this
  std::string message;
};

Awaitable<beast::error_code> ConnectOne(beast::tcp_stream& s, const tcp::endpoint& ep) {
  beast::error_code ec;
  s.expires_after(kConnectTimeout);
  co_await s.async_connect(ep, asio::redirect_error(asio::use_awaitable, ec));
  co_return ec;
}

// A microVM's services are reached at the guest's own address, which the host routes to
// over the sandbox's veth: only sandboxes with network have one. A service listening there
// (or on 0.0.0.0) is dialled directly; one bound to the guest's loopback, which the host
// cannot enter, through a relay the sandbox's agent starts on the guest's address
// (agent/forward.h).
Awaitable<Connected> ConnectGuest(Ctx& ctx, const store::SandboxRecord& rec, int port) {
  Connected out;
  const Json* n = JsonField(rec.spec, "net");
  std::string ip = n ? JsonStringOr(*n, "sandbox_ip", "") : "";
  beast::error_code ec;
  auto addr = asio::ip::make_address_v4(ip, ec);
  if (ip.empty() || ec || core::Platform::StoredPolicy(rec).internet() == false) {
    out.status = 501;
    out.message = "sandbox " + rec.id + " is a microvm without network: its ports are reachable only "
                  "when it is created with network mode internet";
    co_return out;
  }
  if (rec.state != "running") {
    out.status = 409;
    out.message = "sandbox " + rec.id + " is " + rec.state;
    co_return out;
  }
  out.stream.emplace(ctx.stream->get_executor());
  ec = co_await ConnectOne(*out.stream, tcp::endpoint(addr, static_cast<uint16_t>(port)));
  if (ec == asio::error::connection_refused) {
    core::Platform* p = ctx.platform;
    std::string sb = rec.id;
    auto relay = co_await ctx.Blocking([&] { return p->ForwardLoopbackPort(sb, port, ip); });
    if (relay) {
      out.stream.emplace(ctx.stream->get_executor());
      ec = co_await ConnectOne(*out.stream, tcp::endpoint(addr, static_cast<uint16_t>(*relay)));
    } else if (relay.error().code != Errc::kNotFound) {
      spdlog::info("sandbox {}: no loopback relay for port {}: {}", sb, port, relay.error().message);
    }
  }
  if (ec) {
    out.stream.reset();
    out.status = ec == beast::error::timeout ? 504 : 502;
    out.message = ec == asio::error::connection_refused
                      ? "nothing is listening on port " + std::to_string(port) + " in sandbox " + rec.id +
                            " (connection refused on " + ip + ", on 127.0.0.1 and on [::1])"
                      : "cannot reach port " + std::to_string(port) + " in sandbox " + rec.id + ": " +
                            ec.message();
    co_return out;
  }
  out.stream->socket().set_option(tcp::no_delay(true), ec);
  co_return out;
}

Awaitable<Connected> ConnectUpstream(Ctx& ctx, const store::SandboxRecord& rec, int port) {
  Connected out;
  if (rec.runtime == "microvm") co_return co_await ConnectGuest(ctx, rec, port);
  core::Platform* p = ctx.platform;
  std::string sb = rec.id;
  auto up = co_await ctx.Blocking([&] { return OpenUpstream(p, sb, AF_INET); });
  if (!up) {
    const Error& e = up.error();
    // A runtime whose sandboxes have no namespace of theirs on the host but hold the
    // sandbox's address themselves (gvisor's netstack) is reached at it, like a microVM.
    const Json* n = JsonField(rec.spec, "net");
    if (e.code == Errc::kUnavailable && n && !JsonStringOr(*n, "sandbox_ip", "").empty())
      co_return co_await ConnectGuest(ctx, rec, port);
    out.status = e.code == Errc::kUnavailable ? 501 : HttpStatusFor(e.code);
    out.message = e.message;
    co_return out;
  }
  auto ex = ctx.stream->get_executor();
  beast::error_code ec;
  const tcp::endpoint v4(asio::ip::address_v4::loopback(), static_cast<uint16_t>(port));
  const tcp::endpoint v6(asio::ip::address_v6::loopback(), static_cast<uint16_t>(port));
  {
    tcp::socket s(ex);
    int fd = up->sock.Release();
    s.assign(tcp::v4(), fd, ec);
    if (ec) ::close(fd);
    out.stream.emplace(std::move(s));
  }
  if (!ec) ec = co_await ConnectOne(*out.stream, v4);
  if (ec == asio::error::connection_refused) {
    // Nothing on 127.0.0.1: a service may listen on [::1] only.
    int ns = up->ns.get();
    auto s6 = co_await ctx.Blocking([&] { return SocketIn(ns, AF_INET6); });
    if (s6) {
      tcp::socket s(ex);
      beast::error_code aec;
      int fd = s6->Release();
      s.assign(tcp::v6(), fd, aec);
      if (aec) ::close(fd);
      if (!aec) {
        out.stream.emplace(std::move(s));
        auto ec6 = co_await ConnectOne(*out.stream, v6);
        if (!ec6) ec = {};
      }
    }
  }
  if (ec) {
    out.stream.reset();
    out.status = ec == beast::error::timeout ? 504 : 502;
    out.message = ec == asio::error::connection_refused
                      ? "nothing is listening on port " + std::to_string(port) + " in sandbox " +
                            rec.id + " (connection refused on 127.0.0.1 and [::1])"
                      : "cannot reach port " + std::to_string(port) + " in sandbox " + rec.id +
                            ": " + ec.message();
    co_return out;
  }
  out.stream->socket().set_option(tcp::no_delay(true), ec);
  co_return out;
}

// ---------------------------------------------------------------- relaying

// Copies one direction of a tunnel until EOF or an error, then half-closes the other side.
Awaitable<void> Pipe(tcp::socket& from, tcp::socket& to) {
  std::vector<char> buf(kRelayBuffer);
  for (;;) {
    beast::error_code ec;
    size_t n = co_await from.async_read_some(asio::buffer(buf), asio::redirect_error(asio::use_awaitable, ec));
    if (n > 0) {
      beast::error_code wec;
      co_await asio::async_write(to, asio::buffer(buf.data(), n), asio::redirect_error(asio::use_awaitable, wec));
      if (wec) break;
    }
    if (ec) break;
  }
  beast::error_code ec;
  to.shutdown(tcp::socket::shutdown_send, ec);
}

// The second direction of a tunnel, run beside the first; says when it is over.
struct Join {
  explicit Join(asio::any_io_executor ex) : timer(ex, asio::steady_timer::time_point::max()) {}
  asio::steady_timer timer;
  bool done = false;
};

Awaitable<void> PipeAndSignal(tcp::socket& from, tcp::socket& to, std::shared_ptr<Join> j) {
  co_await Pipe(from, to);
  j->done = true;
  j->timer.cancel();
}

// After a 101: bytes both ways until the service closes (or either side fails).
Awaitable<void> Tunnel(Ctx& ctx, beast::tcp_stream& up, beast::flat_buffer& up_buf) {
  beast::error_code ec;
  // What either side already sent past the HTTP header goes first.
  if (ctx.buffer->size() > 0) {
    co_await asio::async_write(up.socket(), ctx.buffer->data(), asio::redirect_error(asio::use_awaitable, ec));
    ctx.buffer->consume(ctx.buffer->size());
  }
  if (!ec && up_buf.size() > 0) {
    co_await asio::async_write(ctx.stream->socket(), up_buf.data(), asio::redirect_error(asio::use_awaitable, ec));
    up_buf.consume(up_buf.size());
  }
  if (ec) co_return;
  ctx.stream->expires_never();
  up.expires_never();
  // Client -> service beside us (same strand), service -> client here.
  auto ex = ctx.stream->get_executor();
  auto j = std::make_shared<Join>(ex);
  asio::co_spawn(ex, PipeAndSignal(ctx.stream->socket(), up.socket(), j), asio::detached);
  co_await Pipe(up.socket(), ctx.stream->socket());
  // The service is done: so is the session (a client that stays silent must not keep it).
  ctx.stream->socket().cancel(ec);
  while (!j->done) {
    co_await j->timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

// ---------------------------------------------------------------- client hang-ups

// A watch on the client's side of a relay: wakes when the client's socket turns readable
// and, if that is its end (EOF or an error, nothing to read), closes the upstream.
struct ClientWatch {
  explicit ClientWatch(asio::any_io_executor ex) : timer(ex, asio::steady_timer::time_point::max()) {}
  asio::steady_timer timer;
  bool done = false;
  bool stopping = false;
  bool hung_up = false;
};

Awaitable<void> WatchClient(tcp::socket& client, tcp::socket& up, std::shared_ptr<ClientWatch> w) {
  beast::error_code ec;
  co_await client.async_wait(tcp::socket::wait_read, asio::redirect_error(asio::use_awaitable, ec));
  if (!ec && !w->stopping) {
    char c;
    ssize_t n = ::recv(client.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      w->hung_up = true;
      beast::error_code cec;
      up.shutdown(tcp::socket::shutdown_both, cec);
      up.cancel(cec);
    }
  }
  w->done = true;
  w->timer.cancel();
}

// Ends the watch (if it is still waiting) and waits until it is over.
Awaitable<void> StopWatch(tcp::socket& client, ClientWatch& w) {
  w.stopping = true;
  beast::error_code ec;
  if (!w.done) client.cancel(ec);  // nothing else is pending on the client socket now
  while (!w.done) {
    co_await w.timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

// The body of the service's answer, relayed piece by piece as it comes. Sets
// ctx.keep_alive false when the exchange cannot be followed by another.
Awaitable<void> RelayBody(Ctx& ctx, beast::tcp_stream& up, beast::flat_buffer& ubuf,
                          http::response_parser<http::buffer_body>& resp,
                          http::response_serializer<http::buffer_body>& sr, bool until_eof,
                          std::vector<char>& buf) {
  auto& res = resp.get();
  beast::error_code ec;
  for (;;) {
    if (!resp.is_done()) {
      res.body().data = buf.data();
      res.body().size = buf.size();
      up.expires_after(kIdleTimeout);
      co_await http::async_read_some(up, ubuf, resp, asio::redirect_error(asio::use_awaitable, ec));
      if (ec == http::error::need_buffer) ec = {};
      if (ec == http::error::end_of_stream || ec == http::error::partial_message) {
        // The upstream closed: for a body until EOF that is its end; otherwise it is cut
        // short, and so is our answer (the client sees a truncated message).
        if (!until_eof) ctx.keep_alive = false;
        if (!until_eof) co_return;
        ec = {};
      }
      if (ec) {
        ctx.keep_alive = false;
        co_return;
      }
      size_t n = buf.size() - res.body().size;
      res.body().data = n > 0 ? buf.data() : nullptr;
      res.body().size = n;
      res.body().more = !resp.is_done();
      if (n == 0 && res.body().more && sr.is_header_done()) continue;
    } else {
      res.body().data = nullptr;
      res.body().size = 0;
      res.body().more = false;
    }
    co_await http::async_write(*ctx.stream, sr, asio::redirect_error(asio::use_awaitable, ec));
    if (ec == http::error::need_buffer) ec = {};
    if (ec) {
      ctx.keep_alive = false;
      co_return;
    }
    if (sr.is_done() || (resp.is_done() && !res.body().more)) break;
  }
}

// The request as it goes on: credentials out, forwarding headers in, one request per
// upstream connection (or Upgrade kept).
void RewriteRequest(Ctx& ctx, http::request<http::buffer_body>& req, const std::string& target,
                    Form form) {
  req.target(target);
  req.erase(kTrafficHeader);
  req.erase(kE2bTrafficHeader);
  if (form == Form::kPath) {
    req.erase(http::field::authorization);
    req.erase("X-API-Key");
  }
  if (form == Form::kE2b) req.erase("X-Access-Token");  // the envd token is spaced's credential
  if (auto it = req.find(http::field::cookie); it != req.end()) {
    std::string kept = net::StripCookie(std::string_view(it->value().data(), it->value().size()),
                                        net::kTrafficCookie, nullptr);
    if (kept.empty()) {
      req.erase(http::field::cookie);
    } else {
      req.set(http::field::cookie, kept);
    }
  }
  req.erase(http::field::expect);  // answered here (see Proxy)
  req.erase(http::field::keep_alive);
  req.erase("Proxy-Connection");
  beast::error_code ec;
  auto remote = ctx.stream->socket().remote_endpoint(ec);
  if (!ec) {
    std::string xff(req["X-Forwarded-For"]);
    req.set("X-Forwarded-For", (xff.empty() ? "" : xff + ", ") + remote.address().to_string());
  }
  req.set("X-Forwarded-Host", std::string(req[http::field::host]));
  req.set("X-Forwarded-Proto", "http");
  bool upgrade = req.find(http::field::upgrade) != req.end();
  if (upgrade) {
    req.set(http::field::connection, "Upgrade");
  } else {
    req.keep_alive(false);
  }
}

// Relays the request (header, then body as it arrives) to the upstream, then its answer
// back. Returns once the exchange is over; ctx.keep_alive says whether the client
// connection may carry another request.
Awaitable<void> Relay(Ctx& ctx, beast::tcp_stream& up, const std::string& target, Form form,
                      const std::vector<std::pair<std::string, std::string>>& extra_headers) {
  bool expect_continue = beast::iequals(ctx.Header(http::field::expect), "100-continue");
  const bool head = ctx.method == "HEAD";
  const unsigned version = ctx.req().version();
  ctx.body_consumed = true;
  http::request_parser<http::buffer_body> rp(std::move(*ctx.parser));
  RewriteRequest(ctx, rp.get(), target, form);
  const bool upgrade_asked = rp.get().find(http::field::upgrade) != rp.get().end();
  std::vector<char> buf(kRelayBuffer);
  beast::error_code ec;

  if (expect_continue && !rp.is_done()) {
    http::response<http::empty_body> cont{http::status::continue_, 11};
    co_await http::async_write(*ctx.stream, cont, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return;
  }
  // ---- request
  {
    http::request_serializer<http::buffer_body> sr{rp.get()};
    for (;;) {
      if (!rp.is_done()) {
        rp.get().body().data = buf.data();
        rp.get().body().size = buf.size();
        ctx.stream->expires_after(kIdleTimeout);
        co_await http::async_read_some(*ctx.stream, *ctx.buffer, rp, asio::redirect_error(asio::use_awaitable, ec));
        if (ec == http::error::need_buffer) ec = {};
        if (ec) {
          ctx.keep_alive = false;
          co_return;  // the client went away mid-body: nothing to answer
        }
        size_t n = buf.size() - rp.get().body().size;
        // Never an empty piece with data set: chunked, that would be the last chunk.
        rp.get().body().data = n > 0 ? buf.data() : nullptr;
        rp.get().body().size = n;
        rp.get().body().more = !rp.is_done();
        if (n == 0 && !rp.is_done() && sr.is_header_done()) continue;
      } else {
        rp.get().body().data = nullptr;
        rp.get().body().size = 0;
        rp.get().body().more = false;
      }
      up.expires_after(kIdleTimeout);
      co_await http::async_write(up, sr, asio::redirect_error(asio::use_awaitable, ec));
      if (ec == http::error::need_buffer) ec = {};
      if (ec) break;
      if (rp.is_done() && (sr.is_done() || !rp.get().body().more)) break;
    }
  }
  if (ec) {
    ctx.keep_alive = false;
    co_await ReplyFailure(ctx, form, 502, "the sandbox's service closed the connection: " + ec.message());
    co_return;
  }

  // ---- response (informational answers other than 101 are dropped: the client was
  // answered 100 Continue by us already)
  beast::flat_buffer ubuf;
  std::optional<http::response_parser<http::buffer_body>> resp;
  for (;;) {
    resp.emplace();
    resp->body_limit(std::numeric_limits<std::uint64_t>::max());
    if (head) resp->skip(true);
    up.expires_after(kIdleTimeout);
    co_await http::async_read_header(up, ubuf, *resp, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) break;
    unsigned s = resp->get().result_int();
    if (s < 100 || s >= 200 || s == 101) break;
  }
  if (ec) {
    ctx.keep_alive = false;
    co_await ReplyFailure(ctx, form, ec == beast::error::timeout ? 504 : 502,
                          "the sandbox's service sent no valid HTTP answer: " + ec.message());
    co_return;
  }
  auto& res = resp->get();
  res.erase(http::field::keep_alive);
  for (const auto& [k, v] : extra_headers) res.insert(k, v);
  if (form == Form::kPath) {
    // Served from spaced's own origin: the page must not act as that origin.
    res.set("Content-Security-Policy", "sandbox");
  }
  ctx.status = static_cast<int>(res.result_int());  // as relayed (metrics)
  if (res.result() == http::status::switching_protocols) {
    if (!upgrade_asked) {
      ctx.keep_alive = false;
      co_await ReplyFailure(ctx, form, 502, "the sandbox's service switched protocols unasked");
      co_return;
    }
    http::response_serializer<http::buffer_body> sr{res};
    co_await http::async_write_header(*ctx.stream, sr, asio::redirect_error(asio::use_awaitable, ec));
    ctx.keep_alive = false;
    if (ec) co_return;
    co_await Tunnel(ctx, up, ubuf);
    co_return;
  }
  unsigned status = res.result_int();
  res.version(version >= 11 ? 11 : 10);
  bool no_body = head || status == 204 || status == 304;
  bool until_eof = !no_body && !resp->chunked() && !resp->content_length();
  if (until_eof) ctx.keep_alive = false;  // the end of the body is the end of the connection
  res.keep_alive(ctx.keep_alive);
  http::response_serializer<http::buffer_body> sr{res};
  ctx.stream->expires_never();
  // While the body streams, a client that hangs up closes the upstream at once: the
  // service learns it now rather than at its next write (a quiet stream, such as a
  // running code cell, may not write for seconds). Not when the client has already sent
  // more (a pipelined request): its connection is alive.
  auto watch = std::make_shared<ClientWatch>(ctx.stream->get_executor());
  const bool watching = ctx.buffer->size() == 0;
  if (watching) asio::co_spawn(ctx.stream->get_executor(), WatchClient(ctx.stream->socket(), up.socket(), watch), asio::detached);
  co_await RelayBody(ctx, up, ubuf, *resp, sr, until_eof, buf);
  if (watching) co_await StopWatch(ctx.stream->socket(), *watch);
  if (watch->hung_up) ctx.keep_alive = false;
  if (!sr.is_done()) ctx.keep_alive = false;
}

// Connects and relays, or answers why not.
Awaitable<void> Proxy(Ctx& ctx, const store::SandboxRecord& rec, int port,
                      const std::string& target, Form form,
                      std::vector<std::pair<std::string, std::string>> extra_headers = {}) {
  auto conn = co_await ConnectUpstream(ctx, rec, port);
  if (conn.status != 0) {
    co_await ReplyFailure(ctx, form, conn.status, conn.message, extra_headers);
    co_return;
  }
  co_await Relay(ctx, *conn.stream, target, form, extra_headers);
}

// ---------------------------------------------------------------- traffic credentials

struct Credential {
  std::string token;
  enum class From { kNone, kQuery, kHeader, kCookie } from = From::kNone;
};

Credential FindCredential(const Ctx& ctx) {
  Credential c;
  auto raw = ctx.req().target();
  std::string q;
  (void)net::StripQueryParam(std::string_view(raw.data(), raw.size()), net::kTrafficQueryParam, &q);
  if (!q.empty()) return {q, Credential::From::kQuery};
  for (const char* h : {kTrafficHeader, kE2bTrafficHeader}) {
    std::string v = ctx.Header(std::string_view(h));
    if (!v.empty()) return {v, Credential::From::kHeader};
  }
  std::string cookie;
  (void)net::StripCookie(ctx.Header(http::field::cookie), net::kTrafficCookie, &cookie);
  if (!cookie.empty()) return {cookie, Credential::From::kCookie};
  return c;
}

// "" when the token opens `port` of `rec`; else why not.
std::string CheckTraffic(const Ctx& ctx, const std::string& token, const store::SandboxRecord& rec,
                         int port) {
  if (!auth::LooksLikeTrafficToken(token))
    return "not a traffic token (API keys and API tokens are not accepted here)";
  auto c = ctx.opts->signing_keys->VerifyTraffic(token, NowUnixMillis() / 1000);
  if (!c) return c.error().message;
  // Constant-time comparison of the MAC is VerifyTraffic's; these are signed claims.
  if (c->sandbox_id != rec.id || c->generation != rec.created_ms)
    return "this traffic token is for another sandbox";
  if (c->port != 0 && c->port != port)
    return "this traffic token is for port " + std::to_string(c->port);
  return "";
}

// A browser navigation (which gets a redirect to the clean URL) rather than an API client
// such as curl (which gets the answer at once).
bool BrowserNavigation(const Ctx& ctx) {
  if (ctx.method != "GET" && ctx.method != "HEAD") return false;
  std::string mode = ctx.Header("Sec-Fetch-Mode");
  if (!mode.empty()) return beast::iequals(mode, "navigate");
  return ctx.Header(http::field::accept).find("text/html") != std::string::npos;
}

std::string TrafficCookie(const std::string& token, int64_t expires_s) {
  std::string c = std::string(net::kTrafficCookie) + "=" + token + "; Path=/; HttpOnly; SameSite=Lax";
  if (expires_s > 0) {
    int64_t left = std::max<int64_t>(1, expires_s - NowUnixMillis() / 1000);
    c += "; Max-Age=" + std::to_string(left);
  }
  return c;
}

// ---------------------------------------------------------------- traffic to a port

// Traffic to a port of a sandbox from outside spaced's API (a sandbox host, or an E2B client
// naming the port in headers): traffic credentials unless the sandbox's traffic is public.
Awaitable<void> ProxyPortTraffic(Ctx& ctx, const std::string& id, int port, Form form) {
  core::Platform* p = ctx.platform;
  auto rec = co_await ctx.Blocking([&] { return p->GetSandbox(id); });
  if (!rec || SandboxGone(*rec)) {
    co_await ReplyFailure(ctx, form, 404, "no sandbox " + id);
    co_return;
  }
  std::string raw(ctx.req().target());
  std::string target = net::StripQueryParam(raw, net::kTrafficQueryParam, nullptr);
  std::vector<std::pair<std::string, std::string>> headers;
  if (!core::Platform::StoredPolicy(*rec).public_traffic) {
    Credential cred = FindCredential(ctx);
    if (cred.from == Credential::From::kNone) {
      co_await ReplyFailure(ctx, form, 401,
                            "port " + std::to_string(port) + " of sandbox " + id +
                                " needs a traffic credential: a " + kTrafficHeader +
                                " header, or a signed URL (space url " + id + " " +
                                std::to_string(port) + ")");
      co_return;
    }
    std::string why = CheckTraffic(ctx, cred.token, *rec, port);
    if (!why.empty()) {
      // A stale cookie is dropped so the next signed URL starts clean.
      if (cred.from == Credential::From::kCookie)
        headers.emplace_back("Set-Cookie", std::string(net::kTrafficCookie) + "=; Path=/; Max-Age=0; HttpOnly; SameSite=Lax");
      co_await ReplyFailure(ctx, form, 403, "traffic credential refused: " + why, headers);
      co_return;
    }
    if (cred.from == Credential::From::kQuery) {
      auto c = ctx.opts->signing_keys->VerifyTraffic(cred.token, NowUnixMillis() / 1000);
      headers.emplace_back("Set-Cookie", TrafficCookie(cred.token, c ? c->expires_s : 0));
      if (BrowserNavigation(ctx)) {
        // The token leaves the address bar (and history, and Referer): the cookie carries it.
        headers.emplace_back("Location", target);
        headers.emplace_back("Cache-Control", "no-store");
        co_await ctx.ReplyBytes(302, "", "text/plain; charset=utf-8", headers);
        co_return;
      }
    }
  }
  // A signed URL used by curl and the like: answered at once, the cookie set on the way.
  co_await Proxy(ctx, *rec, port, target, form, headers);
}

}  // namespace

// ---------------------------------------------------------------- host form

Awaitable<bool> RoutePortsHost(Ctx& ctx) {
  std::string host = ctx.Header(http::field::host);
  auto parsed = net::ParsePortHost(host, ctx.opts->sandbox_domain);
  if (parsed && !*parsed) co_return false;  // spaced's own API
  if (!parsed) {
    co_await ReplyFailure(ctx, Form::kHost, 400, parsed.error().message);
    co_return true;
  }
  co_await ProxyPortTraffic(ctx, (*parsed)->sandbox_id, (*parsed)->port, Form::kHost);
  co_return true;
}

Awaitable<void> RoutePortTraffic(Ctx& ctx, const std::string& sandbox_id, int port) {
  co_await ProxyPortTraffic(ctx, sandbox_id, port, Form::kE2b);
}

// ---------------------------------------------------------------- API routes

Awaitable<bool> RoutePorts(Ctx& ctx) {
  const auto& s = ctx.segments;
  if (s.size() < 3 || s[0] != "v1" || s[1] != "sandboxes") co_return false;
  const bool urls = s.size() == 4 && s[3] == "urls";
  const bool path_form = s.size() >= 5 && s[3] == "ports";
  if (!urls && !path_form) co_return false;
  const std::string id = s[2];
  core::Platform* p = ctx.platform;

  if (urls) {
    if (ctx.method != "POST") {
      co_await ctx.ReplyError(Error(Errc::kInvalidArgument, 0, "use POST " + ctx.path));
      co_return true;
    }
    auto body = co_await ctx.ReadJson();
    if (!body) {
      co_await ctx.ReplyError(body.error());
      co_return true;
    }
    int port = 0;
    if (const Json* pj = JsonField(*body, "port"); pj && pj->is_number_integer()) {
      int64_t v = pj->get<int64_t>();
      port = v >= 1 && v <= 65535 ? static_cast<int>(v) : -1;
    } else if (pj && pj->is_string()) {
      auto v = net::ParsePort(pj->get<std::string>());
      port = v ? *v : -1;
    }
    if (port <= 0) {
      co_await ctx.ReplyError(Error(Errc::kInvalidArgument, 0, "port must be a number 1..65535"));
      co_return true;
    }
    int64_t ttl = kDefaultUrlTtlS;
    if (const Json* t = JsonField(*body, "ttl")) {
      if (!t->is_number_integer() || t->get<int64_t>() < 1 || t->get<int64_t>() > ctx.opts->max_token_ttl_s) {
        co_await ctx.ReplyError(Error(Errc::kInvalidArgument, 0,
                                      "ttl must be seconds, 1.." + std::to_string(ctx.opts->max_token_ttl_s)));
        co_return true;
      }
      ttl = t->get<int64_t>();
    }
    for (const auto& [k, v] : body->items()) {
      if (k != "port" && k != "ttl") {
        co_await ctx.ReplyError(Error(Errc::kInvalidArgument, 0, "unknown field \"" + k + "\""));
        co_return true;
      }
    }
    auto rec = co_await ctx.Blocking([&] { return p->GetSandbox(id); });
    if (!rec || SandboxGone(*rec)) {
      co_await ctx.ReplyError(Error(Errc::kNotFound, 0, "no sandbox " + id));
      co_return true;
    }
    int64_t now = NowUnixMillis() / 1000;
    int64_t exp = now + ttl;
    if (ctx.principal.is_token()) exp = std::min(exp, ctx.principal.claims.expires_s);
    auth::TrafficClaims tc;
    tc.sandbox_id = rec->id;
    tc.generation = rec->created_ms;
    tc.port = port;
    tc.expires_s = exp;
    std::string token = ctx.opts->signing_keys->MintTraffic(tc);
    const bool pub = core::Platform::StoredPolicy(*rec).public_traffic;
    // The port this request reached spaced on is the one the URL's client will use too.
    beast::error_code lec;
    int listen_port = ctx.stream->socket().local_endpoint(lec).port();
    std::string host = net::PortHostName(port, rec->id, ctx.opts->sandbox_domain, listen_port);
    std::string url = "http://" + host + "/";
    if (!pub) url += std::string("?") + net::kTrafficQueryParam + "=" + token;
    Json reply = {{"url", url},
                  {"host", host},
                  {"sandbox_id", rec->id},
                  {"port", port},
                  {"public_traffic", pub},
                  {"token", token},
                  {"header", kTrafficHeader},
                  {"expires_at", FormatRfc3339(exp * 1000)}};
    co_await ctx.Reply(200, reply);
    co_return true;
  }

  // ANY /v1/sandboxes/{id}/ports/{port}/...: the API path to a port (API credentials).
  auto port = net::ParsePort(s[4]);
  if (!port) {
    co_await ctx.ReplyError(port.error());
    co_return true;
  }
  auto rec = co_await ctx.Blocking([&] { return p->GetSandbox(id); });
  if (!rec || SandboxGone(*rec)) {
    co_await ctx.ReplyError(Error(Errc::kNotFound, 0, "no sandbox " + id));
    co_return true;
  }
  // The rest of the raw target after the five segments, as sent (encoding and query kept).
  std::string raw(ctx.req().target());
  size_t q = raw.find('?');
  std::string_view path = std::string_view(raw).substr(0, q);
  size_t pos = 0;
  for (int seg = 0; seg < 5 && pos < path.size();) {
    while (pos < path.size() && path[pos] == '/') ++pos;
    size_t next = path.find('/', pos);
    pos = next == std::string_view::npos ? path.size() : next;
    ++seg;
  }
  std::string target(path.substr(pos));
  while (target.size() >= 2 && target[0] == '/' && target[1] == '/') target.erase(0, 1);
  if (target.empty()) target = "/";
  if (q != std::string::npos) target += raw.substr(q);
  co_await Proxy(ctx, *rec, *port, target, Form::kPath);
  co_return true;
}

}  // namespace space::api
