// microVM networking end to end (docs/networking.md, "microVMs"): real QEMU guests whose NIC
// sits on a tap bridged to the sandbox's veth, against the fake internet of fakenet.h. The
// host side (rules, proxy, DNS) is the one oci sandboxes use, so these cases check what is
// particular to a VM: the guest takes its address, resolver and CA from spaced, cannot pose
// as another address, keeps its policy and address across suspend/wake and a restart of
// spaced, gets a new address in a fork, and serves ports at its own address. Kept few: every
// VM costs seconds under TCG.
#include <dirent.h>

#include <set>

#include "net/net.h"
#include "tests/integration/fakenet.h"
#include "tests/integration/harness.h"

namespace space::testing {
namespace {

// The transparent path: no proxy variables (busybox wget would honour them).
const std::string kNoProxy = "unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY; ";

class MicrovmNetworkTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string why;
    if (!CanRunVms(&why)) {
      skip_ = why;
      return;
    }
    if (!Have("nft") || !Have("dnsmasq") || !Have("openssl")) {
      skip_ = "needs nft, dnsmasq and openssl (make deps)";
      return;
    }
    setup_error_ = StartNetworkSuite({"--sandbox-subnet", "10.215.0.0/24"}, daemon_, net_, tmp_);
  }
  static void TearDownTestSuite() { StopNetworkSuite(daemon_, net_, tmp_); }
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    ASSERT_TRUE(setup_error_.empty()) << setup_error_;
    ASSERT_NE(daemon_, nullptr);
  }
  client::Client& c() { return daemon_->client(); }
  std::string tag() const { return net::TagForDataDir(*sys::RealPath(daemon_->data_dir())); }

  std::string Create(const Json& network) {
    return CreateSandbox(c(), {{"runtime", "microvm"},
                               {"limits", {{"memory_bytes", 256 << 20}}},
                               {"network", network}});
  }
  client::Client::RunOutput Run(const std::string& id, const std::string& cmd) {
    auto r = c().Run(id, Json{{"cmd", cmd}});
    EXPECT_TRUE(r) << (r ? "" : r.error().message);
    return r ? *r : client::Client::RunOutput{};
  }
  std::string SandboxIp(const std::string& id) {
    auto sb = c().GetSandbox(id);
    return sb && (*sb)["network"].contains("sandbox_ip") ? (*sb)["network"]["sandbox_ip"].get<std::string>() : "";
  }
  // What the host has of this daemon's tag: namespaces and host-side veths.
  std::set<std::string> HostObjects() {
    std::set<std::string> out;
    for (const char* dir : {"/run/netns", "/sys/class/net"}) {
      if (DIR* d = ::opendir(dir)) {
        while (dirent* e = ::readdir(d)) {
          std::string n = e->d_name;
          if (n.rfind("space-" + tag() + "-", 0) == 0 || n.rfind("s" + tag() + "-", 0) == 0) out.insert(n);
        }
        ::closedir(d);
      }
    }
    return out;
  }
  // The guest reaches the allowed server and not the denied one (no byte reaches it).
  void ExpectPolicy(const std::string& id, const std::string& what) {
    SCOPED_TRACE(what);
    auto r = Run(id, kNoProxy + "wget -q -O - http://203.0.113.10/" + what);
    EXPECT_NE(r.out.find("GET /" + what), std::string::npos) << r.out << r.err;
    int before = net_->Count("203.0.113.66:80");
    r = Run(id, kNoProxy + "wget -q -O - http://203.0.113.66/" + what + "; echo rc=$?");
    EXPECT_NE(r.out.find("rc=1"), std::string::npos) << r.out << r.err;
    EXPECT_EQ(net_->Count("203.0.113.66:80"), before) << "a byte reached the denied server";
  }

  static inline Daemon* daemon_ = nullptr;
  static inline FakeNet* net_ = nullptr;
  static inline sys::TempDir* tmp_ = nullptr;
  static inline std::string skip_, setup_error_;
};

TEST_F(MicrovmNetworkTest, GuestTakesItsAddressAndThePolicyHolds) {
  std::string id = Create({{"mode", "internet"}, {"deny_out", {"203.0.113.66/32"}}});
  ASSERT_FALSE(id.empty());
  std::string ip = SandboxIp(id);
  ASSERT_FALSE(ip.empty());
  // The guest's eth0 holds the sandbox's address; its resolver is spaced's forwarder.
  auto r = Run(id, "ip -4 -o addr show dev eth0; cat /etc/resolv.conf; ip route");
  EXPECT_NE(r.out.find(ip + "/31"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.out.find("nameserver "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("default via"), std::string::npos) << r.out;
  ExpectPolicy(id, "first");
  // By name, through spaced's DNS forwarder and the fake upstream.
  r = Run(id, kNoProxy + "wget -q -O - http://api.example.test/byname");
  EXPECT_NE(r.out.find("GET /byname"), std::string::npos) << r.out << r.err;
  // The explicit proxy of the environment answers a refusal with its reason.
  r = Run(id, "wget -O - http://203.0.113.66/why 2>&1");
  EXPECT_NE(r.out.find("403"), std::string::npos) << r.out;
  // Root in the guest can add addresses and route from them, but packets from any but its
  // own are dropped. UDP shows it (TCP would meet the proxy, which knows no such sender):
  // allowed datagrams are routed, so without the check a spoofed one would arrive.
  const std::string udp = "timeout 3 tftp -g -r probe -l /tmp/probe 203.0.113.10 7; ";
  int datagrams = net_->Count("203.0.113.10:7", "udp");
  r = Run(id, udp);
  EXPECT_GT(net_->Count("203.0.113.10:7", "udp"), datagrams) << r.out << r.err;
  datagrams = net_->Count("203.0.113.10:7", "udp");
  r = Run(id, "gw=$(ip route | awk '/^default/ {print $3}'); ip addr add 10.215.0.200/32 dev eth0 && "
              "ip route change default via $gw dev eth0 src 10.215.0.200 && " + udp +
              "ip route change default via $gw dev eth0 src " + ip + "; ip addr del 10.215.0.200/32 dev eth0; "
              "ip route | grep -c 'src 10.215.0.200'");
  EXPECT_NE(r.out.find("0\n"), std::string::npos) << r.out << r.err;
  EXPECT_EQ(net_->Count("203.0.113.10:7", "udp"), datagrams) << "a spoofed source reached the internet";
  r = Run(id, "echo hi | nc -w 3 203.0.113.10 2222");
  EXPECT_NE(r.out.find("SSH-2.0-fakenet"), std::string::npos) << r.out << r.err;
  // Live update: the denied address is allowed from now on.
  auto u = c().Call("PUT", "/v1/sandboxes/" + id + "/network", Json{{"deny_out", Json::array()}});
  ASSERT_TRUE(u) << u.error().message;
  r = Run(id, kNoProxy + "wget -q -O - http://203.0.113.66/now-allowed");
  EXPECT_NE(r.out.find("GET /now-allowed"), std::string::npos) << r.out << r.err;
  ASSERT_TRUE(c().DeleteSandboxAndWait(id, 60s));
  EXPECT_EQ(HostObjects(), std::set<std::string>{});
}

TEST_F(MicrovmNetworkTest, PortsAreServedFromTheGuestsAddress) {
  std::string id = Create({{"mode", "internet"}});
  ASSERT_FALSE(id.empty());
  auto srv = c().StartCommand(id, {{"cmd", "mkdir -p /tmp/www && echo hello-from-guest > /tmp/www/index.html && "
                                           "exec httpd -f -p 8080 -h /tmp/www"}});
  ASSERT_TRUE(srv) << srv.error().message;
  const std::string base = daemon_->url() + "/v1/sandboxes/" + id + "/ports/";
  const std::string auth = " -H 'Authorization: Bearer " + daemon_->api_key() + "' ";
  std::string out;
  for (int i = 0; i < 50; ++i) {
    out = Sh("curl -sS --max-time 5" + auth + base + "8080/index.html 2>&1");
    if (out.find("hello-from-guest") != std::string::npos) break;
    std::this_thread::sleep_for(200ms);
  }
  EXPECT_NE(out.find("hello-from-guest"), std::string::npos) << out;
  ExpectLoopbackServiceByUrl(c(), id, base, auth);
  // No listener: 502 with an explanation.
  out = Sh("curl -sS -o /dev/null -w '%{http_code}' --max-time 10" + auth + base + "8099/");
  EXPECT_EQ(out, "502") << out;
  // A microVM without network has no address to serve from.
  std::string none = CreateSandbox(c(), {{"runtime", "microvm"}, {"limits", {{"memory_bytes", 256 << 20}}}});
  ASSERT_FALSE(none.empty());
  out = Sh("curl -sS --max-time 10" + auth + daemon_->url() + "/v1/sandboxes/" + none + "/ports/8080/ -w ' %{http_code}'");
  EXPECT_NE(out.find("501"), std::string::npos) << out;
  // ... and no way out.
  auto r = Run(none, kNoProxy + "wget -q -O - http://203.0.113.10/none; echo rc=$?");
  EXPECT_NE(r.out.find("rc=1"), std::string::npos) << r.out << r.err;
  ASSERT_TRUE(c().DeleteSandboxAndWait(none, 60s));
  ASSERT_TRUE(c().DeleteSandboxAndWait(id, 60s));
}

TEST_F(MicrovmNetworkTest, ForkSuspendWakeAndRestartKeepThePolicy) {
  std::string id = Create({{"mode", "internet"}, {"deny_out", {"203.0.113.66/32"}}});
  ASSERT_FALSE(id.empty());
  const std::string ip = SandboxIp(id);
  ExpectPolicy(id, "parent");
  // A fork is another sandbox: its own address, the same policy.
  auto forks = c().ForkAndWait(id, 1);
  ASSERT_TRUE(forks) << forks.error().message;
  ASSERT_EQ(forks->size(), 1u);
  const std::string child = (*forks)[0].id;
  ASSERT_EQ((*forks)[0].state, "running") << (*forks)[0].error;
  const std::string child_ip = SandboxIp(child);
  EXPECT_FALSE(child_ip.empty());
  EXPECT_NE(child_ip, ip);
  auto r = Run(child, "ip -4 -o addr show dev eth0");
  EXPECT_NE(r.out.find(child_ip + "/31"), std::string::npos) << r.out << r.err;
  EXPECT_EQ(r.out.find(ip + "/"), std::string::npos) << "the fork kept its parent's address: " << r.out;
  ExpectPolicy(child, "fork");
  ExpectPolicy(id, "parent-after-fork");
  // Suspend (the VM's process ends) and wake: the same address, the same rules.
  ASSERT_TRUE(c().TransitionAndWait(id, client::Transition::kSuspend));
  ASSERT_TRUE(c().TransitionAndWait(id, client::Transition::kWake));
  EXPECT_EQ(SandboxIp(id), ip);
  ExpectPolicy(id, "woken");
  // spaced killed and restarted: running guests keep their network, and the rules are
  // rebuilt; a VM suspended across the restart wakes onto its network too.
  ASSERT_TRUE(c().TransitionAndWait(child, client::Transition::kSuspend));
  daemon_->Kill();
  ASSERT_TRUE(daemon_->Start());
  ExpectPolicy(id, "after-restart");
  ASSERT_TRUE(c().TransitionAndWait(child, client::Transition::kWake));
  ExpectPolicy(child, "fork-woken-after-restart");
  ASSERT_TRUE(c().DeleteSandboxAndWait(child, 60s));
  ASSERT_TRUE(c().DeleteSandboxAndWait(id, 60s));
  EXPECT_EQ(HostObjects(), std::set<std::string>{});
  const std::string table = Sh("nft list table inet space_" + tag() + " 2>&1");
  EXPECT_NE(table.find("No such file"), std::string::npos) << "the table outlived its sandboxes: " << table;
}

}  // namespace
}  // namespace space::testing
