// tls_probe: what HTTPS costs a small request, against plain HTTP on the same port of the
// same spaced in the same run (docs/benchmarks.md, "HTTPS"). spaced must run with
// --tls-self-signed (its CA is DATA_DIR/tls/ca.pem). Sequential requests, the modes
// interleaved round by round so that machine noise falls on all of them alike:
//   keep-alive: one connection per mode, N requests on it;
//   new connection: connect (+ full TLS handshake, no resumption) + one request + close.
// Each request is `GET /v1/whoami` with the API key (authenticated, a small JSON answer).
//
// Usage: SPACED_ARGS=--tls-self-signed PROG=tls_probe bash bench/run.sh [--n N]
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/dial.h"
#include "bench/stats.h"

namespace {

using space::bench::Clock;
using space::bench::Ms;

int Dial(int port) { return space::bench::Dial("127.0.0.1", port); }

// One connection, plain or TLS (verified against the CA for 127.0.0.1).
struct Conn {
  int fd = -1;
  SSL* ssl = nullptr;

  Conn(int port, SSL_CTX* ctx) {
    fd = Dial(port);
    if (!ctx) return;
    ssl = SSL_new(ctx);
    SSL_set_fd(ssl, fd);
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), "127.0.0.1");
    if (SSL_connect(ssl) != 1) {
      std::fprintf(stderr, "TLS handshake failed (verify: %s)\n",
                   X509_verify_cert_error_string(SSL_get_verify_result(ssl)));
      std::exit(1);
    }
  }
  ~Conn() {
    if (ssl) {
      SSL_shutdown(ssl);
      SSL_free(ssl);
    }
    ::close(fd);
  }
  void Write(const std::string& s) {
    bool ok = ssl ? SSL_write(ssl, s.data(), static_cast<int>(s.size())) == static_cast<int>(s.size())
                  : ::write(fd, s.data(), s.size()) == static_cast<ssize_t>(s.size());
    if (!ok) {
      std::fprintf(stderr, "write failed\n");
      std::exit(1);
    }
  }
  ssize_t Read(char* buf, size_t n) { return ssl ? SSL_read(ssl, buf, static_cast<int>(n)) : ::read(fd, buf, n); }

  // One request, its whole answer (Content-Length framed); exits on anything but 200.
  void RoundTrip(const std::string& request) {
    Write(request);
    std::string data;
    char buf[16384];
    size_t head_end = std::string::npos, need = 0;
    while (head_end == std::string::npos || data.size() < head_end + 4 + need) {
      ssize_t n = Read(buf, sizeof buf);
      if (n <= 0) {
        std::fprintf(stderr, "connection closed mid-answer\n");
        std::exit(1);
      }
      data.append(buf, static_cast<size_t>(n));
      if (head_end == std::string::npos && (head_end = data.find("\r\n\r\n")) != std::string::npos) {
        if (data.compare(0, 12, "HTTP/1.1 200") != 0) {
          std::fprintf(stderr, "unexpected answer: %s\n", data.substr(0, head_end).c_str());
          std::exit(1);
        }
        size_t cl = data.find("Content-Length: ");
        need = cl < head_end ? std::strtoull(data.c_str() + cl + 16, nullptr, 10) : 0;
      }
    }
  }
};

void Report(const char* what, const std::vector<double>& v, double base_p50) {
  std::vector<double> s = v;
  std::sort(s.begin(), s.end());
  auto at = [&](double q) { return s[std::min(s.size() - 1, static_cast<size_t>(s.size() * q))]; };
  std::printf("%-32s p50 %7.3f ms  p90 %7.3f ms  p99 %7.3f ms", what, at(0.5), at(0.9), at(0.99));
  if (base_p50 > 0) std::printf("   +%.3f ms (%.2fx) over plain", at(0.5) - base_p50, at(0.5) / base_p50);
  std::printf("\n");
}

double P50(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string url, key, data_dir;
  int n = 2000;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--url") url = argv[i + 1];
    else if (a == "--key") key = argv[i + 1];
    else if (a == "--data-dir") data_dir = argv[i + 1];
    else if (a == "--n") n = std::atoi(argv[i + 1]);
  }
  if (url.empty() || key.empty() || data_dir.empty() || n < 10) {
    std::fprintf(stderr, "usage: tls_probe --url URL --key KEY --data-dir DIR [--n N]\n");
    return 2;
  }
  const int port = std::atoi(url.substr(url.rfind(':') + 1).c_str());
  const std::string ca = data_dir + "/tls/ca.pem";
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);  // a full handshake each new connection
  if (SSL_CTX_load_verify_locations(ctx, ca.c_str(), nullptr) != 1) {
    std::fprintf(stderr, "cannot load %s (is spaced running with --tls-self-signed?)\n", ca.c_str());
    return 1;
  }
  const std::string request = "GET /v1/whoami HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + key + "\r\n\r\n";
  const std::string closing = "GET /v1/whoami HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + key +
                              "\r\nConnection: close\r\n\r\n";

  Conn plain_ka(port, nullptr), tls_ka(port, ctx);
  std::vector<double> t_plain_ka, t_tls_ka, t_plain_new, t_tls_new;
  for (int i = -20; i < n; ++i) {  // 20 warm-up rounds
    auto time = [&](std::vector<double>& into, auto fn) {
      auto t0 = Clock::now();
      fn();
      if (i >= 0) into.push_back(Ms(Clock::now() - t0));
    };
    time(t_plain_ka, [&] { plain_ka.RoundTrip(request); });
    time(t_tls_ka, [&] { tls_ka.RoundTrip(request); });
    time(t_plain_new, [&] { Conn c(port, nullptr); c.RoundTrip(closing); });
    time(t_tls_new, [&] { Conn c(port, ctx); c.RoundTrip(closing); });
  }
  std::printf("GET /v1/whoami, %d sequential requests per mode, interleaved\n", n);
  Report("plain HTTP, keep-alive", t_plain_ka, 0);
  Report("HTTPS, keep-alive", t_tls_ka, P50(t_plain_ka));
  Report("plain HTTP, new connection", t_plain_new, 0);
  Report("HTTPS, new connection+handshake", t_tls_new, P50(t_plain_new));
  SSL_CTX_free(ctx);
  return 0;
}
