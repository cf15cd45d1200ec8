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

}  // namespace
}  // namespace space::testing
