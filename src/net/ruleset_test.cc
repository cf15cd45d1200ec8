// The nftables table kept one sandbox at a time (ruleset.cc, network.cc): a sandbox's
// script does not grow with the others, and after any mix of attaches, updates and detaches
// (also concurrent ones, and after the table was changed by hand) the live table is the
// one a full rewrite makes. Drives net::Network against the host's real nft and ip (root).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <thread>

#include "net/internal.h"
#include "net/net.h"
#include "sys/sys.h"

namespace space::net {
namespace {

Policy Parse(const Json& j) {
  auto p = ParsePolicy(j, Presets{});
  EXPECT_TRUE(p) << (p ? "" : p.error().message);
  return p ? *p : Policy{};
}

TEST(RulesetScripts, ASandboxsScriptNamesOnlyItself) {
  TableSpec t;
  t.name = "space_abcdef";
  t.ifs = "sabcdef-*";
  t.subnet = *ParseCidr("10.219.0.0/24");
  SandboxRules a{7, "sabcdef-7", *ParseIpv4("10.219.0.15"),
                 Parse({{"allow_out", {"203.0.113.0/24"}}, {"deny_out", {"198.51.100.0/24"}}})};
  SandboxRules b{9, "sabcdef-9", *ParseIpv4("10.219.0.19"), Parse({{"mode", "internet"}})};
  std::string add = AddSandboxScript(t, a);
  EXPECT_NE(add.find("add chain inet space_abcdef sb_7"), std::string::npos) << add;
  EXPECT_NE(add.find("ip daddr { 203.0.113.0/24 } accept"), std::string::npos) << add;
  EXPECT_NE(add.find("\"sabcdef-7\" : goto sb_7"), std::string::npos) << add;
  EXPECT_NE(add.find("\"sabcdef-7\" . 10.219.0.15"), std::string::npos) << add;
  EXPECT_EQ(add.find("sb_9"), std::string::npos) << add;
  std::string rm = RemoveSandboxScript(t, a);
  EXPECT_LT(rm.find("delete element inet space_abcdef sandboxes"), rm.find("delete chain")) << rm;
  EXPECT_EQ(UpdateSandboxScript(t, b).find("sb_7"), std::string::npos);
  // The whole table holds both; with none, only its removal.
  std::string full = FullTableScript(t, {a, b});
  EXPECT_NE(full.find("chain sb_7"), std::string::npos);
  EXPECT_NE(full.find("chain sb_9"), std::string::npos);
  EXPECT_EQ(FullTableScript(t, {}), "add table inet space_abcdef\ndelete table inet space_abcdef\n");
}

// The host's IPv4 addresses as spaced reads them (one RTM_GETADDR dump) are getifaddrs's.
TEST(HostAddrs, SameAsGetifaddrs) {
  auto from_getifaddrs = [] {
    std::vector<uint32_t> v;
    ifaddrs* ifa = nullptr;
    if (::getifaddrs(&ifa) != 0) return v;
    for (ifaddrs* i = ifa; i; i = i->ifa_next) {
      if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET)
        v.push_back(ntohl(reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr));
    }
    ::freeifaddrs(ifa);
    std::sort(v.begin(), v.end());
    return v;
  };
  Shared shared(Options{});
  std::vector<uint32_t> ours, theirs;
  // Other tests add and remove interfaces meanwhile: equal in one of a few tries.
  for (int i = 0; i < 20; ++i) {
    theirs = from_getifaddrs();
    ours = shared.RefreshHostAddrs();
    std::sort(ours.begin(), ours.end());
    if (ours == theirs) break;
    ::usleep(100000);
  }
  EXPECT_EQ(ours, theirs);
  EXPECT_NE(std::find(ours.begin(), ours.end(), 0x7F000001u), ours.end()) << "127.0.0.1";
}

std::string Sh(const std::string& cmd, int* code = nullptr) {
  sys::SpawnOptions so;
  so.argv = {"/bin/sh", "-c", cmd + " 2>&1"};
  auto r = sys::Run(so, 30000);
  if (code) *code = r ? r->exit_code : -1;
  return r ? r->out : "";
}

// The table as nft lists it, with what differs between two equal tables (handles, the order
// of chains and elements) taken out: chains by name, each with its rules in order; sets and
// maps by name with their elements sorted.
Json Normalised(const std::string& table) {
  int code = 0;
  std::string out = Sh("nft -j list table inet " + table, &code);
  if (code != 0) return nullptr;
  Json j = Json::parse(out, nullptr, false);
  if (j.is_discarded() || !j.contains("nftables")) return nullptr;
  Json norm = Json::object();
  for (const Json& item : j["nftables"]) {
    for (const char* kind : {"chain", "rule", "set", "map"}) {
      if (!item.contains(kind)) continue;
      Json o = item[kind];
      o.erase("handle");
      if (std::string(kind) == "rule") {
        norm["rules:" + o["chain"].get<std::string>()].push_back(o["expr"]);
      } else {
        if (o.contains("elem")) {
          std::vector<std::string> e;
          for (const Json& x : o["elem"]) e.push_back(x.dump());
          std::sort(e.begin(), e.end());
          o["elem"] = e;
        }
        norm[std::string(kind) + ":" + o["name"].get<std::string>()] = o;
      }
    }
  }
  return norm;
}

// Each test's own tag (from its pid: ctest runs the two at once, in two processes) and
// subnet (two daemons' veths with the same addresses would meet in the host's routes).
class RulesetLive : public ::testing::Test {
 protected:
  explicit RulesetLive(const char* subnet) : subnet_(*ParseCidr(subnet)) {}
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (namespaces, veths, nftables)";
    for (const char* tool : {"nft", "ip"}) {
      int code = 0;
      Sh(std::string("command -v ") + tool, &code);
      if (code != 0) GTEST_SKIP() << "needs " << tool << " (make deps)";
    }
    auto dir = sys::TempDir::Create("/tmp", "space-ruleset-");
    ASSERT_TRUE(dir);
    tmp_ = std::make_unique<sys::TempDir>(std::move(*dir));
    Options o;
    o.state_dir = tmp_->path() + "/net";
    char tag[16];
    std::snprintf(tag, sizeof tag, "%06x", static_cast<unsigned>(::getpid()) & 0xffffffu);
    o.tag = tag;
    o.subnet = subnet_;
    o.dns_upstream = "127.0.0.1:53";
    tag_ = o.tag;
    auto n = Network::Create(o);
    ASSERT_TRUE(n) << n.error().message;
    net_ = std::move(*n);
  }
  void TearDown() override {
    if (!net_) return;
    for (const auto& id : attached_) (void)net_->Detach(id);
    net_.reset();
    // Whatever is left is a bug the assertions below name; clean it anyway.
    Sh("nft delete table inet " + table());
    Sh("for n in $(ip netns list | awk '{print $1}' | grep '^space-" + tag_ + "-'); do ip netns del $n; done");
  }
  std::string table() const { return "space_" + tag_; }
  bool TableExists() {
    int code = 0;
    Sh("nft list table inet " + table(), &code);
    return code == 0;
  }
  std::string Leftovers() {
    return Sh("ip netns list | grep space-" + tag_ + "- ; ip -o link | grep s" + tag_ + "- ; true");
  }
  void Attach(const std::string& id, const Json& policy) {
    auto a = net_->Attach(id, Parse(policy));
    ASSERT_TRUE(a) << a.error().message;
    attached_.push_back(id);
    live_[id] = {a->slot, Link::kNamespace, Parse(policy)};
  }
  void Detach(const std::string& id) {
    ASSERT_TRUE(net_->Detach(id));
    attached_.erase(std::remove(attached_.begin(), attached_.end(), id), attached_.end());
    live_.erase(id);
  }
  // The live table equals the one Reconcile writes whole from the same sandboxes.
  void ExpectSameAsFullRewrite() {
    Json kept = Normalised(table());
    ASSERT_FALSE(kept.is_null());
    ASSERT_TRUE(net_->Reconcile(live_));
    Json full = Normalised(table());
    // `internal` holds the host's addresses of the moment, which other tests' veths change.
    for (Json* t : {&kept, &full}) {
      ASSERT_TRUE(t->contains("set:internal"));
      EXPECT_NE((*t)["set:internal"].dump().find(Ipv4ToString(subnet_.addr)), std::string::npos) << t->dump();
      (*t)["set:internal"].erase("elem");
    }
    EXPECT_EQ(kept, full) << "kept:\n" << kept.dump(1) << "\nwritten whole:\n" << full.dump(1);
  }

  const Cidr subnet_;
  std::unique_ptr<sys::TempDir> tmp_;
  std::unique_ptr<Network> net_;
  std::string tag_;
  std::vector<std::string> attached_;
  std::map<std::string, LiveSandbox> live_;
};

class RulesetKept : public RulesetLive {
 protected:
  RulesetKept() : RulesetLive("10.219.0.0/25") {}
};
class RulesetConcurrent : public RulesetLive {
 protected:
  RulesetConcurrent() : RulesetLive("10.219.0.128/25") {}
};

TEST_F(RulesetKept, TableEqualsAFullRewrite) {
  Attach("a", {{"mode", "internet"}});
  Attach("b", {{"allow_out", {"203.0.113.0/24"}}});
  Attach("c", {{"mode", "internet"}, {"deny_out", {"198.51.100.0/24"}}});
  ExpectSameAsFullRewrite();
  Json chains = Normalised(table());
  EXPECT_TRUE(chains.contains("chain:sb_1") && chains.contains("chain:sb_2") && chains.contains("chain:sb_3"));

  // A new policy rewrites only b's chain; a detach takes a's chain and elements away.
  Policy nb = Parse({{"mode", "internet"}, {"deny_out", {"203.0.113.7/32"}}});
  ASSERT_TRUE(net_->Update("b", nb));
  live_["b"].policy = nb;
  Detach("a");
  ExpectSameAsFullRewrite();
  Json after = Normalised(table());
  EXPECT_FALSE(after.contains("chain:sb_1"));
  EXPECT_NE(after["map:sandboxes"].dump().find("s" + tag_ + "-2"), std::string::npos);
  EXPECT_EQ(after["map:sandboxes"].dump().find("s" + tag_ + "-1\""), std::string::npos);

  // The freed slot is taken again.
  Attach("d", {{"mode", "internet"}});
  EXPECT_EQ(live_["d"].slot, 1);
  ExpectSameAsFullRewrite();

  // Changed by hand (an element gone): the next change still leaves the right table.
  Sh("nft delete element inet " + table() + " sandboxes '{ \"s" + tag_ + "-3\" }'");
  Detach("c");
  ExpectSameAsFullRewrite();

  Detach("b");
  Detach("d");
  EXPECT_FALSE(TableExists()) << "the last detach removes the table";
  EXPECT_EQ(Leftovers(), "");
}

TEST_F(RulesetConcurrent, AttachesAndDetaches) {
  constexpr int kN = 8;
  std::vector<std::thread> ts;
  std::vector<std::string> errors(kN);
  std::vector<int> slots(kN);
  for (int i = 0; i < kN; ++i) {
    ts.emplace_back([&, i] {
      Json pol = i % 2 ? Json{{"mode", "internet"}} : Json{{"allow_out", {"203.0.113.0/24"}}};
      auto a = net_->Attach("p" + std::to_string(i), Parse(pol));
      if (!a) errors[i] = a.error().message;
      else slots[i] = a->slot;
    });
  }
  for (auto& t : ts) t.join();
  for (int i = 0; i < kN; ++i) {
    ASSERT_EQ(errors[i], "") << i;
    attached_.push_back("p" + std::to_string(i));
    Json pol = i % 2 ? Json{{"mode", "internet"}} : Json{{"allow_out", {"203.0.113.0/24"}}};
    live_["p" + std::to_string(i)] = {slots[i], Link::kNamespace, Parse(pol)};
  }
  std::vector<int> sorted = slots;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::unique(sorted.begin(), sorted.end()), sorted.end()) << "two sandboxes share a slot";
  // Every namespace has its own address on eth0, and its host end is up.
  for (int i = 0; i < kN; ++i) {
    std::string ns = "space-" + tag_ + "-p" + std::to_string(i);
    std::string addr = Sh("ip -n " + ns + " -4 -o addr show dev eth0");
    uint32_t want = subnet_.addr + 2u * static_cast<uint32_t>(slots[i]) + 1;
    EXPECT_NE(addr.find(Ipv4ToString(want) + "/31"), std::string::npos) << ns << ": " << addr;
  }
  ExpectSameAsFullRewrite();
  ts.clear();
  for (int i = 0; i < kN; ++i) {
    ts.emplace_back([&, i] {
      auto st = net_->Detach("p" + std::to_string(i));
      if (!st) errors[i] = st.error().message;
    });
  }
  for (auto& t : ts) t.join();
  for (int i = 0; i < kN; ++i) EXPECT_EQ(errors[i], "") << i;
  attached_.clear();
  EXPECT_FALSE(TableExists());
  EXPECT_EQ(Leftovers(), "");
}

}  // namespace
}  // namespace space::net
