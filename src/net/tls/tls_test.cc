// net/tls tests over TCP on 127.0.0.1: a fake upstream TLS server whose certificate comes from
// a test root CA made with the openssl CLI (independent of the code under test), RunMitm between
// them, and real clients: OpenSSL, curl, node, /usr/bin/python3 (urllib and requests).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <mutex>
#include <sstream>
#include <thread>

#include "net/tls/internal.h"
#include "net/tls/tls.h"

namespace space::net::tls {
namespace {

using namespace std::chrono_literals;

std::string ReadFile(const std::string& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}
void WriteFile(const std::string& p, std::string_view data) {
  std::ofstream f(p, std::ios::trunc);
  f << data;
}

// Runs a shell command; returns its stdout, exit status in *status.
std::string Shell(const std::string& cmd, int* status = nullptr) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  int st = pclose(p);
  if (status) *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

int Listen(int* port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(fd, 64) != 0) abort();
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd;
}

int Dial(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Blocking TLS read of everything until the peer closes.
std::string SslReadAll(SSL* ssl) {
  std::string out;
  char buf[16384];
  size_t n;
  while (SSL_read_ex(ssl, buf, sizeof(buf), &n) == 1) out.append(buf, n);
  return out;
}

// ---- The fake upstream: a TLS HTTP/1.1 server that records every application byte -------

struct Upstream {
  using Handler = std::function<std::vector<std::string>(const std::string& request)>;

  Upstream(const std::string& cert, const std::string& key, Handler h) : handler(std::move(h)) {
    ctx.reset(SSL_CTX_new(TLS_server_method()));
    SSL_CTX_set_options(ctx.get(), SSL_OP_IGNORE_UNEXPECTED_EOF);
    EXPECT_EQ(SSL_CTX_use_certificate_chain_file(ctx.get(), cert.c_str()), 1);
    EXPECT_EQ(SSL_CTX_use_PrivateKey_file(ctx.get(), key.c_str(), SSL_FILETYPE_PEM), 1);
    listen_fd = Listen(&port);
    thread = std::thread([this] { Serve(); });
  }
  ~Upstream() {
    stop = true;
    shutdown(listen_fd, SHUT_RDWR);
    thread.join();
    for (auto& t : conns) t.join();
    close(listen_fd);
  }

  void Serve() {
    while (!stop) {
      int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) return;
      conns.emplace_back([this, fd] { Conn(fd); });
    }
  }

  void Conn(int fd) {
    SslPtr ssl(SSL_new(ctx.get()));
    SSL_set_fd(ssl.get(), fd);
    if (SSL_accept(ssl.get()) != 1) {
      ERR_clear_error();
      // Whatever arrived after a failed handshake would still count as application bytes.
      close(fd);
      return;
    }
    handshakes++;
    std::string buf;
    char tmp[16384];
    while (true) {
      size_t end;
      while ((end = buf.find("\r\n\r\n")) == std::string::npos) {
        size_t n;
        if (SSL_read_ex(ssl.get(), tmp, sizeof(tmp), &n) != 1) goto done;
        buf.append(tmp, n);
        Record(std::string_view(tmp, n));
      }
      {
        std::string head = buf.substr(0, end + 4);
        size_t cl = 0;
        std::string lower = head;
        for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        size_t p = lower.find("\r\ncontent-length:");
        if (p != std::string::npos) cl = std::stoul(head.substr(p + 17));
        while (buf.size() < end + 4 + cl) {
          size_t n;
          if (SSL_read_ex(ssl.get(), tmp, sizeof(tmp), &n) != 1) goto done;
          buf.append(tmp, n);
          Record(std::string_view(tmp, n));
        }
        std::string request = buf.substr(0, end + 4 + cl);
        buf.erase(0, end + 4 + cl);
        {
          std::lock_guard l(mu);
          requests.push_back(request);
        }
        for (const std::string& piece : handler(request)) {
          if (piece == "<sleep>") {
            std::this_thread::sleep_for(150ms);
            continue;
          }
          if (piece == "<close>") goto done;
          SSL_write(ssl.get(), piece.data(), static_cast<int>(piece.size()));
        }
        if (lower.find("connection: close") != std::string::npos) break;
      }
    }
  done:
    SSL_shutdown(ssl.get());
    close(fd);
  }

  void Record(std::string_view s) {
    std::lock_guard l(mu);
    received.append(s);
  }
  std::string Received() {
    std::lock_guard l(mu);
    return received;
  }
  std::vector<std::string> Requests() {
    std::lock_guard l(mu);
    return requests;
  }

  SslCtxPtr ctx;
  Handler handler;
  int listen_fd = -1, port = 0;
  std::atomic<bool> stop{false};
  std::atomic<int> handshakes{0};
  std::thread thread;
  std::vector<std::thread> conns;  // only touched by the accept thread until the destructor
  std::mutex mu;
  std::string received;
  std::vector<std::string> requests;
};

// A response echoing the request it got (so clients can check what the upstream saw).
std::vector<std::string> Echo(const std::string& req) {
  return {"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: " +
              std::to_string(req.size()) + "\r\n\r\n" + req};
}

// ---- The proxy stand-in: accepts sandbox connections, dials the upstream, runs RunMitm ----

struct Proxy {
  Proxy(SandboxCa& ca, int upstream_port, MitmOptions o)
      : ca(ca), upstream_port(upstream_port), opts(std::move(o)) {
    listen_fd = Listen(&port);
    thread = std::thread([this] {
      while (true) {
        int c = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) return;
        workers.emplace_back([this, c] {
          int u = Dial(this->upstream_port);
          MitmResult r = RunMitm(this->ca, c, u, opts);
          close(c);
          if (u >= 0) close(u);
          std::lock_guard l(mu);
          results.push_back(r);
          cv.notify_all();
        });
      }
    });
  }
  ~Proxy() {
    shutdown(listen_fd, SHUT_RDWR);
    thread.join();
    for (auto& w : workers) w.join();
    close(listen_fd);
  }
  // Waits for the n-th connection's result.
  MitmResult Result(size_t n = 0) {
    std::unique_lock l(mu);
    cv.wait_for(l, 30s, [&] { return results.size() > n; });
    return results.size() > n ? results[n] : MitmResult{false, 0, 0, 0, 0, "no result"};
  }

  SandboxCa& ca;
  int upstream_port;
  MitmOptions opts;
  int listen_fd = -1, port = 0;
  std::thread thread;
  std::vector<std::thread> workers;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<MitmResult> results;
};

// An OpenSSL client: TLS to the proxy with SNI `sni`, trusting only `ca_file`; sends `data`
// and reads until the peer closes. *verify_ok says whether the chain and name verified.
std::string TlsClient(int port, const std::string& sni, const std::string& ca_file,
                      const std::string& data, bool* verify_ok = nullptr,
                      std::string* alpn = nullptr) {
  SslCtxPtr ctx(SSL_CTX_new(TLS_client_method()));
  SSL_CTX_set_options(ctx.get(), SSL_OP_IGNORE_UNEXPECTED_EOF);
  SSL_CTX_load_verify_locations(ctx.get(), ca_file.c_str(), nullptr);
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
  static const unsigned char kAlpn[] = {2, 'h', '2', 8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  SSL_CTX_set_alpn_protos(ctx.get(), kAlpn, sizeof(kAlpn));
  int fd = Dial(port);
  SslPtr ssl(SSL_new(ctx.get()));
  SSL_set_tlsext_host_name(ssl.get(), sni.c_str());
  SSL_set1_host(ssl.get(), sni.c_str());
  SSL_set_fd(ssl.get(), fd);
  std::string out;
  bool ok = SSL_connect(ssl.get()) == 1;
  if (verify_ok) *verify_ok = ok && SSL_get_verify_result(ssl.get()) == X509_V_OK;
  if (ok) {
    if (alpn) {
      const unsigned char* p;
      unsigned len;
      SSL_get0_alpn_selected(ssl.get(), &p, &len);
      *alpn = std::string(reinterpret_cast<const char*>(p), len);
    }
    SSL_write(ssl.get(), data.data(), static_cast<int>(data.size()));
    out = SslReadAll(ssl.get());
  }
  ERR_clear_error();
  close(fd);
  return out;
}

// ---- Fixture: certificates made with the openssl CLI --------------------------------------

class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // OpenSSL writes with plain send(): a peer that closed first raises SIGPIPE, which spaced
    // ignores (daemon/main.cc); so do the tests.
    signal(SIGPIPE, SIG_IGN);
    char tmpl[] = "/tmp/net-tls-test-XXXXXX";
    dir_ = mkdtemp(tmpl);
    std::string d = dir_;
    WriteFile(d + "/ext.cnf",
              "subjectAltName=DNS:api.example.test,DNS:other.example.test,DNS:plain.example.test\n"
              "extendedKeyUsage=serverAuth\nbasicConstraints=critical,CA:FALSE\n");
    std::string script =
        "set -e; cd " + d +
        "; for r in root bad; do openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 "
        "-nodes -keyout $r.key -out $r.pem -days 2 -subj \"/CN=Test upstream $r\" "
        "-addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign; "
        "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout srv-$r.key "
        "-out srv-$r.csr -subj /CN=api.example.test; openssl x509 -req -in srv-$r.csr -CA $r.pem "
        "-CAkey $r.key -CAcreateserial -out srv-$r.pem -days 2 -extfile ext.cnf; done 2>/dev/null";
    int st = 0;
    Shell("bash -c '" + script + "'", &st);
    ASSERT_EQ(st, 0) << "openssl CLI failed";
  }
  static void TearDownTestSuite() { Shell("rm -rf " + dir_); }

  void SetUp() override {
    auto ca = SandboxCa::Generate("sb-test", {"api.example.test", "other.example.test",
                                              "*.wild.test"});
    ASSERT_TRUE(ca) << ca.error().message;
    ca_ = std::move(*ca);
    auto bundle = MakeTrustBundle(ca_->cert_pem(), ReadFile("/etc/ssl/certs/ca-certificates.crt"));
    ASSERT_TRUE(bundle) << bundle.error().message;
    bundle_file_ = dir_ + "/bundle-" + std::to_string(counter_++) + ".pem";
    WriteFile(bundle_file_, bundle->bundle_pem);
    ca_file_ = bundle_file_ + ".ca";
    WriteFile(ca_file_, bundle->ca_pem);
    auto trust = UpstreamTrust::Create(dir_ + "/root.pem");
    ASSERT_TRUE(trust) << trust.error().message;
    trust_ = *trust;

    Secret api{"API_KEY", "real-api-key-123", {"api.example.test"}, MakePlaceholder("API_KEY")};
    Secret other{"OTHER_KEY", "real-other-key", {"other.example.test"},
                 MakePlaceholder("OTHER_KEY")};
    ASSERT_TRUE(ValidateSecret(api));
    ASSERT_TRUE(ValidateSecret(other));
    api_ = api;
    other_ = other;
  }

  MitmOptions Opts(const std::string& host = "api.example.test") {
    MitmOptions o;
    o.host = host;
    o.secrets = {api_, other_};
    o.trust = trust_;
    o.idle_timeout = 5s;
    o.handshake_timeout = 5s;
    return o;
  }
  std::string Srv(const std::string& r = "root") { return dir_ + "/srv-" + r + ".pem"; }
  std::string SrvKey(const std::string& r = "root") { return dir_ + "/srv-" + r + ".key"; }

  static inline std::string dir_;
  static inline int counter_ = 0;
  std::unique_ptr<SandboxCa> ca_;
  std::shared_ptr<UpstreamTrust> trust_;
  std::string bundle_file_, ca_file_;
  Secret api_, other_;
};

// ---- Secrets, placeholders, CA ------------------------------------------------------------

TEST(SecretTest, PlaceholderShapeAndUniqueness) {
  std::string a = MakePlaceholder("API_KEY"), b = MakePlaceholder("API_KEY");
  EXPECT_NE(a, b);
  ASSERT_EQ(a.size(), std::string("space_secret_API_KEY_").size() + 32);
  EXPECT_TRUE(StartsWith(a, "space_secret_API_KEY_"));
  for (char c : a.substr(21)) EXPECT_TRUE(std::isxdigit(static_cast<unsigned char>(c))) << a;
}

TEST(SecretTest, ParseSpecAndValidation) {
  auto s = ParseSecretSpec("TOKEN=abc@def=g@API.example.com,*.Example.org");
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->name, "TOKEN");
  EXPECT_EQ(s->value, "abc@def=g");
  EXPECT_EQ(s->hosts, (std::vector<std::string>{"api.example.com", "*.example.org"}));
  EXPECT_TRUE(SecretAppliesTo(*s, "API.EXAMPLE.COM"));
  EXPECT_TRUE(SecretAppliesTo(*s, "a.b.example.org"));
  EXPECT_FALSE(SecretAppliesTo(*s, "example.org"));
  EXPECT_FALSE(SecretAppliesTo(*s, "evilexample.org"));
  EXPECT_FALSE(SecretAppliesTo(*s, "api.example.com.evil.test"));
  for (const char* bad : {"NOEQUALS@host", "X=1", "1X=v@h.test", "X=@h.test", "X=v@",
                          "X=v@bad_host.test", "X=v@-a.test", "X=v@1.2.3.4", "X=v@*.*.test"}) {
    auto r = ParseSecretSpec(bad);
    EXPECT_FALSE(r) << bad;
    if (!r) {
      EXPECT_EQ(r.error().code, Errc::kInvalidArgument);
    }
  }
  std::vector<Secret> all = {*s};
  EXPECT_TRUE(AnySecretAppliesTo(all, "Api.Example.Com"));
  EXPECT_FALSE(AnySecretAppliesTo(all, "other.example.com"));
  EXPECT_FALSE(AnySecretAppliesTo({}, "api.example.com"));
  Secret crlf{"X", "a\r\nInjected: 1", {"h.test"}, ""};
  EXPECT_FALSE(ValidateSecret(crlf));
}

TEST(SubstitutionTest, ReplacesOnlyWholePlaceholders) {
  Substitutions subs;
  subs.pairs = {{"space_secret_A_0123", "AAA"}, {"space_secret_B_4567", "BB"}};
  std::string s = "x space_secret_A_0123 space_secret_B_4567space_secret_A_012 space_secret_A_0123";
  EXPECT_EQ(subs.Apply(s), 3u);
  EXPECT_EQ(s, "x AAA BBspace_secret_A_012 AAA");
}

TEST_F(TlsTest, CaCertificateProperties) {
  BIO* bio = BIO_new_mem_buf(ca_->cert_pem().data(), static_cast<int>(ca_->cert_pem().size()));
  X509Ptr cert(PEM_read_bio_X509(bio, nullptr, nullptr, nullptr));
  BIO_free(bio);
  ASSERT_TRUE(cert);
  EXPECT_EQ(X509_check_ca(cert.get()), 1);
  EXPECT_EQ(X509_get_pathlen(cert.get()), 0);
  EVP_PKEY* pub = X509_get0_pubkey(cert.get());
  EXPECT_EQ(EVP_PKEY_get_base_id(pub), EVP_PKEY_EC);
  EXPECT_EQ(EVP_PKEY_get_bits(pub), 256);
  int crit = 0;
  void* nc = X509_get_ext_d2i(cert.get(), NID_name_constraints, &crit, nullptr);
  EXPECT_NE(nc, nullptr);
  EXPECT_EQ(crit, 1);
  NAME_CONSTRAINTS_free(static_cast<NAME_CONSTRAINTS*>(nc));
  // ~10 years.
  int days = 0, secs = 0;
  ASSERT_EQ(ASN1_TIME_diff(&days, &secs, X509_get0_notBefore(cert.get()),
                           X509_get0_notAfter(cert.get())),
            1);
  EXPECT_GT(days, 3600);
  EXPECT_NE(ca_->key_pem().find("PRIVATE KEY"), std::string::npos);
  // Outside the name constraints: refused rather than minted.
  auto evil = ca_->LeafPem("evil.test");
  ASSERT_FALSE(evil);
  EXPECT_EQ(evil.error().code, Errc::kPermissionDenied);
  EXPECT_TRUE(ca_->LeafPem("x.wild.test"));
  EXPECT_TRUE(ca_->LeafPem("wild.test"));  // "*.wild.test" permits the subtree wild.test
}

TEST_F(TlsTest, LeafCachedPerHostAndVerifiesWithOpensslCli) {
  auto a1 = ca_->LeafPem("api.example.test");
  auto a2 = ca_->LeafPem("API.example.test");
  auto b = ca_->LeafPem("other.example.test");
  ASSERT_TRUE(a1 && a2 && b);
  EXPECT_EQ(*a1, *a2);  // random serials: equal PEM means the cache answered
  EXPECT_NE(*a1, *b);
  EXPECT_EQ(ca_->cached_leaf_count(), 2u);
  WriteFile(dir_ + "/leaf.pem", *a1);
  int st = 0;
  std::string out = Shell("openssl verify -CAfile " + ca_file_ +
                            " -purpose sslserver -verify_hostname api.example.test " + dir_ +
                            "/leaf.pem 2>&1",
                        &st);
  EXPECT_EQ(st, 0) << out;
  out = Shell("openssl verify -CAfile " + ca_file_ + " -verify_hostname other.example.test " +
                dir_ + "/leaf.pem 2>&1",
            &st);
  EXPECT_NE(st, 0) << out;

  // Concurrent first use of one host from many threads: one cached entry, all valid.
  std::vector<std::thread> ts;
  std::atomic<int> ok{0};
  for (int i = 0; i < 8; ++i)
    ts.emplace_back([&] { ok += ca_->LeafPem("x.wild.test").has_value(); });
  for (auto& t : ts) t.join();
  EXPECT_EQ(ok, 8);
  EXPECT_EQ(ca_->cached_leaf_count(), 3u);
}

TEST_F(TlsTest, LeafCacheIsBounded) {
  auto open = SandboxCa::Generate("no-constraints", {});
  ASSERT_TRUE(open);
  for (int i = 0; i < 300; ++i)
    ASSERT_TRUE((*open)->LeafPem("h" + std::to_string(i) + ".example.test"));
  EXPECT_LE((*open)->cached_leaf_count(), 256u);
  EXPECT_GE((*open)->cached_leaf_count(), 1u);
}

TEST(SubstitutionTest, BasicAuthInsideBase64) {
  Substitutions subs;
  subs.pairs = {{"space_secret_A_0123", "s3cr3t"}};
  RequestHead head;
  head.method = "GET";
  head.target = "/";
  // base64("u:space_secret_A_0123") and base64("u:space_secret_B_9999") (another host's).
  std::string mine = Shell("printf %s 'u:space_secret_A_0123' | base64 -w0");
  std::string other = Shell("printf %s 'u:space_secret_B_9999' | base64 -w0");
  head.fields = {{"Authorization", "Basic " + mine},
                 {"Proxy-Authorization", "basic " + other},
                 {"X-Not-Auth", "Basic " + mine}};
  uint32_t n = 0;
  std::string out = SerializeRequestHead(head, subs, std::nullopt, &n);
  EXPECT_EQ(n, 1u);
  EXPECT_NE(out.find("Authorization: Basic " + Shell("printf %s 'u:s3cr3t' | base64 -w0") + "\r\n"),
            std::string::npos) << out;
  EXPECT_NE(out.find("Proxy-Authorization: basic " + other + "\r\n"), std::string::npos) << out;
  EXPECT_NE(out.find("X-Not-Auth: Basic " + mine + "\r\n"), std::string::npos) << out;
}

TEST_F(TlsTest, LoadRejectsBadPem) {
  auto other = SandboxCa::Generate("other", {});
  ASSERT_TRUE(other);
  EXPECT_FALSE(SandboxCa::Load("garbage", ca_->key_pem()));
  EXPECT_FALSE(SandboxCa::Load(ca_->cert_pem(), "garbage"));
  auto mismatch = SandboxCa::Load(ca_->cert_pem(), (*other)->key_pem());
  ASSERT_FALSE(mismatch);
  EXPECT_NE(mismatch.error().message.find("does not match"), std::string::npos);
}

TEST_F(TlsTest, TrustBundleMergesOnceAndNamesEnv) {
  auto b = MakeTrustBundle(ca_->cert_pem(), "-----BEGIN CERTIFICATE-----\nX\n-----END CERTIFICATE-----");
  ASSERT_TRUE(b);
  EXPECT_TRUE(StartsWith(b->bundle_pem, "-----BEGIN CERTIFICATE-----\nX\n-----END CERTIFICATE-----\n#"));
  EXPECT_NE(b->bundle_pem.find(ca_->cert_pem()), std::string::npos);
  auto again = MakeTrustBundle(ca_->cert_pem(), b->bundle_pem);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->bundle_pem, b->bundle_pem);
  auto empty = MakeTrustBundle(ca_->cert_pem(), "");
  ASSERT_TRUE(empty);
  EXPECT_EQ(empty->ca_pem, ca_->cert_pem());
  std::map<std::string, std::string> env(b->env.begin(), b->env.end());
  EXPECT_EQ(env["SSL_CERT_FILE"], "/etc/ssl/certs/ca-certificates.crt");
  EXPECT_EQ(env["REQUESTS_CA_BUNDLE"], "/etc/ssl/certs/ca-certificates.crt");
  EXPECT_EQ(env["CURL_CA_BUNDLE"], "/etc/ssl/certs/ca-certificates.crt");
  EXPECT_EQ(env["NODE_EXTRA_CA_CERTS"], "/usr/local/share/ca-certificates/space-sandbox-ca.crt");
  EXPECT_FALSE(MakeTrustBundle("not a cert", ""));
}

TEST_F(TlsTest, UpstreamTrustRejectsBadExtraFile) {
  auto missing = UpstreamTrust::Create(dir_ + "/nope.pem");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message.find("--egress-ca-file"), std::string::npos);
  WriteFile(dir_ + "/junk.pem", "not a certificate\n");
  EXPECT_FALSE(UpstreamTrust::Create(dir_ + "/junk.pem"));
  EXPECT_TRUE(UpstreamTrust::Create(""));
}

// ---- RunMitm ------------------------------------------------------------------------------

TEST_F(TlsTest, SecretSwappedInHeadersOnlyForItsHost) {
  Upstream up(Srv(), SrvKey(), Echo);
  Proxy proxy(*ca_, up.port, Opts());
  std::string req = "GET /v1/x HTTP/1.1\r\nHost: api.example.test\r\nAuthorization: Bearer " +
                    api_.placeholder + "\r\nX-Other: " + other_.placeholder +
                    "\r\nX-Both: " + api_.placeholder + "," + api_.placeholder +
                    "\r\nConnection: close\r\n\r\n";
  bool verified = false;
  std::string alpn;
  std::string resp = TlsClient(proxy.port, "api.example.test", bundle_file_, req, &verified, &alpn);
  EXPECT_TRUE(verified);
  EXPECT_EQ(alpn, "http/1.1");
  EXPECT_TRUE(StartsWith(resp, "HTTP/1.1 200 OK")) << resp;
  auto reqs = up.Requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_NE(reqs[0].find("Authorization: Bearer real-api-key-123\r\n"), std::string::npos) << reqs[0];
  EXPECT_NE(reqs[0].find("X-Both: real-api-key-123,real-api-key-123\r\n"), std::string::npos);
  EXPECT_NE(reqs[0].find("X-Other: " + other_.placeholder + "\r\n"), std::string::npos);
  EXPECT_EQ(reqs[0].find(api_.placeholder), std::string::npos);
  EXPECT_EQ(reqs[0].find("real-other-key"), std::string::npos);
  MitmResult r = proxy.Result();
  EXPECT_TRUE(r.ok) << r.outcome;
  EXPECT_EQ(r.requests, 1u);
  EXPECT_EQ(r.substitutions, 3u);
  EXPECT_EQ(r.bytes_up, reqs[0].size());
  EXPECT_EQ(r.bytes_down, resp.size());
}

TEST_F(TlsTest, OtherHostGetsItsOwnSecretOnly) {
  Upstream up(Srv(), SrvKey(), Echo);
  Proxy proxy(*ca_, up.port, Opts("other.example.test"));
  std::string req = "GET / HTTP/1.1\r\nHost: other.example.test\r\nA: " + api_.placeholder +
                    "\r\nB: " + other_.placeholder + "\r\nConnection: close\r\n\r\n";
  TlsClient(proxy.port, "other.example.test", bundle_file_, req);
  auto reqs = up.Requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_NE(reqs[0].find("A: " + api_.placeholder), std::string::npos);
  EXPECT_NE(reqs[0].find("B: real-other-key"), std::string::npos);
  EXPECT_EQ(reqs[0].find("real-api-key-123"), std::string::npos);
}

TEST_F(TlsTest, KeepAliveRequestsRelayedOneByOne) {
  Upstream up(Srv(), SrvKey(), Echo);
  Proxy proxy(*ca_, up.port, Opts());
  std::string one = "GET /1 HTTP/1.1\r\nHost: api.example.test\r\nK: " + api_.placeholder +
                    "\r\n\r\n";
  std::string two = "GET /2 HTTP/1.1\r\nHost: api.example.test:443\r\nConnection: close\r\n\r\n";
  std::string resp = TlsClient(proxy.port, "api.example.test", bundle_file_, one + two);
  EXPECT_EQ(up.Requests().size(), 2u);
  EXPECT_NE(resp.find("GET /1"), std::string::npos);
  EXPECT_NE(resp.find("GET /2"), std::string::npos);
  MitmResult r = proxy.Result();
  EXPECT_TRUE(r.ok) << r.outcome;
  EXPECT_EQ(r.requests, 2u);
  EXPECT_EQ(up.handshakes, 1);  // one upstream connection for both
}

TEST_F(TlsTest, KeepAliveRoundTripsAreNotStalled) {
  // 100 request/response round trips on one connection, each waiting for its response. When
  // the relay wrote a response head and body as two segments, Nagle held the body for the
  // client's delayed ACK: ~40 ms a round trip (8.8 s for 200 curl requests; now 0.1 s).
  Upstream up(Srv(), SrvKey(), Echo);
  Proxy proxy(*ca_, up.port, Opts());
  SslCtxPtr ctx(SSL_CTX_new(TLS_client_method()));
  int fd = Dial(proxy.port);
  SslPtr ssl(SSL_new(ctx.get()));
  SSL_set_tlsext_host_name(ssl.get(), "api.example.test");
  SSL_set_fd(ssl.get(), fd);
  ASSERT_EQ(SSL_connect(ssl.get()), 1);
  int64_t t0 = MonotonicNanos();
  std::string req = "GET /rt HTTP/1.1\r\nHost: api.example.test\r\n\r\n";
  std::string got;
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(SSL_write(ssl.get(), req.data(), static_cast<int>(req.size())),
              static_cast<int>(req.size()));
    std::string resp;
    char buf[4096];
    size_t n;
    // Echo's response: a head with Content-Length, then exactly the request.
    while (resp.find("\r\n\r\n") == std::string::npos ||
           resp.size() < resp.find("\r\n\r\n") + 4 + req.size()) {
      ASSERT_EQ(SSL_read_ex(ssl.get(), buf, sizeof(buf), &n), 1) << i;
      resp.append(buf, n);
    }
  }
  int64_t ms = (MonotonicNanos() - t0) / 1'000'000;
  close(fd);
  EXPECT_LT(ms, 2000) << "100 round trips took " << ms << " ms";
  EXPECT_EQ(up.Requests().size(), 100u);
}

TEST_F(TlsTest, UntrustedUpstreamGets502AndNoBytes) {
  Upstream up(Srv("bad"), SrvKey("bad"), Echo);
  Proxy proxy(*ca_, up.port, Opts());
  std::string req = "GET / HTTP/1.1\r\nHost: api.example.test\r\nAuthorization: " +
                    api_.placeholder + "\r\n\r\n";
  std::string resp = TlsClient(proxy.port, "api.example.test", bundle_file_, req);
  EXPECT_TRUE(StartsWith(resp, "HTTP/1.1 502 Bad Gateway\r\n")) << resp;
  EXPECT_NE(resp.find("certificate not trusted"), std::string::npos) << resp;
  MitmResult r = proxy.Result();
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.outcome.find("certificate not trusted"), std::string::npos) << r.outcome;
  EXPECT_EQ(r.bytes_up, 0u);
  EXPECT_EQ(up.Received(), "");
  EXPECT_EQ(up.handshakes, 0);
}

TEST_F(TlsTest, UpstreamNameMismatchGets502) {
  // The upstream's certificate is trusted but does not name the host asked for.
  Upstream up(Srv(), SrvKey(), Echo);
  auto o = Opts("x.wild.test");
  Proxy proxy(*ca_, up.port, o);
  std::string resp = TlsClient(proxy.port, "x.wild.test", bundle_file_,
                               "GET / HTTP/1.1\r\nHost: x.wild.test\r\n\r\n");
  EXPECT_TRUE(StartsWith(resp, "HTTP/1.1 502")) << resp;
  EXPECT_NE(resp.find("hostname mismatch"), std::string::npos) << resp;
  EXPECT_EQ(up.Received(), "");
}

TEST_F(TlsTest, ChunkedResponseStreamsInPieces) {
  Upstream up(Srv(), SrvKey(), [](const std::string&) {
    return std::vector<std::string>{
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/event-stream\r\n\r\n",
        "6\r\npiece1\r\n", "<sleep>", "<sleep>", "6\r\npiece2\r\n", "<sleep>", "<sleep>",
        "6\r\npiece3\r\n0\r\n\r\n"};
  });
  Proxy proxy(*ca_, up.port, Opts());
  // Read incrementally: each piece must arrive before the upstream sends the next.
  SslCtxPtr ctx(SSL_CTX_new(TLS_client_method()));
  SSL_CTX_load_verify_locations(ctx.get(), bundle_file_.c_str(), nullptr);
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
  int fd = Dial(proxy.port);
  SslPtr ssl(SSL_new(ctx.get()));
  SSL_set_tlsext_host_name(ssl.get(), "api.example.test");
  SSL_set_fd(ssl.get(), fd);
  ASSERT_EQ(SSL_connect(ssl.get()), 1);
  std::string req = "GET /stream HTTP/1.1\r\nHost: api.example.test\r\nConnection: close\r\n\r\n";
  SSL_write(ssl.get(), req.data(), static_cast<int>(req.size()));
  std::vector<std::pair<int64_t, std::string>> reads;
  int64_t t0 = MonotonicNanos();
  char buf[4096];
  size_t n;
  while (SSL_read_ex(ssl.get(), buf, sizeof(buf), &n) == 1)
    reads.emplace_back((MonotonicNanos() - t0) / 1'000'000, std::string(buf, n));
  close(fd);
  std::string all;
  int64_t t_piece1 = -1, t_piece3 = -1;
  for (auto& [t, s] : reads) {
    all += s;
    if (t_piece1 < 0 && all.find("piece1") != std::string::npos) t_piece1 = t;
    if (t_piece3 < 0 && all.find("piece3") != std::string::npos) t_piece3 = t;
  }
  EXPECT_NE(all.find("6\r\npiece2\r\n"), std::string::npos) << all;  // relayed unchanged
  EXPECT_TRUE(all.size() >= 5 && all.substr(all.size() - 5) == "0\r\n\r\n");
  ASSERT_GE(t_piece1, 0);
  ASSERT_GE(t_piece3, 0);
  EXPECT_GE(t_piece3 - t_piece1, 400) << "pieces were buffered, not streamed";
  EXPECT_GE(reads.size(), 3u);
  EXPECT_TRUE(proxy.Result().ok) << proxy.Result().outcome;
}

TEST_F(TlsTest, BodySubstitutionFixesContentLength) {
  Upstream up(Srv(), SrvKey(), Echo);
  Proxy proxy(*ca_, up.port, Opts());
  std::string body = "{\"key\":\"" + api_.placeholder + "\",\"other\":\"" + other_.placeholder + "\"}";
  std::string bin_body = "raw " + api_.placeholder;
  std::string req = "POST /a HTTP/1.1\r\nHost: api.example.test\r\nContent-Type: application/json; "
                    "charset=utf-8\r\nContent-Length: " + std::to_string(body.size()) +
                    "\r\n\r\n" + body +
                    "POST /b HTTP/1.1\r\nHost: api.example.test\r\nContent-Type: "
                    "application/octet-stream\r\nContent-Length: " +
                    std::to_string(bin_body.size()) + "\r\nConnection: close\r\n\r\n" + bin_body;
  TlsClient(proxy.port, "api.example.test", bundle_file_, req);
  auto reqs = up.Requests();
  ASSERT_EQ(reqs.size(), 2u);
  std::string want = "{\"key\":\"real-api-key-123\",\"other\":\"" + other_.placeholder + "\"}";
  EXPECT_NE(reqs[0].find("Content-Length: " + std::to_string(want.size()) + "\r\n"),
            std::string::npos) << reqs[0];
  EXPECT_TRUE(reqs[0].size() > want.size() && reqs[0].substr(reqs[0].size() - want.size()) == want)
      << reqs[0];
  // Not a text type: the body passes untouched.
  EXPECT_NE(reqs[1].find(bin_body), std::string::npos) << reqs[1];
  EXPECT_EQ(proxy.Result().substitutions, 1u);
}

TEST_F(TlsTest, GarbageAndOversizedHeadsGetClear4xx) {
  Upstream up(Srv(), SrvKey(), Echo);
  Proxy proxy(*ca_, up.port, Opts());
  std::string r1 = TlsClient(proxy.port, "api.example.test", bundle_file_,
                             "\x01\x02 garbage\r\n\r\n");
  EXPECT_TRUE(StartsWith(r1, "HTTP/1.1 400 Bad Request\r\n")) << r1;
  EXPECT_NE(r1.find("space egress: bad request"), std::string::npos);
  std::string r2 = TlsClient(proxy.port, "api.example.test", bundle_file_,
                             "GET / HTTP/1.1\r\nHost: api.example.test\r\nX: " +
                                 std::string(100 * 1024, 'a') + "\r\n\r\n");
  EXPECT_TRUE(StartsWith(r2, "HTTP/1.1 4")) << r2.substr(0, 200);
  // Many small fields: Beast consumes complete fields as they come, so its own header_limit
  // never sees the whole head; ours must.
  std::string many;
  for (int i = 0; i < 5000; ++i) many += "X-" + std::to_string(i) + ": aaaaaaaaaaaaaaaaaaaa\r\n";
  std::string r2b = TlsClient(proxy.port, "api.example.test", bundle_file_,
                              "GET / HTTP/1.1\r\nHost: api.example.test\r\n" + many + "\r\n");
  EXPECT_TRUE(StartsWith(r2b, "HTTP/1.1 400")) << r2b.substr(0, 200);
  EXPECT_NE(r2b.find("header limit"), std::string::npos) << r2b.substr(0, 200);
  std::string r3 = TlsClient(proxy.port, "api.example.test", bundle_file_,
                             "POST / HTTP/1.1\r\nHost: api.example.test\r\nContent-Length: 5\r\n"
                             "Content-Length: 7\r\n\r\nhello");
  EXPECT_TRUE(StartsWith(r3, "HTTP/1.1 400")) << r3;
  std::string r4 = TlsClient(proxy.port, "api.example.test", bundle_file_,
                             "POST / HTTP/1.1\r\nHost: api.example.test\r\nContent-Length: "
                             "99999999999999999999999\r\n\r\n");
  EXPECT_TRUE(StartsWith(r4, "HTTP/1.1 400")) << r4;
  EXPECT_EQ(up.Requests().size(), 0u);
  EXPECT_FALSE(proxy.Result(0).ok);
}

TEST_F(TlsTest, RefusesFrontingUpgradeAndConnect) {
  Upstream up(Srv(), SrvKey(), Echo);
  Proxy proxy(*ca_, up.port, Opts());
  std::string front = TlsClient(proxy.port, "api.example.test", bundle_file_,
                                "GET / HTTP/1.1\r\nHost: evil.test\r\nA: " + api_.placeholder +
                                    "\r\n\r\n");
  EXPECT_TRUE(StartsWith(front, "HTTP/1.1 421 Misdirected Request")) << front;
  std::string abs = TlsClient(proxy.port, "api.example.test", bundle_file_,
                              "GET https://evil.test/ HTTP/1.1\r\nHost: api.example.test\r\n\r\n");
  EXPECT_TRUE(StartsWith(abs, "HTTP/1.1 421")) << abs;
  std::string ws = TlsClient(proxy.port, "api.example.test", bundle_file_,
                             "GET /ws HTTP/1.1\r\nHost: api.example.test\r\nConnection: Upgrade\r\n"
                             "Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
                             "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n");
  EXPECT_TRUE(StartsWith(ws, "HTTP/1.1 501 Not Implemented")) << ws;
  EXPECT_NE(ws.find("WebSocket"), std::string::npos);
  EXPECT_EQ(up.Requests().size(), 0u);
}

TEST_F(TlsTest, ExpectContinueAnsweredLocally) {
  Upstream up(Srv(), SrvKey(), Echo);
  Proxy proxy(*ca_, up.port, Opts());
  std::string body = "k=" + api_.placeholder;
  std::string resp = TlsClient(
      proxy.port, "api.example.test", bundle_file_,
      "POST / HTTP/1.1\r\nHost: api.example.test\r\nExpect: 100-continue\r\nContent-Type: "
      "application/x-www-form-urlencoded\r\nContent-Length: " + std::to_string(body.size()) +
          "\r\nConnection: close\r\n\r\n" + body);
  EXPECT_TRUE(StartsWith(resp, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK")) << resp;
  auto reqs = up.Requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].find("Expect:"), std::string::npos);
  EXPECT_NE(reqs[0].find("\r\n\r\nk=real-api-key-123"), std::string::npos) << reqs[0];
}

TEST_F(TlsTest, UpstreamGarbageOrEarlyCloseGets502) {
  Upstream up(Srv(), SrvKey(), [](const std::string& req) {
    if (req.find("GET /garbage") == 0) return std::vector<std::string>{"NOT HTTP AT ALL\r\n\r\n"};
    return std::vector<std::string>{"<close>"};
  });
  Proxy proxy(*ca_, up.port, Opts());
  std::string g = TlsClient(proxy.port, "api.example.test", bundle_file_,
                            "GET /garbage HTTP/1.1\r\nHost: api.example.test\r\n\r\n");
  EXPECT_TRUE(StartsWith(g, "HTTP/1.1 502")) << g;
  std::string c = TlsClient(proxy.port, "api.example.test", bundle_file_,
                            "GET /close HTTP/1.1\r\nHost: api.example.test\r\n\r\n");
  EXPECT_TRUE(StartsWith(c, "HTTP/1.1 502")) << c;
  EXPECT_NE(c.find("closed before the response ended"), std::string::npos) << c;
}

TEST_F(TlsTest, IdleConnectionTimesOut) {
  Upstream up(Srv(), SrvKey(), Echo);
  auto o = Opts();
  o.idle_timeout = 300ms;
  Proxy proxy(*ca_, up.port, o);
  SslCtxPtr ctx(SSL_CTX_new(TLS_client_method()));
  int fd = Dial(proxy.port);
  SslPtr ssl(SSL_new(ctx.get()));
  SSL_set_tlsext_host_name(ssl.get(), "api.example.test");
  SSL_set_fd(ssl.get(), fd);
  ASSERT_EQ(SSL_connect(ssl.get()), 1);
  int64_t t0 = MonotonicNanos();
  MitmResult r = proxy.Result();
  EXPECT_LT((MonotonicNanos() - t0) / 1'000'000, 5000);
  EXPECT_NE(r.outcome.find("idle"), std::string::npos) << r.outcome;
  close(fd);
}

TEST_F(TlsTest, ClientHelloLeftInSocketAfterPeek) {
  // The proxy peeks the ClientHello with MSG_PEEK before handing over: do the same here.
  Upstream up(Srv(), SrvKey(), Echo);
  int port = 0;
  int lfd = Listen(&port);
  std::thread mitm([&] {
    int c = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    char peek[5];
    ASSERT_EQ(recv(c, peek, sizeof(peek), MSG_PEEK | MSG_WAITALL), 5);
    EXPECT_EQ(peek[0], 0x16);  // handshake record
    int u = Dial(up.port);
    MitmResult r = RunMitm(*ca_, c, u, Opts());
    EXPECT_TRUE(r.ok) << r.outcome;
    close(c);
    close(u);
  });
  std::string resp = TlsClient(port, "api.example.test", bundle_file_,
                               "GET / HTTP/1.1\r\nHost: api.example.test\r\nConnection: close\r\n\r\n");
  mitm.join();
  close(lfd);
  EXPECT_TRUE(StartsWith(resp, "HTTP/1.1 200 OK")) << resp;
}

TEST_F(TlsTest, PlainHttpIsNeverRelayed) {
  // Only TLS is ever terminated: plain HTTP with a placeholder gets no substitution, and
  // nothing reaches the upstream.
  Upstream up(Srv(), SrvKey(), Echo);
  Proxy proxy(*ca_, up.port, Opts());
  int fd = Dial(proxy.port);
  std::string req = "GET / HTTP/1.1\r\nHost: api.example.test\r\nA: " + api_.placeholder +
                    "\r\n\r\n";
  ASSERT_EQ(write(fd, req.data(), req.size()), static_cast<ssize_t>(req.size()));
  MitmResult r = proxy.Result();
  close(fd);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.outcome.find("sandbox TLS handshake failed"), std::string::npos) << r.outcome;
  EXPECT_EQ(r.bytes_up, 0u);
  EXPECT_EQ(up.handshakes, 0);
  EXPECT_EQ(up.Received(), "");
}

TEST_F(TlsTest, ReloadedCaMintsLeavesTheClientStillTrusts) {
  auto loaded = SandboxCa::Load(ca_->cert_pem(), ca_->key_pem());
  ASSERT_TRUE(loaded) << loaded.error().message;
  EXPECT_EQ((*loaded)->cert_pem(), ca_->cert_pem());
  EXPECT_EQ((*loaded)->cached_leaf_count(), 0u);
  // Name constraints survive the reload.
  EXPECT_FALSE((*loaded)->LeafPem("evil.test"));
  Upstream up(Srv(), SrvKey(), Echo);
  Proxy proxy(**loaded, up.port, Opts());
  bool verified = false;
  std::string resp = TlsClient(proxy.port, "api.example.test", bundle_file_,
                               "GET / HTTP/1.1\r\nHost: api.example.test\r\nX: " +
                                   api_.placeholder + "\r\nConnection: close\r\n\r\n",
                               &verified);
  EXPECT_TRUE(verified);
  EXPECT_TRUE(StartsWith(resp, "HTTP/1.1 200 OK")) << resp;
  EXPECT_NE(resp.find("X: real-api-key-123"), std::string::npos);
}

TEST_F(TlsTest, ClientNotTrustingTheCaFailsHandshakeCleanly) {
  Upstream up(Srv(), SrvKey(), Echo);
  Proxy proxy(*ca_, up.port, Opts());
  bool verified = true;
  std::string resp = TlsClient(proxy.port, "api.example.test", dir_ + "/root.pem",
                               "GET / HTTP/1.1\r\nHost: api.example.test\r\n\r\n", &verified);
  EXPECT_FALSE(verified);
  EXPECT_EQ(resp, "");
  MitmResult r = proxy.Result();
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.outcome.find("sandbox TLS handshake failed"), std::string::npos) << r.outcome;
  EXPECT_EQ(up.handshakes, 0);
}

// ---- Real clients: the environment the sandbox gets, no per-command trust flags -----------

class RealClientsTest : public TlsTest {
 protected:
  // The env MakeTrustBundle names, pointed at this test's files.
  std::string Env() {
    return "SSL_CERT_FILE=" + bundle_file_ + " REQUESTS_CA_BUNDLE=" + bundle_file_ +
           " CURL_CA_BUNDLE=" + bundle_file_ + " NODE_EXTRA_CA_CERTS=" + ca_file_ + " ";
  }
};

TEST_F(RealClientsTest, CurlWithCacertAndResolve) {
  Upstream up(Srv(), SrvKey(), Echo);
  Proxy proxy(*ca_, up.port, Opts());
  std::string p = std::to_string(proxy.port);
  std::string body = "{\"token\":\"" + api_.placeholder + "\"}";
  int st = 0;
  std::string out = Shell("curl -sS --max-time 20 --cacert " + bundle_file_ +
                            " --resolve api.example.test:" + p + ":127.0.0.1 -H 'Authorization: Bearer " +
                            api_.placeholder + "' -H 'Content-Type: application/json' --data '" +
                            body + "' https://api.example.test:" + p + "/v1/chat 2>&1",
                        &st);
  EXPECT_EQ(st, 0) << out;
  EXPECT_NE(out.find("Authorization: Bearer real-api-key-123"), std::string::npos) << out;
  EXPECT_NE(out.find("{\"token\":\"real-api-key-123\"}"), std::string::npos) << out;
  // Basic auth (git, pip, curl -u): the placeholder inside the base64 is swapped too.
  out = Shell("curl -sS --max-time 20 --cacert " + bundle_file_ + " --resolve api.example.test:" +
                  p + ":127.0.0.1 -u 'x-access-token:" + api_.placeholder +
                  "' https://api.example.test:" + p + "/basic 2>&1",
              &st);
  EXPECT_EQ(st, 0) << out;
  std::string want = Shell("printf %s 'x-access-token:real-api-key-123' | base64 -w0");
  ASSERT_FALSE(want.empty());
  EXPECT_NE(out.find("Authorization: Basic " + want + "\r\n"), std::string::npos) << out;
  // No flags at all: CURL_CA_BUNDLE from the sandbox environment.
  out = Shell(Env() + "curl -sS --max-time 20 --resolve api.example.test:" + p +
                ":127.0.0.1 https://api.example.test:" + p + "/env 2>&1",
            &st);
  EXPECT_EQ(st, 0) << out;
  EXPECT_NE(out.find("GET /env HTTP/1.1"), std::string::npos) << out;
  // curl offers h2 first; we answer with http/1.1 only and it copes.
  EXPECT_EQ(proxy.Result(0).outcome.find("mitm"), 0u) << proxy.Result(0).outcome;
}

TEST_F(RealClientsTest, NodeTrustsViaNodeExtraCaCerts) {
  if (system("command -v node >/dev/null") != 0) GTEST_SKIP() << "node not installed";
  Upstream up(Srv(), SrvKey(), Echo);
  Proxy proxy(*ca_, up.port, Opts());
  std::string js =
      "require('https').get({host:'api.example.test',port:" + std::to_string(proxy.port) +
      ",path:'/node',headers:{'x-key':process.env.API_KEY},lookup:(h,o,cb)=>o&&o.all?"
      "cb(null,[{address:'127.0.0.1',family:4}]):cb(null,'127.0.0.1',4)},r=>{let d='';"
      "r.on('data',c=>d+=c);r.on('end',()=>{console.log(d)})}).on('error',e=>{console.log("
      "'ERR',e.message);process.exit(1)})";
  WriteFile(dir_ + "/t.js", js);
  int st = 0;
  std::string out = Shell(Env() + "API_KEY=" + api_.placeholder + " node " + dir_ + "/t.js 2>&1", &st);
  EXPECT_EQ(st, 0) << out;
  EXPECT_NE(out.find("x-key: real-api-key-123"), std::string::npos) << out;
}

TEST_F(RealClientsTest, PythonUrllibAndRequestsTrustViaEnv) {
  if (access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "/usr/bin/python3 missing";
  Upstream up(Srv(), SrvKey(), Echo);
  Proxy proxy(*ca_, up.port, Opts());
  // Debian's interpreter (requests is the python3-requests package); the name resolves to the
  // proxy through a patched getaddrinfo, like --resolve.
  std::string py =
      "import os, socket, sys\n"
      "real = socket.getaddrinfo\n"
      "socket.getaddrinfo = lambda h, *a, **k: real('127.0.0.1' if h == 'api.example.test' else h, *a, **k)\n"
      "url = 'https://api.example.test:" + std::to_string(proxy.port) + "/'\n"
      "import urllib.request\n"
      "req = urllib.request.Request(url + 'urllib', headers={'X-Key': os.environ['API_KEY']})\n"
      "print(urllib.request.urlopen(req, timeout=20).read().decode())\n"
      "try:\n"
      "    import requests\n"
      "except ImportError:\n"
      "    print('NO-REQUESTS'); sys.exit(0)\n"
      "print(requests.get(url + 'requests', headers={'X-Key': os.environ['API_KEY']}, timeout=20).text)\n";
  WriteFile(dir_ + "/t.py", py);
  int st = 0;
  std::string out =
      Shell(Env() + "API_KEY=" + api_.placeholder + " /usr/bin/python3 " + dir_ + "/t.py 2>&1", &st);
  EXPECT_EQ(st, 0) << out;
  EXPECT_NE(out.find("GET /urllib"), std::string::npos) << out;
  EXPECT_EQ(out.find("NO-REQUESTS"), std::string::npos)
      << "python3-requests missing (scripts/install-deps.sh installs it)";
  EXPECT_NE(out.find("GET /requests"), std::string::npos) << out;
  EXPECT_EQ(out.find(api_.placeholder), std::string::npos) << out;
  EXPECT_NE(out.find("X-Key: real-api-key-123"), std::string::npos) << out;
}

}  // namespace
}  // namespace space::net::tls
