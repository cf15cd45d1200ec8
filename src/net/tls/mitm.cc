// RunMitm: one intercepted connection (TLS both ways, HTTP/1.1 relay with substitution) and
// UpstreamTrust (the verified client side towards real hosts).
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/x509_vfy.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "net/tls/internal.h"

namespace space::net::tls {
namespace {

constexpr size_t kReadChunk = 16 * 1024;

enum class Io { kOk, kEof, kTimeout, kError };

// One side of the relay: an SSL over a non-blocking fd, every operation bounded by a deadline.
class TlsSide {
 public:
  TlsSide(SSL* ssl, int fd) : ssl_(ssl), fd_(fd) {}

  Io Handshake(bool server, int64_t deadline_ns) {
    while (true) {
      int r = server ? SSL_accept(ssl_) : SSL_connect(ssl_);
      if (r == 1) return Io::kOk;
      Io w = Wait(SSL_get_error(ssl_, r), deadline_ns);
      if (w != Io::kOk) return w == Io::kEof ? Io::kError : w;
    }
  }

  // Appends up to kReadChunk bytes to out.
  Io Read(std::string* out, int64_t deadline_ns) {
    char buf[kReadChunk];
    while (true) {
      size_t n = 0;
      if (SSL_read_ex(ssl_, buf, sizeof(buf), &n) == 1) {
        out->append(buf, n);
        return Io::kOk;
      }
      Io w = Wait(SSL_get_error(ssl_, 0), deadline_ns);
      if (w != Io::kOk) return w;
    }
  }

  Io Write(std::string_view data, int64_t deadline_ns) {
    while (!data.empty()) {
      size_t n = 0;
      if (SSL_write_ex(ssl_, data.data(), data.size(), &n) == 1) {
        data.remove_prefix(n);
        written_ += n;
        continue;
      }
      Io w = Wait(SSL_get_error(ssl_, 0), deadline_ns);
      if (w != Io::kOk) return w == Io::kEof ? Io::kError : w;
    }
    return Io::kOk;
  }

  // One best-effort close_notify; never waits.
  void Shutdown() {
    if (SSL_is_init_finished(ssl_)) SSL_shutdown(ssl_);
  }

  uint64_t written() const { return written_; }
  const std::string& error() const { return error_; }

 private:
  Io Wait(int err, int64_t deadline_ns) {
    short events;
    if (err == SSL_ERROR_WANT_READ) {
      events = POLLIN;
    } else if (err == SSL_ERROR_WANT_WRITE) {
      events = POLLOUT;
    } else if (err == SSL_ERROR_ZERO_RETURN) {
      return Io::kEof;
    } else {
      std::string detail = DrainSslErrors();
      if (err == SSL_ERROR_SYSCALL)
        error_ = errno ? std::strerror(errno) : "connection closed";
      else
        error_ = detail.empty() ? "TLS error" : detail;
      if (err == SSL_ERROR_SYSCALL && errno == 0) return Io::kEof;
      return Io::kError;
    }
    while (true) {
      int64_t left_ms = (deadline_ns - MonotonicNanos()) / 1'000'000;
      if (left_ms <= 0) {
        error_ = "timed out";
        return Io::kTimeout;
      }
      pollfd p{fd_, events, 0};
      int r = poll(&p, 1, static_cast<int>(std::min<int64_t>(left_ms, 1'000'000)));
      if (r > 0) return Io::kOk;
      if (r < 0 && errno != EINTR) {
        error_ = std::strerror(errno);
        return Io::kError;
      }
    }
  }

  SSL* ssl_;
  int fd_;
  uint64_t written_ = 0;
  std::string error_;
};

std::string Response(int code, std::string_view reason, std::string_view text) {
  std::string body = "space egress: " + std::string(text) + "\n";
  return "HTTP/1.1 " + std::to_string(code) + " " + std::string(reason) +
         "\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
}

// Non-blocking (every wait is a poll with a deadline) and TCP_NODELAY: the relay writes whole
// messages or stream pieces as they come, and Nagle would hold the second small write of a
// request or response for the peer's delayed ACK (~40 ms). Not a TCP socket: NODELAY fails,
// which is fine (the tests and a future vsock path).
bool SetNonBlocking(int fd) {
  int flags = fcntl(fd, F_GETFL);
  int one = 1;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return flags >= 0 && fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

class Session {
 public:
  Session(SandboxCa::Impl& ca, int client_fd, int upstream_fd, const MitmOptions& opts)
      : ca_(ca), client_fd_(client_fd), upstream_fd_(upstream_fd), opts_(opts) {}

  MitmResult Run() {
    Relay();
    if (client_) client_->Shutdown();
    if (upstream_) upstream_->Shutdown();
    if (client_) result_.bytes_down = client_->written();
    if (upstream_) result_.bytes_up = upstream_->written();
    return result_;
  }

 private:
  int64_t Deadline(std::chrono::milliseconds d) const {
    return MonotonicNanos() + static_cast<int64_t>(d.count()) * 1'000'000;
  }
  int64_t Idle() const { return Deadline(opts_.idle_timeout); }

  void End(bool ok, std::string outcome) {
    result_.ok = ok;
    result_.outcome = std::move(outcome);
  }

  // Sends an error response to the sandbox and ends the connection with that outcome.
  void Refuse(int code, std::string_view reason, std::string_view text, std::string outcome) {
    (void)client_->Write(Response(code, reason, text), Idle());
    End(false, std::move(outcome));
    LingerClose();
  }

  // After an error response the sandbox may still be sending (a big head or body). Closing with
  // unread bytes makes the kernel send RST, which can destroy the response before the client
  // reads it; so send close_notify and FIN, then discard input for a bounded while.
  void LingerClose() {
    client_->Shutdown();
    ::shutdown(client_fd_, SHUT_WR);
    int64_t deadline = Deadline(std::chrono::milliseconds(1000));
    size_t budget = 4 * 1024 * 1024;
    char buf[16384];
    while (budget > 0) {
      int64_t left_ms = (deadline - MonotonicNanos()) / 1'000'000;
      if (left_ms <= 0) break;
      pollfd p{client_fd_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left_ms)) <= 0) break;
      ssize_t n = ::read(client_fd_, buf, sizeof(buf));
      if (n <= 0) break;
      budget -= std::min(budget, static_cast<size_t>(n));
    }
  }

  void Relay() {
    if (!opts_.trust) return End(false, "no upstream trust store configured");
    if (!SetNonBlocking(client_fd_) || !SetNonBlocking(upstream_fd_))
      return End(false, std::string("fcntl O_NONBLOCK: ") + std::strerror(errno));
    subs_ = SubstitutionsFor(opts_.secrets, opts_.host);

    auto leaf = ca_.GetLeaf(opts_.host);
    if (!leaf) return End(false, leaf.error().message);
    client_ssl_.reset(SSL_new(ca_.server_ctx.get()));
    if (!client_ssl_ || SSL_use_certificate(client_ssl_.get(), (*leaf)->cert.get()) != 1 ||
        SSL_use_PrivateKey(client_ssl_.get(), (*leaf)->key.get()) != 1 ||
        SSL_add1_chain_cert(client_ssl_.get(), ca_.cert.get()) != 1 ||
        SSL_set_fd(client_ssl_.get(), client_fd_) != 1)
      return End(false, "sandbox TLS setup: " + DrainSslErrors());
    client_.emplace(client_ssl_.get(), client_fd_);
    if (client_->Handshake(true, Deadline(opts_.handshake_timeout)) != Io::kOk)
      return End(false, "sandbox TLS handshake failed: " + client_->error());

    upstream_ssl_.reset(SSL_new(opts_.trust->impl().client_ctx.get()));
    if (!upstream_ssl_ || SSL_set_tlsext_host_name(upstream_ssl_.get(), opts_.host.c_str()) != 1 ||
        SSL_set1_host(upstream_ssl_.get(), opts_.host.c_str()) != 1 ||
        SSL_set_fd(upstream_ssl_.get(), upstream_fd_) != 1)
      return End(false, "upstream TLS setup: " + DrainSslErrors());
    upstream_.emplace(upstream_ssl_.get(), upstream_fd_);
    if (upstream_->Handshake(false, Deadline(opts_.handshake_timeout)) != Io::kOk) {
      long v = SSL_get_verify_result(upstream_ssl_.get());
      std::string why = v != X509_V_OK
                            ? std::string("certificate not trusted: ") +
                                  X509_verify_cert_error_string(v)
                            : "TLS handshake failed: " + upstream_->error();
      upstream_.reset();  // nothing more goes that way
      return FailBeforeUpstream(why);
    }
    while (RelayOne()) {
    }
  }

  // Upstream unusable: read the sandbox's request head (so closing does not reset the
  // connection under our response), answer 502 with the reason.
  void FailBeforeUpstream(const std::string& why) {
    RequestParser parser(opts_.max_head_bytes);
    std::string error;
    int64_t deadline = Deadline(std::chrono::milliseconds(2000));
    while (!parser.head_done() && error.empty() && pending_.size() <= opts_.max_head_bytes) {
      size_t n = parser.Put(pending_, &error);
      pending_.erase(0, n);
      if (n > 0) continue;
      if (client_->Read(&pending_, deadline) != Io::kOk) break;
    }
    Refuse(502, "Bad Gateway", "upstream " + opts_.host + ": " + why, "upstream " + why);
  }

  // Reads from the sandbox until the parser has the whole head. False when the connection
  // ended (the outcome is set).
  bool ReadHead(RequestParser& parser, bool first_byte_wait) {
    std::string error;
    while (true) {
      size_t n = parser.Put(pending_, &error);
      pending_.erase(0, n);
      if (!error.empty()) {
        Refuse(400, "Bad Request", "bad request: " + error, "bad request: " + error);
        return false;
      }
      if (parser.head_done()) return true;
      if (pending_.size() > opts_.max_head_bytes) {
        Refuse(431, "Request Header Fields Too Large", "request head too large",
               "bad request: head too large");
        return false;
      }
      bool idle_between = pending_.empty();
      Io r = client_->Read(&pending_, Idle());
      if (r == Io::kOk) continue;
      if (idle_between) {
        End(result_.requests > 0 || r == Io::kEof,
            r == Io::kTimeout ? Summary() + ", closed idle"
                              : (r == Io::kEof ? Summary() : "sandbox: " + client_->error()));
      } else {
        End(false, "sandbox closed mid-request (" + client_->error() + ")");
      }
      (void)first_byte_wait;
      return false;
    }
  }

  std::string Summary() const {
    return "mitm " + opts_.host + ": " + std::to_string(result_.requests) + " requests, " +
           std::to_string(result_.substitutions) + " substitutions";
  }

  // Feeds the rest of the request body through parser; each consumed slice goes to sink.
  template <class Sink>
  bool PumpBody(RequestParser& parser, Sink&& sink) {
    std::string error;
    while (!parser.done()) {
      size_t n = parser.Put(pending_, &error);
      if (!error.empty()) {
        Refuse(400, "Bad Request", "bad request body: " + error, "bad request body: " + error);
        return false;
      }
      if (n > 0) {
        if (!sink(std::string_view(pending_).substr(0, n))) return false;
        pending_.erase(0, n);
        continue;
      }
      if (pending_.size() > opts_.max_head_bytes) {
        Refuse(400, "Bad Request", "bad request body framing", "bad request: body framing");
        return false;
      }
      if (client_->Read(&pending_, Idle()) != Io::kOk) {
        End(false, "sandbox closed mid-body (" + client_->error() + ")");
        return false;
      }
    }
    return true;
  }

  bool SendUp(std::string_view data) {
    if (upstream_->Write(data, Idle()) == Io::kOk) return true;
    End(false, "upstream write: " + upstream_->error());
    return false;
  }

  // One request and its response. True when the connection stays open for another.
  bool RelayOne() {
    RequestParser parser(opts_.max_head_bytes);
    if (!ReadHead(parser, result_.requests == 0)) return false;
    const RequestHead& head = parser.head();
    if (head.upgrade) {
      Refuse(501, "Not Implemented",
             "protocol upgrades (WebSocket) are not supported on connections that carry secrets",
             "refused upgrade: " + std::string(head.Field("upgrade")));
      return false;
    }
    if (head.method == "CONNECT") {
      Refuse(405, "Method Not Allowed", "CONNECT inside an intercepted TLS connection",
             "refused CONNECT");
      return false;
    }
    if (!AuthorityMatches(head, opts_.host)) {
      std::string named(head.Field("host"));
      Refuse(421, "Misdirected Request",
             "this TLS connection is for " + opts_.host + "; the request names another host",
             "refused: request authority \"" + named + "\" is not " + opts_.host);
      return false;
    }
    if (head.expect_continue &&
        client_->Write("HTTP/1.1 100 Continue\r\n\r\n", Idle()) != Io::kOk) {
      End(false, "sandbox write: " + client_->error());
      return false;
    }

    uint32_t count = 0;
    if (!subs_.empty() && BodyIsRewritable(head, opts_.max_rewrite_body_bytes)) {
      std::string body;
      body.reserve(*head.content_length);
      if (!PumpBody(parser, [&](std::string_view s) {
            body.append(s);
            return true;
          }))
        return false;
      count += subs_.Apply(body);
      uint32_t head_count = 0;
      std::string out = SerializeRequestHead(head, subs_, body.size(), &head_count);
      count += head_count;
      if (!SendUp(out + body)) return false;
    } else {
      if (!SendUp(SerializeRequestHead(head, subs_, std::nullopt, &count))) return false;
      if (!PumpBody(parser, [&](std::string_view s) { return SendUp(s); })) return false;
    }
    result_.requests++;
    result_.substitutions += count;
    return RelayResponse(head.method == "HEAD", head.keep_alive);
  }

  // Relays one response unchanged. Everything the parser consumed from one upstream read goes
  // to the sandbox in one write (head and body of a small response share a TLS record, so no
  // Nagle / delayed-ACK stall); the rest streams as it arrives.
  bool RelayResponse(bool head_request, bool request_keep_alive) {
    std::string buf, out, error;
    bool forwarded = false;  // some bytes were written to the sandbox: too late for a 502
    auto flush = [&]() {
      if (out.empty()) return true;
      if (client_->Write(out, Idle()) != Io::kOk) {
        End(false, "sandbox write: " + client_->error());
        return false;
      }
      forwarded = true;
      out.clear();
      return true;
    };
    // An upstream failure: a 502 while the sandbox has seen nothing, else cut the response.
    auto fail = [&](const std::string& text, const std::string& outcome) {
      if (!forwarded) {
        Refuse(502, "Bad Gateway", text, outcome);
      } else if (flush()) {
        End(false, outcome);
      }
      return false;
    };
    auto parser = std::make_unique<ResponseParser>(opts_.max_head_bytes, head_request);
    while (true) {
      size_t n = parser->Put(buf, &error);
      if (!error.empty())
        return fail("upstream sent an invalid response: " + error,
                    "upstream invalid response: " + error);
      out.append(buf, 0, n);
      buf.erase(0, n);
      if (parser->done()) {
        int status = parser->status();
        if (status >= 100 && status < 200) {  // interim (100, 103): the final one follows
          parser = std::make_unique<ResponseParser>(opts_.max_head_bytes, head_request);
          continue;
        }
        if (!flush()) return false;
        // Bytes after a complete response that nobody asked for: do not keep the connection.
        bool keep = request_keep_alive && parser->keep_alive() && buf.empty();
        if (!keep) End(true, Summary());
        return keep;
      }
      if (n > 0) continue;
      if (buf.size() > opts_.max_head_bytes)
        return fail("upstream response head too large", "upstream response head too large");
      if (!flush()) return false;
      Io r = upstream_->Read(&buf, Idle());
      if (r == Io::kOk) continue;
      if (r == Io::kEof && parser->head_done() && parser->NeedsEof()) {
        parser->PutEof(&error);
        End(error.empty(), error.empty() ? Summary() : "upstream: " + error);
        return false;
      }
      std::string why = r == Io::kEof ? "closed before the response ended"
                                      : upstream_->error();
      return fail("upstream " + opts_.host + ": " + why, "upstream: " + why);
    }
  }

  SandboxCa::Impl& ca_;
  int client_fd_, upstream_fd_;
  const MitmOptions& opts_;
  Substitutions subs_;
  SslPtr client_ssl_, upstream_ssl_;
  std::optional<TlsSide> client_, upstream_;
  std::string pending_;  // bytes read from the sandbox not yet parsed
  MitmResult result_;
};

}  // namespace

// ---- UpstreamTrust ------------------------------------------------------------------------

UpstreamTrust::UpstreamTrust(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
UpstreamTrust::~UpstreamTrust() = default;

Result<std::shared_ptr<UpstreamTrust>> UpstreamTrust::Create(const std::string& extra_ca_file,
                                                             const std::string& system_bundle) {
  auto impl = std::make_unique<Impl>();
  impl->client_ctx.reset(SSL_CTX_new(TLS_client_method()));
  SSL_CTX* ctx = impl->client_ctx.get();
  if (!ctx) return Fail(Errc::kInternal, "upstream TLS context: " + DrainSslErrors());
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  // Many servers end with a bare TCP FIN; the HTTP framing tells us when a message ended.
  SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_RENEGOTIATION);
  static const unsigned char kAlpn[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  SSL_CTX_set_alpn_protos(ctx, kAlpn, sizeof(kAlpn));
  if (!system_bundle.empty() && access(system_bundle.c_str(), R_OK) == 0 &&
      SSL_CTX_load_verify_locations(ctx, system_bundle.c_str(), nullptr) != 1)
    return Fail(Errc::kInvalidArgument,
                "system CA bundle " + system_bundle + ": " + DrainSslErrors());
  if (!extra_ca_file.empty()) {
    std::ifstream f(extra_ca_file);
    std::stringstream text;
    text << f.rdbuf();
    if (!f.good() && !f.eof())
      return Fail(Errc::kInvalidArgument, "--egress-ca-file " + extra_ca_file + ": cannot read");
    if (!f.is_open())
      return Fail(Errc::kInvalidArgument,
                  "--egress-ca-file " + extra_ca_file + ": " + std::strerror(errno));
    if (text.str().find("-----BEGIN CERTIFICATE-----") == std::string::npos ||
        SSL_CTX_load_verify_locations(ctx, extra_ca_file.c_str(), nullptr) != 1)
      return Fail(Errc::kInvalidArgument,
                  "--egress-ca-file " + extra_ca_file + ": no PEM certificate (" +
                      DrainSslErrors() + ")");
  }
  return std::shared_ptr<UpstreamTrust>(new UpstreamTrust(std::move(impl)));
}

MitmResult RunMitm(SandboxCa& ca, int client_fd, int upstream_fd, const MitmOptions& opts) {
  ERR_clear_error();
  Session s(ca.impl(), client_fd, upstream_fd, opts);
  return s.Run();
}

}  // namespace space::net::tls
