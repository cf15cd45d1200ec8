// Network: namespaces, veths and the nftables table of networked sandboxes (see net.h and
// docs/networking.md for the addressing and the ruleset).
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>

#include <sodium.h>
#include <spdlog/spdlog.h>

#include "net/internal.h"
#include "sys/sys.h"

namespace space::net {

// ---------------------------------------------------------------- the data plane

namespace {

constexpr int64_t kIpTimeoutMs = 15000;
constexpr char kTapName[] = "tap0";

Status RunIp(const std::vector<std::string>& args) {
  sys::SpawnOptions so;
  so.argv = {"ip"};
  so.argv.insert(so.argv.end(), args.begin(), args.end());
  auto r = sys::RunChecked(so, kIpTimeoutMs);
  if (!r) return tl::unexpected(r.error());
  return Ok();
}

// A script for `ip` or `nft`, read once right after: not synced, nothing in it has to
// survive a crash.
Status WriteScratch(const std::string& path, const std::string& text) {
  auto fd = sys::Open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (!fd) return tl::unexpected(fd.error());
  return sys::WriteAll(fd->get(), text);
}

// Runs `ip -batch` (opts first, e.g. -force); with `netns_path`, inside that network
// namespace: the child joins it before exec, which costs less than `ip -n`'s private mount
// namespace (a copy of the host's mount table, and /sys mounted again, per call).
Status RunIpBatch(const std::string& dir, const std::vector<std::string>& opts, const std::string& batch,
                  const std::string& netns_path = "") {
  auto tmp = dir + "/.ip-batch-" + std::to_string(::gettid());
  SPACE_TRY(WriteScratch(tmp, batch));
  sys::UniqueFd netns;
  if (!netns_path.empty()) {
    auto fd = sys::Open(netns_path, O_RDONLY);
    if (!fd) {
      ::unlink(tmp.c_str());
      return tl::unexpected(fd.error());
    }
    netns = std::move(*fd);
  }
  sys::SpawnOptions so;
  so.argv = {"ip"};
  so.argv.insert(so.argv.end(), opts.begin(), opts.end());
  so.argv.insert(so.argv.end(), {"-batch", tmp});
  so.net_ns_fd = netns.get();
  auto r = sys::RunChecked(so, kIpTimeoutMs);
  ::unlink(tmp.c_str());
  if (!r) return tl::unexpected(r.error());
  return Ok();
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
  Result<Attachment> Attach(const std::string& id, const Policy& p, int slot, Link link) override;
  Status Update(const std::string& id, const Policy& p) override;
  Status Detach(const std::string& id) override;
  Status Reconcile(const std::map<std::string, LiveSandbox>& live) override;
  Json Describe(const std::string& id) const override;

 private:
  const Options& opts() const { return shared_.opts; }
  std::string NetnsName(const std::string& id) const { return "space-" + opts().tag + "-" + id; }
  std::string NetnsPath(const std::string& id) const { return "/run/netns/" + NetnsName(id); }
  std::string HostIf(int slot) const { return "s" + opts().tag + "-" + std::to_string(slot); }
  // The host end's MAC address, fixed per slot (locally administered: 02, the tag's three
  // bytes, the slot): a VM guest restored after its namespace was re-made (a wake, a
  // restart of spaced) still has its gateway's address in its ARP cache, and it stays right.
  std::string HostMac(int slot) const {
    char buf[32];
    std::snprintf(buf, sizeof buf, "02:%c%c:%c%c:%c%c:%02x:%02x", opts().tag[0], opts().tag[1], opts().tag[2],
                  opts().tag[3], opts().tag[4], opts().tag[5], (slot >> 8) & 0xff, slot & 0xff);
    return buf;
  }
  uint32_t Gateway(int slot) const { return opts().subnet.addr + 2u * static_cast<uint32_t>(slot); }
  int MaxSlot() const { return (1 << (31 - opts().subnet.prefix)) - 1; }
  Attachment AttachmentFor(int slot, const std::string& id, Link link) const;
  // AttachmentFor plus, with secrets, the trust bundle holding the sandbox's CA.
  Result<Attachment> AttachmentWithCa(int slot, const std::string& id, Link link, const SandboxNet& sb);
  Status UpdateLocked(SandboxNet& sb, const Policy& p);  // call with mu_ held

  Status EnsureStarted();      // listeners; call with mu_ held
  // The sandbox's CA (with secrets): loaded from the state dir, or made and saved there.
  Result<std::shared_ptr<tls::SandboxCa>> CaFor(const std::string& id, const Policy& p);
  std::string CaPath(const std::string& id) const { return opts().state_dir + "/ca/" + id; }
  TableSpec Spec();                                // refreshes the host's addresses
  SandboxRules RulesOf(const SandboxNet& sb) const;
  Status ApplyRuleset();       // the whole table, one transaction; call with mu_ held
  enum class Change { kAdd, kUpdate, kRemove };
  // One sandbox's part of the table (ApplyRuleset where that cannot be done); call with
  // mu_ held, after shared_ holds the change.
  Status ApplySandbox(const SandboxRules& sb, Change change);
  // Applies an nft script in one transaction (the last whole table is kept as
  // DATA/net/ruleset.nft, the last change as DATA/net/change.nft).
  Status RunNft(const std::string& script, const char* name) {
    const std::string path = opts().state_dir + "/" + name;
    SPACE_TRY(WriteScratch(path, script));
    sys::SpawnOptions so;
    so.argv = {"nft", "-f", path};
    auto r = sys::RunChecked(so, kIpTimeoutMs);
    if (!r) return tl::unexpected(std::move(r.error()).Wrap("nft"));
    return Ok();
  }
  Status MakeNamespace(const std::string& id, int slot, Link link);
  void RemoveNamespace(const std::string& id, int slot);

  Shared shared_;
  std::mutex mu_;  // serialises changes of the data plane
  std::unique_ptr<Proxy> proxy_;
  std::unique_ptr<DnsForwarder> dns_;
  std::map<int, std::string> slots_;  // slot -> sandbox id
  bool forwarding_checked_ = false;
  bool netns_made_ = false;  // a namespace was made (so /run/netns is set up)
  bool table_live_ = false;  // the table holds the sandboxes in shared_ as ApplyRuleset wrote it
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
  (void)shared_.RefreshHostAddrs();
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

TableSpec NetworkImpl::Spec() {
  TableSpec t;
  for (uint32_t a : shared_.RefreshHostAddrs()) {
    if (!opts().subnet.Contains(a)) t.host_addrs.push_back(a);
  }
  t.name = "space_" + opts().tag;
  t.ifs = "s" + opts().tag + "-*";
  t.subnet = opts().subnet;
  t.allow_private = opts().allow_private;
  if (proxy_) {
    t.http_port = proxy_->http_port();
    t.tls_port = proxy_->tls_port();
    t.other_port = proxy_->other_port();
  }
  if (dns_) t.dns_port = dns_->port();
  return t;
}

SandboxRules NetworkImpl::RulesOf(const SandboxNet& sb) const {
  SandboxRules r;
  r.slot = sb.slot;
  r.host_if = HostIf(sb.slot);
  r.ip = sb.ip;
  std::lock_guard l(sb.mu);
  r.policy = sb.policy;
  return r;
}

Status NetworkImpl::ApplyRuleset() {
  std::vector<SandboxRules> rules;
  for (const auto& sb : shared_.All()) rules.push_back(RulesOf(*sb));
  table_live_ = false;
  SPACE_TRY(RunNft(FullTableScript(Spec(), rules), "ruleset.nft"));
  table_live_ = !rules.empty();
  if (table_live_ && !forwarding_checked_) {
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

Status NetworkImpl::ApplySandbox(const SandboxRules& sb, Change change) {
  // The first sandbox makes the table and the last one removes it: the whole table then.
  if (table_live_ && !(change == Change::kRemove && shared_.All().empty())) {
    const TableSpec spec = Spec();
    const std::string script = change == Change::kAdd      ? AddSandboxScript(spec, sb)
                               : change == Change::kUpdate ? UpdateSandboxScript(spec, sb)
                                                           : RemoveSandboxScript(spec, sb);
    auto st = RunNft(script, "change.nft");
    if (st) return Ok();
    // The table is not as this spaced left it (changed by hand, or a script of ours
    // refused): write all of it, which also says what is wrong if that fails too.
    spdlog::warn("net: nft change for slot {} refused ({}); rewriting the table", sb.slot, st.error().message);
  }
  return ApplyRuleset();
}

Attachment NetworkImpl::AttachmentFor(int slot, const std::string& id, Link link) const {
  Attachment a;
  a.slot = slot;
  a.link = link;
  if (link == Link::kTap) a.tap = kTapName;
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

Status NetworkImpl::MakeNamespace(const std::string& id, int slot, Link link) {
  const std::string ns = NetnsName(id), hif = HostIf(slot);
  const std::string gw = Ipv4ToString(Gateway(slot)), ip = Ipv4ToString(Gateway(slot) + 1);
  // The namespace and the host end in one `ip` (a batch's `netns add` leaves ip in the
  // host's namespace); the sandbox end is moved into the namespace as it is made.
  if (sys::Exists("/sys/class/net/" + hif)) (void)RunIp({"link", "del", hif});
  SPACE_TRY_WRAP(RunIpBatch(opts().state_dir, {},
                            (sys::Exists(NetnsPath(id)) ? "" : "netns add " + ns + "\n") +
                                "link add " + hif + " address " + HostMac(slot) + " type veth peer name eth0 netns " +
                                ns + "\n" +
                                "addr add " + gw + "/31 dev " + hif + "\n" +
                                "link set " + hif + " up\n"),
                 "create namespace and veth");
  // No IPv6 in the sandbox (v1): no link-local addresses, nothing to bypass the rules with.
  // `all` alone: the kernel copies it to `default` and to every device already there (lo,
  // eth0), and later ones (br0, the tap) start from `default`. One write, not four: each
  // name under /proc/sys/net is a dentry per namespace on one hash chain, so every lookup
  // walks as many entries as there are networked sandboxes.
  SPACE_TRY(NetnsSysctls(NetnsPath(id), {{"net/ipv6/conf/all/disable_ipv6", "1"}}));
  if (link == Link::kTap) {
    // The guest holds the address: the namespace bridges its veth and a tap (persistent,
    // so it outlives the VM process across suspend and wake) and has no address of its own.
    // Made after the sysctls above, br0 and the tap start with IPv6 off too.
    SPACE_TRY_WRAP(RunIpBatch(opts().state_dir, {},
                              std::string("link add br0 type bridge\n") +
                                  "tuntap add dev " + kTapName + " mode tap\n"
                                  "link set eth0 master br0\n"
                                  "link set " + kTapName + " master br0\n"
                                  "link set eth0 up\n"
                                  "link set " + kTapName + " up\n"
                                  "link set br0 up\n"
                                  "link set lo up\n",
                              NetnsPath(id)),
                   "configure namespace");
    return Ok();
  }
  SPACE_TRY_WRAP(RunIpBatch(opts().state_dir, {},
                            "addr add " + ip + "/31 dev eth0\n"
                            "link set eth0 up\n"
                            "link set lo up\n"
                            "route add default via " + gw + " dev eth0\n",
                            NetnsPath(id)),
                 "configure namespace");
  return Ok();
}

void NetworkImpl::RemoveNamespace(const std::string& id, int slot) {
  // The host end is deleted explicitly: the namespace's own teardown frees the veth later,
  // in a kernel worker, and its name may be wanted again at once.
  std::string batch;
  if (slot > 0 && sys::Exists("/sys/class/net/" + HostIf(slot))) batch += "link del " + HostIf(slot) + "\n";
  if (sys::Exists(NetnsPath(id))) batch += "netns del " + NetnsName(id) + "\n";
  if (batch.empty()) return;
  // -force: the namespace goes even if the veth was already gone.
  auto st = RunIpBatch(opts().state_dir, {"-force"}, batch);
  if (!st) spdlog::warn("net: remove namespace of {}: {}", id, st.error().message);
}

Result<Attachment> NetworkImpl::Attach(const std::string& id, const Policy& p, int slot, Link link) {
  std::unique_lock l(mu_);
  SPACE_TRY(EnsureStarted());
  if (auto existing = shared_.ById(id)) {
    if (existing->slot == slot && existing->link == link && sys::Exists(NetnsPath(id)) &&
        sys::Exists("/sys/class/net/" + HostIf(slot))) {
      // Still attached as asked (a VM waking with its network kept): the namespace and its
      // devices stay as they are; only the policy is brought up to date.
      SPACE_TRY(UpdateLocked(*existing, p));
      return AttachmentWithCa(slot, id, link, *existing);
    }
    const SandboxRules old = RulesOf(*existing);
    shared_.Remove(id);
    if (auto st = ApplySandbox(old, Change::kRemove); !st)
      spdlog::warn("net: attach {}: removing its old rules: {}", id, st.error().message);
    RemoveNamespace(id, existing->slot);
    slots_.erase(existing->slot);
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
  // The slot is this sandbox's from here on: its namespace and veth meet nobody else's,
  // so they are made without mu_ and attaches overlap (the first is made alone: `ip
  // netns add` may then make /run/netns a mount point, which two at once could both do).
  slots_[slot] = id;
  const bool alone = !netns_made_;
  if (!alone) l.unlock();
  auto fail = [&](Error e) -> Result<Attachment> {
    if (l.owns_lock()) l.unlock();
    RemoveNamespace(id, slot);
    l.lock();
    slots_.erase(slot);
    return tl::unexpected(std::move(e).Wrap("net: attach " + id));
  };
  auto made = MakeNamespace(id, slot, link);
  if (!made) return fail(std::move(made).error());
  auto ca = CaFor(id, p);
  if (!ca) return fail(std::move(ca).error());
  if (!l.owns_lock()) l.lock();
  netns_made_ = true;
  auto sb = std::make_shared<SandboxNet>();
  sb->id = id;
  sb->slot = slot;
  sb->link = link;
  sb->gateway = Gateway(slot);
  sb->ip = Gateway(slot) + 1;
  sb->policy = p;
  sb->ca = *ca;
  shared_.Put(sb);
  auto applied = ApplySandbox(RulesOf(*sb), Change::kAdd);
  if (!applied) {
    shared_.Remove(id);
    (void)ApplyRuleset();
    return fail(std::move(applied).error());
  }
  return AttachmentWithCa(slot, id, link, *sb);
}

Result<Attachment> NetworkImpl::AttachmentWithCa(int slot, const std::string& id, Link link, const SandboxNet& sb) {
  Attachment a = AttachmentFor(slot, id, link);
  if (sb.ca) {
    // The sandbox trusts its CA: the host's bundle plus the CA, where OpenSSL, curl,
    // requests and Node look (and the variables that point them there).
    auto system = sys::ReadFile(std::string(tls::kSystemCaBundle));
    auto bundle = tls::MakeTrustBundle(sb.ca->cert_pem(), system ? *system : "");
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
  return UpdateLocked(*sb, p);
}

Status NetworkImpl::UpdateLocked(SandboxNet& sb, const Policy& p) {
  Policy old;
  {
    std::lock_guard g(sb.mu);
    old = sb.policy;
    sb.policy = p;
  }
  auto applied = ApplySandbox(RulesOf(sb), Change::kUpdate);
  if (!applied) {
    // Never half-applied: the proxy and DNS go back to what the kernel still enforces.
    std::lock_guard g(sb.mu);
    sb.policy = old;
    return tl::unexpected(std::move(applied.error()).Wrap("net: update " + sb.id));
  }
  proxy_->Recheck(sb);
  return Ok();
}

Status NetworkImpl::Detach(const std::string& id) {
  std::unique_lock l(mu_);
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
    const SandboxRules rules = RulesOf(*sb);
    shared_.Remove(id);
    if (proxy_) {
      auto st = ApplySandbox(rules, Change::kRemove);
      if (!st) spdlog::warn("net: detach {}: {}", id, st.error().message);
    }
  }
  // The slot stays taken until its veth is gone, so no attach makes a veth of that name
  // meanwhile.
  l.unlock();
  RemoveNamespace(id, slot);
  (void)::unlink((CaPath(id) + ".crt").c_str());
  (void)::unlink((CaPath(id) + ".key").c_str());
  if (slot > 0) {
    l.lock();
    if (auto it = slots_.find(slot); it != slots_.end() && it->second == id) slots_.erase(it);
    l.unlock();
  }
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
      table_live_ = false;
      return Ok();
    }
  }
  std::vector<std::string> failed;
  for (const auto& [id, s] : live) {
    std::lock_guard l(mu_);
    SPACE_TRY(EnsureStarted());
    bool intact = sys::Exists(NetnsPath(id)) && sys::Exists("/sys/class/net/" + HostIf(s.slot));
    if (!intact) {
      auto made = MakeNamespace(id, s.slot, s.link);
      if (!made) {
        failed.push_back(id + ": " + made.error().message);
        continue;
      }
    }
    auto sb = std::make_shared<SandboxNet>();
    sb->id = id;
    sb->slot = s.slot;
    sb->link = s.link;
    sb->gateway = Gateway(s.slot);
    sb->ip = Gateway(s.slot) + 1;
    sb->policy = s.policy;
    auto ca = CaFor(id, s.policy);
    if (!ca) failed.push_back(id + ": " + ca.error().message);
    else sb->ca = *ca;
    shared_.Put(sb);
    slots_[s.slot] = id;
    netns_made_ = true;
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
