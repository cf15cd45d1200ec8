#include "net/dns.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sodium.h>
#include <sys/socket.h>
#include <unistd.h>

#include "net/policy.h"
#include "sys/sys.h"

namespace space::net::dns {
namespace {

uint16_t U16(std::string_view m, size_t at) {
  return static_cast<uint16_t>((static_cast<uint8_t>(m[at]) << 8) | static_cast<uint8_t>(m[at + 1]));
}
uint32_t U32(std::string_view m, size_t at) {
  return (static_cast<uint32_t>(U16(m, at)) << 16) | U16(m, at + 2);
}

// Reads a (possibly compressed) name at `pos`; returns the offset after it in the message,
// or 0 on a malformed name. `out` gets the lower-case dotted name when not null.
size_t ReadName(std::string_view m, size_t pos, std::string* out) {
  size_t end = 0;
  int jumps = 0;
  size_t total = 0;
  for (;;) {
    if (pos >= m.size()) return 0;
    uint8_t len = static_cast<uint8_t>(m[pos]);
    if (len == 0) {
      if (end == 0) end = pos + 1;
      return end;
    }
    if ((len & 0xC0) == 0xC0) {
      if (pos + 1 >= m.size() || ++jumps > 16) return 0;
      if (end == 0) end = pos + 2;
      pos = ((len & 0x3F) << 8) | static_cast<uint8_t>(m[pos + 1]);
      continue;
    }
    if (len & 0xC0) return 0;
    if (pos + 1 + len > m.size()) return 0;
    total += len + 1;
    if (total > 255) return 0;
    if (out) {
      if (!out->empty()) out->push_back('.');
      for (size_t i = 0; i < len; ++i) {
        char c = m[pos + 1 + i];
        out->push_back(c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c);
      }
    }
    pos += 1 + len;
  }
}

}  // namespace

std::optional<Question> ParseQuery(std::string_view m) {
  if (m.size() < 12 || m.size() > 4096) return std::nullopt;
  Question q;
  q.id = U16(m, 0);
  q.flags = U16(m, 2);
  if (q.flags & 0x8000) return std::nullopt;           // a response, not a query
  if (((q.flags >> 11) & 0xF) != 0) return std::nullopt;  // opcode QUERY only
  if (U16(m, 4) != 1) return std::nullopt;
  size_t pos = 12;
  // Questions are never compressed in a query.
  std::string name;
  for (;;) {
    if (pos >= m.size()) return std::nullopt;
    uint8_t len = static_cast<uint8_t>(m[pos]);
    if (len == 0) {
      ++pos;
      break;
    }
    if (len & 0xC0 || pos + 1 + len > m.size()) return std::nullopt;
    if (!name.empty()) name.push_back('.');
    for (size_t i = 0; i < len; ++i) {
      char c = m[pos + 1 + i];
      name.push_back(c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c);
    }
    if (name.size() > 253) return std::nullopt;
    pos += 1 + len;
  }
  if (pos + 4 > m.size()) return std::nullopt;
  q.name = std::move(name);
  q.qtype = U16(m, pos);
  q.qclass = U16(m, pos + 2);
  q.question_end = pos + 4;
  return q;
}

std::optional<Answer> ParseAnswer(std::string_view m) {
  if (m.size() < 12) return std::nullopt;
  Answer a;
  a.id = U16(m, 0);
  uint16_t flags = U16(m, 2);
  if (!(flags & 0x8000)) return std::nullopt;
  a.rcode = flags & 0xF;
  uint16_t qd = U16(m, 4), an = U16(m, 6);
  size_t pos = 12;
  for (int i = 0; i < qd; ++i) {
    pos = ReadName(m, pos, nullptr);
    if (pos == 0 || pos + 4 > m.size()) return std::nullopt;
    pos += 4;
  }
  bool first = true;
  for (int i = 0; i < an; ++i) {
    pos = ReadName(m, pos, nullptr);
    if (pos == 0 || pos + 10 > m.size()) return std::nullopt;
    uint16_t type = U16(m, pos), cls = U16(m, pos + 2);
    uint32_t ttl = U32(m, pos + 4);
    uint16_t rdlen = U16(m, pos + 8);
    pos += 10;
    if (pos + rdlen > m.size()) return std::nullopt;
    if (type == kTypeA && cls == 1 && rdlen == 4) {
      a.a.push_back(U32(m, pos));
      if (first || ttl < a.min_ttl) a.min_ttl = ttl;
      first = false;
    }
    pos += rdlen;
  }
  return a;
}

std::string MakeEmptyReply(std::string_view query, const Question& q, int rcode) {
  std::string out(query.substr(0, q.question_end));
  // QR=1, keep opcode and RD, RA=1, rcode; one question, no other records.
  uint16_t flags = static_cast<uint16_t>(0x8000 | (q.flags & 0x7900) | 0x0080 | (rcode & 0xF));
  out[2] = static_cast<char>(flags >> 8);
  out[3] = static_cast<char>(flags & 0xFF);
  for (size_t i = 6; i < 12; ++i) out[i] = 0;
  return out;
}

std::string MakeQuery(uint16_t id, std::string_view name, uint16_t qtype) {
  std::string m;
  m.push_back(static_cast<char>(id >> 8));
  m.push_back(static_cast<char>(id & 0xFF));
  m += std::string("\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00", 10);
  size_t start = 0;
  while (start < name.size()) {
    size_t dot = name.find('.', start);
    if (dot == std::string_view::npos) dot = name.size();
    m.push_back(static_cast<char>(dot - start));
    m.append(name.substr(start, dot - start));
    start = dot + 1;
  }
  m.push_back('\0');
  m.push_back(static_cast<char>(qtype >> 8));
  m.push_back(static_cast<char>(qtype & 0xFF));
  m.push_back('\0');
  m.push_back('\x01');
  return m;
}

void SetId(std::string& msg, uint16_t id) {
  if (msg.size() < 2) return;
  msg[0] = static_cast<char>(id >> 8);
  msg[1] = static_cast<char>(id & 0xFF);
}

Result<Upstream> ParseUpstream(std::string_view s) {
  Upstream up;
  std::string_view host = s;
  if (size_t colon = s.find(':'); colon != std::string_view::npos) {
    host = s.substr(0, colon);
    std::string_view p = s.substr(colon + 1);
    int v = 0;
    if (p.empty() || p.size() > 5) return Fail(Errc::kInvalidArgument, "bad DNS upstream \"" + std::string(s) + "\"");
    for (char c : p) {
      if (c < '0' || c > '9') return Fail(Errc::kInvalidArgument, "bad DNS upstream \"" + std::string(s) + "\"");
      v = v * 10 + (c - '0');
    }
    if (v < 1 || v > 65535) return Fail(Errc::kInvalidArgument, "bad DNS upstream port in \"" + std::string(s) + "\"");
    up.port = static_cast<uint16_t>(v);
  }
  auto ip = ParseIpv4(host);
  if (!ip) return Fail(Errc::kInvalidArgument, "DNS upstream must be an IPv4 address[:port], not \"" + std::string(s) + "\"");
  up.addr = *ip;
  return up;
}

std::optional<Upstream> FromResolvConf(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    std::string_view line = text.substr(pos, eol == std::string_view::npos ? eol : eol - pos);
    pos = eol == std::string_view::npos ? text.size() : eol + 1;
    if (!StartsWith(line, "nameserver")) continue;
    line.remove_prefix(10);
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    while (!line.empty() && (line.back() == ' ' || line.back() == '\r' || line.back() == '\t')) line.remove_suffix(1);
    if (auto ip = ParseIpv4(line)) return Upstream{*ip, 53};
  }
  return std::nullopt;
}

Result<Answer> ResolveA(const Upstream& up, std::string_view name, int timeout_ms) {
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoFail("dns: socket");
  sys::UniqueFd guard(fd);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(up.port);
  sa.sin_addr.s_addr = htonl(up.addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) return ErrnoFail("dns: connect upstream");
  uint16_t id;
  randombytes_buf(&id, sizeof id);
  std::string q = MakeQuery(id, name, kTypeA);
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (::send(fd, q.data(), q.size(), 0) < 0) return ErrnoFail("dns: send");
    int64_t deadline = MonotonicNanos() + static_cast<int64_t>(timeout_ms / 2) * 1000000;
    for (;;) {
      int64_t left = (deadline - MonotonicNanos()) / 1000000;
      if (left <= 0) break;
      pollfd p{fd, POLLIN, 0};
      int r = ::poll(&p, 1, static_cast<int>(left));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      char buf[4096];
      ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n < 0) {
        if (errno == ECONNREFUSED) return Fail(Errc::kUnavailable, "dns: upstream refused the query");
        continue;
      }
      auto a = ParseAnswer(std::string_view(buf, static_cast<size_t>(n)));
      if (a && a->id == id) return *a;
    }
  }
  return Fail(Errc::kDeadlineExceeded, "dns: no answer from upstream for " + std::string(name));
}

}  // namespace space::net::dns
