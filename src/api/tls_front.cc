// api/tls_front (tls_front.h): sniff, TLS handshake, and the two pumps between the client's
// TLS stream and the socketpair the plain server reads.
#include "api/tls_front.h"

#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <sstream>

#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/ssl.hpp>

#include "net/tls/tls.h"

namespace space::api {

namespace ssl = asio::ssl;
using namespace std::chrono_literals;

namespace {

constexpr auto kSniffTimeout = 120s;     // as long as a plain client may take to send its header
constexpr auto kHandshakeTimeout = 10s;
constexpr auto kCloseTimeout = 2s;       // close_notify both ways, as Serve lingers on plain ones
constexpr size_t kDownBuffer = 16 << 10; // one TLS record
constexpr size_t kUpBuffer = 64 << 10;
constexpr size_t kMaxDrain = 64 << 20;     // what a lingering close reads at most
constexpr unsigned char kTlsHandshakeRecord = 0x16;

// One TLS connection. Shared by its two pumps and the deadline timer's handler.
struct Session {
  Session(tcp::socket s, ssl::context& ctx)
      : tls(std::move(s), ctx),
        pair(tls.get_executor()),
        deadline(tls.get_executor()),
        join(tls.get_executor(), asio::steady_timer::time_point::max()) {}
  ssl::stream<tcp::socket> tls;
  asio::local::stream_protocol::socket pair;  // our end of the socketpair
  asio::steady_timer deadline;
  uint64_t arms = 0;         // Arm() calls so far
  uint64_t armed = 0;        // which Arm() the deadline belongs to; 0 = none
  asio::steady_timer join;   // cancelled when the client -> server pump has stopped
  bool stopping = false;     // the client -> server pump is to stop
  bool reader_done = false;
};

// Cancels what is pending on the client's socket unless Disarm() comes first.
void Arm(const std::shared_ptr<Session>& s, std::chrono::steady_clock::duration d) {
  const uint64_t id = ++s->arms;
  s->armed = id;
  s->deadline.expires_after(d);
  s->deadline.async_wait([w = std::weak_ptr<Session>(s), id](beast::error_code ec) {
    auto p = w.lock();
    // A handler that was already queued when Disarm() ran sees another id.
    if (ec || !p || p->armed != id) return;
    beast::error_code ignored;
    p->tls.next_layer().cancel(ignored);
  });
}

void Disarm(Session& s) {
  s.armed = 0;
  s.deadline.cancel();
}

// Client -> server: TLS plaintext into the socketpair until the client ends (close_notify, a
// bare FIN, an error) or the pump is cancelled; then Serve reads EOF, as it would from a
// plain client that closed.
Awaitable<void> Down(std::shared_ptr<Session> s) {
  std::vector<char> buf(kDownBuffer);
  while (!s->stopping) {
    beast::error_code ec;
    size_t n = co_await s->tls.async_read_some(asio::buffer(buf), asio::redirect_error(asio::use_awaitable, ec));
    if (n > 0) {
      beast::error_code wec;
      co_await asio::async_write(s->pair, asio::buffer(buf.data(), n), asio::redirect_error(asio::use_awaitable, wec));
      if (wec) break;
    }
    if (ec) break;
  }
  beast::error_code ignored;
  s->pair.shutdown(asio::socket_base::shutdown_send, ignored);
  s->reader_done = true;
  s->join.cancel();
}

// Server -> client: what Serve writes, encrypted, until Serve ends its side. True when it
// did (EOF); false when the client could not be written to.
Awaitable<bool> Up(std::shared_ptr<Session> s) {
  std::vector<char> buf(kUpBuffer);
  for (;;) {
    beast::error_code ec;
    size_t n = co_await s->pair.async_read_some(asio::buffer(buf), asio::redirect_error(asio::use_awaitable, ec));
    if (n > 0) {
      beast::error_code wec;
      co_await asio::async_write(s->tls, asio::buffer(buf.data(), n), asio::redirect_error(asio::use_awaitable, wec));
      if (wec) co_return false;
    }
    if (ec) co_return ec == asio::error::eof;
  }
}

std::string Peer(const Conn& conn) {
  std::ostringstream o;
  o << conn.remote;
  return o.str();
}

}  // namespace

struct TlsFront::Impl {
  explicit Impl(std::shared_ptr<const net::tls::ServerTls> t)
      : tls(std::move(t)), ctx(tls->NewContextRef()) {}
  std::shared_ptr<const net::tls::ServerTls> tls;  // outlives ctx's use of its callbacks
  ssl::context ctx;
};

TlsFront::TlsFront(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TlsFront::~TlsFront() = default;

Result<std::unique_ptr<TlsFront>> TlsFront::Create(std::shared_ptr<const net::tls::ServerTls> tls) {
  if (!tls) return Fail(Errc::kInvalidArgument, "TLS: no certificate");
  return std::unique_ptr<TlsFront>(new TlsFront(std::make_unique<Impl>(std::move(tls))));
}

Awaitable<void> TlsFront::Serve(tcp::socket socket, Conn conn, ServeFn serve) {
  auto ex = socket.get_executor();
  auto s = std::make_shared<Session>(std::move(socket), impl_->ctx);
  tcp::socket& raw = s->tls.next_layer();

  // Sniff the first byte without taking it.
  unsigned char first = 0;
  Arm(s, kSniffTimeout);
  for (;;) {
    beast::error_code ec;
    co_await raw.async_wait(tcp::socket::wait_read, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return;  // timed out, or spaced is stopping: nothing to answer
    ssize_t n = ::recv(raw.native_handle(), &first, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 1) break;
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) co_return;
  }
  Disarm(*s);
  if (first != kTlsHandshakeRecord) {
    co_await serve(std::move(raw), conn);
    co_return;
  }

  conn.tls = true;
  {
    beast::error_code ec;
    Arm(s, kHandshakeTimeout);
    co_await s->tls.async_handshake(ssl::stream_base::server, asio::redirect_error(asio::use_awaitable, ec));
    Disarm(*s);
    if (ec) {
      spdlog::debug("TLS handshake from {}: {}", Peer(conn), ec.message());
      co_return;
    }
  }
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    spdlog::warn("TLS connection from {}: socketpair: {}", Peer(conn), std::strerror(errno));
    co_return;
  }
  // The server's end is typed as the TCP socket Serve takes: reads, writes, shutdown and
  // MSG_PEEK behave the same on a stream socketpair; addresses come from conn.
  tcp::socket plain(ex);
  beast::error_code aec, pec;
  s->pair.assign(asio::local::stream_protocol(), sv[0], aec);
  plain.assign(conn.local.protocol(), sv[1], pec);
  if (aec || pec) {
    if (aec) ::close(sv[0]);
    if (pec) ::close(sv[1]);
    spdlog::warn("TLS connection from {}: {}", Peer(conn), (aec ? aec : pec).message());
    co_return;
  }
  auto reset = std::make_shared<std::atomic<bool>>(false);
  conn.reset = reset;
  asio::co_spawn(ex, serve(std::move(plain), conn), asio::detached);
  asio::co_spawn(ex, Down(s), asio::detached);
  const bool served = co_await Up(s);

  // Serve is done with the connection (or the client cannot be written to): stop reading
  // the client, let Serve's end go, then close_notify, bounded like a plain lingering close.
  beast::error_code ignored;
  s->stopping = true;
  if (!s->reader_done) raw.cancel(ignored);
  while (!s->reader_done) co_await s->join.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
  s->pair.close(ignored);
  if (reset->load()) {
    // The handler asked for a reset (ResetConnection): no close_notify, an RST after what
    // it wrote, which Up has relayed (the reset came after its last byte).
    raw.set_option(asio::socket_base::linger(true, 0), ignored);
    raw.close(ignored);
    co_return;
  }
  if (served) {
    // close_notify goes out at once (the end of a body that ends with the connection);
    // then Asio reads until the client's own close_notify, an error, or the deadline.
    Arm(s, kCloseTimeout);
    co_await s->tls.async_shutdown(asio::redirect_error(asio::use_awaitable, ignored));
    Disarm(*s);
    // Lingering close, as Serve's for plain clients: closing with the client's bytes
    // unread (the rest of a body refused with 413) sends a reset, and a client still
    // sending then loses the answer. Read and drop them, for a moment and a bounded amount.
    raw.shutdown(tcp::socket::shutdown_send, ignored);
    Arm(s, kCloseTimeout);
    std::vector<char> drop(kUpBuffer);
    for (size_t drained = 0; drained < kMaxDrain;) {
      beast::error_code ec;
      drained += co_await raw.async_read_some(asio::buffer(drop), asio::redirect_error(asio::use_awaitable, ec));
      if (ec) break;
    }
    Disarm(*s);
  }
  raw.close(ignored);
}

}  // namespace space::api
