#include "sys/sys.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/keyctl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

namespace space::sys {

UniqueFd& UniqueFd::operator=(UniqueFd&& o) noexcept {
  if (this != &o) Reset(o.Release());
  return *this;
}

void UniqueFd::Reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

Result<UniqueFd> Open(const std::string& path, int flags, mode_t mode) {
  int fd = ::open(path.c_str(), flags | O_CLOEXEC, mode);
  if (fd < 0) return ErrnoFail("open " + path);
  return UniqueFd(fd);
}

Status WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoFail("write");
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return Ok();
}

Result<std::string> ReadAll(int fd) {
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoFail("read");
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

Result<std::string> ReadFile(const std::string& path) {
  auto fd = Open(path, O_RDONLY);
  if (!fd) return tl::unexpected(fd.error());
  auto r = ReadAll(fd->get());
  if (!r) return tl::unexpected(std::move(r.error()).Wrap(path));
  return r;
}

Status WriteFileAtomic(const std::string& path, std::string_view data, mode_t mode) {
  std::string tmp = path;
  tmp += ".tmp.";
  tmp += std::to_string(::getpid());
  {
    auto fd = Open(tmp, O_WRONLY | O_CREAT | O_TRUNC, mode);
    if (!fd) return tl::unexpected(fd.error());
    SPACE_TRY_WRAP(WriteAll(fd->get(), data), "write " + tmp);
    if (::fchmod(fd->get(), mode) != 0) return ErrnoFail("chmod " + tmp);
    if (::fsync(fd->get()) != 0) return ErrnoFail("fsync " + tmp);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) return ErrnoFail("rename " + tmp);
  std::string dir = path.substr(0, path.find_last_of('/') + 1);
  if (dir.empty()) dir = ".";
  auto dfd = Open(dir, O_RDONLY | O_DIRECTORY);
  if (dfd) ::fsync(dfd->get());
  return Ok();
}

ChildProcess& ChildProcess::operator=(ChildProcess&& o) noexcept {
  if (this != &o) {
    ChildProcess old(pid_);  // kills and reaps what this held
    pid_ = o.Release();
  }
  return *this;
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    int st;
    while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
  }
}

Result<int> ChildProcess::Wait() {
  if (pid_ <= 0) return Fail(Errc::kInternal, "wait: no child");
  int st = 0;
  for (;;) {
    pid_t r = ::waitpid(pid_, &st, 0);
    if (r == pid_) break;
    if (r < 0 && errno == EINTR) continue;
    return ErrnoFail("waitpid");
  }
  pid_ = -1;
  return st;
}

namespace {

[[noreturn]] void ChildFail(int errfd, const char* what) {
  int e = errno;
  char msg[256];
  int n = std::snprintf(msg, sizeof msg, "%d:%s", e, what);
  if (n > 0) (void)!::write(errfd, msg, static_cast<size_t>(n));
  ::_exit(127);
}

std::vector<char*> CStrings(const std::vector<std::string>& v) {
  std::vector<char*> out;
  out.reserve(v.size() + 1);
  for (const auto& s : v) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

}  // namespace

Result<UniqueFd> CloneMount(const std::string& path) {
  int fd = ::open_tree(AT_FDCWD, path.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
  if (fd < 0) return ErrnoFail("open_tree " + path);
  return UniqueFd(fd);
}

namespace {

// What the child of Spawn reads: all of it in the parent's memory, which the child shares
// until it execs (CLONE_VM), so the child writes none of it.
struct ChildArgs {
  const SpawnOptions* opts;
  char** argv;
  char** envp;     // null: inherit
  int errfd;       // the write end of the CLOEXEC error pipe
  int copy_below;  // the child's own descriptor table holds the parent's below this
};

// The soft limit on open files before RaiseOpenFileLimit, restored in spawned children;
// RLIM_INFINITY: not raised.
std::atomic<rlim_t> g_child_nofile{RLIM_INFINITY};

// The child of Spawn, from clone(CLONE_VM | CLONE_VFORK | CLONE_FILES) to exec. It runs on
// its own stack in the parent's address space while the spawning thread waits, so it only
// makes system calls that touch its own state (signal dispositions, namespaces, cwd: not
// shared without CLONE_SIGHAND, CLONE_FS) and keeps its variables on its stack. Its
// descriptor table is the parent's until its first call, which gives it a copy of its own.
int SpawnChild(void* p) {
  const ChildArgs& a = *static_cast<const ChildArgs*>(p);
  const SpawnOptions& opts = *a.opts;
  int errfd = a.errfd;
  // A table of its own holding the parent's descriptors below copy_below: all it is given
  // is there, and the long-lived ones above (MoveFdHigh) are neither copied nor closed
  // again at exec. Where close_range cannot unshare (Linux < 5.9) the whole table is
  // copied. Nothing below may run on the shared table: a dup2 onto 0-2 there would be
  // the daemon's.
  if (::close_range(a.copy_below, ~0U, CLOSE_RANGE_UNSHARE) != 0 && ::unshare(CLONE_FILES) != 0)
    ChildFail(errfd, "unshare descriptor table");
  if (rlim_t soft = g_child_nofile.load(std::memory_order_relaxed); soft != RLIM_INFINITY) {
    struct rlimit rl;
    if (::getrlimit(RLIMIT_NOFILE, &rl) == 0) {
      rl.rlim_cur = soft;
      (void)::setrlimit(RLIMIT_NOFILE, &rl);
    }
  }
  // Default dispositions first, then unblock: a handler of the daemon's must never run here,
  // on memory the daemon is using. Ignored signals stay ignored, as across exec anyway.
  for (int sig = 1; sig < NSIG; ++sig) {
    struct sigaction sa {};
    if (::sigaction(sig, nullptr, &sa) != 0 || sa.sa_handler == SIG_IGN || sa.sa_handler == SIG_DFL) continue;
    sa = {};
    sa.sa_handler = SIG_DFL;
    (void)::sigaction(sig, &sa, nullptr);
  }
  ::signal(SIGPIPE, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  if (opts.new_session) ::setsid();
  if (opts.die_with_parent) ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  // Where the kernel has no keyrings (ENOSYS) or a container around spaced refuses keyctl
  // (EPERM) the child keeps the spawner's: sandboxes cannot reach a keyring anyway (their
  // seccomp filter refuses keyctl, add_key and request_key).
  if (opts.new_session_keyring) (void)::syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, nullptr);
  if (opts.mount_ns_fd >= 0 && ::setns(opts.mount_ns_fd, CLONE_NEWNS) != 0) ChildFail(errfd, "setns");
  if (opts.net_ns_fd >= 0 && ::setns(opts.net_ns_fd, CLONE_NEWNET) != 0) ChildFail(errfd, "setns network namespace");
  if (!opts.attach_mounts.empty()) {
    if (::unshare(CLONE_NEWNS) != 0) ChildFail(errfd, "unshare mount namespace");
    // Private: nothing attached here propagates back to the namespace it was copied from.
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) ChildFail(errfd, "make / private");
    for (const auto& [fd, path] : opts.attach_mounts) {
      if (::move_mount(fd, "", AT_FDCWD, path.c_str(), MOVE_MOUNT_F_EMPTY_PATH) != 0)
        ChildFail(errfd, "move_mount");
    }
  }
  // Nothing but stdin, stdout and stderr goes to the child, whatever the daemon's other
  // threads opened without O_CLOEXEC (a long-lived child such as QEMU would otherwise
  // keep, say, the API's listening socket after spaced is gone). The error pipe is
  // close-on-exec already.
  if (::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
    for (int fd = 3; fd < 65536; ++fd) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  }
  int devnull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  int fds[3] = {opts.stdin_fd, opts.stdout_fd, opts.stderr_fd};
  for (int i = 0; i < 3; ++i) {
    int src = fds[i] >= 0 ? fds[i] : devnull;
    // dup2 onto itself keeps the close-on-exec flag (/dev/null lands on 0-2 when the
    // daemon runs without them): clear it by hand then.
    if (src == i ? ::fcntl(i, F_SETFD, 0) < 0 : ::dup2(src, i) < 0) ChildFail(errfd, "dup2");
  }
  if (opts.pass_fd >= 3) {
    if (opts.pass_fd == 3) {
      ::fcntl(3, F_SETFD, 0);
    } else {
      if (errfd == 3) errfd = ::fcntl(3, F_DUPFD_CLOEXEC, 4);
      if (::dup2(opts.pass_fd, 3) < 0) ChildFail(errfd, "dup2");
    }
  }
  if (!opts.cwd.empty() && ::chdir(opts.cwd.c_str()) != 0) ChildFail(errfd, "chdir");
  if (opts.exec_fd >= 0) {
    ::execveat(opts.exec_fd, "", a.argv, a.envp ? a.envp : environ, AT_EMPTY_PATH);
  } else if (a.envp) {
    ::execvpe(a.argv[0], a.argv, a.envp);
  } else {
    ::execvp(a.argv[0], a.argv);
  }
  ChildFail(errfd, "exec");
}

}  // namespace

// clone(CLONE_VM | CLONE_VFORK) rather than fork(): the child borrows the daemon's memory
// until it execs instead of copying its page tables, and the daemon takes no copy-on-write
// faults afterwards. With many sandboxes the daemon spawns crun for each create and
// delete, and fork's copies were a sixth of its CPU time then (docs/benchmarks.md).
Result<ChildProcess> Spawn(const SpawnOptions& opts) {
  if (opts.argv.empty()) return Fail(Errc::kInvalidArgument, "spawn: empty argv");
  int errpipe[2];
  if (::pipe2(errpipe, O_CLOEXEC) != 0) return ErrnoFail("pipe2");
  auto argv = CStrings(opts.argv);
  std::vector<char*> envp;
  if (opts.env) envp = CStrings(*opts.env);
  // The child's copy of the descriptor table ends above the highest one it needs.
  int top = std::max({2, errpipe[1], opts.stdin_fd, opts.stdout_fd, opts.stderr_fd, opts.pass_fd,
                      opts.exec_fd, opts.mount_ns_fd, opts.net_ns_fd});
  for (const auto& m : opts.attach_mounts) top = std::max(top, m.first);
  ChildArgs args{&opts, argv.data(), opts.env ? envp.data() : nullptr, errpipe[1], top + 1};
  // The child's stack (execvp's PATH search uses a few KiB of it); the spawning thread
  // waits until the exec, so it outlives the child's use of it.
  constexpr size_t kChildStack = 64 * 1024;
  std::unique_ptr<char[]> stack(new char[kChildStack]);
  // All signals blocked around the clone, so none is delivered to the child before it has
  // reset the daemon's handlers.
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  pid_t pid = ::clone(SpawnChild, stack.get() + kChildStack,
                      CLONE_VM | CLONE_VFORK | CLONE_FILES | SIGCHLD, &args);
  int clone_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ::close(errpipe[1]);
  if (pid < 0) {
    ::close(errpipe[0]);
    return ErrnoFail("clone", clone_errno);
  }
  ChildProcess child(pid);
  char buf[256];
  ssize_t n;
  do {
    n = ::read(errpipe[0], buf, sizeof buf - 1);
  } while (n < 0 && errno == EINTR);
  ::close(errpipe[0]);
  if (n > 0) {
    buf[n] = 0;
    int e = std::atoi(buf);
    const char* what = std::strchr(buf, ':');
    (void)child.Wait();
    return ErrnoFail(std::string(what ? what + 1 : "spawn") + " " + opts.argv[0], e);
  }
  return child;
}

UniqueFd MoveFdHigh(UniqueFd fd) {
  if (!fd || fd.get() >= kHighFdBase) return fd;
  int high = ::fcntl(fd.get(), F_DUPFD_CLOEXEC, kHighFdBase);
  if (high < 0) return fd;  // EINVAL: the limit is below the base; EMFILE: no room above it
  return UniqueFd(high);
}

uint64_t RaiseOpenFileLimit() {
  struct rlimit rl;
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
  if (rl.rlim_cur < rl.rlim_max) {
    const rlim_t old = rl.rlim_cur;
    rl.rlim_cur = rl.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &rl) != 0) return old;
    g_child_nofile.store(old);
  }
  return rl.rlim_cur;
}

Result<RunResult> Run(SpawnOptions opts, int64_t timeout_ms) {
  int outp[2], errp[2];
  if (::pipe2(outp, O_CLOEXEC) != 0) return ErrnoFail("pipe2");
  if (::pipe2(errp, O_CLOEXEC) != 0) {
    ::close(outp[0]);
    ::close(outp[1]);
    return ErrnoFail("pipe2");
  }
  UniqueFd out_r(outp[0]), out_w(outp[1]), err_r(errp[0]), err_w(errp[1]);
  if (opts.stdout_fd < 0) opts.stdout_fd = out_w.get();
  if (opts.stderr_fd < 0) opts.stderr_fd = err_w.get();
  auto child = Spawn(opts);
  if (!child) return tl::unexpected(child.error());
  out_w.Reset();
  err_w.Reset();
  RunResult res;
  constexpr size_t kCap = 1 << 20;
  int64_t deadline = MonotonicNanos() + timeout_ms * 1000000;
  bool out_open = true, err_open = true;
  while (out_open || err_open) {
    pollfd pfd[2] = {{out_r.get(), POLLIN, 0}, {err_r.get(), POLLIN, 0}};
    int64_t left_ms = (deadline - MonotonicNanos()) / 1000000;
    if (left_ms <= 0) {
      return Fail(Errc::kDeadlineExceeded, opts.argv[0] + ": timed out after " +
                                               std::to_string(timeout_ms) + " ms");
    }
    int pr = ::poll(pfd, 2, static_cast<int>(left_ms));
    if (pr < 0 && errno != EINTR) return ErrnoFail("poll");
    for (int i = 0; i < 2; ++i) {
      if (!(pfd[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      if (pfd[i].fd < 0) continue;
      char buf[65536];
      ssize_t n = ::read(pfd[i].fd, buf, sizeof buf);
      if (n <= 0) {
        if (n < 0 && errno == EINTR) continue;
        (i == 0 ? out_open : err_open) = false;
        continue;
      }
      std::string& dst = i == 0 ? res.out : res.err;
      if (dst.size() < kCap) dst.append(buf, std::min<size_t>(n, kCap - dst.size()));
    }
    if (!out_open) out_r.Reset();
    if (!err_open) err_r.Reset();
    if (!out_open && !err_open) break;
  }
  auto st = child->Wait();
  if (!st) return tl::unexpected(st.error());
  if (WIFEXITED(*st)) {
    res.exit_code = WEXITSTATUS(*st);
  } else if (WIFSIGNALED(*st)) {
    res.signal = WTERMSIG(*st);
  }
  return res;
}

Result<RunResult> RunChecked(SpawnOptions opts, int64_t timeout_ms) {
  std::string cmd;
  for (const auto& a : opts.argv) cmd += (cmd.empty() ? "" : " ") + a;
  auto r = Run(std::move(opts), timeout_ms);
  if (!r) return tl::unexpected(std::move(r.error()).Wrap(cmd));
  if (!r->ok()) {
    std::string err = r->err.empty() ? r->out : r->err;
    while (!err.empty() && (err.back() == '\n' || err.back() == ' ')) err.pop_back();
    std::string how = r->signal ? "signal " + std::to_string(r->signal)
                                : "exit " + std::to_string(r->exit_code);
    return Fail(Errc::kInternal, cmd + ": " + how + ": " + err);
  }
  return r;
}

Result<TempDir> TempDir::Create(const std::string& parent, const std::string& prefix) {
  std::string tmpl = parent + "/" + prefix + "XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back(0);
  if (!::mkdtemp(buf.data())) return ErrnoFail("mkdtemp " + tmpl);
  return TempDir(std::string(buf.data()));
}

TempDir& TempDir::operator=(TempDir&& o) noexcept {
  if (this != &o) {
    if (!path_.empty()) (void)RemoveAll(path_);
    path_ = std::move(o.path_);
    o.path_.clear();
  }
  return *this;
}

TempDir::~TempDir() {
  if (!path_.empty()) (void)RemoveAll(path_);
}

Status MkdirAll(const std::string& path, mode_t mode) {
  if (path.empty() || path == "/") return Ok();
  // The common cases first: the directory exists, or only its last component is missing.
  if (::mkdir(path.c_str(), mode) != 0) {
    if (errno == ENOENT) {
      size_t slash = path.find_last_of('/', path.find_last_not_of('/'));
      if (slash != std::string::npos && slash > 0) SPACE_TRY(MkdirAll(path.substr(0, slash), mode));
      if (::mkdir(path.c_str(), mode) != 0 && errno != EEXIST) return ErrnoFail("mkdir " + path);
    } else if (errno != EEXIST) {
      return ErrnoFail("mkdir " + path);
    }
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return ErrnoFail("stat " + path);
  if (!S_ISDIR(st.st_mode)) return Fail(Errc::kConflict, "mkdir " + path + ": not a directory");
  return Ok();
}

namespace {
Status RemoveAt(int dirfd, const char* name, dev_t dev) {
  struct stat st;
  if (::fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return Ok();
    return ErrnoFail(std::string("stat ") + name);
  }
  if (S_ISDIR(st.st_mode)) {
    if (st.st_dev != dev) return Fail(Errc::kConflict, std::string("remove ") + name + ": mount point");
    int fd = ::openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return ErrnoFail(std::string("open ") + name);
    DIR* d = ::fdopendir(fd);
    if (!d) {
      ::close(fd);
      return ErrnoFail("fdopendir");
    }
    Status st_all = Ok();
    while (dirent* e = ::readdir(d)) {
      if (!std::strcmp(e->d_name, ".") || !std::strcmp(e->d_name, "..")) continue;
      auto r = RemoveAt(fd, e->d_name, dev);
      if (!r && st_all) st_all = r;
    }
    ::closedir(d);
    if (!st_all) return st_all;
    if (::unlinkat(dirfd, name, AT_REMOVEDIR) != 0 && errno != ENOENT)
      return ErrnoFail(std::string("rmdir ") + name);
    return Ok();
  }
  if (::unlinkat(dirfd, name, 0) != 0 && errno != ENOENT)
    return ErrnoFail(std::string("unlink ") + name);
  return Ok();
}
}  // namespace

Status RemoveAll(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Ok();
    return ErrnoFail("stat " + path);
  }
  return RemoveAt(AT_FDCWD, path.c_str(), st.st_dev);
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

size_t CountDirEntries(const std::string& path) {
  size_t n = 0;
  if (DIR* d = ::opendir(path.c_str())) {
    while (dirent* e = ::readdir(d)) {
      std::string_view name = e->d_name;
      if (name != "." && name != "..") ++n;
    }
    ::closedir(d);
  }
  return n;
}

std::string UnescapeMountField(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      out += static_cast<char>(std::strtol(s.substr(i + 1, 3).c_str(), nullptr, 8));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::vector<std::string> MountsUnder(const std::string& prefix) {
  std::vector<std::string> out;
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ss(line);
    std::string id, parent, devno, root, mp;
    ss >> id >> parent >> devno >> root >> mp;
    mp = UnescapeMountField(mp);
    if (mp == prefix || StartsWith(mp, prefix + "/")) out.push_back(mp);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.size() > b.size(); });
  return out;
}

bool IsMountPoint(const std::string& path) {
  for (const auto& m : MountsUnder(path)) {
    if (m == path) return true;
  }
  return false;
}

Result<std::string> RealPath(const std::string& path) {
  char* p = ::realpath(path.c_str(), nullptr);
  if (!p) return ErrnoFail("realpath " + path);
  std::string s(p);
  std::free(p);
  return s;
}

std::string SelfExeDir() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  buf[n] = 0;
  std::string s(buf);
  return s.substr(0, s.find_last_of('/'));
}

}  // namespace space::sys
