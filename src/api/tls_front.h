// api/tls_front: HTTPS on spaced's own port, in front of the plain HTTP server (api/ only).
//
// Each accepted connection is sniffed: a first byte of 0x16 (a TLS handshake record) is a TLS
// client, anything else plain HTTP, served exactly as before. A TLS connection is terminated
// here (Asio's ssl::stream over the context net/tls makes) and its plaintext relayed through a
// socketpair whose other end the server's ordinary Serve() reads as it reads any client
// socket. So every route (keep-alive, bodies, chunked streams, server-sent events, WebSocket
// and Upgrade tunnels, the hang-up watch of relayed streams) works unchanged over TLS; the
// handlers learn the client's real address, and that it came over TLS, from Ctx::conn.
//
// Why a socketpair and not a TLS stream type in Ctx: every route reads and writes a
// beast::tcp_stream (Beast's parsers and serializers, its WebSocket stream, the relay's raw
// socket pipes and MSG_PEEK hang-up watch); a type-erased stream would touch all of them and
// lose the socket-level half-close and peek that the relay relies on. The price is one
// kernel copy each way (docs/benchmarks.md, "HTTPS").
//
// Threads: everything of one connection runs on that connection's strand. TlsFront itself
// is immutable once made and shared by all connections.
#pragma once

#include <functional>
#include <memory>

#include "api/http.h"

namespace space::api {

class TlsFront {
 public:
  // Serve(socket, conn): the server's plain HTTP connection loop.
  using ServeFn = std::function<Awaitable<void>(tcp::socket, Conn)>;

  // kInvalidArgument when the context cannot be used (never, for a ServerTls that was made).
  [[nodiscard]] static Result<std::unique_ptr<TlsFront>> Create(
      std::shared_ptr<const net::tls::ServerTls> tls);
  ~TlsFront();

  // Serves one accepted connection to its end: plain HTTP straight to `serve`; TLS through
  // the handshake (10 s at most) and a socketpair to `serve`, with conn.tls set. A client that
  // sends nothing for 120 s, or fails its handshake, is closed with nothing answered.
  Awaitable<void> Serve(tcp::socket socket, Conn conn, ServeFn serve);

 private:
  struct Impl;
  explicit TlsFront(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace space::api
