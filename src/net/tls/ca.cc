// SandboxCa (per-sandbox CA and leaf cache), placeholders, secret validation, trust bundles.
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <cctype>

#include "net/tls/internal.h"

namespace space::net::tls {
namespace {

constexpr long kCaValidity = 10 * 365 * kDay;
constexpr long kLeafValidity = 7 * kDay;
constexpr size_t kMaxCachedLeaves = 256;  // a guest clock a little behind still accepts the certs

bool ValidName(std::string_view n) {
  if (n.empty() || n.size() > 64) return false;
  if (!(std::isalpha(static_cast<unsigned char>(n[0])) || n[0] == '_')) return false;
  return std::all_of(n.begin(), n.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

// "*.example.com" -> "example.com"; "api.example.com" -> itself.
std::string_view Subtree(std::string_view host) {
  return StartsWith(host, "*.") ? host.substr(2) : host;
}

bool RandomSerial(X509* x) {
  BIGNUM* bn = BN_new();
  bool ok = bn && BN_rand(bn, 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) == 1 &&
            BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)) != nullptr;
  BN_free(bn);
  return ok;
}

bool AddExt(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (!ext) return false;
  bool ok = X509_add_ext(cert, ext, -1) == 1;
  X509_EXTENSION_free(ext);
  return ok;
}

SslCtxPtr NewServerCtx() {
  SslCtxPtr ctx(SSL_CTX_new(TLS_server_method()));
  if (!ctx) return nullptr;
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  SSL_CTX_set_alpn_select_cb(ctx.get(), SelectAlpn, nullptr);
  // Each connection is one sandbox talking to one host; no resumption cache to keep.
  SSL_CTX_set_session_cache_mode(ctx.get(), SSL_SESS_CACHE_OFF);
  SSL_CTX_set_options(ctx.get(), SSL_OP_NO_TICKET | SSL_OP_NO_RENEGOTIATION |
                                      SSL_OP_IGNORE_UNEXPECTED_EOF);
  return ctx;
}

Result<std::unique_ptr<SandboxCa::Impl>> FinishImpl(X509Ptr cert, PkeyPtr key) {
  auto impl = std::make_unique<SandboxCa::Impl>();
  impl->cert_pem = CertPem(cert.get());
  impl->key_pem = KeyPem(key.get());
  if (impl->cert_pem.empty() || impl->key_pem.empty())
    return SslFail(Errc::kInternal, "sandbox CA: encode PEM");
  impl->permitted = PermittedFromCert(cert.get());
  impl->server_ctx = NewServerCtx();
  if (!impl->server_ctx) return SslFail(Errc::kInternal, "sandbox CA: TLS server context");
  impl->cert = std::move(cert);
  impl->key = std::move(key);
  return impl;
}

}  // namespace

// ---- Certificate helpers (internal.h) -----------------------------------------------------

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

tl::unexpected<Error> SslFail(Errc code, std::string what) {
  std::string detail = DrainSslErrors();
  if (!detail.empty()) what += ": " + detail;
  return Fail(code, std::move(what));
}

bool ValidDnsName(std::string_view h) {
  if (h.empty() || h.size() > 253) return false;
  size_t start = 0;
  while (true) {
    size_t dot = h.find('.', start);
    std::string_view label = h.substr(start, dot == std::string_view::npos ? h.npos : dot - start);
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-')
      return false;
    for (char c : label)
      if (!(std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) ||
            c == '-'))
        return false;
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  // All-numeric names would look like IP literals; SNI never carries those.
  return !std::all_of(h.begin(), h.end(),
                      [](char c) { return std::isdigit(static_cast<unsigned char>(c)) || c == '.'; });
}

bool InSubtree(std::string_view host, std::string_view base) {
  if (host == base) return true;
  return host.size() > base.size() && host.substr(host.size() - base.size()) == base &&
         host[host.size() - base.size() - 1] == '.';
}

PkeyPtr NewP256Key() { return PkeyPtr(EVP_EC_gen("P-256")); }

std::string CertPem(X509* x) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_X509(bio.get(), x) != 1) return "";
  char* data = nullptr;
  long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

std::string KeyPem(EVP_PKEY* k) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_PrivateKey(bio.get(), k, nullptr, nullptr, 0, nullptr, nullptr) != 1)
    return "";
  char* data = nullptr;
  long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

// Only http/1.1: we parse and relay HTTP/1.1, nothing else. A client that offers no
// http/1.1 (h2 only) gets no ALPN and falls back to HTTP/1.1.
int SelectAlpn(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in,
               unsigned int inlen, void*) {
  static const unsigned char kH11[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  unsigned char* sel = nullptr;
  unsigned char sel_len = 0;
  if (SSL_select_next_proto(&sel, &sel_len, kH11, sizeof(kH11), in, inlen) ==
      OPENSSL_NPN_NEGOTIATED) {
    *out = sel;
    *outlen = sel_len;
    return SSL_TLSEXT_ERR_OK;
  }
  return SSL_TLSEXT_ERR_NOACK;
}

std::vector<std::string> PermittedFromCert(X509* cert) {
  std::vector<std::string> out;
  auto* nc = static_cast<NAME_CONSTRAINTS*>(
      X509_get_ext_d2i(cert, NID_name_constraints, nullptr, nullptr));
  if (!nc) return out;
  for (int i = 0; i < sk_GENERAL_SUBTREE_num(nc->permittedSubtrees); ++i) {
    GENERAL_SUBTREE* st = sk_GENERAL_SUBTREE_value(nc->permittedSubtrees, i);
    if (st->base->type != GEN_DNS) continue;
    const ASN1_IA5STRING* s = st->base->d.dNSName;
    out.push_back(Lower(std::string_view(reinterpret_cast<const char*>(s->data),
                                         static_cast<size_t>(s->length))));
  }
  NAME_CONSTRAINTS_free(nc);
  // Constraints with no DNS subtree would make every name unusable: mint nothing then.
  if (out.empty()) out.push_back("invalid.");
  return out;
}

Result<X509Ptr> SignLeaf(X509* ca, EVP_PKEY* ca_key, EVP_PKEY* leaf_key, std::string_view cn,
                         const std::string& san, long validity_s) {
  X509Ptr leaf(X509_new());
  X509* c = leaf.get();
  if (!c) return SslFail(Errc::kInternal, "leaf certificate: new");
  std::string cn_text(cn);
  X509_NAME* name = X509_get_subject_name(c);
  bool ok = X509_set_version(c, 2) == 1 && RandomSerial(c) &&
            X509_gmtime_adj(X509_getm_notBefore(c), -kBackdate) &&
            X509_gmtime_adj(X509_getm_notAfter(c), validity_s) &&
            X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                                       reinterpret_cast<const unsigned char*>(cn_text.c_str()), -1,
                                       -1, 0) == 1 &&
            X509_set_issuer_name(c, X509_get_subject_name(ca)) == 1 &&
            X509_set_pubkey(c, leaf_key) == 1 &&
            AddExt(c, ca, NID_basic_constraints, "critical,CA:FALSE") &&
            AddExt(c, ca, NID_key_usage, "critical,digitalSignature") &&
            AddExt(c, ca, NID_ext_key_usage, "serverAuth") &&
            AddExt(c, ca, NID_subject_alt_name, san) &&
            AddExt(c, ca, NID_subject_key_identifier, "hash") &&
            AddExt(c, ca, NID_authority_key_identifier, "keyid:always") &&
            X509_sign(c, ca_key, EVP_sha256()) > 0;
  if (!ok) return SslFail(Errc::kInternal, "leaf certificate for " + cn_text);
  return leaf;
}

std::string DrainSslErrors() {
  std::string out;
  unsigned long e;
  while ((e = ERR_get_error()) != 0) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out;
}

// ---- Secrets ------------------------------------------------------------------------------

std::string MakePlaceholder(std::string_view name) {
  unsigned char raw[16];
  if (RAND_bytes(raw, sizeof(raw)) != 1) std::abort();  // no entropy: nothing safe to do
  return "space_secret_" + std::string(name) + "_" +
         HexEncode(std::string_view(reinterpret_cast<const char*>(raw), sizeof(raw)));
}

Status ValidateSecret(Secret& s) {
  if (!ValidName(s.name))
    return Fail(Errc::kInvalidArgument,
                "secret name \"" + s.name + "\": must match [A-Za-z_][A-Za-z0-9_]{0,63}");
  if (s.value.empty() || s.value.size() > 8192)
    return Fail(Errc::kInvalidArgument, "secret " + s.name + ": value must be 1..8192 bytes");
  if (s.value.find_first_of(std::string_view("\r\n\0", 3)) != std::string::npos)
    return Fail(Errc::kInvalidArgument,
                "secret " + s.name + ": value must not contain CR, LF or NUL");
  if (s.hosts.empty() || s.hosts.size() > 16)
    return Fail(Errc::kInvalidArgument, "secret " + s.name + ": needs 1..16 hosts");
  for (std::string& h : s.hosts) {
    h = Lower(h);
    if (!ValidDnsName(Subtree(h)))
      return Fail(Errc::kInvalidArgument, "secret " + s.name + ": host \"" + h +
                                              "\" is not a DNS name or *.domain");
  }
  return Ok();
}

Result<Secret> ParseSecretSpec(std::string_view spec) {
  size_t eq = spec.find('=');
  size_t at = spec.rfind('@');
  if (eq == std::string_view::npos || at == std::string_view::npos || at < eq)
    return Fail(Errc::kInvalidArgument,
                "--secret \"" + std::string(spec.substr(0, eq)) + "...\": want NAME=VALUE@host1,host2");
  Secret s;
  s.name = std::string(spec.substr(0, eq));
  s.value = std::string(spec.substr(eq + 1, at - eq - 1));
  std::string_view hosts = spec.substr(at + 1);
  while (!hosts.empty()) {
    size_t comma = hosts.find(',');
    std::string_view h = hosts.substr(0, comma);
    if (!h.empty()) s.hosts.emplace_back(h);
    if (comma == std::string_view::npos) break;
    hosts.remove_prefix(comma + 1);
  }
  SPACE_TRY(ValidateSecret(s));
  return s;
}

bool SecretAppliesTo(const Secret& secret, std::string_view host_any_case) {
  std::string host = Lower(host_any_case);
  for (const std::string& h : secret.hosts) {
    if (StartsWith(h, "*.")) {
      std::string_view suffix = std::string_view(h).substr(1);  // ".example.com"
      if (host.size() > suffix.size() && host.substr(host.size() - suffix.size()) == suffix)
        return true;
    } else if (Lower(h) == host) {
      return true;
    }
  }
  return false;
}

bool AnySecretAppliesTo(const std::vector<Secret>& secrets, std::string_view host) {
  return std::any_of(secrets.begin(), secrets.end(),
                     [&](const Secret& s) { return SecretAppliesTo(s, host); });
}

// ---- SandboxCa ----------------------------------------------------------------------------

SandboxCa::SandboxCa(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SandboxCa::~SandboxCa() = default;
const std::string& SandboxCa::cert_pem() const { return impl_->cert_pem; }
const std::string& SandboxCa::key_pem() const { return impl_->key_pem; }

Result<std::unique_ptr<SandboxCa>> SandboxCa::Generate(
    std::string_view label, const std::vector<std::string>& permitted_hosts,
    std::string_view common_name) {
  PkeyPtr key = NewP256Key();
  X509Ptr cert(X509_new());
  if (!key || !cert) return SslFail(Errc::kInternal, "sandbox CA: new key");
  std::string cn = common_name.empty() ? "SPACE sandbox CA " + std::string(label.substr(0, 40))
                                       : std::string(common_name.substr(0, 64));
  X509_NAME* name = X509_get_subject_name(cert.get());
  bool ok = X509_set_version(cert.get(), 2) == 1 && RandomSerial(cert.get()) &&
            X509_gmtime_adj(X509_getm_notBefore(cert.get()), -kBackdate) &&
            X509_gmtime_adj(X509_getm_notAfter(cert.get()), kCaValidity) &&
            X509_NAME_add_entry_by_txt(name, "O", MBSTRING_UTF8,
                                       reinterpret_cast<const unsigned char*>("SPACE"), -1, -1,
                                       0) == 1 &&
            X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                                       reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1,
                                       0) == 1 &&
            X509_set_issuer_name(cert.get(), name) == 1 &&
            X509_set_pubkey(cert.get(), key.get()) == 1 &&
            AddExt(cert.get(), cert.get(), NID_basic_constraints, "critical,CA:TRUE,pathlen:0") &&
            AddExt(cert.get(), cert.get(), NID_key_usage, "critical,keyCertSign,cRLSign") &&
            AddExt(cert.get(), cert.get(), NID_subject_key_identifier, "hash");
  if (ok && !permitted_hosts.empty()) {
    std::string nc = "critical";
    std::vector<std::string> seen;
    for (const std::string& h : permitted_hosts) {
      std::string base = Lower(Subtree(h));
      if (!ValidDnsName(base))
        return Fail(Errc::kInvalidArgument, "sandbox CA: host \"" + h + "\" is not a DNS name");
      if (std::find(seen.begin(), seen.end(), base) != seen.end()) continue;
      seen.push_back(base);
      nc += ",permitted;DNS:" + base;
    }
    ok = AddExt(cert.get(), cert.get(), NID_name_constraints, nc);
  }
  if (!ok || X509_sign(cert.get(), key.get(), EVP_sha256()) <= 0)
    return SslFail(Errc::kInternal, "sandbox CA: build certificate");
  auto impl = FinishImpl(std::move(cert), std::move(key));
  if (!impl) return tl::unexpected(impl.error());
  return std::unique_ptr<SandboxCa>(new SandboxCa(std::move(*impl)));
}

Result<std::unique_ptr<SandboxCa>> SandboxCa::Load(std::string_view cert_pem,
                                                   std::string_view key_pem) {
  BioPtr cb(BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size())));
  BioPtr kb(BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size())));
  if (!cb || !kb) return SslFail(Errc::kInternal, "sandbox CA: memory");
  X509Ptr cert(PEM_read_bio_X509(cb.get(), nullptr, nullptr, nullptr));
  if (!cert) return SslFail(Errc::kInvalidArgument, "sandbox CA: certificate PEM");
  PkeyPtr key(PEM_read_bio_PrivateKey(kb.get(), nullptr, nullptr, nullptr));
  if (!key) return SslFail(Errc::kInvalidArgument, "sandbox CA: key PEM");
  if (X509_check_private_key(cert.get(), key.get()) != 1)
    return SslFail(Errc::kInvalidArgument, "sandbox CA: key does not match certificate");
  if (X509_check_ca(cert.get()) != 1)
    return Fail(Errc::kInvalidArgument, "sandbox CA: certificate is not a CA");
  auto impl = FinishImpl(std::move(cert), std::move(key));
  if (!impl) return tl::unexpected(impl.error());
  return std::unique_ptr<SandboxCa>(new SandboxCa(std::move(*impl)));
}

Result<std::shared_ptr<const Leaf>> SandboxCa::Impl::GetLeaf(std::string_view host_any_case) {
  std::string host = Lower(host_any_case);
  if (!ValidDnsName(host))
    return Fail(Errc::kInvalidArgument, "leaf certificate: \"" + host + "\" is not a DNS name");
  if (!permitted.empty() &&
      std::none_of(permitted.begin(), permitted.end(),
                   [&](const std::string& base) { return InSubtree(host, base); }))
    return Fail(Errc::kPermissionDenied,
                "leaf certificate: " + host + " is outside the sandbox CA's name constraints");
  time_t now = time(nullptr);
  {
    std::lock_guard lock(mu);
    auto it = leaves.find(host);
    if (it != leaves.end() && it->second->not_after - now > kDay) return it->second;
  }
  // Minting takes ~0.5 ms (docs/networking-secrets.md, Figures); two threads racing for a new
  // host both mint and the last one wins, which is harmless (both leaves are valid).
  auto leaf = std::make_shared<Leaf>();
  leaf->key = NewP256Key();
  if (!leaf->key) return SslFail(Errc::kInternal, "leaf certificate: new key");
  auto signed_leaf = SignLeaf(cert.get(), key.get(), leaf->key.get(), host, "DNS:" + host, kLeafValidity);
  if (!signed_leaf) return tl::unexpected(signed_leaf.error());
  leaf->cert = std::move(*signed_leaf);
  X509* c = leaf->cert.get();
  leaf->not_after = now + kLeafValidity;
  leaf->pem = CertPem(c);
  std::shared_ptr<const Leaf> out = leaf;
  std::lock_guard lock(mu);
  // Bounded: a CA without name constraints could be asked for any number of names. Drop the
  // expiring entries first, then (a flood) everything; leaves in use are shared_ptrs.
  if (leaves.size() >= kMaxCachedLeaves) {
    std::erase_if(leaves, [&](const auto& kv) { return kv.second->not_after - now <= kDay; });
    if (leaves.size() >= kMaxCachedLeaves) leaves.clear();
  }
  leaves[host] = out;
  return out;
}

Result<std::string> SandboxCa::LeafPem(std::string_view host) {
  auto leaf = impl_->GetLeaf(host);
  if (!leaf) return tl::unexpected(leaf.error());
  return (*leaf)->pem;
}

size_t SandboxCa::cached_leaf_count() const {
  std::lock_guard lock(impl_->mu);
  return impl_->leaves.size();
}

// ---- Trust bundle -------------------------------------------------------------------------

Result<TrustBundle> MakeTrustBundle(std::string_view ca_pem, std::string_view template_bundle) {
  BioPtr bio(BIO_new_mem_buf(ca_pem.data(), static_cast<int>(ca_pem.size())));
  X509Ptr cert(bio ? PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!cert) return SslFail(Errc::kInvalidArgument, "trust bundle: CA is not a PEM certificate");
  std::string pem = CertPem(cert.get());  // canonical form, one certificate
  TrustBundle out;
  out.ca_pem = pem;
  out.bundle_pem = std::string(template_bundle);
  if (out.bundle_pem.find(pem) == std::string::npos) {
    if (!out.bundle_pem.empty() && out.bundle_pem.back() != '\n') out.bundle_pem += '\n';
    out.bundle_pem += "# SPACE sandbox CA (egress proxy: TLS to hosts with secrets)\n" + pem;
  }
  std::string bundle(kSandboxBundlePath), ca(kSandboxCaPath);
  out.env = {{"SSL_CERT_FILE", bundle},
             {"REQUESTS_CA_BUNDLE", bundle},
             {"CURL_CA_BUNDLE", bundle},
             {"NODE_EXTRA_CA_CERTS", ca}};
  return out;
}

}  // namespace space::net::tls
