// HTTPS on spaced's own port (docs/tls.md) against a real spaced: the API and port URLs over
// TLS with the self-signed CA (verified by host name and address, as curl or Node verify),
// plain HTTP still on the same port, keep-alive, bodies, a streamed answer and an Upgrade
// tunnel over TLS, X-Forwarded-Proto, https URLs from the API and `space url`, an operator's
// own certificate, bad certificate files refused at start, and handshakes that are garbage,
// cut short or stalled, after which spaced still serves.
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <signal.h>

#include "tests/integration/ports_fixture.h"

namespace space::testing {
namespace {

// One blocking TLS connection to spaced on loopback, verified like a real client: against
// `ca_file`, for `verify_host` (a DNS name, or an IP literal), sending `sni` (none if "").
class TlsClient {
 public:
  TlsClient(int port, const std::string& ca_file, const std::string& sni, const std::string& verify_host) {
    fd_ = Dial(port);
    if (fd_ < 0) {
      error_ = "connect failed";
      return;
    }
    ctx_ = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER, nullptr);
    if (SSL_CTX_load_verify_locations(ctx_, ca_file.c_str(), nullptr) != 1) {
      error_ = "cannot load " + ca_file;
      return;
    }
    ssl_ = SSL_new(ctx_);
    SSL_set_fd(ssl_, fd_);
    if (!sni.empty()) SSL_set_tlsext_host_name(ssl_, sni.c_str());
    if (verify_host.find_first_not_of("0123456789.:") == std::string::npos) {
      X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl_), verify_host.c_str());
    } else {
      SSL_set1_host(ssl_, verify_host.c_str());
    }
    if (SSL_connect(ssl_) != 1) {
      long v = SSL_get_verify_result(ssl_);
      error_ = v != X509_V_OK ? X509_verify_cert_error_string(v) : "handshake failed";
      ERR_clear_error();
    }
  }
  ~TlsClient() {
    if (ssl_) {
      if (error_.empty()) SSL_shutdown(ssl_);
      SSL_free(ssl_);
    }
    if (ctx_) SSL_CTX_free(ctx_);
    if (fd_ >= 0) ::close(fd_);
  }
  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }

  bool Write(std::string_view data) {
    size_t n = 0;
    return ok() && SSL_write_ex(ssl_, data.data(), data.size(), &n) == 1 && n == data.size();
  }
  // What arrives within `ms` ("" on timeout); eof() once the peer closed.
  std::string ReadSome(int ms) {
    if (!ok() || eof_) return "";
    if (SSL_pending(ssl_) == 0) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, ms) != 1) return "";
    }
    char buf[65536];
    size_t n = 0;
    if (SSL_read_ex(ssl_, buf, sizeof buf, &n) != 1) {
      eof_ = true;
      ERR_clear_error();
      return "";
    }
    return std::string(buf, n);
  }
  bool eof() const { return eof_; }
  // One whole answer (Content-Length or chunked framing), within 20 s.
  Response ReadResponse() {
    std::string raw = pending_;
    pending_.clear();
    auto deadline = std::chrono::steady_clock::now() + 20s;
    size_t want = std::string::npos;
    while (std::chrono::steady_clock::now() < deadline && !eof_) {
      size_t head_end = raw.find("\r\n\r\n");
      if (head_end != std::string::npos && want == std::string::npos) {
        Response h = Parse(raw.substr(0, head_end + 4));
        std::string len = h.Header("Content-Length");
        if (!len.empty()) want = head_end + 4 + std::stoul(len);
        else if (h.Header("Transfer-Encoding") == "chunked") want = 0;  // until the last chunk
        else if (h.status == 101 || h.status == 204 || h.status == 304) want = head_end + 4;
      }
      if (want != std::string::npos && want > 0 && raw.size() >= want) break;
      if (want == 0) {
        size_t last = raw.find("\r\n0\r\n\r\n");
        if (last != std::string::npos) {
          want = last + 7;
          break;
        }
      }
      raw += ReadSome(200);
    }
    if (want != std::string::npos && want > 0 && raw.size() > want) {
      pending_ = raw.substr(want);
      raw.resize(want);
    }
    return Parse(raw);
  }

 private:
  int fd_ = -1;
  SSL_CTX* ctx_ = nullptr;
  SSL* ssl_ = nullptr;
  std::string error_;
  std::string pending_;
  bool eof_ = false;
};

std::string PortOf(const std::string& url) { return url.substr(url.rfind(':') + 1); }

class HttpsTest : public SharedDaemonTest<HttpsTest> {
 public:
  static std::vector<std::string> DaemonArgs() { return {"--tls-self-signed"}; }

 protected:
  static void SetUpTestSuite() {
    ::signal(SIGPIPE, SIG_IGN);  // a connection spaced resets must fail a test, not end it
    SharedDaemonTest<HttpsTest>::SetUpTestSuite();
    if (!daemon_) return;
    port_ = std::atoi(PortOf(daemon_->url()).c_str());
    ca_ = daemon_->data_dir() + "/tls/ca.pem";
    private_ = StartPortServers(daemon_->client(), Json::object());
    public_ = StartPortServers(daemon_->client(), Json{{"network", {{"public_traffic", true}}}});
  }
  // The Host and SNI of `port` of sandbox `id`.
  static std::string Sni(int port, const std::string& id) {
    return std::to_string(port) + "-" + id + ".localhost";
  }
  static std::string HostOf(int port, const std::string& id) {
    return Sni(port, id) + ":" + std::to_string(port_);
  }
  std::string Auth() { return "Authorization: Bearer " + daemon_->api_key() + "\r\n"; }
  std::string UrlToken(const std::string& id, int port) {
    auto u = c().PortUrl(id, std::to_string(port), 600);
    EXPECT_TRUE(u) << (u ? "" : u.error().message);
    return u ? JsonStringOr(*u, "token", "") : "";
  }

  static inline int port_ = 0;
  static inline std::string ca_, private_, public_;
};

TEST_F(HttpsTest, ApiOverHttpsAndPlainHttpOnTheSamePort) {
  ASSERT_TRUE(sys::Exists(ca_)) << ca_;
  // Verified for the address (an IP in the certificate) and for localhost.
  for (const std::string& name : {std::string("127.0.0.1"), std::string("localhost")}) {
    TlsClient t(port_, ca_, name == "localhost" ? name : "", name);
    ASSERT_TRUE(t.ok()) << name << ": " << t.error();
    // Three requests on one connection (keep-alive): a GET, an authenticated GET, a POST
    // with a JSON body.
    ASSERT_TRUE(t.Write("GET /healthz HTTP/1.1\r\nHost: " + name + "\r\n\r\n"));
    Response h = t.ReadResponse();
    EXPECT_EQ(h.status, 200) << h.head;
    ASSERT_TRUE(t.Write("GET /v1/sandboxes HTTP/1.1\r\nHost: " + name + "\r\n" + Auth() + "\r\n"));
    Response l = t.ReadResponse();
    EXPECT_EQ(l.status, 200) << l.head;
    EXPECT_NE(l.body.find(private_), std::string::npos) << l.body;
    std::string body = R"({"port": 8080, "ttl": 600})";
    ASSERT_TRUE(t.Write("POST /v1/sandboxes/" + private_ + "/urls HTTP/1.1\r\nHost: " + name + "\r\n" + Auth() +
                        "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
                        "\r\n\r\n" + body));
    Response u = t.ReadResponse();
    ASSERT_EQ(u.status, 200) << u.head << u.body;
    auto j = ParseJson(u.body);
    ASSERT_TRUE(j);
    // spaced serves TLS: the URLs it hands out are https, on the port it listens on.
    EXPECT_EQ(JsonStringOr(*j, "url", "").rfind("https://" + HostOf(8080, private_) + "/?space_traffic_token=tt1.", 0), 0u)
        << u.body;
  }
  // Plain HTTP on the same port, as before.
  EXPECT_TRUE(c().Health());
  auto plain = c().PortUrl(public_, "8080");
  ASSERT_TRUE(plain) << plain.error().message;
  EXPECT_EQ(JsonStringOr(*plain, "url", ""), "https://" + HostOf(8080, public_) + "/");
  // A client that does not trust the CA fails its handshake.
  TlsClient untrusted(port_, "/etc/ssl/certs/ca-certificates.crt", "localhost", "localhost");
  EXPECT_FALSE(untrusted.ok());
}

TEST_F(HttpsTest, RefusedLargeBodyStillGetsItsAnswer) {
  // 8 MiB of JSON, over the 1 MiB limit: spaced answers 413 at once and ends the connection,
  // but reads and drops the rest first (a lingering close), so the client, still sending,
  // does not get a reset that loses the answer.
  TlsClient t(port_, ca_, "localhost", "localhost");
  ASSERT_TRUE(t.ok()) << t.error();
  const size_t size = 8 << 20;
  ASSERT_TRUE(t.Write("POST /v1/sandboxes/" + private_ + "/urls HTTP/1.1\r\nHost: localhost\r\n" + Auth() +
                      "Content-Type: application/json\r\nContent-Length: " + std::to_string(size) + "\r\n\r\n"));
  const std::string chunk(64 << 10, ' ');
  size_t sent = 0;
  while (sent < size && t.Write(chunk)) sent += chunk.size();
  EXPECT_EQ(sent, size);
  Response r = t.ReadResponse();
  EXPECT_EQ(r.status, 413) << "after " << sent << " bytes: " << r.head;
}

TEST_F(HttpsTest, SpaceUrlPrintsHttpsWhenSpacedServesTls) {
  sys::SpawnOptions o;
  o.argv = {BinDir() + "/space", "url", private_, "8080"};
  o.env = {"SPACE_URL=" + daemon_->url(), "SPACE_API_KEY=" + daemon_->api_key(), "PATH=/usr/bin:/bin"};
  auto r = sys::Run(o, 30000);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->exit_code, 0) << r->err;
  // Only the scheme differs from the plain form (docs/ports.md): one line, the URL.
  EXPECT_EQ(r->out.rfind("https://" + HostOf(8080, private_) + "/?space_traffic_token=tt1.", 0), 0u) << r->out;
  EXPECT_EQ(r->out.find('\n'), r->out.size() - 1) << r->out;
}

TEST_F(HttpsTest, PortUrlOverHttpsWithForwardedProto) {
  // The port URL's host has a certificate of its own (minted for exactly that name).
  TlsClient t(port_, ca_, Sni(8080, private_), Sni(8080, private_));
  ASSERT_TRUE(t.ok()) << t.error();
  std::string tok = UrlToken(private_, 8080);
  ASSERT_TRUE(t.Write("GET / HTTP/1.1\r\nHost: " + HostOf(8080, private_) + "\r\nSpace-Traffic-Token: " + tok + "\r\n\r\n"));
  Response r = t.ReadResponse();
  EXPECT_EQ(r.status, 200) << r.head;
  EXPECT_EQ(r.body, "hello from the sandbox\n");
  // The signed URL over TLS: its cookie is Secure.
  ASSERT_TRUE(t.Write("GET /?space_traffic_token=" + tok + " HTTP/1.1\r\nHost: " + HostOf(8080, private_) + "\r\n\r\n"));
  Response s = t.ReadResponse();
  EXPECT_EQ(s.status, 200) << s.head;
  EXPECT_NE(s.Header("Set-Cookie").find("; Secure"), std::string::npos) << s.head;

  // What the service sees: X-Forwarded-Proto https, the client's address.
  TlsClient e(port_, ca_, Sni(8081, public_), Sni(8081, public_));
  ASSERT_TRUE(e.ok()) << e.error();
  ASSERT_TRUE(e.Write("GET /x HTTP/1.1\r\nHost: " + HostOf(8081, public_) + "\r\nX-Forwarded-Proto: http\r\n\r\n"));
  Response seen = e.ReadResponse();
  ASSERT_EQ(seen.status, 200) << seen.head;
  EXPECT_NE(seen.body.find("X-Forwarded-Proto: https"), std::string::npos) << seen.body;
  EXPECT_EQ(seen.body.find("X-Forwarded-Proto: http\n"), std::string::npos) << seen.body;
  EXPECT_NE(seen.body.find("X-Forwarded-For: 127.0.0.1"), std::string::npos) << seen.body;
  // The same over plain HTTP says http.
  int fd = Dial(port_);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(sys::WriteAll(fd, "GET /x HTTP/1.1\r\nHost: " + HostOf(8081, public_) + "\r\nConnection: close\r\n\r\n"));
  std::string raw;
  for (int i = 0; i < 100; ++i) {
    std::string got = ReadSome(fd, 200);
    if (got.empty() && raw.find("\r\n\r\n") != std::string::npos) break;
    raw += got;
  }
  ::close(fd);
  EXPECT_NE(raw.find("X-Forwarded-Proto: http\n"), std::string::npos) << raw;
}

TEST_F(HttpsTest, StreamedAnswerOverHttpsArrivesInPieces) {
  TlsClient t(port_, ca_, Sni(8082, public_), Sni(8082, public_));
  ASSERT_TRUE(t.ok()) << t.error();
  ASSERT_TRUE(t.Write("GET / HTTP/1.1\r\nHost: " + HostOf(8082, public_) + "\r\n\r\n"));
  // piece1 comes while the service still sleeps before piece2 and piece3.
  std::string got;
  auto start = std::chrono::steady_clock::now();
  while (got.find("piece1") == std::string::npos && std::chrono::steady_clock::now() - start < 10s)
    got += t.ReadSome(200);
  ASSERT_NE(got.find("piece1"), std::string::npos) << got;
  EXPECT_EQ(got.find("piece3"), std::string::npos) << "streamed, not buffered: " << got;
  while (got.find("0\r\n\r\n") == std::string::npos && std::chrono::steady_clock::now() - start < 15s)
    got += t.ReadSome(200);
  EXPECT_NE(got.find("piece2"), std::string::npos) << got;
  EXPECT_NE(got.find("piece3\r\n0\r\n\r\n"), std::string::npos) << got;
  EXPECT_GE(std::chrono::steady_clock::now() - start, 1500ms);
}

TEST_F(HttpsTest, WebSocketUpgradeOverHttpsBecomesATunnel) {
  TlsClient t(port_, ca_, Sni(8083, public_), Sni(8083, public_));
  ASSERT_TRUE(t.ok()) << t.error();
  ASSERT_TRUE(t.Write("GET /ws HTTP/1.1\r\nHost: " + HostOf(8083, public_) +
                      "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                      "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"));
  Response up = t.ReadResponse();
  ASSERT_EQ(up.status, 101) << up.head;
  // A masked WebSocket text frame "hello over tls", then more: the service echoes every byte.
  const std::string payload = "hello over tls";
  std::string frame = {'\x81', static_cast<char>(0x80 | payload.size()), 1, 2, 3, 4};
  for (size_t i = 0; i < payload.size(); ++i) frame += static_cast<char>(payload[i] ^ (i % 4 + 1));
  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE(t.Write(frame));
    std::string echo;
    for (int i = 0; i < 50 && echo.size() < frame.size(); ++i) echo += t.ReadSome(100);
    EXPECT_EQ(echo, frame) << "round " << round;
  }
}

TEST_F(HttpsTest, GarbageAndStalledHandshakesNeitherCrashNorWedge) {
  auto closes_within = [&](int fd, std::chrono::seconds limit) {
    auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 200) == 1) {
        char buf[4096];
        if (::read(fd, buf, sizeof buf) <= 0) return true;  // an alert may come first
      }
    }
    return false;
  };
  // A handshake record of junk.
  int junk = Dial(port_);
  ASSERT_GE(junk, 0);
  ASSERT_TRUE(sys::WriteAll(junk, std::string("\x16\x03\x01\x00\x10", 5) + "0123456789abcdef"));
  EXPECT_TRUE(closes_within(junk, 5s));
  ::close(junk);
  // Cut short: a record header promising 512 bytes, then the client closes.
  int cut = Dial(port_);
  ASSERT_GE(cut, 0);
  ASSERT_TRUE(sys::WriteAll(cut, std::string("\x16\x03\x01\x02\x00", 5)));
  ::close(cut);
  // Connected, closed at once; and plain garbage (HTTP's 400).
  ::close(Dial(port_));
  int plain = Dial(port_);
  ASSERT_TRUE(sys::WriteAll(plain, std::string("\x01\x02garbage\r\n\r\n")));
  std::string answer;
  for (int i = 0; i < 25 && answer.find("\r\n\r\n") == std::string::npos; ++i) answer += ReadSome(plain, 200);
  EXPECT_EQ(Parse(answer).status, 400) << answer;
  ::close(plain);
  // Stalled mid-handshake: others are served meanwhile, and spaced gives up on it.
  int stalled = Dial(port_);
  ASSERT_GE(stalled, 0);
  ASSERT_TRUE(sys::WriteAll(stalled, std::string("\x16\x03\x01", 3)));
  auto t0 = std::chrono::steady_clock::now();
  {
    TlsClient t(port_, ca_, "localhost", "localhost");
    ASSERT_TRUE(t.ok()) << t.error();
    ASSERT_TRUE(t.Write("GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"));
    EXPECT_EQ(t.ReadResponse().status, 200);
  }
  EXPECT_TRUE(c().Health());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  EXPECT_TRUE(closes_within(stalled, 15s)) << "a stalled handshake is dropped after 10 s";
  ::close(stalled);
  // spaced lives and still serves both.
  EXPECT_EQ(::kill(daemon_->pid(), 0), 0);
  TlsClient after(port_, ca_, "", "127.0.0.1");
  ASSERT_TRUE(after.ok()) << after.error();
  ASSERT_TRUE(after.Write("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
  EXPECT_EQ(after.ReadResponse().status, 200);
  EXPECT_TRUE(c().Health());
}

// ---- an operator's own certificate; bad files -------------------------------------------

int Shell(const std::string& cmd) {
  int st = std::system((cmd + " >/dev/null 2>&1").c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// A CA and a leaf it signs for `san` in dir (ca.pem, srv.pem, srv.key), with the openssl CLI.
bool MakeOperatorCert(const std::string& dir, const std::string& san) {
  return Shell("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 -subj /CN=op-ca "
               "-keyout " + dir + "/ca.key -out " + dir + "/ca.pem") == 0 &&
         Shell("openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=spaced -keyout " + dir +
               "/srv.key -out " + dir + "/srv.csr") == 0 &&
         sys::WriteFileAtomic(dir + "/ext.cnf", "subjectAltName=" + san + "\n").has_value() &&
         Shell("openssl x509 -req -in " + dir + "/srv.csr -CA " + dir + "/ca.pem -CAkey " + dir +
               "/ca.key -CAcreateserial -days 30 -extfile " + dir + "/ext.cnf -out " + dir + "/srv.pem") == 0;
}

TEST(HttpsOperatorCertTest, ServesTheGivenCertificateForApiAndPortUrls) {
  SPACE_REQUIRE_SANDBOXES();
  auto tmp = sys::TempDir::Create("/tmp", "space-certs-");
  ASSERT_TRUE(tmp);
  const std::string dir = tmp->path();
  ASSERT_TRUE(MakeOperatorCert(dir, "DNS:localhost,IP:127.0.0.1,DNS:*.sbx.test"));
  Daemon d({"--tls-cert", dir + "/srv.pem", "--tls-key", dir + "/srv.key", "--sandbox-domain", "sbx.test"});
  ASSERT_TRUE(d.Start());
  EXPECT_FALSE(sys::Exists(d.data_dir() + "/tls")) << "no CA of spaced's own";
  const int port = std::atoi(PortOf(d.url()).c_str());
  {
    TlsClient t(port, dir + "/ca.pem", "", "127.0.0.1");
    ASSERT_TRUE(t.ok()) << t.error();
    ASSERT_TRUE(t.Write("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
    EXPECT_EQ(t.ReadResponse().status, 200);
  }
  std::string id = StartPortServers(d.client(), Json{{"network", {{"public_traffic", true}}}});
  ASSERT_FALSE(id.empty());
  const std::string sni = "8080-" + id + ".sbx.test";
  TlsClient t(port, dir + "/ca.pem", sni, sni);
  ASSERT_TRUE(t.ok()) << t.error();
  ASSERT_TRUE(t.Write("GET / HTTP/1.1\r\nHost: " + sni + ":" + std::to_string(port) + "\r\n\r\n"));
  Response r = t.ReadResponse();
  EXPECT_EQ(r.status, 200) << r.head;
  EXPECT_EQ(r.body, "hello from the sandbox\n");
  auto u = d.client().PortUrl(id, "8080");
  ASSERT_TRUE(u);
  EXPECT_EQ(JsonStringOr(*u, "url", ""), "https://" + sni + ":" + std::to_string(port) + "/");
}

// spaced with `args` must exit at start-up, non-zero, saying `says`, without ever listening.
void ExpectRefused(const std::vector<std::string>& args, const std::string& says) {
  auto tmp = sys::TempDir::Create("/tmp", "space-it-");
  ASSERT_TRUE(tmp);
  sys::SpawnOptions o;
  o.argv = {BinDir() + "/spaced", "--listen", "127.0.0.1:0", "--data-dir", tmp->path() + "/data"};
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  auto r = sys::Run(o, 60000);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_NE(r->exit_code, 0) << r->out << r->err;
  EXPECT_NE(r->err.find(says), std::string::npos) << "want \"" << says << "\" in:\n" << r->err;
  EXPECT_FALSE(sys::Exists(tmp->path() + "/data/url")) << "spaced must not serve half-configured";
}

TEST(HttpsOperatorCertTest, BadFilesAndFlagsAreRefusedAtStart) {
  SPACE_REQUIRE_SANDBOXES();
  auto tmp = sys::TempDir::Create("/tmp", "space-certs-");
  ASSERT_TRUE(tmp);
  const std::string dir = tmp->path();
  ASSERT_TRUE(MakeOperatorCert(dir, "DNS:localhost"));
  ASSERT_TRUE(sys::WriteFileAtomic(dir + "/garbage.pem", "not a certificate\n"));
  ExpectRefused({"--tls-cert", dir + "/missing.pem", "--tls-key", dir + "/srv.key"}, dir + "/missing.pem");
  ExpectRefused({"--tls-cert", dir + "/garbage.pem", "--tls-key", dir + "/srv.key"}, "no PEM certificate");
  ExpectRefused({"--tls-cert", dir + "/srv.pem", "--tls-key", dir + "/ca.key"}, "does not match");
  ExpectRefused({"--tls-cert", dir + "/srv.pem"}, "--tls-cert needs --tls-key");
  ExpectRefused({"--tls-key", dir + "/srv.key"}, "--tls-key needs --tls-cert");
  ExpectRefused({"--tls-self-signed", "--tls-cert", dir + "/srv.pem", "--tls-key", dir + "/srv.key"},
                "--tls-self-signed");
}

}  // namespace
}  // namespace space::testing
