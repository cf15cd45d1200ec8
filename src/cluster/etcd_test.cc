// The etcd Store against real etcd (Debian's etcd-server): one member for the operations,
// three for failover and the loss of quorum. Members listen on free loopback ports, keep
// their data in a temporary directory, and are SIGKILLed at the end.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "cluster/etcd_testing.h"
#include "cluster/store.h"
#include "sys/sys.h"

namespace space::cluster {
namespace {

using namespace std::chrono_literals;

using EtcdStoreTest = testing::EtcdTest;

TEST_F(EtcdStoreTest, KeysRevisionsAndCompareAndSet) {
  Start(1);
  if (IsSkipped() || HasFatalFailure()) return;
  Store& st = this->st();

  EXPECT_FALSE(*st.Get("/sb/none"));
  // Binary-safe keys and values.
  const std::string bin("a\0\xff\n b", 6);
  auto r1 = st.Put("/sb/a", bin);
  ASSERT_TRUE(r1) << r1.error().message;
  auto a = st.Get("/sb/a");
  ASSERT_TRUE(a && *a);
  EXPECT_EQ((*a)->value, bin);
  EXPECT_EQ((*a)->mod_revision, *r1);
  EXPECT_EQ((*a)->version, 1);

  // CAS: created only when absent, updated only at the revision read.
  auto c1 = st.CompareAndSet("/sb/b", 0, "one");
  ASSERT_TRUE(c1 && *c1);
  auto again = st.CompareAndSet("/sb/b", 0, "other");
  ASSERT_TRUE(again);
  EXPECT_FALSE(*again) << "created twice";
  auto stale = st.CompareAndSet("/sb/b", **c1 - 1, "stale");
  ASSERT_TRUE(stale);
  EXPECT_FALSE(*stale);
  auto c2 = st.CompareAndSet("/sb/b", **c1, "two");
  ASSERT_TRUE(c2 && *c2);
  EXPECT_EQ((*st.Get("/sb/b"))->value, "two");
  auto d0 = st.CompareAndDelete("/sb/b", **c1);
  ASSERT_TRUE(d0);
  EXPECT_FALSE(*d0);
  auto d1 = st.CompareAndDelete("/sb/b", **c2);
  ASSERT_TRUE(d1);
  EXPECT_TRUE(*d1);
  EXPECT_FALSE(*st.Get("/sb/b"));

  // List is by prefix, in key order, with the revision it read at.
  ASSERT_TRUE(st.Put("/sb/c", "3"));
  ASSERT_TRUE(st.Put("/sbx", "not under /sb/"));
  int64_t rev = 0;
  auto l = st.List("/sb/", &rev);
  ASSERT_TRUE(l) << l.error().message;
  ASSERT_EQ(l->size(), 2u);
  EXPECT_EQ((*l)[0].key, "/sb/a");
  EXPECT_EQ((*l)[1].key, "/sb/c");
  EXPECT_GE(rev, (*l)[1].mod_revision);
  ASSERT_TRUE(st.Delete("/sb/c"));
  EXPECT_EQ(st.List("/sb/")->size(), 1u);

  // Bad arguments.
  EXPECT_EQ(st.List("").error().code, Errc::kInvalidArgument);
  EXPECT_EQ(st.GrantLease(0).error().code, Errc::kInvalidArgument);
  EXPECT_EQ(OpenEtcd({.endpoints = {"no-port"}}).error().code, Errc::kInvalidArgument);
  EXPECT_EQ(OpenEtcd({}).error().code, Errc::kInvalidArgument);
}

TEST_F(EtcdStoreTest, LeasesExpireTheirKeys) {
  Start(1);
  if (IsSkipped() || HasFatalFailure()) return;
  Store& st = this->st();
  auto lease = st.GrantLease(2);
  ASSERT_TRUE(lease) << lease.error().message;
  ASSERT_TRUE(st.Put("/nodes/n1", "alive", *lease));
  EXPECT_EQ((*st.Get("/nodes/n1"))->lease, *lease);
  // Kept alive past its TTL, the key stays.
  for (int i = 0; i < 6; ++i) {
    auto ttl = st.KeepAlive(*lease);
    ASSERT_TRUE(ttl) << ttl.error().message;
    EXPECT_GT(*ttl, 0);
    std::this_thread::sleep_for(500ms);
  }
  EXPECT_TRUE(*st.Get("/nodes/n1"));
  // Left alone, it expires with its key.
  bool gone = false;
  for (int i = 0; i < 80 && !gone; ++i) {
    std::this_thread::sleep_for(100ms);
    gone = !*st.Get("/nodes/n1");
  }
  EXPECT_TRUE(gone) << "the key outlived its lease";
  EXPECT_EQ(st.KeepAlive(*lease).error().code, Errc::kNotFound);
  // Revoked: at once.
  auto l2 = st.GrantLease(30);
  ASSERT_TRUE(l2);
  ASSERT_TRUE(st.Put("/nodes/n2", "alive", *l2));
  ASSERT_TRUE(st.RevokeLease(*l2));
  EXPECT_FALSE(*st.Get("/nodes/n2"));
  EXPECT_EQ(st.Put("/nodes/n3", "x", *l2).error().code, Errc::kNotFound);
}

// Collects a watch's events.
struct Seen {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<WatchEvent> events;
  bool lost = false;
  WatchHandlers Handlers() {
    return {.on_events =
                [this](const std::vector<WatchEvent>& b) {
                  std::lock_guard l(mu);
                  events.insert(events.end(), b.begin(), b.end());
                  cv.notify_all();
                },
            .on_lost =
                [this](const Error&) {
                  std::lock_guard l(mu);
                  lost = true;
                  cv.notify_all();
                }};
  }
  bool WaitFor(size_t n, std::chrono::milliseconds t = 10s) {
    std::unique_lock l(mu);
    return cv.wait_for(l, t, [&] { return events.size() >= n; });
  }
};

TEST_F(EtcdStoreTest, WatchDeliversEveryChangeAfterARevisionInOrder) {
  Start(1);
  if (IsSkipped() || HasFatalFailure()) return;
  Store& st = this->st();
  ASSERT_TRUE(st.Put("/routes/before", "x"));
  int64_t rev = 0;
  ASSERT_TRUE(st.List("/routes/", &rev));
  // Changes made between the List and the watch's start are not missed.
  ASSERT_TRUE(st.Put("/routes/sb-1", "node-a"));
  Seen seen;
  auto w = st.WatchPrefix("/routes/", rev, seen.Handlers());
  ASSERT_TRUE(w) << w.error().message;
  ASSERT_TRUE(st.Put("/routes/sb-1", "node-b"));
  ASSERT_TRUE(st.Put("/other/x", "not watched"));
  ASSERT_TRUE(st.Delete("/routes/sb-1"));
  ASSERT_TRUE(seen.WaitFor(3)) << seen.events.size();
  std::lock_guard l(seen.mu);
  ASSERT_EQ(seen.events.size(), 3u);
  EXPECT_EQ(seen.events[0].kv.value, "node-a");
  EXPECT_EQ(seen.events[1].kv.value, "node-b");
  EXPECT_EQ(seen.events[2].type, WatchEvent::Type::kDelete);
  EXPECT_EQ(seen.events[2].kv.key, "/routes/sb-1");
  EXPECT_LT(seen.events[0].kv.mod_revision, seen.events[1].kv.mod_revision);
}

// A watch from a revision etcd has compacted away cannot go on: on_lost says so (the
// caller lists again), and no event is made up.
TEST_F(EtcdStoreTest, WatchFromACompactedRevisionIsLost) {
  Start(1);
  if (IsSkipped() || HasFatalFailure()) return;
  Store& st = this->st();
  auto r1 = st.Put("/c/x", "1");
  auto r2 = st.Put("/c/x", "2");
  ASSERT_TRUE(r1 && r2);
  auto out = sys::Run({.argv = {"curl", "-sS", "--noproxy", "*", "-d", "{\"revision\":\"" + std::to_string(*r2) + "\"}",
                                "http://" + etcd_.Endpoints()[0] + "/v3/kv/compaction"}},
                      10000);
  ASSERT_TRUE(out && out->ok()) << (out ? out->err : out.error().message);
  Seen seen;
  auto w = st.WatchPrefix("/c/", *r1 - 1, seen.Handlers());
  ASSERT_TRUE(w);
  std::unique_lock l(seen.mu);
  EXPECT_TRUE(seen.cv.wait_for(l, 10s, [&] { return seen.lost; }));
  EXPECT_TRUE(seen.events.empty());
}

// Three members: one lost changes nothing (requests and a watch go on through the others);
// two lost is no quorum: requests fail with kUnavailable within the timeout.
TEST_F(EtcdStoreTest, SurvivesAMemberAndFailsClearlyWithoutQuorum) {
  Start(3, 2000);
  if (IsSkipped() || HasFatalFailure()) return;
  Store& st = this->st();
  int64_t rev = 0;
  ASSERT_TRUE(st.List("/w/", &rev));
  Seen seen;
  auto w = st.WatchPrefix("/w/", rev, seen.Handlers());
  ASSERT_TRUE(w);
  ASSERT_TRUE(st.Put("/w/1", "a"));
  ASSERT_TRUE(seen.WaitFor(1));
  etcd_.Kill(0);  // the endpoint tried first, and the watch's
  auto t0 = std::chrono::steady_clock::now();
  Result<int64_t> p = Fail(Errc::kInternal, "not tried");
  for (int i = 0; i < 50 && !p; ++i) {
    p = st.Put("/w/2", "b");
    if (!p) std::this_thread::sleep_for(100ms);
  }
  ASSERT_TRUE(p) << p.error().message;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 8s);
  EXPECT_TRUE(seen.WaitFor(2, 15s)) << "the watch did not move to another member";
  etcd_.Kill(1);
  t0 = std::chrono::steady_clock::now();
  auto q = st.Put("/w/3", "c");
  ASSERT_FALSE(q);
  EXPECT_EQ(q.error().code, Errc::kUnavailable) << q.error().message;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
}

}  // namespace
}  // namespace space::cluster
