// api/relay (relay.h): one HTTP/1.1 exchange relayed to an upstream, streaming both ways.
#include "api/relay.h"

#include <sys/socket.h>

namespace space::api {

namespace {

constexpr size_t kRelayBuffer = 64 << 10;

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
                          std::vector<char>& buf, std::chrono::seconds kIdleTimeout) {
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

// The common part of the request as it goes on: forwarding headers in, one request
// per upstream connection (or Upgrade kept); the policy's own edits first.
void RewriteRequest(Ctx& ctx, http::request<http::buffer_body>& req, const std::string& target,
                    const RelayPolicy& policy) {
  req.target(target);
  if (policy.rewrite) policy.rewrite(req);
  req.erase(http::field::expect);  // answered here (see Relay)
  req.erase(http::field::keep_alive);
  req.erase("Proxy-Connection");
  if (ctx.conn.remote.port() != 0) {  // 0: the client was gone before it could be asked
    std::string xff(req["X-Forwarded-For"]);
    req.set("X-Forwarded-For", (xff.empty() ? "" : xff + ", ") + ctx.conn.remote.address().to_string());
  }
  if (req.find("X-Forwarded-Host") == req.end())
    req.set("X-Forwarded-Host", std::string(req[http::field::host]));
  // Over TLS spaced knows the scheme itself; a plain request may come from a hop that
  // terminated TLS (a gateway, a proxy) and said so.
  if (ctx.conn.tls) {
    req.set("X-Forwarded-Proto", "https");
  } else if (req.find("X-Forwarded-Proto") == req.end()) {
    req.set("X-Forwarded-Proto", "http");
  }
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
}  // namespace

Awaitable<void> Relay(Ctx& ctx, beast::tcp_stream& up, const std::string& target,
                      const RelayPolicy& policy) {
  const auto kIdleTimeout = policy.idle_timeout;
  bool expect_continue = beast::iequals(ctx.Header(http::field::expect), "100-continue");
  const bool head = ctx.method == "HEAD";
  const unsigned version = ctx.req().version();
  ctx.body_consumed = true;
  ctx.KeepHeader();
  http::request_parser<http::buffer_body> rp(std::move(*ctx.parser));
  RewriteRequest(ctx, rp.get(), target, policy);
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
    co_await policy.fail(502, policy.upstream + " closed the connection: " + ec.message());
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
    co_await policy.fail(ec == beast::error::timeout ? 504 : 502,
                       policy.upstream + " sent no valid HTTP answer: " + ec.message());
    co_return;
  }
  auto& res = resp->get();
  res.erase(http::field::keep_alive);
  for (const auto& [k, v] : policy.extra_headers) res.insert(k, v);
  if (policy.rewrite_response) policy.rewrite_response(res);
  ctx.status = static_cast<int>(res.result_int());  // as relayed (metrics)
  if (res.result() == http::status::switching_protocols) {
    if (!upgrade_asked) {
      ctx.keep_alive = false;
      co_await policy.fail(502, policy.upstream + " switched protocols unasked");
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
  co_await RelayBody(ctx, up, ubuf, *resp, sr, until_eof, buf, kIdleTimeout);
  if (watching) co_await StopWatch(ctx.stream->socket(), *watch);
  if (watch->hung_up) ctx.keep_alive = false;
  if (!sr.is_done()) ctx.keep_alive = false;
}

}  // namespace space::api
