#include "sys/sys.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace space::sys
