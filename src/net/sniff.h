// net/sniff: reads the destination name a client names in its first bytes — the SNI of a
// TLS ClientHello, the Host of an HTTP/1.x request, the target of a CONNECT. Pure parsers
// over untrusted bytes (fuzzed: fuzz/net_sniff.cc); they never read past `data`.
#pragma once

#include <string>
#include <string_view>

namespace space::net {

struct Sniffed {
  enum class State { kNeedMore, kDone, kNotThisProtocol };
  State state = State::kNeedMore;
  std::string name;       // normalised host name; "" if none was given (or an IP literal)
  std::string literal;    // the host as written when it is not a name (e.g. "203.0.113.9")
  int port = 0;           // CONNECT / absolute-URI port; 0 = none given
  size_t head_bytes = 0;  // HTTP: bytes of the request head including the blank line
};

// A TLS ClientHello at the start of `data` (possibly incomplete). kDone with an empty name
// when the hello carries no server_name.
Sniffed SniffTls(std::string_view data);
// An HTTP/1.x request head (origin-, absolute- or authority-form). kDone once the blank
// line ending the head has been seen; `name` from the Host header (or the absolute URI).
Sniffed SniffHttp(std::string_view data);

// Splits "host[:port]" (also "[v6]:port"); port 0 when absent. false if malformed.
bool SplitHostPort(std::string_view hostport, std::string* host, int* port);

}  // namespace space::net
