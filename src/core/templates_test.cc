#include "core/templates.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include "sys/sys.h"

namespace space::core {
namespace {

TEST(TemplateRefTest, Parses) {
  auto r = ParseTemplateRef("base");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->first, "base");
  EXPECT_EQ(r->second, "latest");
  r = ParseTemplateRef("py-3.11:v2");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->second, "v2");
  EXPECT_FALSE(ParseTemplateRef(""));
  EXPECT_FALSE(ParseTemplateRef("../etc:x"));
  EXPECT_FALSE(ParseTemplateRef("a:b:c"));
  EXPECT_FALSE(ParseTemplateRef("a b"));
}

TEST(TemplateTest, BaseTreeHasShellAndUsersAndStableDigest) {
  if (!sys::Exists("/bin/busybox")) GTEST_SKIP() << "busybox-static is not installed";
  auto a = sys::TempDir::Create();
  auto b = sys::TempDir::Create();
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(BuildBaseTree(a->path(), "/bin/busybox"));
  ASSERT_TRUE(BuildBaseTree(b->path(), "/bin/busybox"));
  EXPECT_TRUE(sys::Exists(a->path() + "/bin/sh"));
  auto passwd = sys::ReadFile(a->path() + "/etc/passwd");
  ASSERT_TRUE(passwd);
  EXPECT_NE(passwd->find("root:x:0:0"), std::string::npos);
  auto da = TreeDigest(a->path());
  auto db = TreeDigest(b->path());
  ASSERT_TRUE(da && db);
  EXPECT_EQ(*da, *db);
  EXPECT_EQ(da->size(), 7u + 64u);
  ASSERT_TRUE(sys::WriteFileAtomic(b->path() + "/etc/motd", "hi"));
  EXPECT_NE(*da, *TreeDigest(b->path()));
}

}  // namespace
}  // namespace space::core
