// ServerTls: the certificate spaced serves HTTPS with on its own port (an operator's files, or
// a CA of its own made once in the data dir) and the OpenSSL server context made from it.
#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>

#include "net/tls/internal.h"
#include "sys/sys.h"

namespace space::net::tls {

struct ServerTls::Impl {
  SslCtxPtr ctx;
  std::vector<std::string> names;
  int64_t not_after_s = 0;
  std::string ca_file;
  bool made_ca = false;
  // Self-signed: the CA that mints a leaf for each port URL host (SNI one label under
  // mint_under); null for an operator's certificate.
  std::unique_ptr<SandboxCa> mint;
  std::string mint_under;
};

namespace {

constexpr long kServerCertValidity = 365 * kDay;
constexpr int64_t kRenewBefore = 30 * kDay;

// Never prompts on a terminal for a passphrase: an encrypted key is refused instead.
int NoPassphrase(char*, int, int, void*) { return 0; }

int64_t UnixTime(const ASN1_TIME* t) {
  struct tm tm {};
  if (!t || ASN1_TIME_to_tm(t, &tm) != 1) return 0;
  return static_cast<int64_t>(timegm(&tm));
}

std::string Day(int64_t unix_s) { return FormatRfc3339(unix_s * 1000).substr(0, 10); }

// "IP:" + the address in its canonical text, or "" when s is no IP literal.
std::string IpName(std::string_view s) {
  std::string text(s);
  unsigned char buf[16];
  char out[INET6_ADDRSTRLEN];
  for (int family : {AF_INET, AF_INET6}) {
    if (::inet_pton(family, text.c_str(), buf) == 1 &&
        ::inet_ntop(family, buf, out, sizeof(out)) != nullptr)
      return std::string("IP:") + out;
  }
  return "";
}

std::vector<std::string> SubjectAltNames(X509* x) {
  std::vector<std::string> out;
  auto* gens = static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(x, NID_subject_alt_name, nullptr, nullptr));
  if (!gens) return out;
  for (int i = 0; i < sk_GENERAL_NAME_num(gens); ++i) {
    const GENERAL_NAME* g = sk_GENERAL_NAME_value(gens, i);
    if (g->type == GEN_DNS) {
      const ASN1_IA5STRING* s = g->d.dNSName;
      out.push_back("DNS:" + Lower(std::string_view(reinterpret_cast<const char*>(s->data),
                                                    static_cast<size_t>(s->length))));
    } else if (g->type == GEN_IPADD) {
      const ASN1_OCTET_STRING* ip = g->d.iPAddress;
      char text[INET6_ADDRSTRLEN];
      int family = ip->length == 4 ? AF_INET : ip->length == 16 ? AF_INET6 : 0;
      if (family && ::inet_ntop(family, ip->data, text, sizeof(text)))
        out.push_back(std::string("IP:") + text);
    }
  }
  GENERAL_NAMES_free(gens);
  return out;
}

Result<std::string> ReadPemFile(const std::string& path, const std::string& what) {
  auto text = sys::ReadFile(path);
  if (!text) return Fail(Errc::kInvalidArgument, what + " " + path + ": " + text.error().message);
  return text;
}

// Every certificate of a PEM text, in order.
Result<std::vector<X509Ptr>> ParseCerts(std::string_view pem, const std::string& where) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (!bio) return SslFail(Errc::kInternal, "memory");
  std::vector<X509Ptr> out;
  while (X509* x = PEM_read_bio_X509(bio.get(), nullptr, NoPassphrase, nullptr))
    out.emplace_back(x);
  ERR_clear_error();  // the read that ended the loop
  if (out.empty())
    return Fail(Errc::kInvalidArgument, where + ": no PEM certificate (-----BEGIN CERTIFICATE-----) in it");
  return out;
}

Result<PkeyPtr> ParseKey(std::string_view pem, const std::string& where) {
  if (pem.find("ENCRYPTED") != std::string_view::npos)
    return Fail(Errc::kInvalidArgument,
                where + ": the private key is encrypted; spaced needs it unencrypted (mode 0600)");
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (!bio) return SslFail(Errc::kInternal, "memory");
  PkeyPtr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, NoPassphrase, nullptr));
  if (!key) {
    ERR_clear_error();
    return Fail(Errc::kInvalidArgument, where + ": no PEM private key (-----BEGIN PRIVATE KEY-----) in it");
  }
  return key;
}

// Why the leaf is not valid now, or "".
std::string NotValidNow(X509* leaf) {
  int64_t now = static_cast<int64_t>(time(nullptr));
  int64_t from = UnixTime(X509_get0_notBefore(leaf)), until = UnixTime(X509_get0_notAfter(leaf));
  if (until <= now) return "the certificate expired on " + Day(until);
  if (from > now) return "the certificate is not valid before " + Day(from);
  return "";
}

int OnServerName(SSL* ssl, int*, void* arg) {
  const auto* impl = static_cast<const ServerTls::Impl*>(arg);
  const char* sni = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
  if (!sni || !impl->mint) return SSL_TLSEXT_ERR_OK;
  std::string host = Lower(sni);
  const std::string& under = impl->mint_under;
  if (host.size() <= under.size() + 1 || host.compare(host.size() - under.size(), under.size(), under) != 0 ||
      host[host.size() - under.size() - 1] != '.' ||
      host.find('.') != host.size() - under.size() - 1)
    return SSL_TLSEXT_ERR_OK;
  // A name the CA may not sign, or a failed mint: the default certificate, which the
  // client then refuses by name (nothing to answer here).
  auto leaf = impl->mint->impl().GetLeaf(host);
  if (leaf && SSL_use_certificate(ssl, (*leaf)->cert.get()) == 1 &&
      SSL_use_PrivateKey(ssl, (*leaf)->key.get()) == 1)
    return SSL_TLSEXT_ERR_OK;
  ERR_clear_error();
  return SSL_TLSEXT_ERR_OK;
}

// The server context: TLS 1.2+, ALPN http/1.1 only, the chain (leaf first) and its key.
Result<SslCtxPtr> BuildContext(const std::vector<X509Ptr>& chain, EVP_PKEY* key, const std::string& where) {
  SslCtxPtr ctx(SSL_CTX_new(TLS_server_method()));
  if (!ctx) return SslFail(Errc::kInternal, "TLS server context");
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  SSL_CTX_set_options(ctx.get(), SSL_OP_NO_RENEGOTIATION | SSL_OP_IGNORE_UNEXPECTED_EOF |
                                      SSL_OP_CIPHER_SERVER_PREFERENCE);
  SSL_CTX_set_alpn_select_cb(ctx.get(), SelectAlpn, nullptr);
  static const unsigned char kSessionContext[] = "spaced";
  SSL_CTX_set_session_id_context(ctx.get(), kSessionContext, sizeof(kSessionContext) - 1);
  if (SSL_CTX_use_certificate(ctx.get(), chain[0].get()) != 1)
    return SslFail(Errc::kInvalidArgument, where + ": the certificate cannot be used");
  for (size_t i = 1; i < chain.size(); ++i) {
    if (SSL_CTX_add1_chain_cert(ctx.get(), chain[i].get()) != 1)
      return SslFail(Errc::kInvalidArgument, where + ": certificate " + std::to_string(i + 1) + " of the chain");
  }
  if (SSL_CTX_use_PrivateKey(ctx.get(), key) != 1 || SSL_CTX_check_private_key(ctx.get()) != 1) {
    ERR_clear_error();
    return Fail(Errc::kInvalidArgument, where + ": the private key does not match the certificate");
  }
  return ctx;
}

Result<std::unique_ptr<ServerTls::Impl>> MakeImpl(const std::vector<X509Ptr>& chain, EVP_PKEY* key,
                                                  const std::string& where) {
  auto ctx = BuildContext(chain, key, where);
  if (!ctx) return tl::unexpected(ctx.error());
  auto impl = std::make_unique<ServerTls::Impl>();
  impl->ctx = std::move(*ctx);
  impl->names = SubjectAltNames(chain[0].get());
  impl->not_after_s = UnixTime(X509_get0_notAfter(chain[0].get()));
  return impl;
}

bool Covers(const std::vector<std::string>& have, const std::vector<std::string>& want) {
  return std::all_of(want.begin(), want.end(), [&](const std::string& w) {
    return std::find(have.begin(), have.end(), w) != have.end();
  });
}

}  // namespace

ServerTls::ServerTls(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ServerTls::~ServerTls() = default;

ssl_ctx_st* ServerTls::NewContextRef() const {
  SSL_CTX_up_ref(impl_->ctx.get());
  return impl_->ctx.get();
}
const std::vector<std::string>& ServerTls::names() const { return impl_->names; }
int64_t ServerTls::not_after_s() const { return impl_->not_after_s; }
const std::string& ServerTls::ca_file() const { return impl_->ca_file; }
bool ServerTls::made_ca() const { return impl_->made_ca; }

Result<std::shared_ptr<ServerTls>> ServerTls::FromFiles(const std::string& cert_file,
                                                        const std::string& key_file) {
  auto cert_pem = ReadPemFile(cert_file, "--tls-cert");
  if (!cert_pem) return tl::unexpected(cert_pem.error());
  auto key_pem = ReadPemFile(key_file, "--tls-key");
  if (!key_pem) return tl::unexpected(key_pem.error());
  auto chain = ParseCerts(*cert_pem, "--tls-cert " + cert_file);
  if (!chain) return tl::unexpected(chain.error());
  auto key = ParseKey(*key_pem, "--tls-key " + key_file);
  if (!key) return tl::unexpected(key.error());
  if (X509_check_private_key((*chain)[0].get(), key->get()) != 1) {
    ERR_clear_error();
    return Fail(Errc::kInvalidArgument, "--tls-key " + key_file +
                                            " does not match the certificate in --tls-cert " + cert_file +
                                            " (its first certificate must be the server's own)");
  }
  if (std::string why = NotValidNow((*chain)[0].get()); !why.empty())
    return Fail(Errc::kInvalidArgument, "--tls-cert " + cert_file + ": " + why);
  auto impl = MakeImpl(*chain, key->get(), "--tls-cert " + cert_file);
  if (!impl) return tl::unexpected(impl.error());
  return std::shared_ptr<ServerTls>(new ServerTls(std::move(*impl)));
}

Result<std::shared_ptr<ServerTls>> ServerTls::SelfSigned(const std::string& dir,
                                                         const std::vector<std::string>& names,
                                                         const std::string& mint_under) {
  // What the certificate must name, and the DNS subtrees the CA must permit.
  std::vector<std::string> sans, bases;
  for (const std::string& n : names) {
    if (std::string ip = IpName(n); !ip.empty()) {
      if (std::find(sans.begin(), sans.end(), ip) == sans.end()) sans.push_back(ip);
      continue;
    }
    std::string dns = Lower(n);
    std::string base = StartsWith(dns, "*.") ? dns.substr(2) : dns;
    if (!ValidDnsName(base))
      return Fail(Errc::kInvalidArgument, "TLS certificate name \"" + n + "\" is neither a DNS name nor an IP address");
    // Clients match no name against "*.tld", and rustls (pyqwest, the E2B Python SDK's
    // transport) refuses the whole certificate that carries one.
    if (base.size() < dns.size() && base.find('.') == std::string::npos)
      return Fail(Errc::kInvalidArgument, "TLS certificate name \"" + n + "\": a wildcard needs two labels after it");
    if (std::find(sans.begin(), sans.end(), "DNS:" + dns) == sans.end()) sans.push_back("DNS:" + dns);
    if (std::find(bases.begin(), bases.end(), base) == bases.end()) bases.push_back(base);
  }
  if (bases.empty()) return Fail(Errc::kInvalidArgument, "a self-signed TLS certificate needs a DNS name");
  SPACE_TRY(sys::MkdirAll(dir, 0700));
  ::chmod(dir.c_str(), 0700);
  const int64_t now = static_cast<int64_t>(time(nullptr));
  const std::string ca_pem_path = dir + "/ca.pem", ca_key_path = dir + "/ca.key";
  const std::string cert_path = dir + "/server.pem", key_path = dir + "/server.key";

  // The CA: kept while it permits every name and has time left.
  std::unique_ptr<SandboxCa> ca;
  if (sys::Exists(ca_pem_path) || sys::Exists(ca_key_path)) {
    auto cp = ReadPemFile(ca_pem_path, "TLS CA");
    auto kp = cp ? ReadPemFile(ca_key_path, "TLS CA key") : cp;
    auto loaded = kp ? SandboxCa::Load(*cp, *kp) : Result<std::unique_ptr<SandboxCa>>(tl::unexpected(kp.error()));
    if (!loaded)
      return Fail(Errc::kInvalidArgument, loaded.error().message + " (remove " + dir + " to make a new CA)");
    const auto& permitted = (*loaded)->impl().permitted;
    bool covers = permitted.empty() || std::all_of(bases.begin(), bases.end(), [&](const std::string& b) {
                    return std::any_of(permitted.begin(), permitted.end(),
                                       [&](const std::string& p) { return InSubtree(b, p); });
                  });
    if (covers && UnixTime(X509_get0_notAfter((*loaded)->impl().cert.get())) - now > kRenewBefore)
      ca = std::move(*loaded);
  }
  bool made_ca = false;
  if (!ca) {
    char host[256] = "";
    (void)::gethostname(host, sizeof(host) - 1);
    auto made = SandboxCa::Generate("", bases, "SPACE spaced CA " + std::string(host).substr(0, 40));
    if (!made) return tl::unexpected(made.error());
    ca = std::move(*made);
    // The key first: a CA certificate on disk without its key would be refused next start.
    SPACE_TRY(sys::WriteFileAtomic(ca_key_path, ca->key_pem(), 0600));
    SPACE_TRY(sys::WriteFileAtomic(ca_pem_path, ca->cert_pem(), 0644));
    made_ca = true;
  }
  X509* ca_cert = ca->impl().cert.get();
  EVP_PKEY* ca_key = ca->impl().key.get();

  // The server certificate: kept while this CA signed it, it names everything and has time.
  std::vector<X509Ptr> chain;
  PkeyPtr key;
  if (!made_ca && sys::Exists(cert_path) && sys::Exists(key_path)) {
    auto cp = sys::ReadFile(cert_path);
    auto kp = sys::ReadFile(key_path);
    auto certs = cp ? ParseCerts(*cp, cert_path) : Result<std::vector<X509Ptr>>(tl::unexpected(cp.error()));
    auto k = kp ? ParseKey(*kp, key_path) : Result<PkeyPtr>(tl::unexpected(kp.error()));
    if (certs && k) {
      X509* leaf = (*certs)[0].get();
      if (X509_check_private_key(leaf, k->get()) == 1 && X509_verify(leaf, ca_key) == 1 &&
          Covers(SubjectAltNames(leaf), sans) &&
          UnixTime(X509_get0_notAfter(leaf)) - now > kRenewBefore) {
        chain.push_back(std::move((*certs)[0]));
        key = std::move(*k);
      }
    }
    ERR_clear_error();
  }
  if (!key) {
    key = NewP256Key();
    if (!key) return SslFail(Errc::kInternal, "TLS server key");
    std::string san;
    for (const auto& s : sans) san += (san.empty() ? "" : ",") + s;
    auto leaf = SignLeaf(ca_cert, ca_key, key.get(), bases.front(), san, kServerCertValidity);
    if (!leaf) return tl::unexpected(leaf.error());
    chain.push_back(std::move(*leaf));
    SPACE_TRY(sys::WriteFileAtomic(key_path, KeyPem(key.get()), 0600));
    SPACE_TRY(sys::WriteFileAtomic(cert_path, CertPem(chain[0].get()) + ca->cert_pem(), 0644));
  }
  X509_up_ref(ca_cert);
  chain.emplace_back(ca_cert);
  auto impl = MakeImpl(chain, key.get(), cert_path);
  if (!impl) return tl::unexpected(impl.error());
  (*impl)->ca_file = ca_pem_path;
  (*impl)->made_ca = made_ca;
  (*impl)->mint_under = Lower(mint_under);
  (*impl)->mint = std::move(ca);
  SSL_CTX_set_tlsext_servername_callback((*impl)->ctx.get(), OnServerName);
  SSL_CTX_set_tlsext_servername_arg((*impl)->ctx.get(), impl->get());
  return std::shared_ptr<ServerTls>(new ServerTls(std::move(*impl)));
}

}  // namespace space::net::tls
