// gateway (gateway.h): the server, its upkeep (etcd health, lost sandboxes) and dispatch.
#include <spdlog/spdlog.h>

#include "api/parse.h"
#include "gateway/internal.h"

namespace space::gateway {

namespace {

int64_t MonoMs() { return MonotonicNanos() / 1000000; }

bool StartsWithPath(const std::string& path, std::string_view prefix) {
  return path.size() >= prefix.size() && path.compare(0, prefix.size(), prefix) == 0;
}

}  // namespace

Gateway::Gateway(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<Gateway>> Gateway::Start(Options opts) {
  if (!opts.store) return Fail(Errc::kInvalidArgument, "gateway: no cluster store");
  if (opts.lost_after_s < 1) return Fail(Errc::kInvalidArgument, "--lost-after must be at least 1 s");
  auto impl = std::make_unique<Impl>(std::move(opts));
  auto view = cluster::ClusterView::Open(*impl->opts.store, impl->opts.prefix);
  if (!view) return tl::unexpected(view.error().Wrap("cluster view"));
  impl->view = std::move(*view);
  impl->store_ok_ms = MonoMs();
  beast::error_code ec;
  auto addr = asio::ip::make_address(impl->opts.address, ec);
  if (ec) return Fail(Errc::kInvalidArgument, "bad listen address " + impl->opts.address);
  tcp::endpoint ep(addr, impl->opts.port);
  impl->acceptor.open(ep.protocol(), ec);
  if (!ec) impl->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(ep, ec);
  if (!ec) impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Fail(Errc::kUnavailable, "listen on " + impl->opts.address + ":" +
                                              std::to_string(impl->opts.port) + ": " + ec.message());
  Impl* p = impl.get();
  asio::co_spawn(p->ioc, p->Accept(), asio::detached);
  for (int i = 0; i < std::max(1, p->opts.io_threads); ++i) p->threads.emplace_back([p] { p->ioc.run(); });
  p->upkeep = std::thread([p] { p->Upkeep(); });
  return std::unique_ptr<Gateway>(new Gateway(std::move(impl)));
}

Gateway::~Gateway() { Stop(); }

uint16_t Gateway::port() const { return impl_->acceptor.local_endpoint().port(); }

void Gateway::Stop() {
  if (!impl_) return;
  {
    std::lock_guard l(impl_->mu);
    if (impl_->stopping) return;
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  if (impl_->upkeep.joinable()) impl_->upkeep.join();
  asio::post(impl_->ioc, [p = impl_.get()] {
    beast::error_code ec;
    p->acceptor.close(ec);
  });
  impl_->ioc.stop();
  for (auto& t : impl_->threads)
    if (t.joinable()) t.join();
  impl_->pool.join();
}

// Every second: is etcd answering (routing from the cache has a time limit without it),
// and which sandboxes have lost their node. A record whose route has been gone for
// lost_after_s is marked lost by compare-and-set, so gateways racing do it once.
void Gateway::Impl::Upkeep() {
  cluster::Store& st = *opts.store;
  const std::string records = opts.prefix + "sandboxes/";
  std::unique_lock l(mu);
  while (!stopping) {
    l.unlock();
    int64_t rev = 0;
    auto all = st.List(records, &rev);
    if (all) {
      store_ok_ms = MonoMs();
      const int64_t now = MonoMs();
      std::map<std::string, int64_t> seen;
      for (const auto& kv : *all) {
        const std::string id = kv.key.substr(records.size());
        auto j = ParseJson(kv.value);
        if (!j || JsonStringOr(*j, "state", "") != "live") continue;
        if (view->RouteOf(id)) continue;
        int64_t since = now;
        {
          std::lock_guard g(mu);
          if (auto it = missing_since.find(id); it != missing_since.end()) since = it->second;
        }
        seen[id] = since;
        if (now - since < opts.lost_after_s * 1000) continue;
        // A last linearizable look at the route before giving the sandbox up.
        auto route = st.Get(opts.prefix + "routes/" + id);
        if (!route || *route) continue;
        (*j)["state"] = "lost";
        (*j)["lost_ms"] = NowUnixMillis();
        auto cas = st.CompareAndSet(kv.key, kv.mod_revision, j->dump());
        if (cas && *cas) {
          spdlog::warn("gateway: sandbox {} of node {} is lost (no route for {} s)", id,
                       JsonStringOr(*j, "node", "?"), opts.lost_after_s);
          seen.erase(id);
        }
      }
      std::lock_guard g(mu);
      missing_since = std::move(seen);
    }
    l.lock();
    cv.wait_for(l, std::chrono::seconds(1), [&] { return stopping; });
  }
}

Awaitable<void> Gateway::Impl::Accept() {
  for (;;) {
    beast::error_code ec;
    tcp::socket socket = co_await acceptor.async_accept(asio::make_strand(ioc),
                                                        asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
      spdlog::warn("gateway accept: {}", ec.message());
      continue;
    }
    socket.set_option(tcp::no_delay(true), ec);
    auto ex = socket.get_executor();
    asio::co_spawn(ex, Serve(std::move(socket)), asio::detached);
  }
}

Awaitable<void> Gateway::Impl::Serve(tcp::socket socket) {
  api::Conn conn;
  beast::error_code aec;
  conn.remote = socket.remote_endpoint(aec);
  conn.local = socket.local_endpoint(aec);
  beast::tcp_stream stream(std::move(socket));
  beast::flat_buffer buffer;
  try {
    for (;;) {
      http::request_parser<http::empty_body> parser;
      parser.header_limit(64 * 1024);
      parser.body_limit(std::numeric_limits<uint64_t>::max());
      stream.expires_after(std::chrono::seconds(120));
      beast::error_code ec;
      co_await http::async_read_header(stream, buffer, parser, asio::redirect_error(asio::use_awaitable, ec));
      if (ec == http::error::end_of_stream || ec == asio::error::eof || ec == beast::error::timeout ||
          ec == asio::error::connection_reset)
        break;
      Ctx ctx{nullptr, &pool, &server_opts, &stream, &buffer, &parser};
      ctx.conn = conn;
      if (ec) {
        http::response<http::string_body> res{http::status::bad_request, 11};
        res.set(http::field::content_type, "application/json");
        res.body() = api::ErrorBody(Error{Errc::kInvalidArgument, 0, "malformed HTTP request: " + ec.message()}).dump() + "\n";
        res.keep_alive(false);
        res.prepare_payload();
        beast::error_code wec;
        co_await http::async_write(stream, res, asio::redirect_error(asio::use_awaitable, wec));
        break;
      }
      ctx.method = std::string(parser.get().method_string());
      ctx.keep_alive = parser.get().keep_alive();
      auto target = parser.get().target();
      api::Target parsed = api::ParseTarget(std::string_view(target.data(), target.size()));
      ctx.path = std::move(parsed.path);
      ctx.segments = std::move(parsed.segments);
      ctx.query = std::move(parsed.query);
      stream.expires_after(std::chrono::minutes(10));
      co_await Dispatch(ctx);
      // A body nobody read cannot be skipped reliably: that connection ends.
      if (!ctx.body_consumed && (parser.content_length().value_or(0) > 0 || parser.chunked()))
        ctx.keep_alive = false;
      if (!ctx.keep_alive) break;
    }
  } catch (const std::exception& e) {
    spdlog::debug("gateway connection: {}", e.what());
  }
  beast::error_code ec;
  stream.socket().shutdown(tcp::socket::shutdown_send, ec);
}

// Which node answers: by the sandbox a request names (its Host, E2B's header, its path,
// a token), else by what it is (creates placed, lists merged, lookups found).
Awaitable<void> Gateway::Impl::Dispatch(Ctx& ctx) {
  const auto& s = ctx.segments;
  if (ctx.path == "/healthz") {
    Json ok = {{"status", "ok"}, {"role", "gateway"}};
    co_await ctx.Reply(200, ok);
    co_return;
  }
  if (ctx.path == "/readyz") {
    const bool fresh = StoreFresh(3000);
    const size_t nodes = view->Nodes().size();
    Json body = {{"ready", fresh && nodes > 0}, {"nodes", nodes}, {"store", fresh ? "ok" : "unavailable"}};
    const int status = fresh && nodes > 0 ? 200 : 503;
    co_await ctx.Reply(status, body);
    co_return;
  }
  // {port}-{id}.{domain}: a sandbox's port (docs/ports.md).
  std::string host = ctx.Header(http::field::host);
  if (auto colon = host.rfind(':'); colon != std::string::npos && host.find(']') == std::string::npos)
    host.resize(colon);
  const std::string suffix = "." + opts.sandbox_domain;
  if (host.size() > suffix.size() && host.compare(host.size() - suffix.size(), suffix.size(), suffix) == 0) {
    std::string label = host.substr(0, host.size() - suffix.size());
    if (auto dash = label.find('-'); dash != std::string::npos && label.find('.') == std::string::npos) {
      co_await ToSandbox(ctx, Surface::kText, label.substr(dash + 1));
      co_return;
    }
  }
  // E2B's envd: the sandbox in a header, or (SDKs before 2.8) only in its access token.
  if (std::string id = ctx.Header("E2b-Sandbox-Id"); !id.empty()) {
    co_await ToSandbox(ctx, Surface::kText, id);
    co_return;
  }
  if (std::string tok = ctx.Header("X-Access-Token"); !tok.empty()) {
    if (std::string id = TokenSandbox(tok); !id.empty()) {
      co_await ToSandbox(ctx, Surface::kText, id);
      co_return;
    }
  }
  // SPACE's v1 API.
  if (s.size() >= 2 && s[0] == "v1" && s[1] == "sandboxes") {
    if (s.size() == 2) {
      if (ctx.method == "POST") co_await Create(ctx, Surface::kV1);
      else if (ctx.method == "GET") co_await List(ctx, Surface::kV1);
      else co_await ToAnyNode(ctx, Surface::kV1);
      co_return;
    }
    if (s.size() == 3 && ctx.method == "GET") {
      co_await GetSandbox(ctx, s[2]);
      co_return;
    }
    co_await ToSandbox(ctx, Surface::kV1, s[2]);
    co_return;
  }
  if (s.size() >= 2 && s[0] == "v1" && s[1] == "volumes") {
    co_await Volumes(ctx, Surface::kV1);
    co_return;
  }
  if (!s.empty() && (s[0] == "volumes" || (s[0] == "volumecontent" && s.size() >= 2))) {
    co_await Volumes(ctx, Surface::kE2b);
    co_return;
  }
  if (s.size() == 2 && s[0] == "v1" && s[1] == "events" && ctx.method == "GET") {
    co_await Events(ctx);
    co_return;
  }
  if (s.size() >= 3 && s[0] == "ui" && s[1] == "sandboxes") {
    co_await ToAnyNode(ctx, Surface::kV1);  // the page; its API calls come back here
    co_return;
  }
  // E2B's control plane: /sandboxes, /v2/sandboxes, /sandboxes/{id}/...
  const size_t base = (s.size() >= 1 && s[0] == "v2") ? 1 : 0;
  if (s.size() > base && s[base] == "sandboxes") {
    if (s.size() == base + 1) {
      if (ctx.method == "POST") co_await Create(ctx, Surface::kE2b);
      else if (ctx.method == "GET") co_await List(ctx, Surface::kE2b);
      else co_await ToAnyNode(ctx, Surface::kE2b);
      co_return;
    }
    co_await ToSandbox(ctx, Surface::kE2b, s[base + 1]);
    co_return;
  }
  const Surface form = StartsWithPath(ctx.path, "/v1/") || StartsWithPath(ctx.path, "/ui") ? Surface::kV1 : Surface::kE2b;
  // Lookups by an id only one node knows.
  if (ctx.method == "GET" && s.size() == 3 && s[0] == "v1" &&
      (s[1] == "operations" || s[1] == "snapshots")) {
    co_await Find(ctx, form);
    co_return;
  }
  co_await ToAnyNode(ctx, form);
}

}  // namespace space::gateway
