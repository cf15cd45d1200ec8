// net/tls internals shared by ca.cc, mitm.cc, http_relay.cc and the tests/fuzz target.
// Not part of the public front door (tls.h).
#pragma once

#include <openssl/bio.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <ctime>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "net/tls/tls.h"

namespace space::net::tls {

struct X509Free { void operator()(X509* p) const { X509_free(p); } };
struct PkeyFree { void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); } };
struct SslCtxFree { void operator()(SSL_CTX* p) const { SSL_CTX_free(p); } };
struct SslFree { void operator()(SSL* p) const { SSL_free(p); } };
using X509Ptr = std::unique_ptr<X509, X509Free>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;
using SslCtxPtr = std::unique_ptr<SSL_CTX, SslCtxFree>;
using SslPtr = std::unique_ptr<SSL, SslFree>;

struct BioFree { void operator()(BIO* p) const { BIO_free(p); } };
using BioPtr = std::unique_ptr<BIO, BioFree>;

// The OpenSSL error queue, drained into one line ("" when empty).
std::string DrainSslErrors();
// Fail(code, what + ": " + the drained OpenSSL errors).
tl::unexpected<Error> SslFail(Errc code, std::string what);

// ---- Certificate helpers (ca.cc), shared with spaced's own TLS (server.cc) ----------------

inline constexpr long kDay = 24 * 3600;
inline constexpr long kBackdate = kDay;  // certificates start a day early: clocks a little behind

std::string Lower(std::string_view s);
// A lowercase DNS name: labels of [a-z0-9-], no leading/trailing '-', not all digits.
bool ValidDnsName(std::string_view host);
// host is base or a name under it.
bool InSubtree(std::string_view host, std::string_view base);
PkeyPtr NewP256Key();
std::string CertPem(X509* x);     // "" on failure
std::string KeyPem(EVP_PKEY* k);  // "" on failure
// ALPN selection of a server: http/1.1 when offered, else no ALPN (the client falls back).
int SelectAlpn(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in,
               unsigned int inlen, void*);
// The DNS subtrees a CA's name constraints permit (lowercase); empty when it has none.
std::vector<std::string> PermittedFromCert(X509* cert);
// A server leaf signed by ca/ca_key for leaf_key: subject CN `cn`, subjectAltName `san` in
// OpenSSL's form ("DNS:a,DNS:*.b,IP:127.0.0.1"), EKU serverAuth, valid from a day ago for
// validity_s seconds.
Result<X509Ptr> SignLeaf(X509* ca, EVP_PKEY* ca_key, EVP_PKEY* leaf_key, std::string_view cn,
                         const std::string& san, long validity_s);

struct Leaf {
  X509Ptr cert;
  PkeyPtr key;
  time_t not_after = 0;
  std::string pem;
};

struct SandboxCa::Impl {
  X509Ptr cert;
  PkeyPtr key;
  std::string cert_pem, key_pem;
  std::vector<std::string> permitted;  // DNS subtrees from the name constraints; empty = any
  SslCtxPtr server_ctx;                // TLS server side towards the sandbox (ALPN http/1.1)

  mutable std::mutex mu;
  std::map<std::string, std::shared_ptr<const Leaf>> leaves;  // by lowercase host

  // The cached leaf for host, minted when missing or expiring within a day. Thread-safe.
  Result<std::shared_ptr<const Leaf>> GetLeaf(std::string_view host);
};

struct UpstreamTrust::Impl {
  SslCtxPtr client_ctx;  // verify peer, system bundle + extra CA file, ALPN http/1.1
};

// ---- HTTP/1.1 request rewriting (pure; http_relay.cc) -------------------------------------

// The secrets that apply to this connection's host, as placeholder -> value.
struct Substitutions {
  std::vector<std::pair<std::string, std::string>> pairs;
  bool empty() const { return pairs.empty(); }
  // Replaces every occurrence of every placeholder in s; returns how many were replaced.
  uint32_t Apply(std::string& s) const;
};
Substitutions SubstitutionsFor(const std::vector<Secret>& secrets, std::string_view host);

// A parsed request head, fields in order with their original spelling.
struct RequestHead {
  std::string method;
  std::string target;
  unsigned version = 11;  // 10 or 11
  std::vector<std::pair<std::string, std::string>> fields;
  bool chunked = false;
  std::optional<uint64_t> content_length;
  bool keep_alive = true;
  bool upgrade = false;  // an Upgrade header (websocket, h2c, ...): refused
  bool expect_continue = false;
  std::string_view Field(std::string_view name) const;  // first match, case-insensitive; ""
};

// Whether a body with this head gets placeholder substitution (docs/networking-secrets.md):
// Content-Length framing (not chunked), length <= max, no Content-Encoding other than identity,
// and a text-ish Content-Type (text/*, application/json, application/*+json,
// application/x-www-form-urlencoded, application/xml, application/*+xml, application/graphql,
// application/javascript, application/x-ndjson).
bool BodyIsRewritable(const RequestHead& head, size_t max_body);

// Serialises head for the upstream: placeholders substituted in every field value (inside the
// base64 of "Authorization: Basic" / "Proxy-Authorization: Basic" too); the
// Expect header dropped (RunMitm answers 100-continue itself); Content-Length replaced by
// new_content_length when given. Returns the substitution count through *count.
std::string SerializeRequestHead(const RequestHead& head, const Substitutions& subs,
                                 std::optional<uint64_t> new_content_length, uint32_t* count);

// Whether the request's authority (Host header, or an absolute-form target) names `host`
// (case-insensitive, any port). Secrets only go to the host the TLS connection was opened for:
// this stops domain fronting through a shared front end.
bool AuthorityMatches(const RequestHead& head, std::string_view host);

// Incremental request parser over Beast's basic_parser; see http_relay.cc.
class RequestParser {
 public:
  explicit RequestParser(size_t max_head_bytes);
  ~RequestParser();
  // Feeds bytes; returns how many were consumed (0 = need more). Sets *error on a malformed
  // message or a head over max_head_bytes ("" otherwise). The start line and complete fields
  // may be consumed before the head is complete (the parser keeps them); body bytes are
  // consumed as they come. With eager off it stops right after the head.
  size_t Put(std::string_view data, std::string* error);
  bool head_done() const;
  bool done() const;
  const RequestHead& head() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Incremental response framing (for relaying unchanged): finds where a response ends.
class ResponseParser {
 public:
  ResponseParser(size_t max_head_bytes, bool head_request);
  ~ResponseParser();
  size_t Put(std::string_view data, std::string* error);
  void PutEof(std::string* error);  // upstream closed: fine for read-until-close bodies
  bool head_done() const;
  bool done() const;
  int status() const;
  bool keep_alive() const;
  bool NeedsEof() const;  // body framed by the connection closing

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace space::net::tls
