#include "agent/forward.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "agent/log.h"

namespace space::agent {
namespace {

int64_t Now() {
  struct timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// A connected socket to loopback `port`, or -1.
int ConnectLoopback(int port) {
  {
    int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s >= 0) {
      sockaddr_in a = {};
      a.sin_family = AF_INET;
      a.sin_port = htons(static_cast<uint16_t>(port));
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return s;
      ::close(s);
    }
  }
  int s = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return -1;
  sockaddr_in6 a = {};
  a.sin6_family = AF_INET6;
  a.sin6_port = htons(static_cast<uint16_t>(port));
  a.sin6_addr = in6addr_loopback;
  if (::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return s;
  ::close(s);
  return -1;
}

// In the forked relay: every fd but `keep` closed (the agent's connection, epoll and
// command pipes must not stay open in it). gVisor's kernel has no close_range.
void CloseAllBut(int keep) {
  if (keep != 3) {
    if (::dup2(keep, 3) < 0) ::_exit(1);
    ::close(keep);
  }
  if (::close_range(4, ~0U, 0) == 0) return;
  int dir = ::open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) {
    for (int fd = 4; fd < 65536; ++fd) ::close(fd);
    return;
  }
  std::vector<int> fds;
  alignas(8) char buf[4096];
  for (;;) {
    long n = ::syscall(SYS_getdents64, dir, buf, sizeof buf);
    if (n <= 0) break;
    for (long off = 0; off < n;) {
      // struct linux_dirent64: u64 ino, s64 off, u16 reclen, u8 type, name.
      const char* name = buf + off + 19;
      unsigned short reclen;
      std::memcpy(&reclen, buf + off + 16, sizeof reclen);
      int fd = 0;
      bool num = name[0] != 0;
      for (const char* c = name; *c; ++c) {
        if (*c < '0' || *c > '9') {
          num = false;
          break;
        }
        fd = fd * 10 + (*c - '0');
      }
      if (num && fd > 3 && fd != dir) fds.push_back(fd);
      off += reclen;
    }
  }
  ::close(dir);
  for (int fd : fds) ::close(fd);
}

// One direction of a joined pair: bytes read from `from` not yet written to `to`.
struct Pipe {
  int from, to;
  std::vector<char> buf = std::vector<char>(64 << 10);
  size_t len = 0, pos = 0;
  bool eof = false, done = false;
};

// Joins two sockets until both directions have ended (half-closes passed on), then exits.
[[noreturn]] void Join(int a, int b) {
  for (int fd : {a, b}) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  int one = 1;
  ::setsockopt(a, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::setsockopt(b, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  Pipe p[2] = {{a, b}, {b, a}};
  while (!p[0].done || !p[1].done) {
    pollfd fds[2] = {{a, 0, 0}, {b, 0, 0}};
    for (Pipe& d : p) {
      if (d.done) continue;
      pollfd& in = fds[d.from == a ? 0 : 1];
      pollfd& out = fds[d.to == a ? 0 : 1];
      if (d.len == d.pos && !d.eof) in.events |= POLLIN;
      if (d.len > d.pos) out.events |= POLLOUT;
    }
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      ::_exit(1);
    }
    for (Pipe& d : p) {
      if (d.done) continue;
      if (d.len == d.pos && !d.eof) {
        ssize_t n = ::read(d.from, d.buf.data(), d.buf.size());
        if (n > 0) {
          d.len = static_cast<size_t>(n);
          d.pos = 0;
        } else if (n == 0) {
          d.eof = true;
        } else if (errno != EAGAIN && errno != EINTR) {
          ::_exit(0);  // reset: the other side sees its end as the socket closes
        }
      }
      while (d.len > d.pos) {
        ssize_t n = ::write(d.to, d.buf.data() + d.pos, d.len - d.pos);
        if (n > 0) {
          d.pos += static_cast<size_t>(n);
        } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
          break;
        } else {
          ::_exit(0);
        }
      }
      if (d.eof && d.len == d.pos) {
        ::shutdown(d.to, SHUT_WR);
        d.done = true;
      }
    }
  }
  ::_exit(0);
}

// The relay process: accepts on fd 3, one child per connection; exits when idle.
[[noreturn]] void Relay(int port) {
  const int listener = 3;
  int active = 0;
  int64_t idle_since = Now();
  for (;;) {
    for (;;) {
      int status;
      pid_t p = ::waitpid(-1, &status, WNOHANG);
      if (p <= 0) break;
      if (--active == 0) idle_since = Now();
    }
    if (active == 0 && Now() - idle_since > kForwardIdleNs) ::_exit(0);
    pollfd pfd = {listener, POLLIN, 0};
    int r = ::poll(&pfd, 1, 1000);
    if (r < 0 && errno != EINTR) ::_exit(1);
    if (r <= 0) continue;
    int c = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) continue;
    pid_t child = ::fork();
    if (child == 0) {
      ::close(listener);
      int up = ConnectLoopback(port);
      if (up < 0) ::_exit(0);  // the service went away: the client sees the close
      Join(c, up);
    }
    ::close(c);
    if (child > 0) ++active;
  }
}

}  // namespace

bool LoopbackListening(int port) {
  int s = ConnectLoopback(port);
  if (s < 0) return false;
  ::close(s);
  return true;
}

Result<ForwardStarted> StartForward(const std::string& address, int port) {
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  if (::inet_pton(AF_INET, address.c_str(), &a.sin_addr) != 1)
    return Fail(Errc::kInvalidArgument, "forward: not an IPv4 address: " + address);
  int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return ErrnoFail("forward: socket");
  int one = 1;
  ::setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) < 0 || ::listen(s, 64) < 0) {
    int err = errno;
    ::close(s);
    return ErrnoFail("forward: listen on " + address, err);
  }
  socklen_t len = sizeof a;
  if (::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) < 0) {
    int err = errno;
    ::close(s);
    return ErrnoFail("forward: getsockname", err);
  }
  pid_t pid = ::fork();
  if (pid < 0) {
    int err = errno;
    ::close(s);
    return ErrnoFail("forward: fork", err);
  }
  if (pid == 0) {
    // The agent blocks these and reads them from a signalfd; the relay wants defaults
    // (SIGCHLD to reap its connections; SIGPIPE stays ignored: a closed peer is EPIPE).
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGCHLD, SIGUSR1, SIGUSR2}) ::signal(sig, SIG_DFL);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::setsid();
    CloseAllBut(s);
    Relay(port);
  }
  ::close(s);
  return ForwardStarted{pid, ntohs(a.sin_port)};
}

}  // namespace space::agent
