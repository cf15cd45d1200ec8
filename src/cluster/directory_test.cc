// cluster::Directory against real etcd: two nodes' directories on one prefix, each on its
// own connection, as two spaced nodes would have them.
#include "cluster/directory.h"

#include <gtest/gtest.h>

#include <thread>

#include "cluster/etcd_testing.h"

namespace space::cluster {
namespace {

using namespace std::chrono_literals;
using testing::Eventually;

class DirectoryTest : public testing::EtcdTest {
 protected:
  std::unique_ptr<Store> Connect() {
    auto s = OpenEtcd({.endpoints = etcd_.Endpoints(), .request_timeout_ms = 2000});
    EXPECT_TRUE(s) << s.error().message;
    return s ? std::move(*s) : nullptr;
  }
};

TEST_F(DirectoryTest, AWriteOnOneNodeIsReadOnAnotherAtOnceAndRemovalsReachEveryNode) {
  Start(1);
  if (IsSkipped() || HasFatalFailure()) return;
  auto sa = Connect(), sb = Connect();
  ASSERT_TRUE(sa && sb);
  auto a = Directory::Open(*sa, "/t/access/");
  auto b = Directory::Open(*sb, "/t/access/");
  ASSERT_TRUE(a && b);

  // Created on a, read on b before its watch could have brought it: b asks the store.
  auto made = (*a)->Create("keys/h1", "one");
  ASSERT_TRUE(made && *made);
  auto got = (*b)->Get("keys/h1");
  ASSERT_TRUE(got && *got) << (got ? "absent" : got.error().message);
  EXPECT_EQ((*got)->value, "one");
  // Only once: a second create of the same name fails, on either node.
  auto again = (*b)->Create("keys/h1", "two");
  ASSERT_TRUE(again);
  EXPECT_FALSE(*again);

  ASSERT_TRUE((*a)->Create("keys/h2", "deux").value());
  ASSERT_TRUE((*a)->Create("other/x", "x").value());
  EXPECT_TRUE(Eventually([&] { return (*b)->List("keys/").size() == 2; }));
  auto keys = (*b)->List("keys/");
  EXPECT_EQ(keys.count("keys/h1") + keys.count("keys/h2"), 2u);

  // Removed on b: gone on b at once, on a as soon as its watch hears of it, and not
  // brought back by the late event of its creation.
  auto rm = (*b)->Remove("keys/h1");
  ASSERT_TRUE(rm && *rm);
  auto on_b = (*b)->Get("keys/h1");
  ASSERT_TRUE(on_b);
  EXPECT_FALSE(*on_b);
  EXPECT_TRUE(Eventually([&] {
    auto g = (*a)->Get("keys/h1");
    return g && !*g;
  }));
  EXPECT_EQ((*a)->List("keys/").size(), 1u);

  // Removal by revision: refused when the entry changed since.
  auto h2 = (*a)->Get("keys/h2");
  ASSERT_TRUE(h2 && *h2);
  ASSERT_TRUE(sa->Put("/t/access/keys/h2", "changed"));
  auto stale = (*a)->Remove("keys/h2", (*h2)->mod_revision);
  ASSERT_TRUE(stale);
  EXPECT_FALSE(*stale);
  EXPECT_TRUE(Eventually([&] {
    auto g = (*a)->Get("keys/h2");
    return g && *g && (*g)->value == "changed";
  }));
}

TEST_F(DirectoryTest, LeasedEntriesGoWithTheirLeaseAndTheCacheAnswersWhileEtcdIsDown) {
  Start(1);
  if (IsSkipped() || HasFatalFailure()) return;
  auto sa = Connect();
  ASSERT_TRUE(sa);
  auto a = Directory::Open(*sa, "/t/access/");
  ASSERT_TRUE(a);
  auto lease = sa->GrantLease(2);
  ASSERT_TRUE(lease);
  ASSERT_TRUE((*a)->Create("sessions/s1", "v", *lease).value());
  ASSERT_TRUE((*a)->Create("keys/k", "key").value());
  EXPECT_TRUE(Eventually([&] {
    auto g = (*a)->Get("sessions/s1");
    return g && !*g;
  })) << "the session outlived its lease";

  // etcd gone: what was seen still answers; an unknown name fails clearly, and fast.
  etcd_.Kill(0);
  auto k = (*a)->Get("keys/k");
  ASSERT_TRUE(k && *k);
  EXPECT_EQ((*k)->value, "key");
  auto unknown = (*a)->Get("keys/nope");
  EXPECT_FALSE(unknown && *unknown);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 20; ++i) (void)(*a)->Get("keys/nope" + std::to_string(i));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s) << "misses kept waiting for etcd";
}

}  // namespace
}  // namespace space::cluster
