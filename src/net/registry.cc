// net: the registry of attached sandboxes (by address and id), their decision logs, and
// what every part of the data plane asks of it (see internal.h).
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <fstream>
#include <sstream>

#include <sodium.h>
#include <spdlog/spdlog.h>

#include "net/internal.h"
#include "sys/sys.h"

namespace space::net {

namespace {
constexpr size_t kMaxDecisions = 128;
}

uint64_t SandboxNet::Record(DecisionRecord r) {
  std::lock_guard l(mu);
  decisions.push_back(std::move(r));
  if (decisions.size() > kMaxDecisions) decisions.pop_front();
  return next_seq++;
}

void SandboxNet::AddBytes(uint64_t seq, uint64_t out, uint64_t in) {
  std::lock_guard l(mu);
  // decisions holds the records numbered next_seq - size .. next_seq - 1.
  uint64_t first = next_seq - decisions.size();
  if (seq < first || seq >= next_seq) return;
  auto& r = decisions[seq - first];
  r.bytes_out += out;
  r.bytes_in += in;
}

std::shared_ptr<SandboxNet> Shared::ByAddr(uint32_t ip) const {
  std::shared_lock l(mu_);
  auto it = by_addr_.find(ip);
  return it == by_addr_.end() ? nullptr : it->second;
}

std::shared_ptr<SandboxNet> Shared::ById(const std::string& id) const {
  std::shared_lock l(mu_);
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : it->second;
}

void Shared::Put(const std::shared_ptr<SandboxNet>& sb) {
  std::unique_lock l(mu_);
  by_addr_[sb->ip] = sb;
  by_id_[sb->id] = sb;
}

void Shared::Remove(const std::string& id) {
  std::unique_lock l(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return;
  by_addr_.erase(it->second->ip);
  by_id_.erase(it);
}

std::vector<std::shared_ptr<SandboxNet>> Shared::All() const {
  std::shared_lock l(mu_);
  std::vector<std::shared_ptr<SandboxNet>> out;
  for (const auto& [id, sb] : by_id_) out.push_back(sb);
  return out;
}

namespace {

// The host's IPv4 addresses from one RTM_GETADDR dump of the current network namespace;
// nullopt if the kernel could not be asked. (getifaddrs dumps every link as well, and for
// each veth the kernel walks its peer namespace's ids: with hundreds of networked
// sandboxes that was most of spaced's CPU in an attach.)
std::optional<std::vector<uint32_t>> HostIpv4Addrs() {
  int fd = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (fd < 0) return std::nullopt;
  sys::UniqueFd g(fd);
  struct {
    nlmsghdr h;
    ifaddrmsg m;
  } req{};
  req.h.nlmsg_len = sizeof req;
  req.h.nlmsg_type = RTM_GETADDR;
  req.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  req.h.nlmsg_seq = 1;
  req.m.ifa_family = AF_INET;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (::sendto(fd, &req, sizeof req, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof kernel) < 0)
    return std::nullopt;
  std::vector<uint32_t> out;
  std::vector<char> buf(64 << 10);
  for (;;) {
    ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::nullopt;
    int left = static_cast<int>(n);
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf.data()); NLMSG_OK(h, left); h = NLMSG_NEXT(h, left)) {
      if (h->nlmsg_type == NLMSG_DONE) return out;
      if (h->nlmsg_type == NLMSG_ERROR) return std::nullopt;
      if (h->nlmsg_type != RTM_NEWADDR) continue;
      auto* ifa = static_cast<ifaddrmsg*>(NLMSG_DATA(h));
      if (ifa->ifa_family != AF_INET) continue;
      // IFA_LOCAL is the interface's own address; IFA_ADDRESS, the peer's on a
      // point-to-point link, stands in only without it (as getifaddrs does).
      std::optional<uint32_t> local, address;
      int len = static_cast<int>(IFA_PAYLOAD(h));
      for (auto* a = IFA_RTA(ifa); RTA_OK(a, len); a = RTA_NEXT(a, len)) {
        if (RTA_PAYLOAD(a) != 4 || (a->rta_type != IFA_LOCAL && a->rta_type != IFA_ADDRESS)) continue;
        uint32_t v;
        std::memcpy(&v, RTA_DATA(a), 4);
        (a->rta_type == IFA_LOCAL ? local : address) = ntohl(v);
      }
      if (local || address) out.push_back(local ? *local : *address);
    }
  }
}

}  // namespace

std::vector<uint32_t> Shared::RefreshHostAddrs() {
  auto addrs = HostIpv4Addrs();
  std::unique_lock l(mu_);
  // Asking failed: the addresses known before stay denied.
  if (addrs) host_addrs_ = std::move(*addrs);
  return host_addrs_;
}

bool Shared::Reachable(uint32_t ip) const {
  if (opts.subnet.Contains(ip)) return false;
  {
    std::shared_lock l(mu_);
    if (std::find(host_addrs_.begin(), host_addrs_.end(), ip) != host_addrs_.end()) return false;
  }
  for (const auto& c : opts.allow_private) {
    if (c.Contains(ip)) return true;
  }
  for (const auto& c : AlwaysDeniedRanges()) {
    if (c.Contains(ip)) return false;
  }
  return true;
}

void Shared::CacheAnswer(const std::string& name, const std::vector<uint32_t>& addrs, uint32_t ttl_s) {
  std::lock_guard l(cache_mu_);
  if (cache_.size() > 4096) cache_.clear();
  int64_t ttl = std::clamp<int64_t>(ttl_s, 1, 300);
  cache_[name] = {addrs, MonotonicNanos() + ttl * 1000000000};
}

Result<std::vector<uint32_t>> Shared::Resolve(const std::string& name) {
  {
    std::lock_guard l(cache_mu_);
    auto it = cache_.find(name);
    if (it != cache_.end() && it->second.expires_ns > MonotonicNanos()) return it->second.addrs;
  }
  auto a = dns::ResolveA(upstream, name, 4000);
  if (!a) return tl::unexpected(a.error());
  if (a->rcode == dns::kRcodeNxDomain) return Fail(Errc::kNotFound, "no such name");
  if (a->a.empty()) return Fail(Errc::kNotFound, "no A records");
  CacheAnswer(name, a->a, a->min_ttl);
  return a->a;
}

}  // namespace space::net
