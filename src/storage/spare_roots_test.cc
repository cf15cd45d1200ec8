// ClaimRoot and SettleRoot against the real kernel: on btrfs, roots handed out from spares
// made ahead (btrfs_spares.cc); on overlay, the default (CreateRoot). Uses the per-driver
// fixture of storage_test.cc (instantiated there for both drivers).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/btrfs.h>
#include <sys/stat.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "storage/fs_util.h"
#include "storage/storage.h"
#include "storage/storage_test_util.h"

namespace space::storage {
namespace {

using namespace test_util;   // NOLINT(build/namespaces): test helpers

// Spares the btrfs driver holds ready now.
std::vector<std::string> Spares(const std::string& storage) {
  return internal::ListAllNames(storage + "/pool/spare");
}

// Waits (up to 10 s) until `n` spares are ready.
bool WaitForSpares(const std::string& storage, size_t n) {
  for (int i = 0; i < 200; ++i) {
    if (Spares(storage).size() == n) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

// The generation of the file system's last committed transaction.
uint64_t CommittedGeneration(const std::string& path) {
  sys::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  btrfs_ioctl_fs_info_args info{};
  info.flags = BTRFS_FS_INFO_FLAG_GENERATION;
  if (!fd || ::ioctl(fd.get(), BTRFS_IOC_FS_INFO, &info) != 0) return 0;
  return info.generation;
}

TEST_P(StorageTest, ClaimRootHandsOutSparesMadeAhead) {
  auto src = SourceTree::Make();
  Import("base", src.path);
  auto first = driver_->ClaimRoot("sb-1", "base", 0);
  ASSERT_TRUE(first) << first.error().message;
  ASSERT_TRUE(driver_->SettleRoot("sb-1"));
  EXPECT_EQ(ReadStr(*first + "/etc/hostname"), "template\n");
  if (btrfs()) {
    // The first claim of a layer made its root at once and asked for spares of it.
    ASSERT_TRUE(WaitForSpares(storage(), 2)) << Spares(storage()).size() << " spares";
    const std::vector<std::string> ready = Spares(storage());
    const uint64_t before = CommittedGeneration(storage() + "/pool");
    auto second = driver_->ClaimRoot("sb-2", "base", 0);
    ASSERT_TRUE(second) << second.error().message;
    // One of the spares, renamed: the claim made no snapshot of its own.
    std::vector<std::string> now = Spares(storage());
    EXPECT_TRUE(std::any_of(ready.begin(), ready.end(), [&](const std::string& s) {
      return std::find(now.begin(), now.end(), s) == now.end();
    }));
    // Settled means committed: a transaction newer than the rename's start is on disk.
    ASSERT_TRUE(driver_->SettleRoot("sb-2"));
    EXPECT_GT(CommittedGeneration(storage() + "/pool"), before);
    EXPECT_EQ(*second, storage() + "/pool/roots/sb-2");
    EXPECT_EQ(ReadStr(*second + "/etc/hostname"), "template\n");
    EXPECT_EQ(Lstat(*second + "/private/owned").st_uid, kDefaultUidShift + 1234);
    // Independent of the other root and of the spares still held.
    WriteStr(*second + "/etc/hostname", "mine\n");
    EXPECT_EQ(ReadStr(*first + "/etc/hostname"), "template\n");
    ASSERT_TRUE(WaitForSpares(storage(), 2));
    for (const auto& s : Spares(storage()))
      EXPECT_EQ(ReadStr(storage() + "/pool/spare/" + s + "/etc/hostname"), "template\n");
  }
  std::vector<std::string> roots = driver_->ListRoots();
  std::sort(roots.begin(), roots.end());
  const std::vector<std::string> want =
      btrfs() ? std::vector<std::string>{"sb-1", "sb-2"} : std::vector<std::string>{"sb-1"};
  EXPECT_EQ(roots, want);
  // A root that exists: kConflict, and no spare is lost to it.
  auto again = driver_->ClaimRoot("sb-1", "base", 0);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, Errc::kConflict);
  if (btrfs()) EXPECT_TRUE(WaitForSpares(storage(), 2));
  EXPECT_EQ(ReadStr(*first + "/etc/hostname"), "template\n");
  // Bad input: what CreateRoot refuses.
  EXPECT_EQ(driver_->ClaimRoot("../x", "base", 0).error().code, Errc::kInvalidArgument);
  EXPECT_EQ(driver_->ClaimRoot("sb-3", "../base", 0).error().code, Errc::kInvalidArgument);
  EXPECT_EQ(driver_->ClaimRoot("sb-3", "base", -1).error().code, Errc::kInvalidArgument);
  EXPECT_EQ(driver_->ClaimRoot("sb-3", "nolayer", 0).error().code, Errc::kNotFound);
  // Unknown roots settle at once.
  EXPECT_TRUE(driver_->SettleRoot("sb-unknown"));
}

// Spares are btrfs's alone (overlay's ClaimRoot is its CreateRoot).
class SpareRootsTest : public StorageTest {};

TEST_P(SpareRootsTest, ClaimedRootsKeepTheirQuota) {
  auto src = SourceTree::Make();
  Import("base", src.path);
  auto first = driver_->ClaimRoot("sb-q1", "base", 8 << 20);
  ASSERT_TRUE(first) << first.error().message;
  ASSERT_TRUE(WaitForSpares(storage(), 2));
  auto spared = driver_->ClaimRoot("sb-q2", "base", 8 << 20);
  ASSERT_TRUE(spared) << spared.error().message;
  ASSERT_TRUE(driver_->SettleRoot("sb-q2"));
  // Spares are kept per quota: a root without one is not handed a limited spare.
  auto unlimited = driver_->ClaimRoot("sb-free", "base", 0);
  ASSERT_TRUE(unlimited) << unlimited.error().message;
  for (const std::string& root : {*first, *spared}) {
    EXPECT_EQ(WriteMiB(root + "/small", 2), 0) << root;
    int err = WriteMiB(root + "/too-big", 32);
    EXPECT_TRUE(err == EDQUOT || err == ENOSPC) << root << ": got " << std::strerror(err);
  }
  EXPECT_EQ(WriteMiB(*unlimited + "/big", 32), 0);
}

TEST_P(SpareRootsTest, DeletingALayerRemovesItsSpares) {
  auto src = SourceTree::Make();
  Import("base", src.path);
  Import("other", src.path);
  ASSERT_TRUE(driver_->ClaimRoot("sb-1", "base", 0));
  ASSERT_TRUE(driver_->ClaimRoot("sb-2", "other", 0));
  ASSERT_TRUE(WaitForSpares(storage(), 4));
  ASSERT_TRUE(driver_->DeleteLayer("base"));
  // Gone when DeleteLayer returns, even one that was being made or removed meanwhile.
  EXPECT_EQ(Spares(storage()).size(), 2u) << testing::PrintToString(Spares(storage()));
  // The layer is gone for claims too, spares or not; roots made from it stay.
  auto gone = driver_->ClaimRoot("sb-3", "base", 0);
  ASSERT_FALSE(gone);
  EXPECT_EQ(gone.error().code, Errc::kNotFound);
  EXPECT_EQ(ReadStr(storage() + "/pool/roots/sb-1/etc/hostname"), "template\n");
  EXPECT_TRUE(driver_->ClaimRoot("sb-4", "other", 0));
}

TEST_P(SpareRootsTest, SparesDoNotOutliveTheDriver) {
  auto src = SourceTree::Make();
  Import("base", src.path);
  ASSERT_TRUE(driver_->ClaimRoot("sb-1", "base", 0));
  ASSERT_TRUE(WaitForSpares(storage(), 2));
  // A daemon that stops removes its spares; one killed leaves them, and the next Open
  // removes them (they may be of a layer or quota that changed meanwhile).
  driver_.reset();
  EXPECT_TRUE(Spares(storage()).empty());
  ASSERT_TRUE(CreateSubvolume(storage() + "/pool/spare", "s-left"));
  WriteStr(storage() + "/pool/spare/s-left/file", "x");
  ASSERT_EQ(::mkdir((storage() + "/pool/spare/plain").c_str(), 0700), 0);
  Reopen();
  EXPECT_TRUE(Spares(storage()).empty());
  EXPECT_EQ(driver_->ListRoots(), std::vector<std::string>{"sb-1"});
}

TEST_P(SpareRootsTest, SpareRootsHaveTheRuntimesMountPoints) {
  driver_.reset();
  auto bad = Driver::Open(data_->path(), "btrfs", {.pool_bytes = kPoolBytes, .spare_dirs = {"../x"}});
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, Errc::kInvalidArgument);
  auto d = Driver::Open(data_->path(), "btrfs", {.pool_bytes = kPoolBytes, .spare_dirs = {".space"}});
  ASSERT_TRUE(d) << d.error().message;
  driver_ = std::move(*d);
  auto src = SourceTree::Make();
  WriteStr(src.path + "/.space", "a file of the template's");
  Import("plain", SourceTree::Make().path);
  Import("taken", src.path);
  ASSERT_TRUE(driver_->ClaimRoot("sb-1", "plain", 0));
  ASSERT_TRUE(driver_->ClaimRoot("sb-2", "taken", 0));
  ASSERT_TRUE(WaitForSpares(storage(), 4));
  auto made = driver_->ClaimRoot("sb-3", "plain", 0);
  ASSERT_TRUE(made) << made.error().message;
  struct stat st = Lstat(*made + "/.space");
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  // What the template has there is left alone.
  auto kept = driver_->ClaimRoot("sb-4", "taken", 0);
  ASSERT_TRUE(kept) << kept.error().message;
  EXPECT_EQ(ReadStr(*kept + "/.space"), "a file of the template's");
}

INSTANTIATE_TEST_SUITE_P(Btrfs, SpareRootsTest, ::testing::Values("btrfs"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace space::storage
