// net/dns: the small part of DNS the data plane needs — reading a query's question,
// reading the A records of an answer, and writing the answers the forwarder makes itself
// (NXDOMAIN, NODATA, REFUSED) — plus a blocking A-record resolver against one upstream.
// Parsers take untrusted bytes and never read past them (fuzzed: fuzz/net_dns.cc).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/common.h"

namespace space::net::dns {

inline constexpr uint16_t kTypeA = 1;
inline constexpr uint16_t kTypeAAAA = 28;
inline constexpr uint16_t kTypeAny = 255;
inline constexpr int kRcodeNoError = 0, kRcodeServFail = 2, kRcodeNxDomain = 3, kRcodeRefused = 5;

struct Question {
  uint16_t id = 0;
  uint16_t flags = 0;
  std::string name;      // lower-case, no trailing dot ("" = the root)
  uint16_t qtype = 0, qclass = 0;
  size_t question_end = 0;  // offset just past the question section
};
// A standard query with exactly one question. nullopt for anything else.
std::optional<Question> ParseQuery(std::string_view msg);

struct Answer {
  uint16_t id = 0;
  int rcode = 0;
  std::vector<uint32_t> a;       // A records (host byte order), in order
  uint32_t min_ttl = 0;
};
std::optional<Answer> ParseAnswer(std::string_view msg);

// A reply to `query` (bytes of the original message) with `rcode` and no answers.
std::string MakeEmptyReply(std::string_view query, const Question& q, int rcode);
// A query for name/type with the given id (recursion desired).
std::string MakeQuery(uint16_t id, std::string_view name, uint16_t qtype);
// Replaces the 16-bit id of a message.
void SetId(std::string& msg, uint16_t id);

struct Upstream {
  uint32_t addr = 0;   // host byte order
  uint16_t port = 53;
};
// "a.b.c.d[:port]". kInvalidArgument otherwise.
[[nodiscard]] Result<Upstream> ParseUpstream(std::string_view s);
// The first IPv4 nameserver in a resolv.conf text; nullopt if none.
std::optional<Upstream> FromResolvConf(std::string_view text);

// Asks `up` for the A records of `name` (blocking, up to timeout_ms; one retry).
[[nodiscard]] Result<Answer> ResolveA(const Upstream& up, std::string_view name, int timeout_ms);

}  // namespace space::net::dns
