#include "agent/exec.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/close_range.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include <cstring>

extern char** environ;

namespace space::agent {

struct linux_dirent64_ {
  uint64_t d_ino;
  int64_t d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[];
};

namespace {
// Kernels without close_range (gVisor's): mark the open fds from /proc/self/fd (a handful)
// rather than every possible fd number (tens of thousands of system calls, which cost
// seconds per command under gVisor's ptrace platform). Runs in the forked child: raw
// system calls only, no allocation.
void MarkCloexecFallback() {
  int dir = ::open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) {
    struct rlimit rl;
    int top = ::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 65536 ? static_cast<int>(rl.rlim_cur) : 65536;
    for (int fd = 3; fd < top; ++fd) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
    return;
  }
  alignas(8) char buf[4096];
  for (;;) {
    long n = ::syscall(SYS_getdents64, dir, buf, sizeof buf);
    if (n <= 0) break;
    for (long off = 0; off < n;) {
      auto* d = reinterpret_cast<struct linux_dirent64_*>(buf + off);
      int fd = 0;
      bool num = d->d_name[0] != 0;
      for (const char* c = d->d_name; *c; ++c) {
        if (*c < '0' || *c > '9') { num = false; break; }
        fd = fd * 10 + (*c - '0');
      }
      if (num && fd >= 3 && fd != dir) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
      off += d->d_reclen;
    }
  }
  ::close(dir);
}
}  // namespace
namespace {

// Stages of the child's set-up, reported through the error pipe with errno.
enum ChildStage : uint32_t { kStageSetup = 0, kStageUser = 1, kStageCwd = 2, kStageExec = 3 };

bool HasNul(std::string_view s) { return s.find('\0') != std::string_view::npos; }

void SetEnv(std::vector<std::string>* env, std::string_view key, std::string_view value,
            bool override_existing) {
  for (auto& e : *env) {
    if (e.size() > key.size() && e.compare(0, key.size(), key) == 0 && e[key.size()] == '=') {
      if (override_existing) e = std::string(key) + "=" + std::string(value);
      return;
    }
  }
  env->push_back(std::string(key) + "=" + std::string(value));
}

[[noreturn]] void ChildFail(int fd, uint32_t stage, int err) {
  char buf[kExecFailureSize];
  std::memcpy(buf, &stage, 4);
  std::memcpy(buf + 4, &err, 4);
  ssize_t ignored = ::write(fd, buf, sizeof buf);
  (void)ignored;
  ::_exit(127);
}

Status SetNonBlocking(int fd) {
  int fl = ::fcntl(fd, F_GETFL);
  if (fl < 0 || ::fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) return ErrnoFail("fcntl O_NONBLOCK");
  return Ok();
}

Result<std::pair<sys::UniqueFd, sys::UniqueFd>> Pipe() {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) < 0) return ErrnoFail("pipe2");
  return std::make_pair(sys::UniqueFd(p[0]), sys::UniqueFd(p[1]));
}

// Opens a new pseudo-terminal: the master (close-on-exec, non-blocking) and its slave
// (close-on-exec; dup2 in the child clears that for fds 0-2). TIOCGPTPEER (Linux 4.13)
// opens the slave without a path lookup, so a sandbox cannot swap /dev/pts/N under us.
Result<std::pair<sys::UniqueFd, sys::UniqueFd>> OpenPty(ExecRequest::PtySize size) {
  sys::UniqueFd master(::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC | O_NONBLOCK));
  if (!master) return ErrnoFail("open /dev/ptmx");
  int unlock = 0;
  if (::ioctl(master.get(), TIOCSPTLCK, &unlock) < 0) return ErrnoFail("unlock pty");
  sys::UniqueFd slave(::ioctl(master.get(), TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC));
  if (!slave) {
    char name[64];
    if (::ptsname_r(master.get(), name, sizeof name) != 0) return ErrnoFail("ptsname");
    slave.Reset(::open(name, O_RDWR | O_NOCTTY | O_CLOEXEC));
    if (!slave) return ErrnoFail(std::string("open ") + name);
  }
  SPACE_TRY(ResizePty(master.get(), size));
  return std::make_pair(std::move(master), std::move(slave));
}

// The kernel's own sigaction, used instead of glibc's: glibc refuses (EINVAL) the two
// real-time signals it keeps for itself (32 and 33), yet whoever started the agent may have
// left them ignored, and an ignored signal stays ignored across exec. All zeros is SIG_DFL
// with no flags and an empty mask; only the handler, the first field, is ever read.
struct KernelSigaction {
  void (*handler)(int);
  unsigned long flags;
  void (*restorer)();
  uint64_t mask;
};

bool KernelDefault(int sig) {
  KernelSigaction dfl = {};
  return ::syscall(SYS_rt_sigaction, sig, &dfl, nullptr, sizeof dfl.mask) == 0;
}

// The signals whose disposition is not SIG_DFL in the agent. The agent sets its own up
// before it runs any command and never changes them after, so they are read once; a
// command's child then puts back only these (a handful) instead of making a system call for
// each of the 64 signals. (Handlers would go at exec anyway; ignored signals would not.)
const std::vector<int>& ChangedSignals() {
  static const std::vector<int> changed = [] {
    std::vector<int> out;
    for (int s = 1; s < NSIG; ++s) {
      KernelSigaction sa = {};
      if (::syscall(SYS_rt_sigaction, s, nullptr, &sa, sizeof sa.mask) == 0 &&
          sa.handler != SIG_DFL)
        out.push_back(s);
    }
    return out;
  }();
  return changed;
}

// `name` as execvp would find it in `path`, found with one stat per directory in the
// agent rather than one failed execve per directory in the child (each of those costs the
// kernel the start of an exec: ~10 us here, five of them for /bin/echo in busybox's PATH).
// "" when execvp must search itself: a name with a slash, no PATH, a relative or empty
// directory in it (execvp resolves those against the child's cwd), nothing found. The
// child falls back to execvp whenever the exec of what this found fails, so a file that
// looks executable and is not (no permission for the command's user, a script without an
// interpreter line, a noexec mount) ends as execvp would have ended it.
std::string FindInPath(const std::string& name, const std::vector<std::string>& env) {
  if (name.empty() || name.find('/') != std::string::npos) return "";
  std::string_view path;
  for (const auto& e : env) {
    if (e.compare(0, 5, "PATH=") == 0) path = std::string_view(e).substr(5);
  }
  while (!path.empty()) {
    const size_t colon = path.find(':');
    std::string_view dir = path.substr(0, colon);
    path = colon == std::string_view::npos ? std::string_view() : path.substr(colon + 1);
    if (dir.empty() || dir[0] != '/') return "";
    std::string candidate = std::string(dir) + "/" + name;
    struct stat st;
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0111)) return candidate;
  }
  return "";
}

Result<sys::UniqueFd> Dup(int fd) {
  sys::UniqueFd d(::fcntl(fd, F_DUPFD_CLOEXEC, 3));
  if (!d) return ErrnoFail("dup");
  return d;
}

}  // namespace

Result<ExecRequest::PtySize> ParsePtySize(const Json& j) {
  if (!j.is_object()) return Fail(Errc::kInvalidArgument, "pty must be an object {cols, rows}");
  ExecRequest::PtySize size;
  for (auto [key, field] : {std::pair{"cols", &size.cols}, std::pair{"rows", &size.rows}}) {
    auto v = JsonInt(j, key);
    if (!v || *v < 1 || *v > 4096)
      return Fail(Errc::kInvalidArgument, std::string("pty ") + key + " must be 1..4096");
    *field = static_cast<uint16_t>(*v);
  }
  return size;
}

Status ResizePty(int master, ExecRequest::PtySize size) {
  struct winsize ws = {};
  ws.ws_col = size.cols;
  ws.ws_row = size.rows;
  if (::ioctl(master, TIOCSWINSZ, &ws) < 0) return ErrnoFail("resize pty");
  return Ok();
}

Result<ExecRequest> ParseExecRequest(const Json& j) {
  ExecRequest r;
  auto bad = [](std::string m) { return Fail(Errc::kInvalidArgument, "exec: " + std::move(m)); };
  auto stream = JsonInt(j, "stream");
  if (!stream || *stream <= 0 || *stream > 0xffffffffll) return bad("stream must be 1..2^32-1");
  r.stream = static_cast<uint32_t>(*stream);
  if (const Json* id = JsonField(j, "id")) {
    if (!id->is_string()) return bad("id must be a string");
    r.id = id->get<std::string>();
  }
  const Json* argv = JsonField(j, "argv");
  const Json* shell = JsonField(j, "shell");
  if ((argv != nullptr) == (shell != nullptr))
    return bad("exactly one of argv and shell is required");
  if (argv) {
    if (!argv->is_array() || argv->empty()) return bad("argv must be a non-empty array");
    for (const Json& a : *argv) {
      if (!a.is_string()) return bad("argv must hold strings");
      r.argv.push_back(a.get<std::string>());
      if (HasNul(r.argv.back())) return bad("argv holds a NUL byte");
    }
    if (r.argv[0].empty()) return bad("argv[0] is empty");
  } else {
    if (!shell->is_string()) return bad("shell must be a string");
    std::string s = shell->get<std::string>();
    if (HasNul(s)) return bad("shell holds a NUL byte");
    r.argv = {"/bin/sh", "-c", std::move(s)};
  }
  if (const Json* env = JsonField(j, "env")) {
    if (!env->is_object()) return bad("env must be an object");
    for (auto it = env->begin(); it != env->end(); ++it) {
      if (!it.value().is_string()) return bad("env values must be strings");
      std::string k = it.key(), v = it.value().get<std::string>();
      if (k.empty() || k.find('=') != std::string::npos || HasNul(k) || HasNul(v))
        return bad("bad env name: " + k);
      r.env.emplace_back(std::move(k), std::move(v));
    }
  }
  if (const Json* cwd = JsonField(j, "cwd")) {
    if (!cwd->is_string() || cwd->get<std::string>().empty() || HasNul(cwd->get<std::string>()))
      return bad("cwd must be a non-empty string");
    r.cwd = cwd->get<std::string>();
  }
  if (const Json* user = JsonField(j, "user")) {
    if (user->is_string() && !user->get<std::string>().empty() &&
        !HasNul(user->get<std::string>())) {
      r.user = user->get<std::string>();
    } else if (user->is_number_integer() && user->get<int64_t>() >= 0 &&
               user->get<int64_t>() < 0xffffffffll) {
      r.user = std::to_string(user->get<int64_t>());
    } else {
      return bad("user must be a name or a uid");
    }
  }
  if (const Json* in = JsonField(j, "stdin")) {
    if (!in->is_boolean()) return bad("stdin must be a bool");
    r.stdin_pipe = in->get<bool>();
  }
  if (JsonField(j, "timeout_ms")) {
    auto t = JsonInt(j, "timeout_ms");
    if (!t || *t < 0) return bad("timeout_ms must be a non-negative integer");
    r.timeout_ms = *t;
  }
  if (const Json* pty = JsonField(j, "pty"); pty && !pty->is_null()) {
    auto size = ParsePtySize(*pty);
    if (!size) return bad(size.error().message);
    r.pty = *size;
  }
  return r;
}

Result<StartedCommand> StartCommand(const ExecRequest& req) {
  // Everything that allocates or can fail is done here, before fork.
  bool switch_user = req.user.has_value();
  UserInfo user;
  if (switch_user) {
    auto u = LookupUser(*req.user);
    if (!u) return tl::unexpected(u.error());
    user = std::move(*u);
  } else {
    auto u = LookupUser(std::to_string(::getuid()));
    if (u)
      user = std::move(*u);
    else
      user.home = "/";
  }

  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) env.emplace_back(*e);
  // A requested user gets its own identity; without one, fill in only what is missing.
  SetEnv(&env, "HOME", user.home, switch_user);
  if (!user.name.empty()) {
    SetEnv(&env, "USER", user.name, switch_user);
    SetEnv(&env, "LOGNAME", user.name, switch_user);
  }
  // Full-screen programs need to know what the terminal is; the request may say otherwise.
  if (req.pty) SetEnv(&env, "TERM", "xterm", false);
  for (const auto& [k, v] : req.env) SetEnv(&env, k, v, true);

  std::vector<char*> argv_c, env_c;
  for (const auto& a : req.argv) argv_c.push_back(const_cast<char*>(a.c_str()));
  argv_c.push_back(nullptr);
  for (auto& e : env) env_c.push_back(e.data());
  env_c.push_back(nullptr);
  const std::string cwd = req.cwd.value_or(user.home);
  const bool cwd_explicit = req.cwd.has_value();
  const std::string found = FindInPath(req.argv[0], env);
  const std::vector<int>& changed_signals = ChangedSignals();  // read here, not in the child

  auto status = Pipe();
  if (!status) return tl::unexpected(status.error());
  // The child's stdin, stdout, stderr and the parent's ends of them.
  sys::UniqueFd in_child, in_parent, out_child, out_parent, err_child, err_parent, master;
  if (req.pty) {
    auto pty = OpenPty(*req.pty);
    if (!pty) return tl::unexpected(pty.error());
    master = std::move(pty->first);
    auto r = Dup(master.get());
    auto w = Dup(master.get());
    if (!r || !w) return tl::unexpected(!r ? r.error() : w.error());
    out_parent = std::move(*r);
    in_parent = std::move(*w);
    in_child = std::move(pty->second);
  } else {
    auto out = Pipe();
    if (!out) return tl::unexpected(out.error());
    auto err = Pipe();
    if (!err) return tl::unexpected(err.error());
    out_parent = std::move(out->first);
    out_child = std::move(out->second);
    err_parent = std::move(err->first);
    err_child = std::move(err->second);
    // Bigger pipes mean fewer wake-ups for chatty commands; the window, not the pipe,
    // bounds what the agent holds. Failure (a lowered pipe-max-size) is harmless.
    ::fcntl(out_child.get(), F_SETPIPE_SZ, 1 << 20);
    ::fcntl(err_child.get(), F_SETPIPE_SZ, 1 << 20);
  }
  if (req.pty) {
    // stdin, stdout and stderr are all the pty's slave side.
  } else if (req.stdin_pipe) {
    auto in = Pipe();
    if (!in) return tl::unexpected(in.error());
    in_child = std::move(in->first);
    in_parent = std::move(in->second);
  } else {
    auto devnull = sys::Open("/dev/null", O_RDONLY);
    if (!devnull) return tl::unexpected(devnull.error());
    in_child = std::move(*devnull);
  }
  const int child_in = in_child.get();
  const int child_out = req.pty ? child_in : out_child.get();
  const int child_err = req.pty ? child_in : err_child.get();
  const bool pty = req.pty.has_value();

  pid_t pid = ::fork();
  if (pid < 0) return ErrnoFail("fork");
  if (pid == 0) {
    // Child: the parent is single-threaded, so allocation-free code is not required,
    // but everything needed was prepared above anyway.
    const int status_fd = status->second.get();
    if (::setsid() < 0) ChildFail(status_fd, kStageSetup, errno);
    // A session leader without a terminal takes the pty as its controlling terminal.
    if (pty && ::ioctl(child_in, TIOCSCTTY, 0) < 0) ChildFail(status_fd, kStageSetup, errno);
    // Default dispositions first, then the agent's blocked signals unblocked: none of the
    // agent's handlers can run here.
    for (int s : changed_signals) KernelDefault(s);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    // fds 0-2 of the agent are always open (main makes sure), so none of these pipes
    // is 0, 1 or 2 and dup2 never clobbers a source.
    if (::dup2(child_in, 0) < 0 || ::dup2(child_out, 1) < 0 || ::dup2(child_err, 2) < 0)
      ChildFail(status_fd, kStageSetup, errno);
    // Everything else closes at exec; the status pipe stays usable until then.
    if (::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) < 0) MarkCloexecFallback();
    ::umask(022);
    // The host shields the agent from the OOM killer (oom_score_adj -999): commands are
    // ordinary candidates again. Where it could not (lowering needs CAP_SYS_RESOURCE, which
    // some hosts withhold from root), commands are made likelier victims than the agent
    // instead (500). Raising it needs no privilege.
    if (int fd = ::open("/proc/self/oom_score_adj", O_RDWR | O_CLOEXEC); fd >= 0) {
      char cur[16] = {0};
      ssize_t n = ::read(fd, cur, sizeof cur - 1);
      const char* want = n > 0 && cur[0] == '-' ? "0" : "500";
      if (n > 0 && std::atoi(cur) >= 500) want = nullptr;
      if (want) (void)!::pwrite(fd, want, std::strlen(want), 0);
      ::close(fd);
    }
    if (switch_user) {
      if (::setgroups(user.groups.size(), user.groups.data()) < 0)
        ChildFail(status_fd, kStageUser, errno);
      if (::setgid(user.gid) < 0) ChildFail(status_fd, kStageUser, errno);
      if (::setuid(user.uid) < 0) ChildFail(status_fd, kStageUser, errno);
    }
    if (::chdir(cwd.c_str()) < 0) {
      if (cwd_explicit) ChildFail(status_fd, kStageCwd, errno);
      if (::chdir("/") < 0) ChildFail(status_fd, kStageCwd, errno);
    }
    if (!found.empty()) ::execve(found.c_str(), argv_c.data(), env_c.data());
    // execvp searches the PATH of `environ`, so the request's PATH applies.
    environ = env_c.data();
    ::execvp(argv_c[0], argv_c.data());
    ChildFail(status_fd, kStageExec, errno);
  }

  StartedCommand c;
  c.pid = pid;
  c.stdin_pipe = std::move(in_parent);
  c.stdout_pipe = std::move(out_parent);
  c.stderr_pipe = std::move(err_parent);
  c.error_pipe = std::move(status->first);
  c.pty_master = std::move(master);
  // The child's ends close here (their destructors), so EOF on our ends means exit.
  for (int fd :
       {c.stdout_pipe.get(), c.stderr_pipe.get(), c.error_pipe.get(), c.stdin_pipe.get()}) {
    if (fd >= 0) {
      auto st = SetNonBlocking(fd);
      if (!st) {
        ::kill(pid, SIGKILL);  // reaped by the agent's waitpid(-1) loop
        return tl::unexpected(st.error());
      }
    }
  }
  return c;
}

Error ExecFailure(const char (&buf)[kExecFailureSize], const ExecRequest& req) {
  uint32_t stage;
  int err;
  std::memcpy(&stage, buf, 4);
  std::memcpy(&err, buf + 4, 4);
  std::string what;
  switch (stage) {
    case kStageUser:
      what = "switch to user " + req.user.value_or("?");
      break;
    case kStageCwd:
      what = "cwd " + req.cwd.value_or("(home)");
      break;
    case kStageExec:
      what = "exec " + req.argv[0];
      break;
    default:
      what = "set up command";
      break;
  }
  Error e{ErrcFromErrno(err), err, what + ": " + std::strerror(err)};
  if (stage == kStageSetup) e.code = Errc::kInternal;
  return e;
}

}  // namespace space::agent
