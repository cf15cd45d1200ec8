// Node membership and the gateways' view against real etcd. A node "cut off" from etcd
// talks to it through CutStore, which fails every call while cut, as a partition would
// (the cluster tests cut real links between namespaces; here the unit is the lease logic).
#include "cluster/membership.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>

#include "cluster/etcd_testing.h"

namespace space::cluster {
namespace {

using namespace std::chrono_literals;
using MembershipTest = testing::EtcdTest;

class CutStore final : public Store {
 public:
  explicit CutStore(Store& s) : s_(s) {}
  std::atomic<bool> cut{false};

  Result<std::optional<KeyValue>> Get(const std::string& k) override {
    if (cut) return Down();
    return s_.Get(k);
  }
  Result<std::vector<KeyValue>> List(const std::string& p, int64_t* rev) override {
    if (cut) return Down();
    return s_.List(p, rev);
  }
  Result<int64_t> Put(const std::string& k, const std::string& v, int64_t l) override {
    if (cut) return Down();
    return s_.Put(k, v, l);
  }
  Result<std::optional<int64_t>> CompareAndSet(const std::string& k, int64_t e, const std::string& v,
                                               int64_t l) override {
    if (cut) return Down();
    return s_.CompareAndSet(k, e, v, l);
  }
  Result<bool> CompareAndDelete(const std::string& k, int64_t e) override {
    if (cut) return Down();
    return s_.CompareAndDelete(k, e);
  }
  Status Delete(const std::string& k) override {
    if (cut) return Down();
    return s_.Delete(k);
  }
  Result<int64_t> GrantLease(int64_t t) override {
    if (cut) return Down();
    return s_.GrantLease(t);
  }
  Result<int64_t> KeepAlive(int64_t l) override {
    if (cut) return Down();
    return s_.KeepAlive(l);
  }
  Status RevokeLease(int64_t l) override {
    if (cut) return Down();
    return s_.RevokeLease(l);
  }
  Result<std::unique_ptr<Watch>> WatchPrefix(const std::string& p, int64_t a, WatchHandlers h) override {
    return s_.WatchPrefix(p, a, std::move(h));
  }

 private:
  static tl::unexpected<Error> Down() { return Fail(Errc::kUnavailable, "cut off"); }
  Store& s_;
};

NodeOptions Node(const std::string& name, std::vector<std::string> owned = {}) {
  NodeOptions o;
  o.prefix = "/t/";
  o.name = name;
  o.lease_ttl_s = 2;
  o.publish_interval_ms = 300;
  o.describe = [name] { return Json{{"address", name + ".test:7070"}, {"free_memory", 1 << 30}}; };
  o.owned = [owned] { return owned; };
  return o;
}

using testing::Eventually;

TEST_F(MembershipTest, NodesAppearInTheViewAndRoutesAreExclusive) {
  Start(1);
  if (IsSkipped() || HasFatalFailure()) return;
  auto view = ClusterView::Open(st(), "/t/");
  ASSERT_TRUE(view) << view.error().message;
  auto n1 = NodeMembership::Join(st(), Node("n1"));
  auto n2 = NodeMembership::Join(st(), Node("n2"));
  ASSERT_TRUE(n1 && n2);
  ASSERT_TRUE(Eventually([&] { return (*view)->Nodes().size() == 2; }));
  EXPECT_EQ((*view)->Nodes()["n1"].value("address", ""), "n1.test:7070");

  ASSERT_TRUE((*n1)->ClaimRoute("sb-1"));
  EXPECT_TRUE((*n1)->ClaimRoute("sb-1")) << "a claim again by its holder is fine";
  auto other = (*n2)->ClaimRoute("sb-1");
  ASSERT_FALSE(other);
  EXPECT_EQ(other.error().code, Errc::kConflict);
  EXPECT_NE(other.error().message.find("n1"), std::string::npos) << other.error().message;
  ASSERT_TRUE(Eventually([&] { return (*view)->RouteOf("sb-1") == std::optional<std::string>("n1"); }));
  // Released by its holder only.
  ASSERT_TRUE((*n2)->ReleaseRoute("sb-1"));
  EXPECT_TRUE(*st().Get("/t/routes/sb-1"));
  ASSERT_TRUE((*n1)->ReleaseRoute("sb-1"));
  ASSERT_TRUE(Eventually([&] { return !(*view)->RouteOf("sb-1"); }));
  ASSERT_TRUE((*n2)->ClaimRoute("sb-1"));
  ASSERT_TRUE(Eventually([&] { return (*view)->RouteOf("sb-1") == std::optional<std::string>("n2"); }));
  // Leaving (destruction) revokes the lease: the node and its routes go at once.
  n2->reset();
  ASSERT_TRUE(Eventually([&] { return !(*view)->RouteOf("sb-1") && (*view)->Nodes().size() == 1; }, 3s));

  EXPECT_EQ(NodeMembership::Join(st(), Node("Bad_Name")).error().code, Errc::kInvalidArgument);
  // Kubernetes' node names are DNS names.
  EXPECT_TRUE(CheckNodeName("ip-10-0-1-2.ec2.internal"));
  for (const char* bad : {"", ".a", "a.", "a..b", "-a", "a-.b", "A.b", "a_b"})
    EXPECT_FALSE(CheckNodeName(bad)) << bad;
  EXPECT_FALSE(CheckNodeName(std::string(64, 'a'))) << "a label is at most 63";
}

// Cut off: the node fences itself once its TTL has passed, the cluster drops it and its
// routes; back, it registers again, claims back what is still its own, and hears of what
// the cluster gave to another node meanwhile.
TEST_F(MembershipTest, ACutOffNodeFencesItselfAndReconcilesWhenBack) {
  Start(1);
  if (IsSkipped() || HasFatalFailure()) return;
  auto view = ClusterView::Open(st(), "/t/");
  ASSERT_TRUE(view);
  CutStore link(st());
  std::mutex mu;
  std::vector<std::string> given_up;
  NodeOptions o = Node("n1", {"sb-a", "sb-b"});
  o.on_given_up = [&](const std::vector<std::string>& ids) {
    std::lock_guard l(mu);
    given_up = ids;
  };
  auto n1 = NodeMembership::Join(link, o);
  ASSERT_TRUE(n1) << n1.error().message;
  ASSERT_TRUE(Eventually([&] { return (*view)->RouteOf("sb-a") && (*view)->RouteOf("sb-b"); }));
  auto n2 = NodeMembership::Join(st(), Node("n2"));
  ASSERT_TRUE(n2);
  EXPECT_FALSE((*n1)->fenced());

  link.cut = true;
  ASSERT_TRUE(Eventually([&] { return (*n1)->fenced(); }, 4s));
  EXPECT_EQ((*n1)->ClaimRoute("sb-new").error().code, Errc::kUnavailable);
  // The cluster's side: node and routes gone with the lease.
  ASSERT_TRUE(Eventually([&] { return !(*view)->RouteOf("sb-a") && !(*view)->Nodes().count("n1"); }, 6s));
  // The cluster gives sb-b to another node meanwhile.
  ASSERT_TRUE((*n2)->ClaimRoute("sb-b"));

  link.cut = false;
  // on_given_up runs once every route has been tried, which may be after the view sees
  // sb-a come back: wait for both.
  ASSERT_TRUE(Eventually([&] {
    std::lock_guard l(mu);
    return !given_up.empty() && !(*n1)->fenced() &&
           (*view)->RouteOf("sb-a") == std::optional<std::string>("n1");
  }));
  EXPECT_EQ((*view)->RouteOf("sb-b"), std::optional<std::string>("n2")) << "a route moved back";
  std::lock_guard l(mu);
  EXPECT_EQ(given_up, std::vector<std::string>{"sb-b"});
}

// A node that restarts (its earlier process died without leaving) replaces its earlier
// registration at once rather than waiting for that lease to run out.
TEST_F(MembershipTest, ARestartedNodeReplacesItsEarlierRegistration) {
  Start(1);
  if (IsSkipped() || HasFatalFailure()) return;
  CutStore dead_link(st());
  auto before = NodeMembership::Join(dead_link, Node("n1", {"sb-x"}));
  ASSERT_TRUE(before);
  const int64_t old_lease = (*before)->lease();
  dead_link.cut = true;  // it dies: nothing more reaches etcd, not even a revoke
  before->reset();
  auto after = NodeMembership::Join(st(), Node("n1", {"sb-x"}));
  ASSERT_TRUE(after) << after.error().message;
  EXPECT_NE((*after)->lease(), old_lease);
  auto route = st().Get("/t/routes/sb-x");
  ASSERT_TRUE(route && *route);
  EXPECT_EQ((*route)->lease, (*after)->lease());
  EXPECT_EQ(st().KeepAlive(old_lease).error().code, Errc::kNotFound) << "the old lease lives on";
}

}  // namespace
}  // namespace space::cluster
