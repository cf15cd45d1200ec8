// net/internal: what the data plane's parts share (net/ only). The registry maps a
// sandbox's address to its policy and live flows; the egress proxy and the DNS forwarder
// look senders up in it, and Network fills it.
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/json.h"
#include "net/dns.h"
#include "net/net.h"
#include "net/tls/tls.h"

namespace space::net {

struct DecisionRecord {
  int64_t time_ms = 0;
  std::string proto;        // "tcp", "http", "tls", "connect", "dns"
  std::string destination;  // address or name asked for
  int port = 0;
  std::string name;
  bool allowed = false;
  std::string reason;
  uint64_t bytes_out = 0, bytes_in = 0;
};

// One proxied flow; the proxy thread owns the fds, Update may shut them down to cut it.
struct Flow {
  int client_fd = -1, upstream_fd = -1;
  uint32_t addr = 0;
  int port = 0;
  std::string name;
  std::atomic<bool> cut{false};
};

struct SandboxNet {
  std::string id;
  int slot = 0;
  Link link = Link::kNamespace;
  uint32_t ip = 0, gateway = 0;
  mutable std::mutex mu;  // guards everything below
  Policy policy;
  std::shared_ptr<tls::SandboxCa> ca;  // with secrets: terminates TLS to their hosts
  std::deque<DecisionRecord> decisions;
  std::set<Flow*> flows;

  // Appends a decision (bounded); returns its sequence number for later byte updates.
  uint64_t Record(DecisionRecord r);
  void AddBytes(uint64_t seq, uint64_t out, uint64_t in);
  uint64_t next_seq = 0;
};

class Shared {
 public:
  explicit Shared(Options o) : opts(std::move(o)) {}
  Options opts;
  dns::Upstream upstream;
  std::shared_ptr<const tls::UpstreamTrust> trust;  // for hosts with secrets

  std::shared_ptr<SandboxNet> ByAddr(uint32_t ip) const;
  std::shared_ptr<SandboxNet> ById(const std::string& id) const;
  void Put(const std::shared_ptr<SandboxNet>& sb);
  void Remove(const std::string& id);
  std::vector<std::shared_ptr<SandboxNet>> All() const;

  // Whether a sandbox may ever reach `ip`: false for the always-denied ranges (less
  // --egress-allow-private), the sandbox subnet and the host's own addresses.
  bool Reachable(uint32_t ip) const;
  // Reads the host's IPv4 addresses again (kept for Reachable) and returns them.
  std::vector<uint32_t> RefreshHostAddrs();

  // A small cache of A answers the forwarder relayed, so the proxy dials what the sandbox
  // was told (and saves a round trip).
  void CacheAnswer(const std::string& name, const std::vector<uint32_t>& addrs, uint32_t ttl_s);
  [[nodiscard]] Result<std::vector<uint32_t>> Resolve(const std::string& name);

  std::atomic<bool> stopping{false};
  std::atomic<int> flows{0};

 private:
  mutable std::shared_mutex mu_;
  std::map<uint32_t, std::shared_ptr<SandboxNet>> by_addr_;
  std::map<std::string, std::shared_ptr<SandboxNet>> by_id_;
  std::vector<uint32_t> host_addrs_;
  struct CacheEntry {
    std::vector<uint32_t> addrs;
    int64_t expires_ns = 0;
  };
  mutable std::mutex cache_mu_;
  std::map<std::string, CacheEntry> cache_;
};

// The nftables table (ruleset.cc): `nft -f` scripts, each applied as one transaction.
struct TableSpec {
  std::string name;                  // space_<tag>
  std::string ifs;                   // the host veths' glob, s<tag>-*
  Cidr subnet;
  std::vector<Cidr> allow_private;
  std::vector<uint32_t> host_addrs;  // the host's own addresses outside the subnet
  int http_port = 0, tls_port = 0, other_port = 0, dns_port = 0;
};
struct SandboxRules {
  int slot = 0;
  std::string host_if;
  uint32_t ip = 0;
  Policy policy;
};
// The whole table (replacing what is there); with no sandboxes, the table's removal.
std::string FullTableScript(const TableSpec& t, const std::vector<SandboxRules>& sandboxes);
// One sandbox's chain and elements added, rewritten or removed in the table as
// FullTableScript made it; the script's size does not depend on the other sandboxes.
std::string AddSandboxScript(const TableSpec& t, const SandboxRules& sb);
std::string UpdateSandboxScript(const TableSpec& t, const SandboxRules& sb);
std::string RemoveSandboxScript(const TableSpec& t, const SandboxRules& sb);

// The egress proxy: transparent listeners for :80 (Host), :443 (SNI) and every other TCP
// port (addresses only; also the explicit HTTP proxy on the gateway's port 3128).
class Proxy {
 public:
  static constexpr int kExplicitPort = 3128;
  explicit Proxy(Shared* shared) : shared_(shared) {}
  ~Proxy();
  [[nodiscard]] Status Start();
  int http_port() const { return ports_[0]; }
  int tls_port() const { return ports_[1]; }
  int other_port() const { return ports_[2]; }
  // Cuts the sandbox's flows its policy no longer allows.
  void Recheck(SandboxNet& sb);

 private:
  enum Kind { kHttp = 0, kTls = 1, kOther = 2 };
  void AcceptLoop(Kind kind, int fd);
  void Serve(Kind kind, int client_fd);
  Shared* shared_;
  int fds_[3] = {-1, -1, -1};
  int ports_[3] = {0, 0, 0};
  std::vector<std::thread> threads_;
};

// DNS under a sandbox's policy (dns_forwarder.cc), shared by the UDP forwarder and DNS over
// TCP (proxy.cc). JudgeDnsQuery: the reply when the query is answered without asking
// upstream (a name the policy refuses, AAAA, a type we do not relay); nullopt to forward.
// CheckDnsAnswer: upstream's answer as the sandbox may see it (rebinding -> NXDOMAIN), with
// the client's id. AnswerDnsQueryBlocking: both, asking upstream over UDP (3 s); "" for a
// message that is no query.
std::optional<std::string> JudgeDnsQuery(SandboxNet& sb, const std::string& msg,
                                         const dns::Question& q);
std::string CheckDnsAnswer(Shared& shared, SandboxNet& sb, const std::string& query,
                           const dns::Question& q, std::string answer);
std::string AnswerDnsQueryBlocking(Shared& shared, SandboxNet& sb, const std::string& msg);

// The DNS forwarder: answers sandboxes' queries under their policy.
class DnsForwarder {
 public:
  explicit DnsForwarder(Shared* shared) : shared_(shared) {}
  ~DnsForwarder();
  [[nodiscard]] Status Start();
  int port() const { return port_; }

 private:
  void Loop();
  Shared* shared_;
  int fd_ = -1, upstream_fd_ = -1, wake_[2] = {-1, -1};
  int port_ = 0;
  std::thread thread_;
};

}  // namespace space::net
