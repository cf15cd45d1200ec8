// net/tls: secrets that never enter the sandbox.
//
// A sandbox with `secrets` sees only placeholders in its environment. When the egress proxy
// (net/) sees a TLS connection from that sandbox to a host one of its secrets is scoped to, it
// hands both file descriptors to RunMitm(), which terminates the sandbox's TLS with a leaf
// minted by the sandbox's own CA (SandboxCa), opens verified TLS to the real host, and relays
// HTTP/1.1 requests one by one, swapping each in-scope placeholder for its real value in header
// values (and in small text bodies). Connections to hosts without secrets never reach this
// code: the proxy splices them.
//
// The rules (what is substituted where, limits, the error responses the sandbox sees, the
// trust-store paths inside the sandbox) are written down in docs/networking-secrets.md.
//
// ServerTls is spaced's own certificate for HTTPS on its API port (an operator's files, or a
// CA of spaced's own kept in the data dir; docs/tls.md): it makes the OpenSSL context that
// api/tls_front.h serves TLS with.
//
// Ownership and threads: SandboxCa is thread-safe (the leaf cache has its own lock) and must
// outlive every RunMitm() that uses it; UpstreamTrust is immutable after Create() and shared.
// RunMitm() blocks its calling thread for the life of one connection and borrows the fds (the
// caller closes them afterwards). Nothing here logs; results are returned.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/common.h"

struct ssl_ctx_st;  // OpenSSL's SSL_CTX

namespace space::net::tls {

// ---- Secrets and placeholders -------------------------------------------------------------

struct Secret {
  std::string name;                // environment variable name, [A-Za-z_][A-Za-z0-9_]{0,63}
  std::string value;               // the real value; never enters the sandbox
  std::vector<std::string> hosts;  // lowercase DNS names or "*.domain" (subdomains only)
  std::string placeholder;         // what the sandbox's environment holds (MakePlaceholder)
};

// "space_secret_<NAME>_<32 lowercase hex of system entropy>": printable ASCII, safe in header
// values, URLs and JSON strings, and (128 random bits) never equal to real data by accident.
std::string MakePlaceholder(std::string_view name);

// Parses the CLI form "NAME=VALUE@host1,host2" (split at the last '@': values may contain '@',
// host names cannot) and validates it like ValidateSecret. The placeholder is left empty.
Result<Secret> ParseSecretSpec(std::string_view spec);

// Checks a secret before it is stored: name as above, value 1..8192 bytes without CR, LF or
// NUL (it is written into header values), 1..16 hosts, each a valid DNS name (labels of
// [a-z0-9-], no leading/trailing '-') or "*." plus one; hosts are lowercased in place.
// kInvalidArgument with a message naming the field.
Status ValidateSecret(Secret& secret);

// True when `host` (the TLS SNI, any case) is in `secret.hosts`: exact match, case-insensitive,
// or "*.example.com" matching any name ending in ".example.com" (not "example.com" itself).
bool SecretAppliesTo(const Secret& secret, std::string_view host);

// The proxy's one decision: intercept (RunMitm) when any secret applies to the SNI host,
// splice otherwise.
bool AnySecretAppliesTo(const std::vector<Secret>& secrets, std::string_view host);

// ---- Per-sandbox CA -----------------------------------------------------------------------

class SandboxCa {
 public:
  // A new CA: EC P-256 key, self-signed, CA:TRUE, pathlen 0, keyCertSign|cRLSign, valid from
  // a day ago for 10 years, subject "CN=SPACE sandbox CA <label>". When `permitted_hosts` is not
  // empty the CA carries critical name constraints permitting only those DNS subtrees ("*.d"
  // permits d), so even a stolen key cannot mint certificates for other hosts that the
  // sandbox would trust, and MintLeaf refuses hosts outside them. A non-empty `common_name`
  // replaces that subject CN (at most 64 bytes; spaced's own CA, ServerTls).
  static Result<std::unique_ptr<SandboxCa>> Generate(std::string_view label,
                                                    const std::vector<std::string>& permitted_hosts,
                                                    std::string_view common_name = {});
  // Restores a CA from the PEM pair Generate produced (after a daemon restart). Checks that the
  // key matches the certificate and that the certificate is a CA. kInvalidArgument otherwise.
  static Result<std::unique_ptr<SandboxCa>> Load(std::string_view cert_pem,
                                                std::string_view key_pem);
  ~SandboxCa();
  SandboxCa(const SandboxCa&) = delete;
  SandboxCa& operator=(const SandboxCa&) = delete;

  const std::string& cert_pem() const;  // public: goes into the sandbox's trust store
  const std::string& key_pem() const;   // private: store 0600 in the data dir, never in a sandbox

  // The PEM of the leaf certificate for `host` (as MintLeaf caches it); for tests and logs.
  // A leaf: its own P-256 key, SAN DNS:<host>, EKU serverAuth, valid from a day ago for 7 days,
  // signed by this CA. Leaves are cached per host and re-minted when less than a day is left.
  Result<std::string> LeafPem(std::string_view host);
  size_t cached_leaf_count() const;

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  explicit SandboxCa(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// ---- Trust inside the sandbox -------------------------------------------------------------

// Where the lead's code puts the files in the sandbox's root filesystem.
inline constexpr std::string_view kSandboxBundlePath = "/etc/ssl/certs/ca-certificates.crt";
inline constexpr std::string_view kSandboxCaPath =
    "/usr/local/share/ca-certificates/space-sandbox-ca.crt";

struct TrustBundle {
  std::string bundle_pem;  // write to kSandboxBundlePath (0644): template bundle + our CA
  std::string ca_pem;      // write to kSandboxCaPath (0644): our CA alone
  // SSL_CERT_FILE, REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE -> kSandboxBundlePath (these replace a
  // client's store, so they get the merged bundle); NODE_EXTRA_CA_CERTS -> kSandboxCaPath (Node
  // appends it to its built-in roots). Set them in the sandbox's environment unless the user
  // set the same name.
  std::vector<std::pair<std::string, std::string>> env;
};

// Merges `ca_pem` into the template's own bundle text (the template's
// /etc/ssl/certs/ca-certificates.crt; may be empty). Idempotent: a bundle that already holds
// this CA is returned as is. kInvalidArgument when ca_pem is not one PEM certificate.
Result<TrustBundle> MakeTrustBundle(std::string_view ca_pem, std::string_view template_bundle);

// ---- Upstream verification ----------------------------------------------------------------

inline constexpr std::string_view kSystemCaBundle = "/etc/ssl/certs/ca-certificates.crt";

// The trust store RunMitm verifies real hosts against: the system bundle plus the certificates
// in `extra_ca_file` (--egress-ca-file; empty for none). Load once at daemon start and share.
// kInvalidArgument when extra_ca_file cannot be read or holds no certificate; a missing system
// bundle is not an error (only the extra file is trusted then).
class UpstreamTrust {
 public:
  static Result<std::shared_ptr<UpstreamTrust>> Create(
      const std::string& extra_ca_file, const std::string& system_bundle = std::string(kSystemCaBundle));
  ~UpstreamTrust();
  UpstreamTrust(const UpstreamTrust&) = delete;
  UpstreamTrust& operator=(const UpstreamTrust&) = delete;

  struct Impl;
  Impl& impl() const { return *impl_; }

 private:
  explicit UpstreamTrust(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// ---- spaced's own TLS ----------------------------------------------------------------------

// The certificate spaced serves HTTPS with on its own port (spaced --tls-cert/--tls-key, or
// --tls-self-signed; docs/tls.md) and the OpenSSL server context made from it. Immutable after
// creation and thread-safe (the self-signed CA's leaf cache has its own lock); it must outlive
// every context NewContextRef() handed out.
class ServerTls {
 public:
  // An operator's own certificate: cert_file holds the leaf first, then any intermediates; key_file
  // its private key; both PEM. kInvalidArgument naming the file when one cannot be read, holds no
  // certificate or no key, the key is encrypted or does not match, or the certificate is not
  // valid now (expired, or not yet valid).
  static Result<std::shared_ptr<ServerTls>> FromFiles(const std::string& cert_file,
                                                      const std::string& key_file);

  // spaced --tls-self-signed. In `dir` (made 0700): a CA made once and kept (ca.pem; its key
  // ca.key, 0600), whose name constraints permit only the DNS names of `names` ("*.d" permits
  // d); and a server certificate it signs (server.pem: the leaf, then the CA; server.key, 0600)
  // for every entry of `names` (DNS names, "*.domain" with two labels or more, IPv4 or IPv6
  // literals), made again when
  // it lacks one of them or has less than 30 days left. A CA whose constraints do not cover the
  // names, or with less than 30 days left, is replaced (made_ca(): clients must trust the new
  // ca.pem). A connection whose SNI is one label under `mint_under` (a port URL's host,
  // "3000-sb-….localhost") gets a leaf for exactly that name, minted on first use and cached:
  // clients refuse a wildcard over a one-label domain such as "*.localhost". kInvalidArgument
  // for a name that is neither a DNS name nor an IP literal, or unreadable CA files (remove the
  // directory to start over); kInternal when a file cannot be written.
  static Result<std::shared_ptr<ServerTls>> SelfSigned(const std::string& dir,
                                                       const std::vector<std::string>& names,
                                                       const std::string& mint_under);
  ~ServerTls();
  ServerTls(const ServerTls&) = delete;
  ServerTls& operator=(const ServerTls&) = delete;

  // A new reference to the server context (an OpenSSL SSL_CTX*: TLS 1.2 and 1.3, ALPN
  // http/1.1 only, the certificate and key above). The caller owns the reference
  // (SSL_CTX_free; asio::ssl::context adopts it).
  ssl_ctx_st* NewContextRef() const;
  // The served certificate's subject alternative names ("DNS:localhost", "IP:127.0.0.1").
  const std::vector<std::string>& names() const;
  int64_t not_after_s() const;         // its expiry, Unix seconds
  const std::string& ca_file() const;  // SelfSigned: dir/ca.pem, the file clients trust; else ""
  bool made_ca() const;                // SelfSigned made a new CA this start

  struct Impl;

 private:
  explicit ServerTls(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// ---- One intercepted connection -----------------------------------------------------------

struct MitmOptions {
  std::string host;             // the SNI the sandbox sent (the proxy's peek); any case
  std::vector<Secret> secrets;  // the sandbox's secrets; only those that apply to host are used
  std::shared_ptr<const UpstreamTrust> trust;  // required
  std::chrono::milliseconds handshake_timeout{10'000};  // each TLS handshake
  std::chrono::milliseconds idle_timeout{60'000};       // no byte in either direction
  size_t max_head_bytes = 64 * 1024;                    // request or response head
  size_t max_rewrite_body_bytes = 1024 * 1024;          // larger bodies are streamed untouched
};

struct MitmResult {
  bool ok = false;            // every request relayed and the connection ended cleanly
  uint64_t bytes_up = 0;      // plaintext bytes written to the upstream (after substitution)
  uint64_t bytes_down = 0;    // plaintext bytes written to the sandbox
  uint32_t requests = 0;      // requests relayed upstream
  uint32_t substitutions = 0; // placeholders replaced by real values, all requests together
  std::string outcome;        // short, for the decision log: "mitm: 2 requests", "upstream
                              // certificate not trusted: ...", "bad request: ...", ...
};

// Runs one intercepted connection to completion; blocks (run it on its own thread).
//  - client_fd: the sandbox's TCP connection, its ClientHello still unread (MSG_PEEK only).
//  - upstream_fd: a TCP connection the proxy already dialled to `opts.host` after its policy
//    checks. No byte has been written to it.
// Both fds are switched to non-blocking and are NOT closed; the caller closes them. Never
// throws. The process must ignore SIGPIPE (spaced does): OpenSSL writes with plain send(). If the upstream certificate does not verify, the sandbox reads an HTTP 502 whose body
// says why, and no application byte goes upstream.
MitmResult RunMitm(SandboxCa& ca, int client_fd, int upstream_fd, const MitmOptions& opts);

}  // namespace space::net::tls
