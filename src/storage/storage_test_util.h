// Helpers shared by the storage tests (storage_test.cc, snapshot_test.cc): data dirs that
// clean up after themselves, a source tree exercising what templates hold, and the
// per-driver fixture. Test-only; include from src/storage/*_test.cc.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/btrfs.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "storage/fs_util.h"
#include "storage/storage.h"
#include "sys/sys.h"

namespace space::storage::test_util {

inline constexpr uint64_t kPoolBytes = uint64_t{1} << 30;   // sparse; mkfs needs >= ~120 MiB

inline std::string ReadStr(const std::string& path) {
  auto r = sys::ReadFile(path);
  return r ? *r : std::string("<missing: " + path + ">");
}

inline void WriteStr(const std::string& path, const std::string& data, mode_t mode = 0644) {
  auto fd = sys::Open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
  ASSERT_TRUE(fd) << fd.error().message;
  ASSERT_TRUE(sys::WriteAll(fd->get(), data));
  ASSERT_EQ(::fchmod(fd->get(), mode), 0);
}

// Writes `mib` MiB to a new file and fsyncs it; 0 or the errno of what failed (EDQUOT or
// ENOSPC past a quota).
inline int WriteMiB(const std::string& path, int mib) {
  sys::UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd) return errno;
  std::string chunk(1 << 20, 'z');
  for (int i = 0; i < mib; ++i) {
    if (!sys::WriteAll(fd.get(), chunk)) return errno;
  }
  return ::fsync(fd.get()) != 0 ? errno : 0;
}

inline struct stat Lstat(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path << ": " << std::strerror(errno);
  return st;
}

// Loop devices whose backing file lies under `prefix`.
inline std::vector<std::string> LoopsBackedBy(const std::string& prefix) {
  std::vector<std::string> out;
  for (const auto& dev : internal::ListAllNames("/sys/block")) {
    if (!StartsWith(dev, "loop")) continue;
    auto f = sys::ReadFile("/sys/block/" + dev + "/loop/backing_file");
    if (f && StartsWith(*f, prefix)) out.push_back(dev + " -> " + *f);
  }
  return out;
}

inline bool HaveBtrfs() {
  auto r = sys::Run({.argv = {"mkfs.btrfs", "--version"}});
  return r && r->ok();
}

inline Status CreateSubvolume(const std::string& parent, const std::string& name) {
  auto fd = sys::Open(parent, O_RDONLY | O_DIRECTORY);
  if (!fd) return tl::unexpected(fd.error());
  btrfs_ioctl_vol_args args{};
  std::snprintf(args.name, sizeof args.name, "%s", name.c_str());
  if (::ioctl(fd->get(), BTRFS_IOC_SUBVOL_CREATE, &args) != 0)
    return ErrnoFail("subvol create " + name);
  return Ok();
}

// A data dir under /tmp. On destruction: drops the driver, runs Teardown, checks that no
// mount or loop device is left (detaching any that are, so the next test starts clean),
// and removes the directory.
class DataDir {
 public:
  DataDir() {
    auto t = sys::TempDir::Create("/tmp", "space-storage-test-");
    EXPECT_TRUE(t) << t.error().message;
    if (t) {
      auto real = sys::RealPath(t->path());
      path_ = real ? *real : t->path();
      tmp_.emplace(std::move(*t));
      // As a real data dir: containers (an unprivileged host uid) must be able to walk it.
      EXPECT_EQ(::chmod(path_.c_str(), 0755), 0);
    }
  }
  ~DataDir() { Cleanup(); }
  const std::string& path() const { return path_; }

  void Cleanup() {
    if (path_.empty()) return;
    auto st = Driver::Teardown(path_);
    EXPECT_TRUE(st) << st.error().message;
    auto left = sys::MountsUnder(path_);
    EXPECT_TRUE(left.empty()) << "mounts left: " << left.size() << " first " << left[0];
    for (const auto& mp : left) ::umount2(mp.c_str(), MNT_DETACH);
    auto loops = LoopsBackedBy(path_);
    EXPECT_TRUE(loops.empty()) << "loop devices left: " << loops[0];
    tmp_.reset();   // removes the tree
    path_.clear();
  }

 private:
  // std::optional + emplace/reset: sys::TempDir's move assignment is unsafe (see report).
  std::optional<sys::TempDir> tmp_;
  std::string path_;
};

// A small tree exercising what a template holds.
struct SourceTree {
  std::optional<sys::TempDir> dir;
  std::string path;

  static SourceTree Make() {
    SourceTree t;
    auto d = sys::TempDir::Create("/tmp", "space-storage-src-");
    EXPECT_TRUE(d);
    t.dir.emplace(std::move(*d));
    t.path = t.dir->path();
    const std::string& p = t.path;
    EXPECT_EQ(::mkdir((p + "/etc").c_str(), 0755), 0);
    EXPECT_EQ(::mkdir((p + "/bin").c_str(), 0755), 0);
    EXPECT_EQ(::mkdir((p + "/private").c_str(), 0750), 0);
    EXPECT_EQ(::mkdir((p + "/tmp").c_str(), 0755), 0);
    EXPECT_EQ(::chmod((p + "/tmp").c_str(), 01777), 0);
    WriteStr(p + "/etc/hostname", "template\n");
    WriteStr(p + "/bin/run.sh", "#!/bin/sh\necho hi\n", 0755);
    WriteStr(p + "/bin/suid", "x", 04755);
    WriteStr(p + "/private/owned", "by 1234:5678", 0640);
    EXPECT_EQ(::chown((p + "/private/owned").c_str(), 1234, 5678), 0);
    EXPECT_EQ(::chmod((p + "/bin/suid").c_str(), 04755), 0);
    EXPECT_EQ(::symlink("../etc/hostname", (p + "/bin/link").c_str()), 0);
    EXPECT_EQ(::link((p + "/etc/hostname").c_str(), (p + "/etc/hostname.hard").c_str()), 0);
    EXPECT_EQ(::mkfifo((p + "/etc/fifo").c_str(), 0600), 0);
    struct timespec ts[2] = {{1000000000, 0}, {1000000000, 0}};
    EXPECT_EQ(::utimensat(AT_FDCWD, (p + "/etc/hostname").c_str(), ts, 0), 0);
    return t;
  }
};

// A tree of ~2,000 small files in 40 directories.
inline std::string MakeBigTree(const std::string& parent) {
  std::string root = parent + "/big";
  EXPECT_EQ(::mkdir(root.c_str(), 0755), 0);
  for (int d = 0; d < 40; ++d) {
    std::string dir = root + "/d" + std::to_string(d);
    EXPECT_EQ(::mkdir(dir.c_str(), 0755), 0);
    for (int f = 0; f < 50; ++f) {
      WriteStr(dir + "/f" + std::to_string(f), "file " + std::to_string(d * 50 + f) + "\n");
    }
  }
  return root;
}

class StorageTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (mount, btrfs ioctls, chown)";
    if (kind() == "btrfs" && !HaveBtrfs()) GTEST_SKIP() << "mkfs.btrfs not installed";
    data_.emplace();
    ASSERT_FALSE(data_->path().empty());
    Reopen();
  }
  void TearDown() override {
    driver_.reset();
    data_.reset();   // Teardown + checks + removal
  }

  const std::string& kind() const { return GetParam(); }
  bool btrfs() const { return kind() == "btrfs"; }
  std::string storage() const { return data_->path() + "/storage"; }
  std::string LayerDir(const std::string& digest) const {
    return storage() + (btrfs() ? "/pool/layers/" : "/overlay/layers/") + digest;
  }

  void Reopen() {
    driver_.reset();
    auto d = Driver::Open(data_->path(), kind(), {.pool_bytes = kPoolBytes});
    ASSERT_TRUE(d) << d.error().message;
    driver_ = std::move(*d);
    ASSERT_EQ(driver_->Name(), kind());
  }

  void Import(const std::string& digest, const std::string& src) {
    auto st = driver_->ImportLayer(digest, src, kDefaultUidShift);
    ASSERT_TRUE(st) << st.error().message;
  }

  std::string Create(const std::string& id, const std::string& digest, int64_t quota = 0) {
    auto r = driver_->CreateRoot(id, digest, quota);
    EXPECT_TRUE(r) << r.error().message;
    return r ? *r : "";
  }

  std::optional<DataDir> data_;
  std::unique_ptr<Driver> driver_;
};

}  // namespace space::storage::test_util
