// The compiled profile is loaded into a child process for real, and the child checks what
// the kernel then answers: allowed calls work, the host-reaching ones get EPERM, clone3 and
// syscalls outside the allow-list get ENOSYS, argument rules hold.
#include "runtime/oci/seccomp_bpf.h"

#include <gtest/gtest.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "runtime/oci/bundle.h"

namespace space::runtime::oci {
namespace {

#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif

// Runs `check` in a child under the filter; returns the child's exit status (0 = all good,
// otherwise the number of the first failed expectation).
int UnderFilter(const std::string& bpf, int (*check)()) {
  pid_t pid = ::fork();
  if (pid == 0) {
    sock_fprog prog{static_cast<unsigned short>(bpf.size() / 8),
                    reinterpret_cast<sock_filter*>(const_cast<char*>(bpf.data()))};
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) ::_exit(100);
    if (::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0) ::_exit(101);
    ::_exit(check());
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 200 + WTERMSIG(status);
}

int Fails(long r, int want) { return r == -1 && errno == want ? 0 : 1; }

int CheckProfile() {
  if (::getpid() <= 0) return 1;
  if (::write(-1, "", 0) != -1 || errno != EBADF) return 2;  // allowed: the kernel answers
  if (Fails(::syscall(SYS_mount, "none", "/tmp", "tmpfs", 0, nullptr), EPERM)) return 3;
  if (Fails(::syscall(SYS_unshare, CLONE_NEWUSER), EPERM)) return 4;
  if (Fails(::syscall(SYS_clone3, nullptr, 0), ENOSYS)) return 5;
  if (Fails(::syscall(SYS_kexec_load, 0, 0, nullptr, 0), EPERM)) return 6;
  if (Fails(::syscall(SYS_clone, CLONE_NEWNS | SIGCHLD, nullptr, nullptr, nullptr, 0), EPERM))
    return 7;
  if (Fails(::socket(AF_VSOCK, SOCK_STREAM, 0), EPERM)) return 8;
  // BTRFS_IOC_SNAP_CREATE_V2 (0x50009417) is refused; another ioctl reaches the kernel.
  if (Fails(::syscall(SYS_ioctl, -1, 0x50009417ul, 0), EPERM)) return 9;
  if (Fails(::ioctl(-1, TIOCGWINSZ, nullptr), EBADF)) return 10;
  if (Fails(::syscall(SYS_personality, 0x0004000ul), EPERM) &&
      Fails(::syscall(SYS_personality, 0x0004000ul), ENOSYS))
    return 11;  // READ_IMPLIES_EXEC is not on the allowed list
  pid_t child = ::fork();  // plain fork (clone without namespace flags) works
  if (child < 0) return 12;
  if (child == 0) ::_exit(0);
  int st = 0;
  ::waitpid(child, &st, 0);
  return 0;
}

TEST(SeccompBpf, CompiledProfileEnforcesItsRules) {
  auto bpf = CompileSeccompBpf(SeccompProfile());
  ASSERT_TRUE(bpf) << bpf.error().message;
  ASSERT_GT(bpf->size(), 8u);
  EXPECT_EQ(UnderFilter(*bpf, CheckProfile), 0);
}

TEST(SeccompBpf, BadProfilesAreErrors) {
  EXPECT_FALSE(CompileSeccompBpf(Json::array()));
  EXPECT_FALSE(CompileSeccompBpf(Json{{"defaultAction", "SCMP_ACT_BOGUS"}}));
  Json p{{"defaultAction", "SCMP_ACT_ERRNO"},
         {"syscalls", {{{"names", {"read"}}, {"action", "SCMP_ACT_ALLOW"},
                        {"args", {{{"index", 9}, {"value", 1}, {"op", "SCMP_CMP_EQ"}}}}}}}};
  EXPECT_FALSE(CompileSeccompBpf(p));
  p["syscalls"][0]["args"][0]["index"] = 0;
  p["syscalls"][0]["args"][0]["op"] = "SCMP_CMP_WHATEVER";
  EXPECT_FALSE(CompileSeccompBpf(p));
  // Unknown syscall names are skipped, as crun does.
  Json ok{{"defaultAction", "SCMP_ACT_ALLOW"},
          {"syscalls", {{{"names", {"no_such_syscall", "mount"}}, {"action", "SCMP_ACT_ERRNO"}}}}};
  EXPECT_TRUE(CompileSeccompBpf(ok));
}

}  // namespace
}  // namespace space::runtime::oci
