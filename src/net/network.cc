// Network: namespaces, veths and the nftables table of networked sandboxes (see net.h and
// docs/networking.md for the addressing and the ruleset).
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

// ---------------------------------------------------------------- SandboxNet, Shared

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

// ---------------------------------------------------------------- presets, tag

std::string TagForDataDir(const std::string& data_dir) {
  unsigned char h[16];
  crypto_generichash(h, sizeof h, reinterpret_cast<const unsigned char*>(data_dir.data()),
                     data_dir.size(), nullptr, 0);
  return HexEncode(std::string_view(reinterpret_cast<char*>(h), 3));
}

namespace {

std::string HostOfUrl(std::string_view url) {
  size_t s = url.find("://");
  if (s == std::string_view::npos) return "";
  std::string_view rest = url.substr(s + 3);
  rest = rest.substr(0, rest.find_first_of("/?#"));
  if (size_t at = rest.rfind('@'); at != std::string_view::npos) rest = rest.substr(at + 1);
  if (size_t colon = rest.rfind(':'); colon != std::string_view::npos) rest = rest.substr(0, colon);
  return NormaliseHostName(rest);
}

void AddUrlsFrom(const std::string& text, const std::vector<std::string>& keys,
                 std::vector<std::string>* out) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    for (const auto& k : keys) {
      size_t at = line.find(k);
      if (at == std::string::npos) continue;
      size_t pos = at + k.size();
      while (pos < line.size()) {
        size_t u = line.find("://", pos);
        if (u == std::string::npos) break;
        size_t start = line.rfind(' ', u);
        start = start == std::string::npos ? pos : start + 1;
        if (start < pos) start = pos;
        size_t end = line.find_first_of(" \t\"'", u);
        std::string h = HostOfUrl(std::string_view(line).substr(start, end - start));
        if (!h.empty() && h.find('.') != std::string::npos &&
            std::find(out->begin(), out->end(), h) == out->end())
          out->push_back(h);
        pos = end == std::string::npos ? line.size() : end;
      }
    }
  }
}

std::vector<std::string> AptHosts() {
  std::vector<std::string> out;
  std::vector<std::string> files = {"/etc/apt/sources.list"};
  if (DIR* d = ::opendir("/etc/apt/sources.list.d")) {
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n.size() > 5 && (n.ends_with(".list") || n.ends_with(".sources")))
        files.push_back("/etc/apt/sources.list.d/" + n);
    }
    ::closedir(d);
  }
  for (const auto& f : files) {
    if (auto t = sys::ReadFile(f)) AddUrlsFrom(*t, {"deb", "URIs:"}, &out);
  }
  return out;
}

std::vector<std::string> PipHosts() {
  std::vector<std::string> out;
  for (const char* var : {"PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL"}) {
    if (const char* v = ::getenv(var)) AddUrlsFrom(std::string("x ") + v, {"x"}, &out);
  }
  std::vector<std::string> files = {"/etc/pip.conf", "/etc/xdg/pip/pip.conf"};
  if (const char* home = ::getenv("HOME")) {
    files.push_back(std::string(home) + "/.config/pip/pip.conf");
    files.push_back(std::string(home) + "/.pip/pip.conf");
  }
  for (const auto& f : files) {
    if (auto t = sys::ReadFile(f)) AddUrlsFrom(*t, {"index-url", "index_url", "find-links"}, &out);
  }
  return out;
}

std::vector<std::string> NpmHosts() {
  std::vector<std::string> out;
  if (const char* v = ::getenv("NPM_CONFIG_REGISTRY")) AddUrlsFrom(std::string("x ") + v, {"x"}, &out);
  if (const char* v = ::getenv("npm_config_registry")) AddUrlsFrom(std::string("x ") + v, {"x"}, &out);
  std::vector<std::string> files = {"/etc/npmrc", "/usr/etc/npmrc"};
  if (const char* home = ::getenv("HOME")) files.push_back(std::string(home) + "/.npmrc");
  for (const auto& f : files) {
    if (auto t = sys::ReadFile(f)) AddUrlsFrom(*t, {"registry"}, &out);
  }
  return out;
}

}  // namespace

Presets ResolvePresets(const std::vector<std::string>& operator_presets) {
  Presets p;
  // github is a code host, not a package registry: its names are stable and public.
  p["github"] = {"github.com", "*.github.com", "*.githubusercontent.com", "*.githubassets.com"};
  p["debian"] = AptHosts();
  p["pypi"] = PipHosts();
  p["npm"] = NpmHosts();
  for (const auto& e : operator_presets) {
    size_t eq = e.find('=');
    if (eq == std::string::npos || eq == 0) {
      spdlog::warn("--egress-preset {}: expected NAME=DOMAIN[,DOMAIN...]; ignored", e);
      continue;
    }
    std::string name = e.substr(0, eq);
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::istringstream in(e.substr(eq + 1));
    std::string d;
    while (std::getline(in, d, ',')) {
      auto n = NormaliseDomainPattern(d);
      if (!n) {
        spdlog::warn("--egress-preset {}: {}; entry ignored", name, n.error().message);
        continue;
      }
      auto& v = p[name];
      if (std::find(v.begin(), v.end(), *n) == v.end()) v.push_back(*n);
    }
  }
  return p;
}

// ---------------------------------------------------------------- the data plane

namespace {

constexpr int64_t kIpTimeoutMs = 15000;

Status RunIp(const std::vector<std::string>& args) {
  sys::SpawnOptions so;
  so.argv = {"ip"};
  so.argv.insert(so.argv.end(), args.begin(), args.end());
  auto r = sys::RunChecked(so, kIpTimeoutMs);
  if (!r) return tl::unexpected(r.error());
  return Ok();
}

Status RunIpBatch(const std::string& dir, const std::vector<std::string>& ns_opt,
                  const std::string& batch) {
  auto tmp = dir + "/.ip-batch-" + std::to_string(::gettid());
  SPACE_TRY(sys::WriteFileAtomic(tmp, batch, 0600));
  std::vector<std::string> args = ns_opt;
  args.push_back("-batch");
  args.push_back(tmp);
  auto st = RunIp(args);
  ::unlink(tmp.c_str());
  return st;
}

// Writes sysctls inside a network namespace: /proc/sys/net follows the netns of the
// thread that opens it, so a short-lived thread joins the namespace and writes them.
Status NetnsSysctls(const std::string& netns_path,
                    const std::vector<std::pair<std::string, std::string>>& kv) {
  Status result = Ok();
  std::thread t([&] {
    int fd = ::open(netns_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      result = ErrnoFail("open " + netns_path);
      return;
    }
    sys::UniqueFd g(fd);
    // Safety: only this thread changes namespace (unshare(CLONE_FS) is not needed for
    // CLONE_NEWNET), and it exits right after; no other code runs on it.
    if (::setns(fd, CLONE_NEWNET) != 0) {
      result = ErrnoFail("setns " + netns_path);
      return;
    }
    for (const auto& [k, v] : kv) {
      std::string path = "/proc/sys/" + k;
      int s = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
      if (s < 0) {
        result = ErrnoFail("open " + path);
        return;
      }
      bool ok = ::write(s, v.data(), v.size()) == static_cast<ssize_t>(v.size());
      ::close(s);
      if (!ok) {
        result = ErrnoFail("write " + path);
        return;
      }
    }
  });
  t.join();
  return result;
}

std::string Elements(const std::vector<Cidr>& v) {
  std::string s;
  for (const auto& c : v) s += (s.empty() ? "" : ", ") + c.ToString();
  return s;
}

class NetworkImpl final : public Network {
 public:
  explicit NetworkImpl(Options o) : shared_(std::move(o)) {}
  ~NetworkImpl() override {
    shared_.stopping = true;
    proxy_.reset();
    dns_.reset();
    // Flows still relaying hold pointers into shared_: cut them and wait (bounded).
    for (auto& sb : shared_.All()) {
      std::lock_guard l(sb->mu);
      for (Flow* f : sb->flows) {
        f->cut = true;
        ::shutdown(f->client_fd, SHUT_RDWR);
        ::shutdown(f->upstream_fd, SHUT_RDWR);
      }
    }
    for (int i = 0; i < 300 && shared_.flows.load() > 0; ++i) ::usleep(10000);
  }

  Status Init();
  const Presets& presets() const override { return shared_.opts.presets; }
  Result<Attachment> Attach(const std::string& id, const Policy& p, int slot) override;
  Status Update(const std::string& id, const Policy& p) override;
  Status Detach(const std::string& id) override;
  Status Reconcile(const std::map<std::string, LiveSandbox>& live) override;
  Json Describe(const std::string& id) const override;

 private:
  const Options& opts() const { return shared_.opts; }
  std::string NetnsName(const std::string& id) const { return "space-" + opts().tag + "-" + id; }
  std::string NetnsPath(const std::string& id) const { return "/run/netns/" + NetnsName(id); }
  std::string HostIf(int slot) const { return "s" + opts().tag + "-" + std::to_string(slot); }
  uint32_t Gateway(int slot) const { return opts().subnet.addr + 2u * static_cast<uint32_t>(slot); }
  int MaxSlot() const { return (1 << (31 - opts().subnet.prefix)) - 1; }
  Attachment AttachmentFor(int slot, const std::string& id) const;

  Status EnsureStarted();      // listeners; call with mu_ held
  // The sandbox's CA (with secrets): loaded from the state dir, or made and saved there.
  Result<std::shared_ptr<tls::SandboxCa>> CaFor(const std::string& id, const Policy& p);
  std::string CaPath(const std::string& id) const { return opts().state_dir + "/ca/" + id; }
  Status ApplyRuleset();       // the whole table, one transaction; call with mu_ held
  // Applies an nft script in one transaction (kept as DATA/net/ruleset.nft).
  Status RunNft(const std::string& script) {
    const std::string path = opts().state_dir + "/ruleset.nft";
    SPACE_TRY(sys::WriteFileAtomic(path, script, 0600));
    sys::SpawnOptions so;
    so.argv = {"nft", "-f", path};
    auto r = sys::RunChecked(so, kIpTimeoutMs);
    if (!r) return tl::unexpected(std::move(r.error()).Wrap("nft"));
    return Ok();
  }
  Status MakeNamespace(const std::string& id, int slot);
  void RemoveNamespace(const std::string& id, int slot);

  Shared shared_;
  std::mutex mu_;  // serialises changes of the data plane
  std::unique_ptr<Proxy> proxy_;
  std::unique_ptr<DnsForwarder> dns_;
  std::map<int, std::string> slots_;  // slot -> sandbox id
  bool forwarding_checked_ = false;
};

Status NetworkImpl::Init() {
  SPACE_TRY(sys::MkdirAll(opts().state_dir, 0700));
  if (opts().subnet.prefix < 8 || opts().subnet.prefix > 28)
    return Fail(Errc::kInvalidArgument, "sandbox subnet must be a /8../28");
  if (!opts().dns_upstream.empty()) {
    auto up = dns::ParseUpstream(opts().dns_upstream);
    if (!up) return tl::unexpected(std::move(up.error()).Wrap("--dns-upstream"));
    shared_.upstream = *up;
  } else {
    auto text = sys::ReadFile("/etc/resolv.conf");
    auto up = text ? dns::FromResolvConf(*text) : std::nullopt;
    shared_.upstream = up ? *up : dns::Upstream{0x7F000001u, 53};
  }
  shared_.RefreshHostAddrs();
  if (!opts().egress_ca_file.empty() && !sys::Exists(opts().egress_ca_file))
    return Fail(Errc::kInvalidArgument, "--egress-ca-file " + opts().egress_ca_file + " does not exist");
  return Ok();
}

Result<std::shared_ptr<tls::SandboxCa>> NetworkImpl::CaFor(const std::string& id, const Policy& p) {
  if (p.secrets.empty()) return std::shared_ptr<tls::SandboxCa>();
  const std::string base = CaPath(id);
  auto cert = sys::ReadFile(base + ".crt");
  auto key = sys::ReadFile(base + ".key");
  if (cert && key) {
    auto ca = tls::SandboxCa::Load(*cert, *key);
    if (ca) return std::shared_ptr<tls::SandboxCa>(std::move(*ca));
    spdlog::warn("net: CA of {} unreadable ({}); making a new one", id, ca.error().message);
  }
  std::vector<std::string> hosts;
  for (const auto& s : p.secrets) hosts.insert(hosts.end(), s.hosts.begin(), s.hosts.end());
  auto ca = tls::SandboxCa::Generate(id, hosts);
  if (!ca) return tl::unexpected(std::move(ca.error()).Wrap("sandbox CA"));
  SPACE_TRY(sys::MkdirAll(opts().state_dir + "/ca", 0700));
  SPACE_TRY(sys::WriteFileAtomic(base + ".key", (*ca)->key_pem(), 0600));
  SPACE_TRY(sys::WriteFileAtomic(base + ".crt", (*ca)->cert_pem(), 0600));
  return std::shared_ptr<tls::SandboxCa>(std::move(*ca));
}

Status NetworkImpl::EnsureStarted() {
  if (proxy_) return Ok();
  if (!shared_.trust) {
    auto trust = tls::UpstreamTrust::Create(opts().egress_ca_file);
    if (!trust) return tl::unexpected(std::move(trust.error()).Wrap("--egress-ca-file"));
    shared_.trust = std::move(*trust);
  }
  auto proxy = std::make_unique<Proxy>(&shared_);
  SPACE_TRY_WRAP(proxy->Start(), "egress proxy");
  auto dns = std::make_unique<DnsForwarder>(&shared_);
  SPACE_TRY_WRAP(dns->Start(), "dns forwarder");
  proxy_ = std::move(proxy);
  dns_ = std::move(dns);
  spdlog::info("net: egress proxy on :{} (http) :{} (tls) :{} (other), dns on :{}, upstream {}:{}",
               proxy_->http_port(), proxy_->tls_port(), proxy_->other_port(), dns_->port(),
               Ipv4ToString(shared_.upstream.addr), shared_.upstream.port);
  return Ok();
}

Status NetworkImpl::ApplyRuleset() {
  const std::string table = "space_" + opts().tag;
  std::string out = "add table inet " + table + "\ndelete table inet " + table + "\n";
  auto sandboxes = shared_.All();
  // Nothing attached: no table at all.
  if (sandboxes.empty()) return RunNft(out);
  shared_.RefreshHostAddrs();
  const std::string ifs = "s" + opts().tag + "-*";
  const int H = proxy_->http_port(), S = proxy_->tls_port(), O = proxy_->other_port(),
            D = dns_->port();
  std::ostringstream t;
  t << "table inet " << table << " {\n";
  t << "  set always_deny { type ipv4_addr; flags interval; auto-merge; elements = { "
    << Elements(AlwaysDeniedRanges()) << " } }\n";
  t << "  set internal { type ipv4_addr; flags interval; auto-merge; elements = { "
    << opts().subnet.ToString();
  {
    std::vector<uint32_t> addrs;
    ifaddrs* ifa = nullptr;
    if (::getifaddrs(&ifa) == 0) {
      for (ifaddrs* i = ifa; i; i = i->ifa_next) {
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET) {
          uint32_t a = ntohl(reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr);
          if (!opts().subnet.Contains(a)) t << ", " << Ipv4ToString(a);
        }
      }
      ::freeifaddrs(ifa);
    }
  }
  t << " } }\n";
  if (!opts().allow_private.empty())
    t << "  set allow_private { type ipv4_addr; flags interval; auto-merge; elements = { "
      << Elements(opts().allow_private) << " } }\n";
  std::string vmap;
  for (const auto& sb : sandboxes) {
    std::lock_guard l(sb->mu);
    const Policy& p = sb->policy;
    t << "  chain sb_" << sb->slot << " {\n";
    if (!p.allow_cidrs.empty()) t << "    ip daddr { " << Elements(p.allow_cidrs) << " } accept\n";
    if (!p.deny_cidrs.empty()) t << "    ip daddr { " << Elements(p.deny_cidrs) << " } drop\n";
    t << "    " << (p.restricted() || !p.internet() ? "drop" : "accept") << "\n  }\n";
    vmap += (vmap.empty() ? "" : ", ") + std::string("\"") + HostIf(sb->slot) + "\" : goto sb_" +
            std::to_string(sb->slot);
  }
  t << "  map sandboxes { type ifname : verdict; elements = { " << vmap << " } }\n";
  t << "  chain prerouting {\n    type nat hook prerouting priority dstnat; policy accept;\n"
    << "    iifname \"" << ifs << "\" meta nfproto ipv4 udp dport 53 redirect to :" << D << "\n"
    << "    iifname \"" << ifs << "\" meta nfproto ipv4 tcp dport 80 redirect to :" << H << "\n"
    << "    iifname \"" << ifs << "\" meta nfproto ipv4 tcp dport 443 redirect to :" << S << "\n"
    << "    iifname \"" << ifs << "\" meta nfproto ipv4 meta l4proto tcp redirect to :" << O << "\n  }\n";
  t << "  chain input {\n    type filter hook input priority filter; policy accept;\n"
    << "    iifname \"" << ifs << "\" jump from_sandbox_to_host\n"
    // The proxy and DNS ports listen on every address; only sandboxes may use them.
    << "    tcp dport { " << H << ", " << S << ", " << O << " } drop\n"
    << "    udp dport " << D << " drop\n  }\n";
  t << "  chain from_sandbox_to_host {\n"
    << "    meta nfproto ipv6 drop\n"
    << "    tcp dport { " << H << ", " << S << ", " << O << " } accept\n"
    << "    udp dport " << D << " accept\n"
    << "    drop\n  }\n";
  t << "  chain forward {\n    type filter hook forward priority filter; policy accept;\n"
    << "    iifname \"" << ifs << "\" jump from_sandbox\n"
    << "    oifname \"" << ifs << "\" ct state established,related accept\n"
    << "    oifname \"" << ifs << "\" drop\n  }\n";
  t << "  chain from_sandbox {\n"
    << "    meta nfproto ipv6 drop\n"
    << "    meta l4proto tcp drop\n"  // TCP is redirected to the proxy, never forwarded
    << "    ip daddr @internal drop\n";
  if (!opts().allow_private.empty()) t << "    ip daddr @allow_private iifname vmap @sandboxes\n";
  t << "    ip daddr @always_deny drop\n"
    << "    iifname vmap @sandboxes\n"
    << "    drop\n  }\n";
  t << "  chain postrouting {\n    type nat hook postrouting priority srcnat; policy accept;\n"
    << "    ip saddr " << opts().subnet.ToString() << " oifname != \"" << ifs << "\" masquerade\n  }\n";
  t << "}\n";
  out += t.str();
  SPACE_TRY(RunNft(out));
  if (!forwarding_checked_) {
    // Non-TCP flows (UDP, ICMP) allowed by CIDR are routed, which needs forwarding on.
    auto f = sys::ReadFile("/proc/sys/net/ipv4/ip_forward");
    if (f && !StartsWith(*f, "1")) {
      spdlog::info("net: enabling net.ipv4.ip_forward for sandboxes' non-TCP traffic");
      int fd = ::open("/proc/sys/net/ipv4/ip_forward", O_WRONLY | O_CLOEXEC);
      if (fd >= 0) {
        (void)!::write(fd, "1", 1);
        ::close(fd);
      }
    }
    forwarding_checked_ = true;
  }
  return Ok();
}

Attachment NetworkImpl::AttachmentFor(int slot, const std::string& id) const {
  Attachment a;
  a.slot = slot;
  a.netns_path = NetnsPath(id);
  a.gateway_ip = Ipv4ToString(Gateway(slot));
  a.sandbox_ip = Ipv4ToString(Gateway(slot) + 1);
  a.resolv_conf = "# written by spaced: queries are answered under the sandbox's policy\n"
                  "nameserver " + a.gateway_ip + "\noptions single-request\n";
  std::string proxy = "http://" + a.gateway_ip + ":" + std::to_string(Proxy::kExplicitPort);
  for (const char* k : {"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"}) a.env[k] = proxy;
  a.env["NO_PROXY"] = a.env["no_proxy"] = "localhost,127.0.0.1";
  return a;
}

Status NetworkImpl::MakeNamespace(const std::string& id, int slot) {
  const std::string ns = NetnsName(id), hif = HostIf(slot);
  const std::string gw = Ipv4ToString(Gateway(slot)), ip = Ipv4ToString(Gateway(slot) + 1);
  if (!sys::Exists(NetnsPath(id))) SPACE_TRY_WRAP(RunIp({"netns", "add", ns}), "create namespace");
  // The host end first; the sandbox end is moved into the namespace as it is made.
  if (sys::Exists("/sys/class/net/" + hif)) (void)RunIp({"link", "del", hif});
  SPACE_TRY_WRAP(RunIpBatch(opts().state_dir, {},
                            "link add " + hif + " type veth peer name eth0 netns " + ns + "\n" +
                                "addr add " + gw + "/31 dev " + hif + "\n" +
                                "link set " + hif + " up\n"),
                 "create veth");
  // No IPv6 in the sandbox (v1): no link-local addresses, nothing to bypass the rules with.
  SPACE_TRY(NetnsSysctls(NetnsPath(id), {{"net/ipv6/conf/all/disable_ipv6", "1"},
                                         {"net/ipv6/conf/default/disable_ipv6", "1"},
                                         {"net/ipv6/conf/eth0/disable_ipv6", "1"},
                                         {"net/ipv6/conf/lo/disable_ipv6", "1"}}));
  SPACE_TRY_WRAP(RunIpBatch(opts().state_dir, {"-n", ns},
                            "addr add " + ip + "/31 dev eth0\n"
                            "link set eth0 up\n"
                            "link set lo up\n"
                            "route add default via " + gw + " dev eth0\n"),
                 "configure namespace");
  return Ok();
}

void NetworkImpl::RemoveNamespace(const std::string& id, int slot) {
  if (slot > 0 && sys::Exists("/sys/class/net/" + HostIf(slot))) (void)RunIp({"link", "del", HostIf(slot)});
  if (sys::Exists(NetnsPath(id))) {
    auto st = RunIp({"netns", "del", NetnsName(id)});
    if (!st) spdlog::warn("net: remove namespace of {}: {}", id, st.error().message);
  }
}

Result<Attachment> NetworkImpl::Attach(const std::string& id, const Policy& p, int slot) {
  std::lock_guard l(mu_);
  SPACE_TRY(EnsureStarted());
  if (auto existing = shared_.ById(id)) {
    slots_.erase(existing->slot);
    shared_.Remove(id);
    RemoveNamespace(id, existing->slot);
  }
  if (slot <= 0 || slots_.count(slot)) {
    if (slot > 0) spdlog::warn("net: slot {} of {} is taken; choosing another", slot, id);
    slot = 0;
    for (int s = 1; s <= MaxSlot(); ++s) {
      if (!slots_.count(s)) {
        slot = s;
        break;
      }
    }
    if (slot == 0)
      return Fail(Errc::kResourceExhausted, "no free sandbox address in " + opts().subnet.ToString());
  }
  auto made = MakeNamespace(id, slot);
  if (!made) {
    RemoveNamespace(id, slot);
    return tl::unexpected(std::move(made.error()).Wrap("net: attach " + id));
  }
  auto ca = CaFor(id, p);
  if (!ca) {
    RemoveNamespace(id, slot);
    return tl::unexpected(std::move(ca.error()).Wrap("net: attach " + id));
  }
  auto sb = std::make_shared<SandboxNet>();
  sb->id = id;
  sb->slot = slot;
  sb->gateway = Gateway(slot);
  sb->ip = Gateway(slot) + 1;
  sb->policy = p;
  sb->ca = *ca;
  shared_.Put(sb);
  slots_[slot] = id;
  auto applied = ApplyRuleset();
  if (!applied) {
    shared_.Remove(id);
    slots_.erase(slot);
    RemoveNamespace(id, slot);
    (void)ApplyRuleset();
    return tl::unexpected(std::move(applied.error()).Wrap("net: attach " + id));
  }
  Attachment a = AttachmentFor(slot, id);
  if (sb->ca) {
    // The sandbox trusts its CA: the host's bundle plus the CA, where OpenSSL, curl,
    // requests and Node look (and the variables that point them there).
    auto system = sys::ReadFile(std::string(tls::kSystemCaBundle));
    auto bundle = tls::MakeTrustBundle(sb->ca->cert_pem(), system ? *system : "");
    if (!bundle) return tl::unexpected(std::move(bundle.error()).Wrap("net: trust bundle"));
    a.files[std::string(tls::kSandboxBundlePath)] = bundle->bundle_pem;
    a.files[std::string(tls::kSandboxCaPath)] = bundle->ca_pem;
    for (const auto& [k, v] : bundle->env) a.env[k] = v;
  }
  return a;
}

Status NetworkImpl::Update(const std::string& id, const Policy& p) {
  std::lock_guard l(mu_);
  auto sb = shared_.ById(id);
  if (!sb) return Fail(Errc::kNotFound, "net: sandbox " + id + " has no network attached");
  Policy old;
  {
    std::lock_guard g(sb->mu);
    old = sb->policy;
    sb->policy = p;
  }
  auto applied = ApplyRuleset();
  if (!applied) {
    // Never half-applied: the proxy and DNS go back to what the kernel still enforces.
    std::lock_guard g(sb->mu);
    sb->policy = old;
    return tl::unexpected(std::move(applied.error()).Wrap("net: update " + id));
  }
  proxy_->Recheck(*sb);
  return Ok();
}

Status NetworkImpl::Detach(const std::string& id) {
  std::lock_guard l(mu_);
  auto sb = shared_.ById(id);
  int slot = 0;
  if (sb) {
    slot = sb->slot;
    {
      std::lock_guard g(sb->mu);
      for (Flow* f : sb->flows) {
        f->cut = true;
        ::shutdown(f->client_fd, SHUT_RDWR);
        ::shutdown(f->upstream_fd, SHUT_RDWR);
      }
    }
    shared_.Remove(id);
    slots_.erase(slot);
    if (proxy_) {
      auto st = ApplyRuleset();
      if (!st) spdlog::warn("net: detach {}: {}", id, st.error().message);
    }
  }
  RemoveNamespace(id, slot);
  (void)::unlink((CaPath(id) + ".crt").c_str());
  (void)::unlink((CaPath(id) + ".key").c_str());
  if (sys::Exists(NetnsPath(id)))
    return Fail(Errc::kInternal, "net: namespace of " + id + " could not be removed");
  return Ok();
}

Status NetworkImpl::Reconcile(const std::map<std::string, LiveSandbox>& live) {
  {
    std::lock_guard l(mu_);
    // Every namespace and host veth of this tag that no live sandbox owns goes.
    const std::string prefix = "space-" + opts().tag + "-";
    if (DIR* d = ::opendir("/run/netns")) {
      std::vector<std::string> stale;
      while (dirent* e = ::readdir(d)) {
        std::string n = e->d_name;
        if (StartsWith(n, prefix) && !live.count(n.substr(prefix.size()))) stale.push_back(n);
      }
      ::closedir(d);
      for (const auto& n : stale) {
        spdlog::info("net: removing orphaned namespace {}", n);
        (void)RunIp({"netns", "del", n});
      }
    }
    std::set<std::string> wanted;
    for (const auto& [id, s] : live) wanted.insert(HostIf(s.slot));
    const std::string ifprefix = "s" + opts().tag + "-";
    if (DIR* d = ::opendir("/sys/class/net")) {
      std::vector<std::string> stale;
      while (dirent* e = ::readdir(d)) {
        std::string n = e->d_name;
        if (StartsWith(n, ifprefix) && !wanted.count(n)) stale.push_back(n);
      }
      ::closedir(d);
      for (const auto& n : stale) (void)RunIp({"link", "del", n});
    }
    if (live.empty()) {
      // No table either.
      sys::SpawnOptions so;
      so.argv = {"nft", "delete", "table", "inet", "space_" + opts().tag};
      (void)sys::Run(so, kIpTimeoutMs);
      return Ok();
    }
  }
  std::vector<std::string> failed;
  for (const auto& [id, s] : live) {
    std::lock_guard l(mu_);
    SPACE_TRY(EnsureStarted());
    bool intact = sys::Exists(NetnsPath(id)) && sys::Exists("/sys/class/net/" + HostIf(s.slot));
    if (!intact) {
      auto made = MakeNamespace(id, s.slot);
      if (!made) {
        failed.push_back(id + ": " + made.error().message);
        continue;
      }
    }
    auto sb = std::make_shared<SandboxNet>();
    sb->id = id;
    sb->slot = s.slot;
    sb->gateway = Gateway(s.slot);
    sb->ip = Gateway(s.slot) + 1;
    sb->policy = s.policy;
    auto ca = CaFor(id, s.policy);
    if (!ca) failed.push_back(id + ": " + ca.error().message);
    else sb->ca = *ca;
    shared_.Put(sb);
    slots_[s.slot] = id;
  }
  std::lock_guard l(mu_);
  SPACE_TRY(ApplyRuleset());
  if (!failed.empty()) {
    std::string msg = "net: reconcile:";
    for (const auto& f : failed) msg += " " + f + ";";
    return Fail(Errc::kInternal, msg);
  }
  return Ok();
}

Json NetworkImpl::Describe(const std::string& id) const {
  auto sb = shared_.ById(id);
  if (!sb) return nullptr;
  Json decisions = Json::array();
  std::lock_guard l(sb->mu);
  for (const auto& d : sb->decisions) {
    decisions.push_back({{"time", FormatRfc3339(d.time_ms)},
                         {"proto", d.proto},
                         {"destination", d.destination},
                         {"port", d.port},
                         {"name", d.name},
                         {"verdict", d.allowed ? "allow" : "deny"},
                         {"reason", d.reason},
                         {"bytes_out", d.bytes_out},
                         {"bytes_in", d.bytes_in}});
  }
  return Json{{"slot", sb->slot},
              {"sandbox_ip", Ipv4ToString(sb->ip)},
              {"gateway_ip", Ipv4ToString(sb->gateway)},
              {"active_flows", sb->flows.size()},
              {"decisions", std::move(decisions)}};
}

}  // namespace

Result<std::unique_ptr<Network>> Network::Create(Options opts) {
  if (opts.tag.empty()) return Fail(Errc::kInvalidArgument, "net: no tag");
  auto n = std::make_unique<NetworkImpl>(std::move(opts));
  SPACE_TRY(n->Init());
  return std::unique_ptr<Network>(std::move(n));
}

}  // namespace space::net
