// Unit tests of AgentCopies (no root needed): which file of the agent binary each start
// gets. The copies under a real crun: OciTest.EachAgentFileServesAtMostItsShareOfSandboxes.
#include "runtime/oci/agent_copies.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "sys/sys.h"

namespace space::runtime::oci_impl {
namespace {

ino_t Inode(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? st.st_ino : 0;
}

class AgentCopiesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto t = sys::TempDir::Create("/tmp", "space-agent-copies-");
    ASSERT_TRUE(t) << t.error().message;
    tmp_ = std::move(*t);
    original_ = tmp_.path() + "/space-agent";
    ASSERT_TRUE(sys::WriteFileAtomic(original_, std::string(300000, 'x') + "agent", 0755));
  }
  sys::TempDir tmp_;
  std::string original_;
};

TEST_F(AgentCopiesTest, FillsEachFileUpToItsShareThenCopies) {
  AgentCopies c(original_, tmp_.path() + "/copies", 2);
  EXPECT_EQ(c.Acquire("a"), original_);
  EXPECT_EQ(c.Acquire("a"), original_) << "the same instance again is counted once";
  EXPECT_EQ(c.Acquire("b"), original_);
  const std::string copy = c.Acquire("c");
  EXPECT_EQ(copy, tmp_.path() + "/copies/space-agent.1");
  EXPECT_EQ(sys::ReadFile(copy).value_or(""), sys::ReadFile(original_).value_or("?"));
  EXPECT_NE(Inode(copy), Inode(original_));
  EXPECT_EQ(c.Users(), (std::vector<size_t>{2, 1}));
  EXPECT_FALSE(sys::Exists(copy + ".tmp"));

  c.Release("a");
  c.Release("a");  // a second release of the same instance changes nothing
  c.Release("never-started");
  EXPECT_EQ(c.Users(), (std::vector<size_t>{1, 1}));
  EXPECT_EQ(c.Acquire("d"), original_) << "the lowest file with room";
  EXPECT_EQ(c.Acquire("e"), copy);
  EXPECT_EQ(c.Acquire("f"), tmp_.path() + "/copies/space-agent.2");
  EXPECT_EQ(c.Users(), (std::vector<size_t>{2, 2, 1}));
}

TEST_F(AgentCopiesTest, AnOlderProcessesCopiesAreReplaced) {
  const std::string dir = tmp_.path() + "/copies";
  ASSERT_TRUE(sys::MkdirAll(dir, 0700));
  ASSERT_TRUE(sys::WriteFileAtomic(dir + "/space-agent.1", "an older agent", 0755));
  ASSERT_TRUE(sys::WriteFileAtomic(dir + "/space-agent.9", "an older agent", 0755));
  // Held open, as a sandbox running the older copy holds it: its inode stays (and its
  // number cannot be handed to the new copy).
  auto held = sys::Open(dir + "/space-agent.1", O_RDONLY);
  ASSERT_TRUE(held);
  struct stat old {};
  ASSERT_EQ(::fstat(held->get(), &old), 0);
  AgentCopies c(original_, dir, 1);
  EXPECT_EQ(c.Acquire("a"), original_);
  EXPECT_EQ(c.Acquire("b"), dir + "/space-agent.1");
  EXPECT_NE(Inode(dir + "/space-agent.1"), old.st_ino);
  EXPECT_EQ(sys::ReadFile(dir + "/space-agent.1").value_or(""), sys::ReadFile(original_).value_or("?"));
  EXPECT_FALSE(sys::Exists(dir + "/space-agent.9"));
  struct stat st {};
  ASSERT_EQ(::stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0755u) << "the sandboxes' unprivileged root must reach the copies";
}

TEST_F(AgentCopiesTest, WithoutCopiesStartsShareTheLeastUsedFile) {
  // The copies' directory cannot be made (a file is in the way): starts go on, sharing.
  ASSERT_TRUE(sys::WriteFileAtomic(tmp_.path() + "/blocked", "", 0644));
  AgentCopies c(original_, tmp_.path() + "/blocked/copies", 1);
  EXPECT_EQ(c.Acquire("a"), original_);
  EXPECT_EQ(c.Acquire("b"), original_);
  EXPECT_EQ(c.Acquire("c"), original_);
  EXPECT_EQ(c.Users(), (std::vector<size_t>{3}));
}

}  // namespace
}  // namespace space::runtime::oci_impl
