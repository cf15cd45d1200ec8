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
#include "api/relay.h"
#include "net/ingress.h"

namespace space::api {

namespace {

constexpr auto kConnectTimeout = std::chrono::seconds(10);
constexpr auto kIdleTimeout = std::chrono::minutes(10);
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

// What the ports proxy does to a request beyond the relay's own forwarding headers:
// traffic credentials out always, API credentials out on the path form, the envd token
// out for E2B clients, and spaced's traffic cookie out of the cookies.
void StripCredentials(http::request<http::buffer_body>& req, Form form) {
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
  RelayPolicy policy;
  policy.upstream = "the sandbox's service";
  policy.fail = [&ctx, form, extra_headers](int status, std::string message) -> Awaitable<void> {
    co_await ReplyFailure(ctx, form, status, message, extra_headers);
  };
  // The Host the service sees: the sandbox's mask_request_host when it has one.
  const std::string host = core::Platform::StoredPolicy(rec).RequestHostFor(port);
  policy.rewrite = [form, host](http::request<http::buffer_body>& req) {
    StripCredentials(req, form);
    if (!host.empty()) req.set(http::field::host, host);
  };
  policy.extra_headers = extra_headers;
  if (form == Form::kPath) {
    // Served from spaced's own origin: the page must not act as that origin.
    policy.rewrite_response = [](http::response<http::buffer_body>& res) {
      res.set("Content-Security-Policy", "sandbox");
    };
  }
  policy.idle_timeout = std::chrono::duration_cast<std::chrono::seconds>(kIdleTimeout);
  co_await Relay(ctx, *conn.stream, target, policy);
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

// The traffic cookie (Secure when it is set over TLS: a browser then never sends it in clear).
std::string TrafficCookie(const Ctx& ctx, const std::string& token, int64_t expires_s) {
  std::string c = std::string(net::kTrafficCookie) + "=" + token + "; Path=/; HttpOnly; SameSite=Lax";
  if (ctx.conn.tls) c += "; Secure";
  if (expires_s > 0) {
    int64_t left = std::max<int64_t>(1, expires_s - NowUnixMillis() / 1000);
    c += "; Max-Age=" + std::to_string(left);
  }
  return c;
}

// ---------------------------------------------------------------- traffic to a port

// A paused sandbox created with auto_resume (E2B's autoResume) is resumed by traffic to its
// ports: the request waits for the resume (at most 30 s) and then goes on. Requests that
// arrive together share one resume: the others find it under way and look again.
Awaitable<Result<store::SandboxRecord>> ResumeForTraffic(Ctx& ctx, const std::string& id) {
  core::Platform* p = ctx.platform;
  const int64_t deadline = MonotonicNanos() + 30'000'000'000LL;
  asio::steady_timer pause(ctx.stream->get_executor());
  for (;;) {
    auto rec = co_await ctx.Blocking([&] { return p->GetSandbox(id); });
    if (!rec || rec->state != "paused" || !JsonBoolOr(rec->spec, "auto_resume", false)) co_return rec;
    auto op = co_await ctx.Blocking([&] { return p->Transition(id, "resume"); });
    if (op) {
      spdlog::info("sandbox {}: traffic to a port resumes it ({})", id, op->id);
      auto done = co_await AwaitOperation(ctx, op->id, 30000);
      if (!done) co_return tl::unexpected(done.error());
      if (done->state == "failed") co_return Fail(Errc::kUnavailable, done->error_message);
      continue;
    }
    if (op.error().code != Errc::kConflict || MonotonicNanos() >= deadline)
      co_return tl::unexpected(op.error());
    pause.expires_after(std::chrono::milliseconds(50));
    beast::error_code ec;
    co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

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
      headers.emplace_back("Set-Cookie", TrafficCookie(ctx, cred.token, c ? c->expires_s : 0));
      if (BrowserNavigation(ctx)) {
        // The token leaves the address bar (and history, and Referer): the cookie carries it.
        headers.emplace_back("Location", target);
        headers.emplace_back("Cache-Control", "no-store");
        co_await ctx.ReplyBytes(302, "", "text/plain; charset=utf-8", headers);
        co_return;
      }
    }
  }
  if (rec->state == "paused" && JsonBoolOr(rec->spec, "auto_resume", false)) {
    rec = co_await ResumeForTraffic(ctx, id);
    if (!rec) {
      co_await ReplyFailure(ctx, form, 503, "sandbox " + id + " could not be resumed: " + rec.error().message);
      co_return;
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
    // The port this request reached spaced on is the one the URL's client will use too;
    // https whenever spaced serves TLS (on that same port).
    const bool https = ctx.opts->tls != nullptr;
    std::string host = net::PortHostName(port, rec->id, ctx.opts->sandbox_domain,
                                         ctx.conn.local.port(), https ? 443 : 80);
    std::string url = (https ? "https://" : "http://") + host + "/";
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
