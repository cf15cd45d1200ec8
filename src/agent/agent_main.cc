// space-agent: the in-sandbox agent (PID 1 in every sandbox). See docs/agent-protocol.md.
//
//   space-agent --listen PATH | --fd N | --channel DEV  [--root DIR] [--window BYTES] [--checkpoint-signals] [--verbose]
#include <fcntl.h>
#include <net/if.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "agent/agent.h"
#include "agent/log.h"

namespace {

using space::agent::AgentOptions;

void Usage() {
  std::fprintf(stderr,
               "usage: space-agent (--listen PATH | --fd N | --channel DEV) [--root DIR] "
               "[--window BYTES] "
               "[--verbose]\n");
}

bool ParseU64(const char* s, uint64_t* out) {
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(s, &end, 10);
  if (errno || !end || *end || end == s || s[0] == '-') return false;
  *out = v;
  return true;
}

// A child's stdio is dup2'ed from fresh pipes; were 0-2 closed, a pipe could land on
// them and be clobbered. Occupy them with /dev/null.
void EnsureStdio() {
  for (int fd = 0; fd < 3; ++fd) {
    if (::fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
      int n = ::open("/dev/null", O_RDWR);
      if (n >= 0 && n != fd) ::close(n);
    }
  }
}

// A fresh network namespace has `lo` down; as init, nobody else brings it up.
void BringUpLoopback() {
  int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) {
    AGENT_LOG_WARN("lo: socket: %s", strerror(errno));
    return;
  }
  struct ifreq ifr = {};
  std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  if (::ioctl(s, SIOCGIFFLAGS, &ifr) < 0) {
    AGENT_LOG_WARN("lo: SIOCGIFFLAGS: %s", strerror(errno));
  } else if (!(ifr.ifr_flags & IFF_UP)) {
    ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
    if (::ioctl(s, SIOCSIFFLAGS, &ifr) < 0) AGENT_LOG_WARN("lo: SIOCSIFFLAGS: %s", strerror(errno));
  }
  ::close(s);
}

// POSIX shared memory lives in /dev/shm. oci sandboxes get it as a directory of their
// /dev tmpfs rather than a tmpfs of its own (one superblock fewer per sandbox); as init,
// the agent makes it. Where it exists (a microVM's mount, gVisor's) it is left as it is.
void EnsureDevShm() {
  if (::mkdir("/dev/shm", 01777) == 0) {
    if (::chmod("/dev/shm", 01777) != 0) AGENT_LOG_WARN("chmod /dev/shm: %s", strerror(errno));
  } else if (errno != EEXIST) {
    AGENT_LOG_WARN("mkdir /dev/shm: %s", strerror(errno));
  }
}

}  // namespace

int main(int argc, char** argv) {
  AgentOptions opts;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) return nullptr;
      return argv[++i];
    };
    const char* v = nullptr;
    if (a == "--listen" && (v = value())) {
      opts.listen_path = v;
    } else if (a == "--fd" && (v = value())) {
      uint64_t fd;
      if (!ParseU64(v, &fd) || fd > 1 << 20) return Usage(), 2;
      opts.fd = static_cast<int>(fd);
    } else if (a == "--channel" && (v = value())) {
      // A character device (the microVM's virtio-serial port): opened here, then served
      // exactly like --fd. It may appear a moment after boot.
      int fd = -1;
      for (int tries = 0; tries < 500 && fd < 0; ++tries) {
        fd = ::open(v, O_RDWR | O_NOCTTY | O_CLOEXEC);
        if (fd < 0) ::usleep(10000);
      }
      if (fd < 0) {
        AGENT_LOG_ERROR("open %s: %s", v, strerror(errno));
        return 1;
      }
      opts.fd = fd;
    } else if (a == "--root" && (v = value())) {
      opts.root = v;
    } else if (a == "--window" && (v = value())) {
      if (!ParseU64(v, &opts.window) || opts.window == 0) return Usage(), 2;
    } else if (a == "--checkpoint-signals") {
      opts.checkpoint_signals = true;
    } else if (a == "--verbose") {
      space::agent::g_log_level = space::agent::LogLevel::kDebug;
    } else {
      Usage();
      return 2;
    }
  }
  if (opts.listen_path.empty() == (opts.fd < 0)) {
    Usage();
    return 2;
  }

  EnsureStdio();
  opts.is_init = ::getpid() == 1;
  if (opts.is_init) {
    BringUpLoopback();
    EnsureDevShm();
  } else if (::prctl(PR_SET_CHILD_SUBREAPER, 1) < 0) {
    // Orphans of commands then go to the real init; ours are still reaped.
    AGENT_LOG_WARN("PR_SET_CHILD_SUBREAPER: %s", strerror(errno));
  }
  // Writes to a closed connection must fail with EPIPE, not kill the agent. Commands get
  // default dispositions back before exec.
  ::signal(SIGPIPE, SIG_IGN);
  // An inherited SIG_IGN for SIGCHLD would make the kernel auto-reap our commands and
  // lose their exit statuses.
  ::signal(SIGCHLD, SIG_DFL);
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGCHLD, SIGTERM, SIGINT, SIGHUP}) sigaddset(&set, s);
  if (opts.checkpoint_signals) {
    sigaddset(&set, SIGUSR1);
    sigaddset(&set, SIGUSR2);
  }
  ::sigprocmask(SIG_BLOCK, &set, nullptr);
  // They are read from a signalfd and never delivered, but the kernel drops signals to a
  // namespace's init whose disposition is SIG_DFL; a (never run) handler keeps them
  // coming however the kernel orders its checks.
  struct sigaction sa = {};
  sa.sa_handler = [](int) {};
  for (int s : {SIGTERM, SIGINT, SIGHUP}) ::sigaction(s, &sa, nullptr);
  if (opts.checkpoint_signals) {
    ::sigaction(SIGUSR1, &sa, nullptr);
    ::sigaction(SIGUSR2, &sa, nullptr);
  }
  // Files created by file operations get exactly the requested mode.
  ::umask(0);

  auto agent = space::agent::Agent::Create(opts);
  if (!agent) {
    AGENT_LOG_ERROR("%s", agent.error().message.c_str());
    return 1;
  }
  AGENT_LOG_INFO(
      "%s ready (pid %d, %s %s)", space::agent::kAgentVersion, ::getpid(),
      opts.listen_path.empty() ? "fd" : "listening on",
      opts.listen_path.empty() ? std::to_string(opts.fd).c_str() : opts.listen_path.c_str());
  return (*agent)->Run();
}
