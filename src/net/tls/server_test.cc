// ServerTls (spaced's own certificate): operator files and what is wrong with them, the
// self-signed CA kept across starts, and handshakes against the context it makes, verified
// the way clients verify (CA file, host name).
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <thread>

#include "net/tls/internal.h"
#include "net/tls/tls.h"
#include "sys/sys.h"

namespace space::net::tls {
namespace {

std::string ReadFile(const std::string& p) { return sys::ReadFile(p).value_or(""); }
void WriteFile(const std::string& p, std::string_view data) { ASSERT_TRUE(sys::WriteFileAtomic(p, data)); }

int Shell(const std::string& cmd) {
  int st = std::system((cmd + " >/dev/null 2>&1").c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

mode_t Mode(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 ? (st.st_mode & 07777) : 0;
}

class ServerTlsTest : public ::testing::Test {
 protected:
  // A side that fails its handshake closes while the other still writes (spaced ignores
  // SIGPIPE too).
  static void SetUpTestSuite() { ::signal(SIGPIPE, SIG_IGN); }
  void SetUp() override {
    char tmpl[] = "/tmp/server-tls-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { Shell("rm -rf " + dir_); }

  // A CA (ca.pem, made anew each call) and a leaf it signs for `san` (subjectAltName in
  // openssl's form), made with the openssl CLI as an operator would.
  void MakeCert(const std::string& name, const std::string& san) {
    ASSERT_EQ(Shell("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 "
                    "-subj /CN=test-ca -keyout " + dir_ + "/ca.key -out " + dir_ + "/ca.pem"), 0);
    ASSERT_EQ(Shell("openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=" + name +
                    " -keyout " + dir_ + "/" + name + ".key -out " + dir_ + "/" + name + ".csr"), 0);
    WriteFile(dir_ + "/ext.cnf", "subjectAltName=" + san + "\nextendedKeyUsage=serverAuth\n");
    ASSERT_EQ(Shell("openssl x509 -req -in " + dir_ + "/" + name + ".csr -CA " + dir_ + "/ca.pem -CAkey " +
                    dir_ + "/ca.key -CAcreateserial -days 30 -extfile " + dir_ + "/ext.cnf -out " + dir_ +
                    "/" + name + ".pem"), 0);
  }

  std::string dir_;
};

// One TLS handshake against `tls`'s context over a socketpair, as a client that trusts
// ca_file, sends `sni` and checks `verify_host` (a DNS name or an IP literal). "" when it
// verified; else why not. *alpn: what was negotiated.
std::string Handshake(const ServerTls& tls, const std::string& ca_file, const std::string& sni,
                      const std::string& verify_host, std::string* alpn = nullptr) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return "socketpair";
  SslCtxPtr server_ctx(tls.NewContextRef());
  std::thread server([&] {
    SslPtr s(SSL_new(server_ctx.get()));
    SSL_set_fd(s.get(), sv[1]);
    if (SSL_accept(s.get()) == 1) {
      char c;
      (void)SSL_read(s.get(), &c, 1);
    }
    ::close(sv[1]);
  });
  SslCtxPtr ctx(SSL_CTX_new(TLS_client_method()));
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
  SSL_CTX_load_verify_locations(ctx.get(), ca_file.c_str(), nullptr);
  static const unsigned char kProtos[] = {2, 'h', '2', 8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  SSL_CTX_set_alpn_protos(ctx.get(), kProtos, sizeof(kProtos));
  SslPtr c(SSL_new(ctx.get()));
  SSL_set_fd(c.get(), sv[0]);
  if (!sni.empty()) SSL_set_tlsext_host_name(c.get(), sni.c_str());
  X509_VERIFY_PARAM* param = SSL_get0_param(c.get());
  if (verify_host.find_first_not_of("0123456789.:") == std::string::npos)
    X509_VERIFY_PARAM_set1_ip_asc(param, verify_host.c_str());
  else
    SSL_set1_host(c.get(), verify_host.c_str());
  std::string why;
  if (SSL_connect(c.get()) != 1) {
    long v = SSL_get_verify_result(c.get());
    why = v != X509_V_OK ? X509_verify_cert_error_string(v) : "handshake failed: " + DrainSslErrors();
  } else if (alpn) {
    const unsigned char* p = nullptr;
    unsigned int n = 0;
    SSL_get0_alpn_selected(c.get(), &p, &n);
    *alpn = std::string(reinterpret_cast<const char*>(p), n);
  }
  ::shutdown(sv[0], SHUT_RDWR);
  server.join();
  ::close(sv[0]);
  ERR_clear_error();
  return why;
}

TEST_F(ServerTlsTest, OperatorFilesServeTheirNames) {
  MakeCert("srv", "DNS:localhost,DNS:*.sbx.example.test,IP:127.0.0.1");
  // The chain as operators often have it: leaf, then the CA.
  WriteFile(dir_ + "/chain.pem", ReadFile(dir_ + "/srv.pem") + ReadFile(dir_ + "/ca.pem"));
  auto tls = ServerTls::FromFiles(dir_ + "/chain.pem", dir_ + "/srv.key");
  ASSERT_TRUE(tls) << tls.error().message;
  EXPECT_EQ((*tls)->ca_file(), "");
  EXPECT_EQ((*tls)->names(), (std::vector<std::string>{"DNS:localhost", "DNS:*.sbx.example.test", "IP:127.0.0.1"}));
  EXPECT_GT((*tls)->not_after_s(), time(nullptr) + 20 * 86400);
  std::string alpn;
  EXPECT_EQ(Handshake(**tls, dir_ + "/ca.pem", "8080-sb-a.sbx.example.test", "8080-sb-a.sbx.example.test", &alpn), "");
  EXPECT_EQ(alpn, "http/1.1");  // never h2: spaced speaks HTTP/1.1
  EXPECT_EQ(Handshake(**tls, dir_ + "/ca.pem", "", "127.0.0.1"), "");
  EXPECT_NE(Handshake(**tls, dir_ + "/ca.pem", "other.test", "other.test"), "");
}

TEST_F(ServerTlsTest, BadOperatorFilesAreRefusedSayingWhy) {
  MakeCert("srv", "DNS:localhost");
  MakeCert("other", "DNS:localhost");  // another key, which does not match srv.pem
  auto expect_refused = [&](const std::string& cert, const std::string& key, const std::string& says) {
    auto tls = ServerTls::FromFiles(cert, key);
    ASSERT_FALSE(tls) << cert << " " << key;
    EXPECT_EQ(tls.error().code, Errc::kInvalidArgument);
    EXPECT_NE(tls.error().message.find(says), std::string::npos) << tls.error().message;
  };
  expect_refused(dir_ + "/missing.pem", dir_ + "/srv.key", dir_ + "/missing.pem");
  expect_refused(dir_ + "/srv.pem", dir_ + "/missing.key", dir_ + "/missing.key");
  WriteFile(dir_ + "/garbage.pem", "not a certificate\n");
  expect_refused(dir_ + "/garbage.pem", dir_ + "/srv.key", "no PEM certificate");
  expect_refused(dir_ + "/srv.pem", dir_ + "/garbage.pem", "no PEM private key");
  expect_refused(dir_ + "/srv.pem", dir_ + "/other.key", "does not match");
  // The key and the certificate swapped.
  expect_refused(dir_ + "/srv.key", dir_ + "/srv.pem", "no PEM certificate");
  ASSERT_EQ(Shell("openssl pkey -in " + dir_ + "/srv.key -aes256 -passout pass:x -out " + dir_ + "/enc.key"), 0);
  expect_refused(dir_ + "/srv.pem", dir_ + "/enc.key", "encrypted");
  // Expired: signed with a validity that ended an hour ago.
  auto ca = SandboxCa::Generate("t", {});
  ASSERT_TRUE(ca);
  PkeyPtr key = NewP256Key();
  auto old = SignLeaf((*ca)->impl().cert.get(), (*ca)->impl().key.get(), key.get(), "localhost",
                      "DNS:localhost", -3600);
  ASSERT_TRUE(old);
  WriteFile(dir_ + "/old.pem", CertPem(old->get()));
  WriteFile(dir_ + "/old.key", KeyPem(key.get()));
  expect_refused(dir_ + "/old.pem", dir_ + "/old.key", "expired on");
}

TEST_F(ServerTlsTest, SelfSignedKeepsItsCaAndMintsPortHosts) {
  const std::string tls_dir = dir_ + "/tls";
  const std::vector<std::string> names = {"localhost", "127.0.0.1", "::1", "localhost"};
  auto first = ServerTls::SelfSigned(tls_dir, names, "localhost");
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_TRUE((*first)->made_ca());
  EXPECT_EQ((*first)->ca_file(), tls_dir + "/ca.pem");
  EXPECT_EQ((*first)->names(), (std::vector<std::string>{"DNS:localhost", "IP:127.0.0.1", "IP:::1"}));
  EXPECT_EQ(Mode(tls_dir), 0700u);
  EXPECT_EQ(Mode(tls_dir + "/ca.key"), 0600u);
  EXPECT_EQ(Mode(tls_dir + "/server.key"), 0600u);
  EXPECT_EQ(Mode(tls_dir + "/ca.pem"), 0644u);
  const std::string ca_pem = ReadFile(tls_dir + "/ca.pem"), server_pem = ReadFile(tls_dir + "/server.pem");
  const std::string ca = tls_dir + "/ca.pem";

  EXPECT_EQ(Handshake(**first, ca, "localhost", "localhost"), "");
  EXPECT_EQ(Handshake(**first, ca, "", "127.0.0.1"), "");
  EXPECT_EQ(Handshake(**first, ca, "", "::1"), "");
  // "*.localhost" is refused by OpenSSL, Node and browsers alike (a wildcard over one
  // label): a port URL's host gets a leaf of its own, minted at the handshake.
  EXPECT_EQ(Handshake(**first, ca, "3000-sb-abcdefghijklmnop.localhost", "3000-sb-abcdefghijklmnop.localhost"), "");
  // Not one label under the domain, or outside it: the default certificate, refused by name.
  EXPECT_NE(Handshake(**first, ca, "a.b.localhost", "a.b.localhost"), "");
  EXPECT_NE(Handshake(**first, ca, "example.test", "example.test"), "");

  // A restart keeps both files.
  auto again = ServerTls::SelfSigned(tls_dir, names, "localhost");
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_FALSE((*again)->made_ca());
  EXPECT_EQ(ReadFile(tls_dir + "/ca.pem"), ca_pem);
  EXPECT_EQ(ReadFile(tls_dir + "/server.pem"), server_pem);

  // A new address: a new server certificate from the same CA.
  auto more = ServerTls::SelfSigned(tls_dir, {"localhost", "127.0.0.1", "10.1.2.3"}, "localhost");
  ASSERT_TRUE(more) << more.error().message;
  EXPECT_FALSE((*more)->made_ca());
  EXPECT_EQ(ReadFile(tls_dir + "/ca.pem"), ca_pem);
  EXPECT_NE(ReadFile(tls_dir + "/server.pem"), server_pem);
  EXPECT_EQ(Handshake(**more, ca, "", "10.1.2.3"), "");

  // A domain outside the CA's name constraints: a new CA (clients must trust it anew).
  auto other = ServerTls::SelfSigned(tls_dir, {"localhost", "sbx.example.test", "*.sbx.example.test"}, "sbx.example.test");
  ASSERT_TRUE(other) << other.error().message;
  EXPECT_TRUE((*other)->made_ca());
  EXPECT_NE(ReadFile(tls_dir + "/ca.pem"), ca_pem);
  EXPECT_EQ(Handshake(**other, ca, "8080-sb-x.sbx.example.test", "8080-sb-x.sbx.example.test"), "");
  EXPECT_NE(Handshake(**other, ca, "evil.test", "evil.test"), "");
}

TEST_F(ServerTlsTest, SelfSignedRefusesBadNamesAndBrokenCaFiles) {
  auto bad = ServerTls::SelfSigned(dir_ + "/tls", {"localhost", "not a name"}, "localhost");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("not a name"), std::string::npos) << bad.error().message;
  // A wildcard over one label: matched by no client, and rustls refuses the certificate.
  auto tld = ServerTls::SelfSigned(dir_ + "/tls", {"localhost", "*.localhost"}, "localhost");
  ASSERT_FALSE(tld);
  EXPECT_NE(tld.error().message.find("two labels"), std::string::npos) << tld.error().message;
  ASSERT_TRUE(ServerTls::SelfSigned(dir_ + "/tls", {"localhost"}, "localhost"));
  WriteFile(dir_ + "/tls/ca.key", "garbage");
  auto broken = ServerTls::SelfSigned(dir_ + "/tls", {"localhost"}, "localhost");
  ASSERT_FALSE(broken);
  EXPECT_NE(broken.error().message.find("remove " + dir_ + "/tls"), std::string::npos) << broken.error().message;
}

}  // namespace
}  // namespace space::net::tls
