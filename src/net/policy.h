// net/policy: a sandbox's egress policy as a value — parsing, validation and matching.
//
// Pure code (no I/O), shared by the API (validation of requests), core (stored in the
// sandbox's spec) and the data plane (nftables sets, the egress proxy, the DNS forwarder).
// Thread-safe as values are.
//
// Decision order for a flow to address A (and, for TCP on 80/443 or a CONNECT, the name N):
//   1. A (or, for a name, every address it resolves to) in the always-denied set -> deny.
//   2. N matches an allow_out domain          -> allow (the proxy dials N itself).
//   3. A in an allow_out CIDR                  -> allow.
//   4. A in a deny_out CIDR                    -> deny.
//   5. allow_out holds anything                -> deny (only what is listed).
//   6. otherwise                               -> allow (every public destination).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/common.h"
#include "common/json.h"

namespace space::net {

inline constexpr size_t kMaxAllowEntries = 64;
inline constexpr size_t kMaxDenyEntries = 64;
inline constexpr size_t kMaxSecrets = 16;
inline constexpr size_t kMaxSecretValueBytes = 4096;

struct Cidr {
  uint32_t addr = 0;  // host byte order, already masked
  int prefix = 0;
  bool Contains(uint32_t ip) const {
    return prefix == 0 || ((ip ^ addr) >> (32 - prefix)) == 0;
  }
  std::string ToString() const;
};
// "a.b.c.d" or "a.b.c.d/n" (host bits must be zero). kInvalidArgument with the reason.
[[nodiscard]] Result<Cidr> ParseCidr(std::string_view s);
// Dotted quad -> host byte order. nullopt for anything else.
std::optional<uint32_t> ParseIpv4(std::string_view s);
std::string Ipv4ToString(uint32_t ip);

// A domain pattern: "example.com" (exact) or "*.example.com" (any name below it, not the
// name itself). Lower-case, no trailing dot.
[[nodiscard]] Result<std::string> NormaliseDomainPattern(std::string_view s);
bool DomainMatches(std::string_view pattern, std::string_view name);
// Lower-cases a host name and drops one trailing dot; "" if it is not a valid name.
std::string NormaliseHostName(std::string_view name);

struct Secret {
  std::string name;                 // environment variable name
  std::string value;                // the real value: never enters the sandbox
  std::vector<std::string> hosts;   // domain patterns the value may be sent to
  std::string placeholder;          // what the sandbox's environment holds instead
};

// Named sets of domain patterns (`pypi`, `npm`, `github`, `debian`, and any the operator
// adds). See net.h: Presets are resolved at start-up from the host's configuration.
using Presets = std::map<std::string, std::vector<std::string>>;

struct Policy {
  enum class Mode { kNone, kInternet };
  Mode mode = Mode::kNone;
  std::vector<std::string> allow_out;  // as given, normalised: CIDRs, domains, preset names
  std::vector<std::string> deny_out;   // CIDRs
  bool public_traffic = false;         // ingress without a traffic credential
  // The Host header the sandbox's services see on requests through port URLs ("" = the
  // request's own); "${PORT}" in it becomes the port (E2B's maskRequestHost).
  std::string mask_request_host;
  std::vector<Secret> secrets;

  // Derived by Parse/Resolve from allow_out / deny_out.
  std::vector<Cidr> allow_cidrs, deny_cidrs;
  std::vector<std::string> allow_domains;  // patterns, presets expanded

  bool internet() const { return mode == Mode::kInternet; }
  bool restricted() const { return !allow_out.empty(); }
  bool AllowsName(std::string_view normalised_name) const;

  enum class Verdict { kAllow, kDeny };
  struct Decision {
    Verdict verdict = Verdict::kDeny;
    std::string reason;   // "allow_out domain *.x", "deny_out 1.2.3.0/24", "not in allow_out" ...
    bool by_name = false; // allowed because of the name: dial the name, not the address
  };
  // Steps 2-6 of the order above (the caller applies the always-denied set).
  Decision Decide(uint32_t addr, std::string_view normalised_name) const;

  // {"mode","allow_out","deny_out","public_traffic","secrets":[{name,hosts[,value]}]}, and
  // "mask_request_host" when set.
  Json ToJson(bool with_secret_values) const;
  // mask_request_host for a request to `port` ("" when unset).
  std::string RequestHostFor(int port) const;
};

// Parses the API's `network` field: an object {mode, allow_out, deny_out, public_traffic,
// mask_request_host, secrets}, or the older boolean form (true = internet). Unknown keys, malformed CIDRs or
// domains, unknown presets, too many entries, secrets without hosts: kInvalidArgument with
// a message naming the bad entry. Secret placeholders are left empty (see AssignPlaceholders).
// `stored`: j is a policy spaced saved itself (ToJson(true)): placeholders are kept and a
// preset no longer configured is skipped rather than refused.
[[nodiscard]] Result<Policy> ParsePolicy(const Json& j, const Presets& presets,
                                         bool stored = false);
// Gives every secret without one a fresh placeholder.
void AssignPlaceholders(Policy& p);
// Parses the egress part only ({allow_out, deny_out[, mode]}) as PUT …/network takes it,
// keeping `current`'s secrets, public_traffic and mask_request_host.
[[nodiscard]] Result<Policy> ParsePolicyUpdate(const Json& j, const Policy& current,
                                               const Presets& presets);

// The always-denied set: private, loopback, link-local (metadata), CGNAT, multicast,
// reserved and "this network" ranges. The host's own addresses and the sandbox subnet are
// added by the data plane.
const std::vector<Cidr>& AlwaysDeniedRanges();

}  // namespace space::net
