// net: the registry of attached sandboxes (by address and id), their decision logs, and
// what every part of the data plane asks of it (see internal.h).
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
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

void Shared::RefreshHostAddrs() {
  std::vector<uint32_t> addrs;
  ifaddrs* ifa = nullptr;
  if (::getifaddrs(&ifa) == 0) {
    for (ifaddrs* i = ifa; i; i = i->ifa_next) {
      if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET)
        addrs.push_back(ntohl(reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr));
    }
    ::freeifaddrs(ifa);
  }
  std::unique_lock l(mu_);
  host_addrs_ = std::move(addrs);
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
