#include "sys/sys.h"

#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace space::sys {
namespace {

TEST(RunTest, CapturesOutputAndExitCode) {
  auto r = sys::Run({.argv = {"/bin/sh", "-c", "echo out; echo err >&2; exit 3"}});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->out, "out\n");
  EXPECT_EQ(r->err, "err\n");
  EXPECT_EQ(r->exit_code, 3);
}

TEST(RunTest, MissingBinaryIsAnError) {
  auto r = sys::Run({.argv = {"/nonexistent/binary"}});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::kNotFound);
}

TEST(RunTest, CheckedReportsStderr) {
  auto r = RunChecked({.argv = {"/bin/sh", "-c", "echo boom >&2; exit 1"}});
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("boom"), std::string::npos);
}

TEST(RunTest, Timeout) {
  auto r = sys::Run({.argv = {"/bin/sleep", "5"}}, 100);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::kDeadlineExceeded);
}

TEST(TempDirTest, RemovedOnDestruction) {
  std::string path;
  {
    auto t = TempDir::Create();
    ASSERT_TRUE(t);
    path = t->path();
    ASSERT_TRUE(MkdirAll(path + "/a/b/c"));
    ASSERT_TRUE(WriteFileAtomic(path + "/a/b/c/f", "x"));
    EXPECT_EQ(*ReadFile(path + "/a/b/c/f"), "x");
  }
  EXPECT_FALSE(Exists(path));
}

// A tree attached for a child is seen by that child only: not by us, and not by the
// namespace the child's was copied from, and it is gone once the child is.
TEST(SpawnTest, AttachedMountIsTheChildsAlone) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (mount)";
  auto t = TempDir::Create();
  ASSERT_TRUE(t);
  const std::string src = t->path() + "/src", at = t->path() + "/at";
  ASSERT_TRUE(MkdirAll(src));
  ASSERT_TRUE(MkdirAll(at));
  ASSERT_EQ(::mount("tmpfs", src.c_str(), "tmpfs", 0, "size=64k"), 0) << std::strerror(errno);
  ASSERT_TRUE(WriteFileAtomic(src + "/f", "from the tmpfs"));
  const size_t mounts_before = MountsUnder(t->path()).size();
  {
    auto tree = CloneMount(src);
    ASSERT_TRUE(tree) << tree.error().message;
    SpawnOptions so{.argv = {"/bin/sh", "-c", "cat " + at + "/f; echo x > " + at + "/g"}};
    so.attach_mounts = {{tree->get(), at}};
    auto r = sys::Run(so);
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->exit_code, 0) << r->err;
    EXPECT_EQ(r->out, "from the tmpfs");
  }
  // Not attached here: `at` is still the empty directory, and no mount was added.
  EXPECT_FALSE(Exists(at + "/f"));
  EXPECT_EQ(MountsUnder(t->path()).size(), mounts_before);
  // The same tmpfs, though: what the child wrote is in it.
  EXPECT_EQ(*ReadFile(src + "/g"), "x\n");
  ::umount2(src.c_str(), MNT_DETACH);
}

TEST(SpawnTest, AttachToAMissingPathFailsBeforeExec) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (mount)";
  auto t = TempDir::Create();
  ASSERT_TRUE(t);
  auto tree = CloneMount(t->path());
  ASSERT_TRUE(tree) << tree.error().message;
  SpawnOptions so{.argv = {"/bin/true"}};
  so.attach_mounts = {{tree->get(), t->path() + "/missing"}};
  auto r = sys::Run(so);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("move_mount"), std::string::npos) << r.error().message;
}

}  // namespace
}  // namespace space::sys
