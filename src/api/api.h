// api: SPACE's HTTP/1.1 server (JSON, long-poll, SSE and a binary stream) over core::Platform.
//
// The API layer only parses and validates requests into core calls and renders their
// results; it makes no syscalls of its own beyond sockets. Server owns its io threads and
// a pool for blocking core calls. Start() returns once the socket is bound; Stop() is
// idempotent and thread-safe; the destructor stops.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <functional>
#include <string>
#include <string_view>

#include "auth/auth.h"
#include "common/common.h"
#include "core/core.h"

namespace space::net::tls {
class ServerTls;  // net/tls/tls.h
}

namespace space::api {

class SessionBacking;  // api/console_sessions.h

// GET /v1/templates/{ref}/archive, /v1/snapshots/{id}/archive: the template's or the
// snapshot's record (JSON) and the body's sha256.
inline constexpr std::string_view kTemplateHeader = "X-Space-Template";
inline constexpr std::string_view kSnapshotHeader = "X-Space-Snapshot";
inline constexpr std::string_view kArchiveSha256Header = "X-Space-Archive-Sha256";

struct ServerOptions {
  std::string address = "127.0.0.1";
  uint16_t port = 7070;             // 0 = pick a free port
  // Credentials (docs/security.md, "Tokens and access"): operator keys live in the
  // platform; sandbox and attach tokens are signed with these keys. Null = a fresh,
  // in-memory key set (tokens then die with the server).
  std::shared_ptr<const auth::SigningKeys> signing_keys;
  bool no_auth = false;             // every request acts as the operator (loopback only)
  int64_t token_ttl_s = 24 * 3600;  // sandbox and attach tokens, unless asked otherwise
  int64_t max_token_ttl_s = 30 * 24 * 3600;
  // Ports as URLs (docs/ports.md): a request whose Host is {port}-{sandbox_id}.{domain}
  // goes to that port inside the sandbox, never to the API.
  std::string sandbox_domain = "localhost";
  // Browser origins ("https://host[:port]", exact) that may use POST /mcp besides loopback
  // and the listen address (spaced --mcp-allow-origin).
  std::vector<std::string> mcp_allowed_origins;
  // The web console (docs/console.md): its files by path under /ui ("/index.html" ->
  // bytes), as the daemon loaded them at start; empty = no console (/ui/ says so).
  std::map<std::string, std::string> console_assets;
  // HTTPS on the same port (docs/tls.md): with a certificate, connections that open with a
  // TLS handshake are served over TLS, the rest as plain HTTP; URLs spaced hands out
  // (`space url`, POST /v1/sandboxes/{id}/urls) say https. Null: plain HTTP only.
  std::shared_ptr<const net::tls::ServerTls> tls;
  // Console cookies marked Secure on every connection (spaced behind a TLS proxy); they are
  // on TLS connections anyway.
  bool console_secure_cookies = false;
  // Where console sessions live besides this server's memory: a cluster's shared state,
  // so any node honours a login made through another (api/console_sessions.h).
  std::shared_ptr<SessionBacking> console_session_backing;
  // GET /readyz: "" when ready to take sandboxes, else why not (a cluster node that has
  // not joined or is cut off from etcd; docs/cluster.md). Unset: always ready.
  std::function<std::string()> not_ready;
  int io_threads = 2;
  int blocking_threads = 16;
  size_t max_json_body = 1 << 20;
  // Requests served at once (streams and long polls included; /healthz not counted).
  // Beyond it: 429 with Retry-After. 0 = no limit.
  int max_inflight = 1024;
};

class Server {
 public:
  [[nodiscard]] static Result<std::unique_ptr<Server>> Start(core::Platform* platform,
                                                             ServerOptions opts);
  ~Server();
  uint16_t port() const;
  void Stop();
  // Blocks until Stop() is called (from another thread or a signal handler thread).
  void Wait();

  struct Impl;

 private:
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace space::api
