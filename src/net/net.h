// net: sandbox networking — each networked sandbox's namespace and routed veth, the
// nftables table spaced owns, the egress proxy every TCP flow of a sandbox is redirected
// to, and the DNS forwarder that answers its queries. See docs/networking.md.
//
// Network owns everything it creates on the host and names it after the data dir's tag
// (so two daemons on one host never touch each other's): namespaces
// /run/netns/space-<tag>-<sandbox>, host-side veths s<tag>-<slot>, the table
// `inet space_<tag>`. It keeps no state that matters only in memory: a sandbox's slot and
// policy live in its record (core), and Reconcile() rebuilds the rest after a restart.
// The data plane starts on first use, so a daemon whose sandboxes have no network makes
// no table and opens no port. Thread-safe; Attach/Update/Detach block for a few ms (they
// run `ip` and `nft`); attaches and detaches of different sandboxes overlap but for their
// nft transaction.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/common.h"
#include "common/json.h"
#include "net/policy.h"

namespace space::net {

struct Options {
  std::string state_dir;                 // absolute; e.g. DATA/net (ruleset, CA keys)
  std::string tag;                       // 6 hex chars naming this daemon's host objects
  Cidr subnet{0x0AD50000u, 16};          // 10.213.0.0/16: one /31 per sandbox
  std::string dns_upstream;              // "a.b.c.d[:port]"; "" = the host's resolv.conf
  std::vector<Cidr> allow_private;       // opened out of the always-denied set
  std::string egress_ca_file;            // extra trust for upstream TLS (secrets)
  Presets presets;                       // see ResolvePresets
};

// The tag for a data dir: 6 hex chars of a hash of its absolute path.
std::string TagForDataDir(const std::string& data_dir);
// Built-in presets (`github`) plus the package sources this host's own tools are configured
// with (`debian` from apt's sources, `pypi` from pip's configuration, `npm` from npm's), with
// the operator's `--egress-preset NAME=D1,D2` entries added on top. A preset the host has no
// configuration for stays empty, and asking for it is refused with a message saying so.
Presets ResolvePresets(const std::vector<std::string>& operator_presets);

// How a sandbox meets its namespace's veth: its processes live in the namespace
// (kNamespace: the namespace's eth0 holds the sandbox's address, as for oci), or a VM's
// NIC is bridged to the veth through a tap device in the namespace (kTap: the guest holds
// the address and the namespace only moves frames; the host side and its rules are the
// same).
enum class Link { kNamespace, kTap };

struct Attachment {
  int slot = 0;
  Link link = Link::kNamespace;
  std::string tap;              // kTap: the tap device in the namespace ("tap0")
  int prefix_len = 31;          // sandbox_ip/prefix_len, gateway_ip the other address
  std::string netns_path;       // /run/netns/space-<tag>-<id>
  std::string sandbox_ip;       // eth0 inside
  std::string gateway_ip;       // the host end: default route, DNS server, proxy
  std::string resolv_conf;      // the sandbox's /etc/resolv.conf
  std::map<std::string, std::string> env;  // HTTP(S)_PROXY, NO_PROXY and lower-case twins;
                                           // with secrets, the CA variables too
  // Files to place read-only in the sandbox (path inside -> content): with secrets, the
  // trust bundle holding the sandbox's CA.
  std::map<std::string, std::string> files;
};

struct LiveSandbox {
  int slot = 0;
  Link link = Link::kNamespace;
  Policy policy;
};

class Network {
 public:
  [[nodiscard]] static Result<std::unique_ptr<Network>> Create(Options opts);
  virtual ~Network() = default;

  virtual const Presets& presets() const = 0;
  // Gives sandbox `id` a namespace, a veth and its rules (slot -1: the lowest free one;
  // else that slot, which must be free). Replaces leftovers of an earlier attach of the id.
  [[nodiscard]] virtual Result<Attachment> Attach(const std::string& id, const Policy& p,
                                                  int slot = -1, Link link = Link::kNamespace) = 0;
  // New flows follow `p` at once; proxied flows it now refuses are cut, and non-TCP
  // packets are judged per packet, so those stop too.
  [[nodiscard]] virtual Status Update(const std::string& id, const Policy& p) = 0;
  // Removes the sandbox's rules, veth and namespace (call after its processes are gone).
  // Idempotent.
  [[nodiscard]] virtual Status Detach(const std::string& id) = 0;
  // After a restart: adopts exactly these sandboxes (their namespaces must exist; those
  // whose namespace is gone are re-made) and removes every other object of this tag.
  [[nodiscard]] virtual Status Reconcile(const std::map<std::string, LiveSandbox>& live) = 0;
  // {"slot","sandbox_ip","gateway_ip","decisions":[{time,proto,destination,port,name,
  // verdict,reason,bytes_out,bytes_in}]} (most recent last); null if not attached.
  virtual Json Describe(const std::string& id) const = 0;
};

}  // namespace space::net
