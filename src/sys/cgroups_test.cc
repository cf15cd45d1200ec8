#include "sys/cgroups.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace space::sys {
namespace {

std::optional<Hierarchy> V2() {
  for (auto& h : CgroupHierarchies()) {
    if (h.v2) return h;
  }
  return std::nullopt;
}

std::vector<std::string> OptionsBut(const Hierarchy& h, const std::string& skip) {
  std::vector<std::string> out;
  for (const auto& o : h.options) {
    if (o != skip) out.push_back(o);
  }
  return out;
}

// This process's cgroup.procs in the cgroup2 hierarchy ("0::/path" in /proc/self/cgroup).
std::string OwnProcs(const Hierarchy& v2) {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) == 0) {
      std::string path = line.substr(3);
      return v2.mount_point + (path == "/" ? "" : path) + "/cgroup.procs";
    }
  }
  return "";
}

class CgroupFavorDynmodsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (mount)";
    auto v2 = V2();
    if (!v2) GTEST_SKIP() << "no cgroup2 hierarchy mounted";
    was_on_ = CgroupFavorDynmods(CgroupHierarchies());
  }
  void TearDown() override {
    if (V2()) (void)SetCgroupFavorDynmods(was_on_);
  }
  bool was_on_ = false;
};

TEST_F(CgroupFavorDynmodsTest, TurnsOnAndOffKeepingTheOtherOptionsAndMigrationsStopWaiting) {
  auto before = V2();
  ASSERT_TRUE(before);
  const auto others = OptionsBut(*before, "favordynmods");

  auto off = SetCgroupFavorDynmods(false);
  ASSERT_TRUE(off) << off.error().message;
  EXPECT_FALSE(*off);
  EXPECT_FALSE(CgroupFavorDynmods(CgroupHierarchies()));
  EXPECT_EQ(OptionsBut(*V2(), "favordynmods"), others);

  auto on = SetCgroupFavorDynmods(true);
  ASSERT_TRUE(on) << on.error().message;
  EXPECT_TRUE(*on);
  auto after = V2();
  ASSERT_TRUE(after);
  EXPECT_NE(std::find(after->options.begin(), after->options.end(), "favordynmods"), after->options.end());
  EXPECT_EQ(OptionsBut(*after, "favordynmods"), others);
  // The host's own mount is untouched: same mount point, still its one cgroup2 mount.
  EXPECT_EQ(after->mount_point, before->mount_point);

  auto again = SetCgroupFavorDynmods(true);  // already on: nothing to do
  ASSERT_TRUE(again);
  EXPECT_TRUE(*again);

  // What it is for: with it on, moving a task between cgroups after the host was idle does
  // not wait for an RCU grace period (5-12 ms on this 2-core machine without it). In the
  // same test as the switching above: ctest runs each test on its own, in parallel.
  const std::string procs = OwnProcs(*after);
  ASSERT_FALSE(procs.empty());
  const std::string self = std::to_string(::getpid());
  std::vector<double> ms;
  for (int i = 0; i < 7; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto t0 = std::chrono::steady_clock::now();
    int fd = ::open(procs.c_str(), O_WRONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0) << procs;
    ASSERT_EQ(::write(fd, self.data(), self.size()), static_cast<ssize_t>(self.size())) << procs;
    ::close(fd);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  EXPECT_LT(ms[ms.size() / 2], 3.0) << "median migration after 100 ms idle, ms";
}

}  // namespace
}  // namespace space::sys
