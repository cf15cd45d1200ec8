// The DNS forwarder: every UDP query a networked sandbox sends (to any server: nftables
// redirects port 53 here) is answered under its policy. A name the policy does not allow
// gets NXDOMAIN without any query upstream (no exfiltration through DNS); AAAA gets an
// empty answer (IPv6 is off; clients don't wait for it); an answer that points into the
// always-denied set (DNS rebinding) becomes NXDOMAIN.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sodium.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <optional>

#include <spdlog/spdlog.h>

#include "net/internal.h"

namespace space::net {
namespace {

constexpr int kUpstreamTimeoutMs = 3000;
constexpr size_t kMaxPending = 1024;

struct Pending {
  sockaddr_in client{};
  std::string query;   // the client's message (its id)
  dns::Question q;
  std::shared_ptr<SandboxNet> sb;
  int64_t deadline_ns = 0;
};

void RecordDns(SandboxNet& sb, const dns::Question& q, bool allowed, std::string reason) {
  DecisionRecord r;
  r.time_ms = NowUnixMillis();
  r.proto = "dns";
  r.destination = q.name;
  r.name = q.name;
  r.port = 53;
  r.allowed = allowed;
  r.reason = std::move(reason);
  sb.Record(std::move(r));
}

}  // namespace

std::optional<std::string> JudgeDnsQuery(SandboxNet& sb, const std::string& msg, const dns::Question& q) {
  bool allowed;
  {
    std::lock_guard l(sb.mu);
    allowed = sb.policy.AllowsName(q.name);
  }
  if (!allowed) {
    RecordDns(sb, q, false, "name not in allow_out");
    return dns::MakeEmptyReply(msg, q, dns::kRcodeNxDomain);
  }
  if (q.qtype == dns::kTypeAAAA) return dns::MakeEmptyReply(msg, q, dns::kRcodeNoError);
  if (q.qclass != 1 || (q.qtype != dns::kTypeA && q.qtype != 5 /*CNAME*/ && q.qtype != 16 /*TXT*/ &&
                        q.qtype != 15 /*MX*/ && q.qtype != 33 /*SRV*/ && q.qtype != 12 /*PTR*/))
    return dns::MakeEmptyReply(msg, q, dns::kRcodeRefused);
  return std::nullopt;
}

std::string CheckDnsAnswer(Shared& shared, SandboxNet& sb, const std::string& query,
                           const dns::Question& q, std::string answer) {
  auto a = dns::ParseAnswer(answer);
  if (!a) return dns::MakeEmptyReply(query, q, dns::kRcodeServFail);
  for (uint32_t ip : a->a) {
    if (!shared.Reachable(ip)) {
      RecordDns(sb, q, false, "answer points into the always-denied set");
      return dns::MakeEmptyReply(query, q, dns::kRcodeNxDomain);
    }
  }
  if (!a->a.empty()) shared.CacheAnswer(q.name, a->a, a->min_ttl);
  dns::SetId(answer, q.id);
  return answer;
}

std::string AnswerDnsQueryBlocking(Shared& shared, SandboxNet& sb, const std::string& msg) {
  auto q = dns::ParseQuery(msg);
  if (!q) return "";
  if (auto now = JudgeDnsQuery(sb, msg, *q)) return *now;
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return dns::MakeEmptyReply(msg, *q, dns::kRcodeServFail);
  sockaddr_in up{};
  up.sin_family = AF_INET;
  up.sin_port = htons(shared.upstream.port);
  up.sin_addr.s_addr = htonl(shared.upstream.addr);
  uint16_t id;
  randombytes_buf(&id, sizeof id);
  std::string out = msg;
  dns::SetId(out, id);
  std::string reply;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&up), sizeof up) == 0 &&
      ::send(fd, out.data(), out.size(), 0) == static_cast<ssize_t>(out.size())) {
    const int64_t deadline = MonotonicNanos() + int64_t{kUpstreamTimeoutMs} * 1000000;
    char buf[65536];
    for (;;) {
      int left = static_cast<int>((deadline - MonotonicNanos()) / 1000000);
      if (left <= 0) break;
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, left) <= 0) break;
      ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      auto a = dns::ParseAnswer(std::string_view(buf, static_cast<size_t>(n)));
      if (a && a->id == id) {
        reply.assign(buf, static_cast<size_t>(n));
        break;
      }
    }
  }
  ::close(fd);
  if (reply.empty()) return dns::MakeEmptyReply(msg, *q, dns::kRcodeServFail);
  return CheckDnsAnswer(shared, sb, msg, *q, std::move(reply));
}

DnsForwarder::~DnsForwarder() {
  if (wake_[1] >= 0) (void)!::write(wake_[1], "x", 1);
  if (thread_.joinable()) thread_.join();
  for (int fd : {fd_, upstream_fd_, wake_[0], wake_[1]}) {
    if (fd >= 0) ::close(fd);
  }
}

Status DnsForwarder::Start() {
  fd_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) return ErrnoFail("dns: socket");
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_ANY);  // nftables admits only sandbox interfaces
  if (::bind(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) return ErrnoFail("dns: bind");
  socklen_t len = sizeof sa;
  ::getsockname(fd_, reinterpret_cast<sockaddr*>(&sa), &len);
  port_ = ntohs(sa.sin_port);
  upstream_fd_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (upstream_fd_ < 0) return ErrnoFail("dns: socket");
  sockaddr_in up{};
  up.sin_family = AF_INET;
  up.sin_port = htons(shared_->upstream.port);
  up.sin_addr.s_addr = htonl(shared_->upstream.addr);
  if (::connect(upstream_fd_, reinterpret_cast<sockaddr*>(&up), sizeof up) != 0)
    return ErrnoFail("dns: connect upstream");
  if (::pipe2(wake_, O_CLOEXEC) != 0) return ErrnoFail("dns: pipe");
  thread_ = std::thread([this] { Loop(); });
  return Ok();
}

void DnsForwarder::Loop() {
  std::map<uint16_t, Pending> pending;
  char buf[4096];
  auto reply = [&](const sockaddr_in& to, const std::string& msg) {
    ::sendto(fd_, msg.data(), msg.size(), 0, reinterpret_cast<const sockaddr*>(&to), sizeof to);
  };
  for (;;) {
    int timeout = 1000;
    pollfd p[3] = {{fd_, POLLIN, 0}, {upstream_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    int r = ::poll(p, 3, timeout);
    if (r < 0 && errno != EINTR) return;
    if (p[2].revents) return;
    int64_t now = MonotonicNanos();
    for (auto it = pending.begin(); it != pending.end();) {
      if (it->second.deadline_ns < now) {
        reply(it->second.client, dns::MakeEmptyReply(it->second.query, it->second.q, dns::kRcodeServFail));
        it = pending.erase(it);
      } else {
        ++it;
      }
    }
    if (p[0].revents & POLLIN) {
      sockaddr_in from{};
      socklen_t flen = sizeof from;
      ssize_t n = ::recvfrom(fd_, buf, sizeof buf, 0, reinterpret_cast<sockaddr*>(&from), &flen);
      if (n > 0) {
        std::string msg(buf, static_cast<size_t>(n));
        auto sb = shared_->ByAddr(ntohl(from.sin_addr.s_addr));
        auto q = dns::ParseQuery(msg);
        if (sb && q) {
          if (auto direct = JudgeDnsQuery(*sb, msg, *q)) {
            reply(from, *direct);
          } else if (pending.size() >= kMaxPending) {
            reply(from, dns::MakeEmptyReply(msg, *q, dns::kRcodeServFail));
          } else {
            uint16_t id;
            do {
              randombytes_buf(&id, sizeof id);
            } while (pending.count(id));
            std::string out = msg;
            dns::SetId(out, id);
            if (::send(upstream_fd_, out.data(), out.size(), 0) < 0) {
              reply(from, dns::MakeEmptyReply(msg, *q, dns::kRcodeServFail));
            } else {
              pending[id] = Pending{from, msg, *q, sb, now + int64_t{kUpstreamTimeoutMs} * 1000000};
            }
          }
        }
      }
    }
    if (p[1].revents & POLLIN) {
      ssize_t n;
      while ((n = ::recv(upstream_fd_, buf, sizeof buf, 0)) > 0) {
        std::string msg(buf, static_cast<size_t>(n));
        auto a = dns::ParseAnswer(msg);
        if (!a) continue;
        auto it = pending.find(a->id);
        if (it == pending.end()) continue;
        Pending pend = std::move(it->second);
        pending.erase(it);
        msg = CheckDnsAnswer(*shared_, *pend.sb, pend.query, pend.q, std::move(msg));
        reply(pend.client, msg);
      }
    }
  }
}

}  // namespace space::net
