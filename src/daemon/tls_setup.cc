#include "daemon/tls_setup.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>

namespace space::daemon {

Status ValidateTlsFlags(const TlsFlags& f) {
  if (f.self_signed && (!f.cert_file.empty() || !f.key_file.empty()))
    return Fail(Errc::kInvalidArgument,
                "--tls-self-signed makes its own certificate: give it alone, or --tls-cert and --tls-key without it");
  if (f.cert_file.empty() != f.key_file.empty())
    return Fail(Errc::kInvalidArgument, f.cert_file.empty() ? "--tls-key needs --tls-cert (the certificate it belongs to)"
                                                            : "--tls-cert needs --tls-key (its private key)");
  return Ok();
}

std::vector<std::string> SelfSignedNames(const std::string& listen_address,
                                         const std::string& sandbox_domain) {
  std::vector<std::string> names = {"localhost", "127.0.0.1", "::1"};
  if (listen_address != "0.0.0.0" && listen_address != "::" && !listen_address.empty())
    names.push_back(listen_address);
  char host[256] = "";
  if (::gethostname(host, sizeof(host) - 1) == 0) {
    std::string h = host;
    for (char& c : h) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    // Only a plain DNS name (not a literal, nothing odd): the certificate refuses others.
    bool plain = !h.empty() && h.size() <= 253 && h.front() != '-' && h.front() != '.' &&
                 std::all_of(h.begin(), h.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.'; }) &&
                 h.find_first_not_of("0123456789.") != std::string::npos;
    if (plain) names.push_back(h);
  }
  names.push_back(sandbox_domain);
  // A wildcard over one label (*.localhost) matches nothing for any client, and rustls
  // refuses a whole certificate that carries one: port hosts under such a domain get
  // certificates of their own (ServerTls::SelfSigned).
  if (sandbox_domain.find('.') != std::string::npos) names.push_back("*." + sandbox_domain);
  std::vector<std::string> out;
  for (auto& n : names)
    if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
  return out;
}

Result<std::shared_ptr<const net::tls::ServerTls>> SetupTls(const TlsFlags& f,
                                                            const std::string& data_dir,
                                                            const std::string& listen_address,
                                                            const std::string& sandbox_domain) {
  if (!f.any()) return std::shared_ptr<const net::tls::ServerTls>();
  SPACE_TRY(ValidateTlsFlags(f));
  Result<std::shared_ptr<net::tls::ServerTls>> tls =
      f.self_signed ? net::tls::ServerTls::SelfSigned(data_dir + "/tls",
                                                      SelfSignedNames(listen_address, sandbox_domain),
                                                      sandbox_domain)
                    : net::tls::ServerTls::FromFiles(f.cert_file, f.key_file);
  if (!tls) return tl::unexpected(tls.error());
  std::string names;
  for (const auto& n : (*tls)->names()) names += (names.empty() ? "" : " ") + n;
  const std::string expires = FormatRfc3339((*tls)->not_after_s() * 1000).substr(0, 10);
  if (f.self_signed) {
    if ((*tls)->made_ca())
      spdlog::warn("TLS: made a new CA, {}: clients must trust it (an older one no longer works)",
                   (*tls)->ca_file());
    spdlog::info("TLS: https on the same port, self-signed for {} (until {}); clients trust {} "
                 "(curl --cacert, NODE_EXTRA_CA_CERTS, SSL_CERT_FILE)",
                 names, expires, (*tls)->ca_file());
  } else {
    spdlog::info("TLS: https on the same port with {} for {} (until {})", f.cert_file, names, expires);
    const int64_t days_left = ((*tls)->not_after_s() - NowUnixMillis() / 1000) / 86400;
    if (days_left < 14)
      spdlog::warn("TLS: {} expires in {} days; restart spaced with a renewed certificate", f.cert_file, days_left);
  }
  return std::shared_ptr<const net::tls::ServerTls>(std::move(*tls));
}

}  // namespace space::daemon
