// daemon/tls_setup: spaced's TLS flags (docs/tls.md) turned into the certificate the API
// server serves HTTPS with, beside plain HTTP on the same port. Wiring only.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/common.h"
#include "net/tls/tls.h"

namespace space::daemon {

struct TlsFlags {
  std::string cert_file;     // --tls-cert: the operator's certificate chain (PEM)
  std::string key_file;      // --tls-key: its private key (PEM)
  bool self_signed = false;  // --tls-self-signed: a CA of spaced's own in DATA_DIR/tls
  bool any() const { return self_signed || !cert_file.empty() || !key_file.empty(); }
};

// Checks the combination before anything starts: a certificate needs its key and the key its
// certificate; --tls-self-signed excludes both. kInvalidArgument saying which.
[[nodiscard]] Status ValidateTlsFlags(const TlsFlags& f);

// The names a self-signed certificate covers: localhost, 127.0.0.1 and ::1, the listen
// address unless it is a wildcard (0.0.0.0, ::), this host's name, the sandbox domain and,
// when that has two labels or more, *.{sandbox domain}.
std::vector<std::string> SelfSignedNames(const std::string& listen_address,
                                         const std::string& sandbox_domain);

// Loads the operator's files or makes/loads the self-signed CA and certificate in
// data_dir/tls; null when TLS is off. Logs what spaced serves, and for a self-signed
// certificate where the CA is that clients must trust. Errors say which file and why.
[[nodiscard]] Result<std::shared_ptr<const net::tls::ServerTls>> SetupTls(
    const TlsFlags& f, const std::string& data_dir, const std::string& listen_address,
    const std::string& sandbox_domain);

}  // namespace space::daemon
