#include "sys/sys.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <linux/keyctl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

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

// The child starts with no signal blocked whatever the spawning thread blocks (spaced
// blocks SIGINT and SIGTERM; Spawn blocks all around the clone), keeps what is ignored
// (as fork+exec does), and gets stdin from /dev/null, an fd of its own, PATH searched.
TEST(SpawnTest, ChildStartsWithSignalsUnblockedAndIgnoredOnesKept) {
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGUSR1);
  sigaddset(&block, SIGTERM);
  ASSERT_EQ(::pthread_sigmask(SIG_BLOCK, &block, &old), 0);
  auto prev = ::signal(SIGUSR2, SIG_IGN);
  // grep itself (no shell, which may set its own mask) reads its own status.
  auto r = sys::Run({.argv = {"grep", "-E", "^Sig(Blk|Ign)", "/proc/self/status"}});
  auto in = sys::Run({.argv = {"readlink", "/proc/self/fd/0"}});
  ::signal(SIGUSR2, prev);
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(r->exit_code, 0) << r->err;
  EXPECT_NE(r->out.find("SigBlk:\t0000000000000000"), std::string::npos) << r->out;
  // SIGUSR2 is signal 12: bit 11 of the ignored mask.
  auto ign = r->out.find("SigIgn:\t");
  ASSERT_NE(ign, std::string::npos) << r->out;
  const unsigned long long mask = std::stoull(r->out.substr(ign + 8, 16), nullptr, 16);
  EXPECT_TRUE(mask & (1ULL << (SIGUSR2 - 1))) << r->out;
  ASSERT_TRUE(in) << in.error().message;
  EXPECT_EQ(in->out, "/dev/null\n");
}

// Many spawns at once from several threads, while those threads' memory changes: each
// child runs its own argv and each parent gets its own exit code.
TEST(SpawnTest, ConcurrentSpawnsKeepTheirOwnArguments) {
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t, &ok] {
      for (int i = 0; i < 25; ++i) {
        std::string want = std::to_string(t * 100 + i);
        std::vector<std::string> junk(64, std::string(1000, 'x'));  // the heap moves meanwhile
        auto r = sys::Run({.argv = {"/bin/sh", "-c", "echo " + want + "; exit " + std::to_string(i % 7)}});
        if (r && r->out == want + "\n" && r->exit_code == i % 7) ++ok;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok.load(), 100);
}

// The number after "Name:" in a /proc/PID/status text, -1 if absent.
long StatusField(const std::string& status, const std::string& name) {
  size_t at = status.find("\n" + name + ":");
  return at == std::string::npos ? -1 : std::strtol(status.c_str() + at + name.size() + 2, nullptr, 10);
}

// A spawned child copies the descriptors below the highest one it is given and none of
// those a daemon moved high (one per sandbox): its table stays small however many the
// parent holds, and what it is given still arrives, wherever it was numbered.
TEST(SpawnTest, ChildCopiesNoneOfTheDescriptorsMovedHigh) {
  struct rlimit rl;
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &rl), 0);
  if (rl.rlim_max < 8192) GTEST_SKIP() << "hard limit on open files below 8192";
  RaiseOpenFileLimit();
  UniqueFd null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(null);
  std::vector<UniqueFd> held;
  for (int i = 0; i < 3000; ++i) {
    UniqueFd moved = MoveFdHigh(UniqueFd(::fcntl(null.get(), F_DUPFD_CLOEXEC, 0)));
    ASSERT_GE(moved.get(), kHighFdBase);
    held.push_back(std::move(moved));
  }
  // Without CLOEXEC, as a thread of the daemon might leave one: still not the child's.
  UniqueFd leaky(::fcntl(null.get(), F_DUPFD, kHighFdBase + 4000));
  ASSERT_GE(leaky.get(), kHighFdBase + 4000);
  auto self = sys::ReadFile("/proc/self/status");
  ASSERT_TRUE(self);
  ASSERT_GE(StatusField(*self, "FDSize"), 4096);

  auto r = sys::Run({.argv = {"cat", "/proc/self/status"}});
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(r->exit_code, 0) << r->err;
  EXPECT_LE(StatusField(r->out, "FDSize"), kHighFdBase) << r->out;
  auto fds = sys::Run({.argv = {"ls", "/proc/self/fd"}});
  ASSERT_TRUE(fds) << fds.error().message;
  EXPECT_EQ(fds->out, "0\n1\n2\n3\n") << fds->out;  // 3: ls's own directory

  // A descriptor given to the child from high up arrives at its place.
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  UniqueFd rd(p[0]);
  UniqueFd wr = MoveFdHigh(UniqueFd(p[1]));
  ASSERT_GE(wr.get(), kHighFdBase);
  auto child = sys::Spawn({.argv = {"/bin/sh", "-c", "echo given >&3"}, .pass_fd = wr.get()});
  ASSERT_TRUE(child) << child.error().message;
  wr.Reset();
  char buf[16] = {};
  EXPECT_EQ(::read(rd.get(), buf, sizeof buf - 1), 6);
  EXPECT_STREQ(buf, "given\n");
  auto st = child->Wait();
  ASSERT_TRUE(st);
  EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 0);
}

// The daemon raises its soft limit on open files to the hard one; the programs it starts
// get the soft limit it had before.
TEST(SpawnTest, ChildrenKeepTheSoftLimitOnOpenFilesTheDaemonHadBefore) {
  struct rlimit rl;
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &rl), 0);
  if (rl.rlim_max <= 512) GTEST_SKIP() << "hard limit on open files is 512 or less";
  const rlim_t hard = rl.rlim_max;
  rl.rlim_cur = 512;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &rl), 0);
  EXPECT_EQ(RaiseOpenFileLimit(), hard);
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &rl), 0);
  EXPECT_EQ(rl.rlim_cur, hard);
  const std::string hard_text = hard == RLIM_INFINITY ? "unlimited" : std::to_string(hard);
  auto r = sys::Run({.argv = {"/bin/sh", "-c", "ulimit -Sn; ulimit -Hn"}});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->out, "512\n" + hard_text + "\n");
  // Raised already: nothing changes, children still get 512.
  EXPECT_EQ(RaiseOpenFileLimit(), hard);
  r = sys::Run({.argv = {"/bin/sh", "-c", "ulimit -Sn"}});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->out, "512\n");
}

// new_session_keyring: each child gets a session keyring of its own (an OCI runtime started
// so with --no-new-keyring gives it to the sandbox), not the spawner's; without it the
// child has the spawner's.
TEST(SpawnTest, NewSessionKeyringIsTheChildsOwn) {
  const long mine = ::syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 1);
  // As Spawn: no keyrings in the kernel, or keyctl refused around us (a container's seccomp).
  if (mine < 0 && (errno == ENOSYS || errno == EPERM)) GTEST_SKIP() << "keyctl: " << std::strerror(errno);
  ASSERT_GT(mine, 0) << std::strerror(errno);
  // Debian's interpreter (not a pyenv shim): ctypes calls keyctl(KEYCTL_GET_KEYRING_ID, @s).
  const std::string py = "import ctypes; l = ctypes.CDLL(None); print(l.syscall(" +
                         std::to_string(SYS_keyctl) + ", " + std::to_string(KEYCTL_GET_KEYRING_ID) +
                         ", " + std::to_string(KEY_SPEC_SESSION_KEYRING) + ", 0))";
  auto id_of_child = [&](bool fresh) -> long {
    auto r = sys::Run({.argv = {"/usr/bin/python3", "-c", py}, .new_session_keyring = fresh});
    EXPECT_TRUE(r) << r.error().message;
    return r ? std::stol(r->out) : -1;
  };
  EXPECT_EQ(id_of_child(false), mine);
  const long a = id_of_child(true), b = id_of_child(true);
  EXPECT_GT(a, 0);
  EXPECT_GT(b, 0);
  EXPECT_NE(a, mine);
  EXPECT_NE(b, mine);
  EXPECT_NE(a, b);
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

namespace space::sys {
namespace {

Status CopyFile(const std::string& from, const std::string& to) {
  auto data = ReadFile(from);
  if (!data) return tl::unexpected(data.error());
  SPACE_TRY(WriteFileAtomic(to + ".tmp", *data, 0755));
  if (::rename((to + ".tmp").c_str(), to.c_str()) != 0) return ErrnoFail("rename");
  return Ok();
}

TEST(SealedExecutableTest, RunsFromASealedCopyThatFollowsTheFile) {
  auto dir = TempDir::Create();
  ASSERT_TRUE(dir);
  const std::string path = dir->path() + "/prog";
  ASSERT_TRUE(CopyFile("/bin/readlink", path));
  auto se = SealedExecutable::Create(path);
  ASSERT_TRUE(se) << se.error().message;
  auto fd = (*se)->Current();
  ASSERT_TRUE(fd) << fd.error().message;
  // Exactly the seals runc and crun accept as "already cloned".
  EXPECT_EQ(::fcntl((*fd)->get(), F_GET_SEALS), F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE);
  EXPECT_LT(::write((*fd)->get(), "x", 1), 0);
  EXPECT_EQ(errno, EPERM);

  // The child runs the copy, not the file: its /proc/self/exe is the memfd.
  auto r = sys::Run({.argv = {path, "/proc/self/exe"}, .exec_fd = (*fd)->get(), .exec_keep = *fd});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->exit_code, 0);
  EXPECT_EQ(r->out.rfind("/memfd:prog", 0), 0u) << r->out;

  // Unchanged file: the same copy. A new file at the path: a new copy of it.
  auto again = (*se)->Current();
  ASSERT_TRUE(again);
  EXPECT_EQ(again->get(), fd->get());
  ASSERT_TRUE(CopyFile("/bin/false", path));
  auto changed = (*se)->Current();
  ASSERT_TRUE(changed);
  EXPECT_NE(changed->get(), fd->get());
  r = sys::Run({.argv = {path}, .exec_fd = (*changed)->get(), .exec_keep = *changed});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->exit_code, 1);  // false, not readlink
  // The earlier copy stays valid for whoever still holds it.
  EXPECT_EQ(::fcntl((*fd)->get(), F_GET_SEALS), F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE);

  ASSERT_EQ(::unlink(path.c_str()), 0);
  EXPECT_FALSE((*se)->Current());
  EXPECT_FALSE(SealedExecutable::Create(dir->path()));  // a directory
}

}  // namespace
}  // namespace space::sys
