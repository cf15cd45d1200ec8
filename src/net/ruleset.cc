// net: the nftables table of one daemon, written as `nft -f` scripts (see internal.h). The
// whole table is written at start-up, after a restart and when nothing else works; a
// sandbox coming, going or changing policy touches only its own chain and elements, so
// its script does not grow with the number of sandboxes.
#include <sstream>

#include "net/internal.h"

namespace space::net {

namespace {

std::string Elements(const std::vector<Cidr>& v) {
  std::string s;
  for (const auto& c : v) s += (s.empty() ? "" : ", ") + c.ToString();
  return s;
}

// The sandbox subnet plus the host's own addresses outside it.
std::string InternalElements(const TableSpec& t) {
  std::string s = t.subnet.ToString();
  for (uint32_t a : t.host_addrs) s += ", " + Ipv4ToString(a);
  return s;
}

std::string Quoted(const std::string& s) { return "\"" + s + "\""; }

// The statements of a sandbox's own chain: its CIDR rules, then its default.
std::vector<std::string> ChainRules(const SandboxRules& sb) {
  std::vector<std::string> r;
  const Policy& p = sb.policy;
  if (!p.allow_cidrs.empty()) r.push_back("ip daddr { " + Elements(p.allow_cidrs) + " } accept");
  if (!p.deny_cidrs.empty()) r.push_back("ip daddr { " + Elements(p.deny_cidrs) + " } drop");
  r.push_back(p.restricted() || !p.internet() ? "drop" : "accept");
  return r;
}

std::string ChainName(const SandboxRules& sb) { return "sb_" + std::to_string(sb.slot); }

std::string SourceElement(const SandboxRules& sb) {
  return Quoted(sb.host_if) + " . " + Ipv4ToString(sb.ip);
}

// The rules of the sandbox's chain, added to a chain that exists and is empty.
void AddChainRules(std::ostringstream& o, const TableSpec& t, const SandboxRules& sb) {
  for (const auto& r : ChainRules(sb))
    o << "add rule inet " << t.name << " " << ChainName(sb) << " " << r << "\n";
}

// The host's addresses may have changed since the last script (an address taken by DHCP,
// an interface brought up): every script that touches the table refreshes `internal`.
void RefreshInternal(std::ostringstream& o, const TableSpec& t) {
  o << "flush set inet " << t.name << " internal\n"
    << "add element inet " << t.name << " internal { " << InternalElements(t) << " }\n";
}

}  // namespace

std::string FullTableScript(const TableSpec& spec, const std::vector<SandboxRules>& sandboxes) {
  const std::string& table = spec.name;
  std::string out = "add table inet " + table + "\ndelete table inet " + table + "\n";
  // Nothing attached: no table at all.
  if (sandboxes.empty()) return out;
  const std::string ifs = Quoted(spec.ifs);
  const int H = spec.http_port, S = spec.tls_port, O = spec.other_port, D = spec.dns_port;
  std::ostringstream t;
  t << "table inet " << table << " {\n";
  t << "  set always_deny { type ipv4_addr; flags interval; auto-merge; elements = { "
    << Elements(AlwaysDeniedRanges()) << " } }\n";
  t << "  set internal { type ipv4_addr; flags interval; auto-merge; elements = { "
    << InternalElements(spec) << " } }\n";
  if (!spec.allow_private.empty())
    t << "  set allow_private { type ipv4_addr; flags interval; auto-merge; elements = { "
      << Elements(spec.allow_private) << " } }\n";
  std::string vmap, sources;
  for (const auto& sb : sandboxes) {
    sources += (sources.empty() ? "" : ", ") + SourceElement(sb);
    t << "  chain " << ChainName(sb) << " {\n";
    for (const auto& r : ChainRules(sb)) t << "    " << r << "\n";
    t << "  }\n";
    vmap += (vmap.empty() ? "" : ", ") + Quoted(sb.host_if) + " : goto " + ChainName(sb);
  }
  t << "  map sandboxes { type ifname : verdict; elements = { " << vmap << " } }\n";
  // Each sandbox sends from its own address only (a VM guest, root on its own NIC, could
  // otherwise pose as another sandbox to the proxy); no IPv6 at all.
  t << "  set sources { type ifname . ipv4_addr; elements = { " << sources << " } }\n";
  t << "  chain antispoof {\n    type filter hook prerouting priority raw; policy accept;\n"
    << "    iifname " << ifs << " meta nfproto ipv6 drop\n"
    << "    iifname " << ifs << " iifname . ip saddr != @sources drop\n  }\n";
  t << "  chain prerouting {\n    type nat hook prerouting priority dstnat; policy accept;\n"
    << "    iifname " << ifs << " meta nfproto ipv4 udp dport 53 redirect to :" << D << "\n"
    << "    iifname " << ifs << " meta nfproto ipv4 tcp dport 80 redirect to :" << H << "\n"
    << "    iifname " << ifs << " meta nfproto ipv4 tcp dport 443 redirect to :" << S << "\n"
    << "    iifname " << ifs << " meta nfproto ipv4 meta l4proto tcp redirect to :" << O << "\n  }\n";
  t << "  chain input {\n    type filter hook input priority filter; policy accept;\n"
    << "    iifname " << ifs << " jump from_sandbox_to_host\n"
    // The proxy and DNS ports listen on every address; only sandboxes may use them.
    << "    tcp dport { " << H << ", " << S << ", " << O << " } drop\n"
    << "    udp dport " << D << " drop\n  }\n";
  t << "  chain from_sandbox_to_host {\n"
    << "    meta nfproto ipv6 drop\n"
    // Replies on connections the host opened (ingress to a VM guest's address).
    << "    ct state established,related accept\n"
    << "    tcp dport { " << H << ", " << S << ", " << O << " } accept\n"
    << "    udp dport " << D << " accept\n"
    << "    drop\n  }\n";
  t << "  chain forward {\n    type filter hook forward priority filter; policy accept;\n"
    << "    iifname " << ifs << " jump from_sandbox\n"
    << "    oifname " << ifs << " ct state established,related accept\n"
    << "    oifname " << ifs << " drop\n  }\n";
  t << "  chain from_sandbox {\n"
    << "    meta nfproto ipv6 drop\n"
    << "    meta l4proto tcp drop\n"  // TCP is redirected to the proxy, never forwarded
    << "    ip daddr @internal drop\n";
  if (!spec.allow_private.empty()) t << "    ip daddr @allow_private iifname vmap @sandboxes\n";
  t << "    ip daddr @always_deny drop\n"
    << "    iifname vmap @sandboxes\n"
    << "    drop\n  }\n";
  t << "  chain postrouting {\n    type nat hook postrouting priority srcnat; policy accept;\n"
    << "    ip saddr " << spec.subnet.ToString() << " oifname != " << ifs << " masquerade\n  }\n";
  t << "}\n";
  return out + t.str();
}

std::string AddSandboxScript(const TableSpec& t, const SandboxRules& sb) {
  std::ostringstream o;
  RefreshInternal(o, t);
  // `add chain` of a chain that exists is no error; the flush empties a leftover's rules.
  o << "add chain inet " << t.name << " " << ChainName(sb) << "\n"
    << "flush chain inet " << t.name << " " << ChainName(sb) << "\n";
  AddChainRules(o, t, sb);
  o << "add element inet " << t.name << " sandboxes { " << Quoted(sb.host_if) << " : goto "
    << ChainName(sb) << " }\n"
    << "add element inet " << t.name << " sources { " << SourceElement(sb) << " }\n";
  return o.str();
}

std::string UpdateSandboxScript(const TableSpec& t, const SandboxRules& sb) {
  std::ostringstream o;
  RefreshInternal(o, t);
  o << "flush chain inet " << t.name << " " << ChainName(sb) << "\n";
  AddChainRules(o, t, sb);
  return o.str();
}

std::string RemoveSandboxScript(const TableSpec& t, const SandboxRules& sb) {
  std::ostringstream o;
  RefreshInternal(o, t);
  // The map's element refers to the chain: it goes first, in the same transaction.
  o << "delete element inet " << t.name << " sandboxes { " << Quoted(sb.host_if) << " }\n"
    << "delete element inet " << t.name << " sources { " << SourceElement(sb) << " }\n"
    << "delete chain inet " << t.name << " " << ChainName(sb) << "\n";
  return o.str();
}

}  // namespace space::net
