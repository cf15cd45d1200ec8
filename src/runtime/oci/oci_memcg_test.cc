// Integration tests of parked memory cgroups (memcg_pool.h) against the real crun: a
// deleted sandbox's memory cgroup serves the next one, with the next one's limits; the
// pool is bounded; a runtime object after a crash adopts what was parked and removes what
// cannot be; a stopped one removes its own.
#include <sys/wait.h>

#include "runtime/oci/oci_test_fixture.h"

namespace space::runtime {
namespace {

using namespace oci_testing;
using sys::CgroupLayout;

class OciMemcgTest : public OciTest {
 protected:
  void SetUp() override {
    OciTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    const sys::Hierarchy* mem = sys::FindHierarchy(hier_, "memory");
    if (layout_ == CgroupLayout::kV2 || !mem || mem->controllers != std::vector<std::string>{"memory"})
      GTEST_SKIP() << "parked memory cgroups need cgroup v1 with memory in a hierarchy of its own";
    parent_ = mem->mount_point + "/" + opts_.cgroup_parent;
  }

  ino_t Inode(const std::string& dir) {
    struct stat st;
    return ::stat(dir.c_str(), &st) == 0 ? st.st_ino : 0;
  }
  std::string Limit(const std::string& dir) { return ReadTrim(dir + "/memory.limit_in_bytes"); }
  // What a cgroup without a limit of its own reads: the root's (unlimited) figure.
  std::string Unlimited() {
    return ReadTrim(sys::FindHierarchy(hier_, "memory")->mount_point + "/memory.limit_in_bytes");
  }

  // A second runtime object on the fixture's state dir, destroyed after the cleanup.
  Runtime* RuntimeWith(const OciOptions& o) {
    auto rt = CreateOciRuntime(o);
    EXPECT_TRUE(rt) << rt.error().message;
    if (!rt) return nullptr;
    others_.push_back(std::move(*rt));
    return others_.back().get();
  }

  std::string parent_;
};

TEST_F(OciMemcgTest, ADeletedSandboxsMemoryCgroupServesTheNextWithItsLimits) {
  InstanceSpec a = Spec("ma");
  a.limits.memory_bytes = 64ll << 20;
  ASSERT_TRUE(Start(a));
  ASSERT_TRUE(ConnectWithRetry(rt_->AgentSocketPath("ma")));
  const ino_t ino_a = Inode(CgroupDir("memory", "ma"));
  ASSERT_NE(ino_a, 0u);
  EXPECT_EQ(Limit(CgroupDir("memory", "ma")), std::to_string(64ll << 20));

  ASSERT_TRUE(rt_->Destroy("ma"));
  ExpectNoTraces(rt_.get(), opts_, "ma");
  auto parked = ParkedMemoryCgroups(parent_);
  ASSERT_EQ(parked.size(), 1u);
  const std::string p = parent_ + "/" + parked[0];
  EXPECT_EQ(Inode(p), ino_a) << "the same cgroup, renamed";
  EXPECT_EQ(ReadTrim(p + "/cgroup.procs"), "") << "no process of the sandbox left in it";
  EXPECT_EQ(Limit(p), Unlimited()) << "its limit reset";
  if (sys::Exists(p + "/memory.memsw.limit_in_bytes"))
    EXPECT_EQ(ReadTrim(p + "/memory.memsw.limit_in_bytes"), Unlimited());

  // A sandbox without a memory limit gets it, unlimited, and its processes are in it.
  InstanceSpec b = Spec("mb");
  b.limits.memory_bytes = 0;
  ASSERT_TRUE(Start(b));
  const std::string sock = rt_->AgentSocketPath("mb");
  auto out = Ask(sock, "sh echo hi; cat /sys/fs/cgroup/memory/memory.limit_in_bytes");
  ASSERT_TRUE(out) << out.error().message;
  EXPECT_EQ(*out, "hi\n" + Unlimited() + "\nexit=0\n");
  EXPECT_EQ(Inode(CgroupDir("memory", "mb")), ino_a);
  EXPECT_TRUE(ParkedMemoryCgroups(parent_).empty());
  const pid_t init = InitHostPid("mb");
  ASSERT_GT(init, 0);
  EXPECT_NE(ReadTrim(CgroupDir("memory", "mb") + "/cgroup.procs").find(std::to_string(init)),
            std::string::npos);

  // With none parked, a new one is made; then a reused one takes a lower limit (memsw and
  // the limit written in the order the kernel accepts).
  InstanceSpec c = Spec("mc");
  c.limits.memory_bytes = 32ll << 20;
  ASSERT_TRUE(Start(c));
  EXPECT_NE(Inode(CgroupDir("memory", "mc")), ino_a);
  EXPECT_EQ(Limit(CgroupDir("memory", "mc")), std::to_string(32ll << 20));
  ASSERT_TRUE(rt_->Destroy("mb"));
  InstanceSpec d = Spec("md");
  d.limits.memory_bytes = 48ll << 20;
  ASSERT_TRUE(Start(d));
  EXPECT_EQ(Inode(CgroupDir("memory", "md")), ino_a);
  EXPECT_EQ(Limit(CgroupDir("memory", "md")), std::to_string(48ll << 20));
  if (sys::Exists(CgroupDir("memory", "md") + "/memory.memsw.limit_in_bytes"))
    EXPECT_EQ(ReadTrim(CgroupDir("memory", "md") + "/memory.memsw.limit_in_bytes"),
              std::to_string(48ll << 20));
  // The limit holds: dd's 64 MiB buffer in a 48 MiB sandbox is killed.
  auto big = Ask(rt_->AgentSocketPath("md"),
                 "sh dd if=/dev/zero of=/dev/null bs=64M count=1 2>/dev/null; echo rc=$?");
  ASSERT_TRUE(big) << big.error().message;
  EXPECT_EQ(*big, "rc=137\nexit=0\n");
}

TEST_F(OciMemcgTest, ThePoolIsBoundedAndARestartAdoptsIt) {
  OciOptions o = opts_;
  o.parked_memory_cgroups = 1;
  Runtime* one = RuntimeWith(o);
  ASSERT_NE(one, nullptr);
  ASSERT_TRUE(StartOn(one, Spec("pa")));
  ASSERT_TRUE(StartOn(one, Spec("pb")));
  const ino_t ino_b = Inode(CgroupDir("memory", "pb"));
  ASSERT_TRUE(one->Destroy("pb"));
  ASSERT_TRUE(one->Destroy("pa"));
  ExpectNoTraces(one, o, "pa");
  ExpectNoTraces(one, o, "pb");
  auto parked = ParkedMemoryCgroups(parent_);
  ASSERT_EQ(parked.size(), 1u) << "the second one was removed";
  EXPECT_EQ(Inode(parent_ + "/" + parked[0]), ino_b);

  // An earlier process's leftover with a process still in it is not adopted: the process
  // is killed and the cgroup removed.
  const std::string stray = parent_ + "/.park-99";
  ASSERT_EQ(::mkdir(stray.c_str(), 0755), 0);
  pid_t child = ::fork();
  if (child == 0) {
    ::execl("/bin/sleep", "sleep", "60", nullptr);
    ::_exit(127);
  }
  ASSERT_GT(child, 0);
  // Should the test stop before the adoption killed it: no sleeper left in the cgroup.
  struct Reap {
    pid_t& pid;
    ~Reap() {
      if (pid > 0 && ::kill(pid, SIGKILL) == 0) ::waitpid(pid, nullptr, 0);
    }
  } reap{child};
  std::ofstream(stray + "/cgroup.procs") << child;
  EXPECT_EQ(ReadTrim(stray + "/cgroup.procs"), std::to_string(child));

  // A restart (a new runtime object) adopts the empty one and reuses it.
  Runtime* two = RuntimeWith(o);
  ASSERT_NE(two, nullptr);
  int status = 0;
  EXPECT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  child = -1;   // reaped
  EXPECT_FALSE(sys::Exists(stray));
  ASSERT_TRUE(StartOn(two, Spec("pc")));
  EXPECT_EQ(Inode(CgroupDir("memory", "pc")), ino_b);
  ASSERT_TRUE(ConnectWithRetry(two->AgentSocketPath("pc")));
  EXPECT_TRUE(ParkedMemoryCgroups(parent_).empty());
}

TEST_F(OciMemcgTest, ParkedOnesUnclaimedForAWhileAreRemoved) {
  OciOptions o = opts_;
  o.parked_memory_cgroups_idle_ms = 600;
  Runtime* one = RuntimeWith(o);
  ASSERT_NE(one, nullptr);
  ASSERT_TRUE(StartOn(one, Spec("ia")));
  ASSERT_TRUE(StartOn(one, Spec("ib")));
  ASSERT_TRUE(one->Destroy("ia"));
  ASSERT_TRUE(one->Destroy("ib"));
  EXPECT_EQ(ParkedMemoryCgroups(parent_).size(), 2u);
  // A start within the idle time takes one; the other goes once none was taken for 600 ms.
  ASSERT_TRUE(StartOn(one, Spec("ic")));
  EXPECT_EQ(ParkedMemoryCgroups(parent_).size(), 1u);
  const int64_t t0 = MonotonicNanos();
  while (!ParkedMemoryCgroups(parent_).empty() && MonotonicNanos() - t0 < 5'000'000'000)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_TRUE(ParkedMemoryCgroups(parent_).empty());
  EXPECT_GE(MonotonicNanos() - t0, 400'000'000) << "removed before the idle time";
  ASSERT_TRUE(ConnectWithRetry(one->AgentSocketPath("ic")));
}

TEST_F(OciMemcgTest, AStoppedRuntimeLeavesNoneParked) {
  auto rt = CreateOciRuntime(opts_);
  ASSERT_TRUE(rt) << rt.error().message;
  ASSERT_TRUE((*rt)->Start(Spec("sa")));
  ASSERT_TRUE((*rt)->Destroy("sa"));
  EXPECT_EQ(ParkedMemoryCgroups(parent_).size(), 1u);
  rt->reset();   // a daemon stopping (one killed leaves them for the next one's Adopt)
  EXPECT_TRUE(ParkedMemoryCgroups(parent_).empty());
}

TEST_F(OciMemcgTest, NoneAreParkedWhenTheOptionIsZero) {
  OciOptions o = opts_;
  o.parked_memory_cgroups = 0;
  Runtime* zero = RuntimeWith(o);
  ASSERT_NE(zero, nullptr);
  ASSERT_TRUE(StartOn(zero, Spec("z")));
  ASSERT_TRUE(zero->Destroy("z"));
  ExpectNoTraces(zero, o, "z");
  EXPECT_TRUE(ParkedMemoryCgroups(parent_).empty());
}

}  // namespace
}  // namespace space::runtime
