// The configurable alternatives end to end: runc instead of crun, and the overlay storage
// driver instead of btrfs. Each gets a real spaced and the basic life of a sandbox.
#include "tests/integration/harness.h"

namespace space::testing {
namespace {

using namespace std::chrono_literals;

void ExerciseSandbox(Daemon& d) {
  auto& c = d.client();
  std::string id = CreateSandbox(c, {{"limits", {{"memory_bytes", 64 << 20}, {"pids", 64}}}});
  ASSERT_FALSE(id.empty()) << d.Log();
  auto r = c.Run(id, Json{{"cmd", "echo hello; echo err >&2; exit 4"}});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->out, "hello\n");
  EXPECT_EQ(r->err, "err\n");
  EXPECT_EQ(r->exit_code, 4);
  ASSERT_TRUE(c.WriteFile(id, "/root/f.txt", "content"));
  auto back = c.ReadFile(id, "/root/f.txt");
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, "content");
  // Writes stay in this sandbox: a second one from the same template does not see them.
  std::string other = CreateSandbox(c);
  ASSERT_FALSE(other.empty());
  auto missing = c.Stat(other, "/root/f.txt");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, Errc::kNotFound);
  ASSERT_TRUE(c.DeleteSandboxAndWait(id, 60s));
  ASSERT_TRUE(c.DeleteSandboxAndWait(other, 60s));
  EXPECT_TRUE(c.ListSandboxes()->empty());
}

TEST(BackendsTest, RuncInsteadOfCrun) {
  SPACE_REQUIRE_SANDBOXES();
  if (!sys::Exists("/usr/bin/runc")) GTEST_SKIP() << "runc is not installed";
  Daemon d({"--oci-runtime", "runc"});
  ASSERT_TRUE(d.Start());
  ExerciseSandbox(d);
}

TEST(BackendsTest, OverlayStorageInsteadOfBtrfs) {
  SPACE_REQUIRE_SANDBOXES();
  Daemon d({"--storage", "overlay"});
  ASSERT_TRUE(d.Start());
  ExerciseSandbox(d);
  EXPECT_FALSE(sys::Exists(d.data_dir() + "/storage/pool.img"));
}

// The shipped gvisor runtime plugin (runsc) as the default runtime: the same checks, plus
// pause/resume and a suspend that keeps a running command.
TEST(BackendsTest, GvisorPluginInsteadOfOci) {
  SPACE_REQUIRE_SANDBOXES();
  if (!sys::Exists("/usr/bin/runsc")) GTEST_SKIP() << "runsc is not installed (make deps)";
  Daemon d({"--default-runtime", "gvisor"});
  ASSERT_TRUE(d.Start());
  ExerciseSandbox(d);
  auto& c = d.client();
  std::string id = CreateSandbox(c);
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(c.GetSandbox(id)->value("runtime", ""), "gvisor");
  auto uname = c.Run(id, Json{{"cmd", "dmesg 2>/dev/null | head -1; uname -r"}});
  ASSERT_TRUE(uname);
  EXPECT_NE(uname->out.find("gVisor"), std::string::npos) << "not gVisor's kernel: " << uname->out;
  ASSERT_TRUE(c.TransitionAndWait(id, client::Transition::kPause));
  ASSERT_TRUE(c.TransitionAndWait(id, client::Transition::kResume));
  auto started = c.StartCommand(id, Json{{"cmd", "i=0; while true; do i=$((i+1)); echo $i > /tmp/n; sleep 0.1; done"}});
  ASSERT_TRUE(started) << started.error().message;
  std::this_thread::sleep_for(1s);
  ASSERT_TRUE(c.TransitionAndWait(id, client::Transition::kSuspend));
  EXPECT_EQ(c.GetSandbox(id)->value("state", ""), "suspended");
  ASSERT_TRUE(c.TransitionAndWait(id, client::Transition::kWake));
  auto before = c.Run(id, Json{{"cmd", "cat /tmp/n"}});
  std::this_thread::sleep_for(500ms);
  auto after = c.Run(id, Json{{"cmd", "cat /tmp/n"}});
  ASSERT_TRUE(before && after);
  EXPECT_GT(std::atoi(after->out.c_str()), std::atoi(before->out.c_str())) << "the loop did not survive suspend";
  EXPECT_GT(std::atoi(before->out.c_str()), 3);
  auto caps = c.GetSandbox(id);
  ASSERT_TRUE(caps);
  EXPECT_TRUE((*caps)["capabilities"].value("suspend_keeps_processes", false));
  // Networking is announced (network_test's GvisorNetworkTest drives it against the fake
  // internet); what it cannot do is listed.
  auto runtimes = c.ListRuntimes();
  ASSERT_TRUE(runtimes);
  bool listed = false;
  for (const auto& r : *runtimes) {
    if (r.value("name", "") != "gvisor") continue;
    listed = true;
    EXPECT_TRUE(r["capabilities"].value("network", false)) << r.dump();
    EXPECT_NE(r["limitations"].dump().find("ports"), std::string::npos) << r.dump();
  }
  EXPECT_TRUE(listed) << runtimes->dump();
  ASSERT_TRUE(c.DeleteSandboxAndWait(id, 60s));
}

// GET /v1/runtimes says whether each runtime can run here, and why not: microvm without
// its guest kernel is listed unavailable, and creating on it fails with that reason.
TEST(BackendsTest, RuntimesListSaysWhyMicrovmIsUnavailable) {
  SPACE_REQUIRE_SANDBOXES();
  Daemon d({"--microvm-kernel", "/nonexistent/vmlinux"});
  ASSERT_TRUE(d.Start());
  auto& c = d.client();
  auto runtimes = c.ListRuntimes();
  ASSERT_TRUE(runtimes);
  Json microvm, oci;
  for (const auto& r : *runtimes) {
    if (r.value("name", "") == "microvm") microvm = r;
    if (r.value("name", "") == "oci") oci = r;
  }
  ASSERT_TRUE(microvm.is_object()) << runtimes->dump();
  EXPECT_FALSE(microvm.value("available", true)) << microvm.dump();
  EXPECT_NE(microvm.value("why_not", "").find("/nonexistent/vmlinux"), std::string::npos) << microvm.dump();
  EXPECT_TRUE(oci.value("available", false)) << oci.dump();
  auto refused = c.CreateSandbox(Json{{"runtime", "microvm"}});
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("/nonexistent/vmlinux"), std::string::npos) << refused.error().message;
}

}  // namespace
}  // namespace space::testing
