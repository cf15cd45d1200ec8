// Notifier: one-shot watches by key, and subscribers that see every key (GET /v1/events).
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "core/core.h"

namespace space::core {
namespace {

TEST(NotifierTest, SubscribersSeeEveryKeyUntilTheirHandleGoes) {
  Notifier n;
  std::vector<std::string> seen;
  std::mutex mu;
  auto sub = n.Subscribe([&](const std::string& key) {
    std::lock_guard l(mu);
    seen.push_back(key);
  });
  int watched = 0;
  auto w = n.Watch("sb:1", [&] { ++watched; });
  n.Notify("sb:1");
  n.Notify("op:2");
  n.Notify("sb:1");  // the watch fired once; the subscriber sees both
  EXPECT_EQ(watched, 1);
  EXPECT_EQ(seen, (std::vector<std::string>{"sb:1", "op:2", "sb:1"}));
  sub.reset();
  n.Notify("sb:3");
  EXPECT_EQ(seen.size(), 3u);
}

TEST(NotifierTest, SubscribingAndNotifyingFromManyThreads) {
  Notifier n;
  std::atomic<int> count{0};
  std::vector<std::shared_ptr<void>> subs;
  for (int i = 0; i < 4; ++i) subs.push_back(n.Subscribe([&](const std::string&) { ++count; }));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&n, t] {
      for (int i = 0; i < 1000; ++i) n.Notify("cmd:" + std::to_string(t));
    });
  }
  // A subscriber that comes and goes meanwhile never runs after its handle is gone.
  std::atomic<bool> gone{false};
  std::atomic<int> late{0};
  for (int i = 0; i < 100; ++i) {
    gone = false;
    auto h = n.Subscribe([&](const std::string&) {
      if (gone) ++late;
    });
    h.reset();
    gone = true;
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(count.load(), 4 * 4 * 1000);
  EXPECT_EQ(late.load(), 0);
}

}  // namespace
}  // namespace space::core
