#include <spdlog/spdlog.h>
#include <sys/ioctl.h>
#include <sys/sendfile.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <thread>

#include "api/console_sessions.h"
#include "api/http.h"
#include "api/metrics.h"
#include "api/router.h"
#include "api/tls_front.h"

namespace space::api {

// ---------------------------------------------------------------- Ctx

std::string Ctx::Query(const std::string& key, const std::string& def) const {
  return QueryValue(query, key, def);
}

std::vector<std::string> Ctx::QueryAll(const std::string& key) const {
  std::vector<std::string> out;
  auto [b, e] = query.equal_range(key);
  for (auto it = b; it != e; ++it) out.push_back(it->second);
  return out;
}

std::string Ctx::Header(http::field f) const {
  auto it = req().find(f);
  return it == req().end() ? "" : std::string(it->value());
}

std::string Ctx::Header(std::string_view name) const {
  auto it = req().find(beast::string_view(name.data(), name.size()));
  return it == req().end() ? "" : std::string(it->value());
}

Awaitable<Result<std::string>> Ctx::ReadBody(size_t limit) {
  body_consumed = true;
  if (auto len = parser->content_length(); len && *len > limit) {
    keep_alive = false;
    co_return Fail(Errc::kTooLarge, "request body larger than " + std::to_string(limit) + " bytes");
  }
  KeepHeader();
  http::request_parser<http::string_body> p(std::move(*parser));
  p.body_limit(limit);
  beast::error_code ec;
  co_await http::async_read(*stream, *buffer, p, asio::redirect_error(asio::use_awaitable, ec));
  if (ec == http::error::body_limit) {
    keep_alive = false;
    co_return Fail(Errc::kTooLarge, "request body larger than " + std::to_string(limit) + " bytes");
  }
  if (ec) throw beast::system_error(ec);
  co_return std::move(p.get().body());
}

Awaitable<Status> Ctx::ReadBodyStream(
    size_t limit, const std::function<Awaitable<Status>(std::string_view)>& sink) {
  body_consumed = true;
  if (auto len = parser->content_length(); len && *len > limit) {
    keep_alive = false;
    co_return Fail(Errc::kTooLarge, "request body larger than " + std::to_string(limit) + " bytes");
  }
  KeepHeader();
  http::request_parser<http::buffer_body> p(std::move(*parser));
  p.body_limit(limit);
  std::vector<char> chunk(1 << 20);
  std::string pending;
  while (!p.is_done()) {
    p.get().body().data = chunk.data();
    p.get().body().size = chunk.size();
    beast::error_code ec;
    co_await http::async_read(*stream, *buffer, p, asio::redirect_error(asio::use_awaitable, ec));
    if (ec == http::error::need_buffer) ec = {};
    if (ec == http::error::body_limit) {
      keep_alive = false;
      co_return Fail(Errc::kTooLarge, "request body larger than " + std::to_string(limit) + " bytes");
    }
    if (ec) throw beast::system_error(ec);
    size_t got = chunk.size() - p.get().body().size;
    pending.append(chunk.data(), got);
    // Hand the sink large pieces: each is one round trip to the agent.
    if (pending.size() >= (1u << 20) || (p.is_done() && !pending.empty())) {
      auto st = co_await sink(pending);
      pending.clear();
      if (!st) {
        keep_alive = false;  // the rest of the body is not read
        co_return st;
      }
    }
  }
  co_return Ok();
}

Awaitable<Result<Json>> Ctx::ReadJson() {
  auto body = co_await ReadBody(opts->max_json_body);
  if (!body) co_return tl::unexpected(body.error());
  co_return ParseJsonBody(*body);
}

Awaitable<void> Ctx::ReplyBytes(int status, std::string body, const std::string& content_type,
                                const std::vector<std::pair<std::string, std::string>>& headers) {
  if (!body_consumed && (parser->content_length().value_or(0) > 0 || parser->chunked())) {
    // Do not leave an unread body on a keep-alive connection.
    keep_alive = false;
  }
  http::response<http::string_body> res{static_cast<http::status>(status), req().version()};
  this->status = status;
  res.set(http::field::server, "spaced");
  res.set(http::field::content_type, content_type);
  for (const auto& h : headers) {
    // Set-Cookie is the one field that may come more than once.
    if (h.first == "Set-Cookie") {
      res.insert(h.first, h.second);
    } else {
      res.set(h.first, h.second);
    }
  }
  res.keep_alive(keep_alive);
  res.body() = std::move(body);
  res.prepare_payload();
  co_await http::async_write(*stream, res, asio::use_awaitable);
}

Awaitable<void> Ctx::Reply(int status, const Json& body,
                           const std::vector<std::pair<std::string, std::string>>& headers) {
  co_await ReplyBytes(status, body.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n",
                      "application/json", headers);
}

Awaitable<void> Ctx::ReplyError(const Error& e) {
  std::vector<std::pair<std::string, std::string>> headers;
  // Overload is temporary: say when to come back rather than let clients time out.
  if (e.code == Errc::kResourceExhausted) headers.emplace_back("Retry-After", "1");
  co_await Reply(HttpStatusFor(e.code), ErrorBody(e), headers);
}

Awaitable<void> Ctx::StartChunked(int status, const std::string& content_type,
                                  const std::vector<std::pair<std::string, std::string>>& headers) {
  http::response<http::empty_body> res{static_cast<http::status>(status), req().version()};
  this->status = status;
  res.set(http::field::server, "spaced");
  res.set(http::field::content_type, content_type);
  res.set(http::field::cache_control, "no-cache");
  for (const auto& h : headers) res.set(h.first, h.second);
  res.keep_alive(keep_alive);
  res.chunked(true);
  chunked_.emplace(std::move(res), nullptr);
  chunked_->second = std::make_unique<http::response_serializer<http::empty_body>>(chunked_->first);
  stream->expires_never();
  co_await http::async_write_header(*stream, *chunked_->second, asio::use_awaitable);
}

Awaitable<void> Ctx::WriteChunk(std::string_view data) {
  if (data.empty()) co_return;
  co_await asio::async_write(*stream, http::make_chunk(asio::buffer(data.data(), data.size())),
                             asio::use_awaitable);
}

Awaitable<void> Ctx::WriteChunk(std::string_view head, std::string_view data) {
  std::array<asio::const_buffer, 2> bufs = {asio::buffer(head.data(), head.size()),
                                            asio::buffer(data.data(), data.size())};
  co_await asio::async_write(*stream, http::make_chunk(bufs), asio::use_awaitable);
}

Awaitable<void> Ctx::WriteChunkFromFile(std::string_view head, int fd, uint64_t offset,
                                        size_t length) {
  if (head.empty() && length == 0) co_return;
  char size_line[32];
  int k = std::snprintf(size_line, sizeof size_line, "%zx\r\n", head.size() + length);
  std::array<asio::const_buffer, 2> pre = {asio::buffer(size_line, static_cast<size_t>(k)),
                                           asio::buffer(head.data(), head.size())};
  co_await asio::async_write(*stream, pre, asio::use_awaitable);
  auto& sock = stream->socket();
  // sendfile needs the fd itself non-blocking: a full socket must suspend this coroutine,
  // not block the I/O thread.
  if (!sock.native_non_blocking()) sock.native_non_blocking(true);
  off_t pos = static_cast<off_t>(offset);
  size_t left = length;
  while (left > 0) {
    ssize_t n = ::sendfile(sock.native_handle(), fd, &pos, left);
    if (n > 0) {
      left -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      co_await sock.async_wait(tcp::socket::wait_write, asio::use_awaitable);
      continue;
    }
    // 0: the file ended early (its output was deleted meanwhile, say).
    throw beast::system_error(beast::error_code(n == 0 ? EPIPE : errno, beast::system_category()),
                              "sendfile");
  }
  co_await asio::async_write(*stream, asio::buffer("\r\n", 2), asio::use_awaitable);
}

Awaitable<void> Ctx::EndChunked() {
  co_await asio::async_write(*stream, http::make_chunk_last(), asio::use_awaitable);
  chunked_.reset();
}

Ctx::Watcher::Watcher(Ctx& ctx, std::string key) : ctx_(ctx), key_(std::move(key)) {}

void Ctx::Watcher::Arm() {
  fired_ = std::make_shared<bool>(false);
  auto ex = ctx_.stream->get_executor();
  timer_ = std::make_shared<asio::steady_timer>(ex);
  auto fired = fired_;
  auto timer = timer_;
  handle_ = ctx_.platform->notifier().Watch(key_, [ex, fired, timer] {
    asio::post(ex, [fired, timer] {
      *fired = true;
      timer->cancel();
    });
  });
}

Awaitable<bool> Ctx::Watcher::Wait(int64_t deadline_ns) {
  int64_t left = deadline_ns - MonotonicNanos();
  if (!*fired_ && left > 0) {
    timer_->expires_after(std::chrono::nanoseconds(left));
    beast::error_code ec;
    co_await timer_->async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  bool fired = *fired_;
  handle_.reset();
  co_return fired;
}

bool Finished(const store::OperationRecord& op) {
  return op.state == "succeeded" || op.state == "failed";
}

Awaitable<Result<store::OperationRecord>> AwaitOperation(Ctx& ctx, const std::string& id,
                                                         int64_t wait_ms) {
  int64_t deadline = MonotonicNanos() + wait_ms * 1000000;
  Ctx::Watcher w(ctx, "op:" + id);
  for (;;) {
    w.Arm();
    auto op = co_await ctx.Blocking([&] { return ctx.platform->GetOperation(id); });
    if (!op || Finished(*op) || MonotonicNanos() >= deadline) co_return op;
    co_await w.Wait(deadline);
  }
}

Awaitable<bool> AwaitOrFail(Ctx& ctx, store::OperationRecord* op, int64_t wait_ms) {
  if (wait_ms <= 0) co_return false;
  // Already over (a warm-pool claim is): no need to look it up again.
  if (!Finished(*op)) {
    auto done = co_await AwaitOperation(ctx, op->id, wait_ms);
    if (done) *op = *done;
  }
  if (op->state != "failed") co_return false;
  Error e(ErrcFromName(op->error_code), 0, op->error_message);
  co_await ctx.ReplyError(e);
  co_return true;
}

int64_t WaitMillis(const Ctx& ctx) { return WaitMillis(ctx.query); }

// ---------------------------------------------------------------- server

struct Server::Impl {
  core::Platform* platform;
  ServerOptions opts;
  // Before ioc: connections' coroutines destroyed with ioc still count their request here.
  // Its `inflight`: requests being dispatched, /healthz aside.
  HttpMetrics http_metrics;
  ConsoleSessions sessions;
  asio::io_context ioc;
  asio::thread_pool pool;
  tcp::acceptor acceptor;
  std::unique_ptr<TlsFront> tls_front;  // with a certificate: TLS beside plain HTTP
  std::vector<std::thread> threads;
  std::mutex mu;
  std::condition_variable cv;
  bool stopped = false;

  Impl(core::Platform* p, ServerOptions o)
      : platform(p), opts(std::move(o)),
        sessions(8 * 3600, 7 * 24 * 3600, 4096, opts.console_session_backing),
        pool(opts.blocking_threads), acceptor(ioc) {}

  Awaitable<void> Accept();
  // One connection's requests, one after another (keep-alive); `socket` is the client's, or
  // the plaintext end of its TLS (tls_front.h).
  Awaitable<void> Serve(tcp::socket socket, Conn conn);
  Awaitable<void> Dispatch(Ctx& ctx);
};

Awaitable<void> Server::Impl::Accept() {
  for (;;) {
    beast::error_code ec;
    tcp::socket socket = co_await acceptor.async_accept(
        asio::make_strand(ioc), asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      if (ec == asio::error::operation_aborted) co_return;
      spdlog::warn("accept: {}", ec.message());
      continue;
    }
    // Responses are often written in several small pieces (header, then chunks): without
    // TCP_NODELAY, Nagle plus the client's delayed ACK adds ~40 ms to each.
    socket.set_option(tcp::no_delay(true), ec);
    Conn conn;
    conn.remote = socket.remote_endpoint(ec);
    conn.local = socket.local_endpoint(ec);
    auto ex = socket.get_executor();
    if (tls_front) {
      auto serve = [this](tcp::socket s, Conn c) { return Serve(std::move(s), c); };
      asio::co_spawn(ex, tls_front->Serve(std::move(socket), conn, serve), asio::detached);
    } else {
      asio::co_spawn(ex, Serve(std::move(socket), conn), asio::detached);
    }
  }
}

Awaitable<void> Server::Impl::Serve(tcp::socket socket, Conn conn) {
  beast::tcp_stream stream(std::move(socket));
  beast::flat_buffer buffer;
  bool reset = false;  // a handler threw ResetConnection
  try {
    for (;;) {
      http::request_parser<http::empty_body> parser;
      parser.header_limit(64 * 1024);
      parser.body_limit(std::numeric_limits<uint64_t>::max());
      stream.expires_after(std::chrono::seconds(120));
      beast::error_code ec;
      co_await http::async_read_header(stream, buffer, parser,
                                       asio::redirect_error(asio::use_awaitable, ec));
      if (ec == http::error::end_of_stream || ec == asio::error::eof ||
          ec == beast::error::timeout || ec == asio::error::connection_reset)
        break;
      Ctx ctx{platform, &pool, &opts, &stream, &buffer, &parser};
      ctx.conn = conn;
      ctx.http_metrics = &http_metrics;
      ctx.sessions = &sessions;
      // Counted once answered (or abandoned: a client gone mid-request counts as status 0).
      struct Count {
        Ctx& ctx;
        int64_t t0 = MonotonicNanos();
        ~Count() {
          ctx.http_metrics->Record(MethodLabel(ctx.method),
                                   ctx.route.empty() ? RouteLabel(ctx.segments) : ctx.route,
                                   ctx.status, (MonotonicNanos() - t0) / 1e9);
        }
      } count{ctx};
      if (ec) {
        ctx.keep_alive = false;
        ctx.status = 400;
        // A malformed request: answer 400 if the socket is still writable.
        http::response<http::string_body> res{http::status::bad_request, 11};
        res.set(http::field::content_type, "application/json");
        res.body() = ErrorBody(Error{Errc::kInvalidArgument, 0, "malformed HTTP request: " + ec.message()}).dump() + "\n";
        res.keep_alive(false);
        res.prepare_payload();
        beast::error_code wec;
        co_await http::async_write(stream, res, asio::redirect_error(asio::use_awaitable, wec));
        break;
      }
      ctx.method = std::string(parser.get().method_string());
      ctx.keep_alive = parser.get().keep_alive();
      auto target = parser.get().target();
      Target parsed = ParseTarget(std::string_view(target.data(), target.size()));
      ctx.path = std::move(parsed.path);
      ctx.segments = std::move(parsed.segments);
      ctx.query = std::move(parsed.query);
      stream.expires_after(std::chrono::minutes(10));
      if (ctx.path != "/healthz" && opts.max_inflight > 0) {
        // Over the limit a request is refused at once (429 + Retry-After) instead of
        // queueing behind the others; /healthz is never refused, so it stays responsive.
        if (http_metrics.inflight.fetch_add(1) >= opts.max_inflight) {
          http_metrics.inflight.fetch_sub(1);
          ctx.keep_alive = false;  // its body, if any, is not read
          Error busy(Errc::kResourceExhausted, 0,
                     "spaced is at its limit of " + std::to_string(opts.max_inflight) +
                         " concurrent requests; retry later");
          co_await ctx.ReplyError(busy);
          break;
        }
        struct Release {
          std::atomic<int>& n;
          ~Release() { n.fetch_sub(1); }
        } release{http_metrics.inflight};
        co_await Dispatch(ctx);
      } else {
        co_await Dispatch(ctx);
      }
      if (!ctx.keep_alive) break;
    }
  } catch (const ResetConnection& e) {
    spdlog::debug("connection from {}: reset: {}", conn.remote.address().to_string(), e.what());
    reset = true;
  } catch (const std::exception& e) {
    // Client went away or a write failed: nothing to answer.
  }
  if (reset) {
    // A reset drops what the kernel has not sent yet: wait (a moment at most) until what
    // was written has left, then close with SO_LINGER 0, which sends the RST (over TLS the
    // front, which holds the client's socket, resets it once it has relayed those bytes).
    if (conn.reset) conn.reset->store(true);
    beast::error_code ec;
    asio::steady_timer wait(stream.get_executor());
    for (int i = 0; i < 100; ++i) {
      int unsent = 0;
      if (::ioctl(stream.socket().native_handle(), TIOCOUTQ, &unsent) != 0 || unsent == 0) break;
      wait.expires_after(std::chrono::milliseconds(10));
      co_await wait.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    stream.socket().set_option(asio::socket_base::linger(true, 0), ec);
    stream.socket().close(ec);
    co_return;
  }
  beast::error_code ec;
  stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  // Lingering close: closing with unread bytes (the rest of a body refused with 413)
  // makes the kernel send a reset, and a client still sending then loses our answer.
  // Read and drop what is still coming, for a moment and a bounded amount.
  stream.expires_after(std::chrono::seconds(2));
  std::vector<char> drop(64 << 10);
  for (size_t drained = 0; !ec && drained < (64u << 20);) {
    drained += co_await stream.async_read_some(asio::buffer(drop),
                                               asio::redirect_error(asio::use_awaitable, ec));
  }
}

Awaitable<void> Server::Impl::Dispatch(Ctx& ctx) {
  // What is served is the route table's (route_table.h); router.cc dispatches by it.
  co_await RouteRequest(ctx);
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Server::~Server() {
  Stop();
  for (auto& t : impl_->threads) {
    if (t.joinable()) t.join();
  }
  impl_->pool.join();
}

Result<std::unique_ptr<Server>> Server::Start(core::Platform* platform, ServerOptions opts) {
  if (!opts.signing_keys) {
    opts.signing_keys = std::make_shared<const auth::SigningKeys>(auth::SigningKeys::Generate());
  }
  auto impl = std::make_unique<Impl>(platform, std::move(opts));
  if (impl->opts.tls) {
    auto front = TlsFront::Create(impl->opts.tls);
    if (!front) return tl::unexpected(front.error());
    impl->tls_front = std::move(*front);
  }
  beast::error_code ec;
  auto addr = asio::ip::make_address(impl->opts.address, ec);
  if (ec) return Fail(Errc::kInvalidArgument, "bad listen address " + impl->opts.address);
  tcp::endpoint ep(addr, impl->opts.port);
  impl->acceptor.open(ep.protocol(), ec);
  if (!ec) impl->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(ep, ec);
  if (!ec) impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return Fail(Errc::kUnavailable, "listen on " + impl->opts.address + ":" +
                                        std::to_string(impl->opts.port) + ": " + ec.message());
  }
  asio::co_spawn(impl->ioc, impl->Accept(), asio::detached);
  for (int i = 0; i < std::max(1, impl->opts.io_threads); ++i) {
    impl->threads.emplace_back([i = impl.get()] { i->ioc.run(); });
  }
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

uint16_t Server::port() const {
  beast::error_code ec;
  return impl_->acceptor.local_endpoint(ec).port();
}

void Server::Stop() {
  {
    std::lock_guard lock(impl_->mu);
    if (impl_->stopped) return;
    impl_->stopped = true;
    impl_->cv.notify_all();
  }
  asio::post(impl_->ioc, [i = impl_.get()] {
    beast::error_code ec;
    i->acceptor.close(ec);
  });
  impl_->ioc.stop();
}

void Server::Wait() {
  std::unique_lock lock(impl_->mu);
  impl_->cv.wait(lock, [&] { return impl_->stopped; });
}

}  // namespace space::api
