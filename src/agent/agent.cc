#include "agent/agent.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <linux/random.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <vector>

#include "agent/exec.h"
#include "agent/forward.h"
#include "agent/sync.h"
#include "agent/log.h"
#include "common/json.h"

namespace space::agent {
namespace {

// What an epoll event belongs to: the kind in the high half of data.u64, a stream id (or
// the connection generation) in the low half. Lookups by stream make stale events for
// fds closed earlier in the same batch harmless.
enum Kind : uint32_t {
  kListenTag = 1,
  kConnTag,
  kSignalTag,
  kStdoutTag,  // kStdoutTag + 1 is stderr
  kStderrTag,
  kStdinTag,
  kExecStatusTag,
};
uint64_t Tag(Kind k, uint32_t id) { return (static_cast<uint64_t>(k) << 32) | id; }

// Encoded frames waiting for the socket: above this the agent stops turning buffered
// output into frames (and stops reading pipes) until the host catches up.
constexpr size_t kOutHighWater = 2u << 20;
constexpr size_t kScratchSize = kMaxDataChunk;
constexpr int64_t kCoalesceNs = 2'000'000;      // hold small output at most this long
constexpr uint64_t kCoalesceBytes = 256 << 10;  // ... and only while less than this
constexpr int64_t kShutdownGraceNs = 5'000'000'000;
constexpr int64_t kFdPollIntervalNs = 200'000'000;

int64_t RealtimeNanos() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// As init of a pid namespace, the only legitimate client is the host, outside the
// namespace: SO_PEERCRED reports its pid as 0 there. A peer with a visible pid is a
// process of the sandbox trying to take the host's place (the socket lives in the
// sandbox's filesystem), and is refused.
bool FromOutsideNamespace(int fd) {
  struct ucred cred = {};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
    AGENT_LOG_WARN("SO_PEERCRED: %s", strerror(errno));
    return false;
  }
  // Under gVisor (runsc --host-uds=create) the host's connection to the host-backed socket
  // carries the sentry's own credentials, i.e. our pid (1); no other process of the sandbox
  // can be pid 1, and gVisor lets none of them connect to that socket at all.
  if (cred.pid != 0 && cred.pid != ::getpid()) {
    AGENT_LOG_WARN("refusing a connection from pid %d inside the sandbox", cred.pid);
    return false;
  }
  return true;
}

std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

// The process group of `pid` from /proc/PID/stat (the fifth field, after the
// parenthesised name, which may itself hold spaces and parentheses); -1 when gone.
pid_t ProcessGroupOf(pid_t pid) {
  auto stat = sys::ReadFile("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return -1;
  size_t p = stat->rfind(')');
  if (p == std::string::npos) return -1;
  int ppid = 0, pgrp = -1;
  char state = 0;
  if (std::sscanf(stat->c_str() + p + 1, " %c %d %d", &state, &ppid, &pgrp) != 3) return -1;
  return pgrp;
}

// Whether process `pid` has an fd on one of the pipes with inodes `inos`.
bool HoldsPipe(pid_t pid, const std::vector<ino_t>& inos) {
  std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  DIR* d = ::opendir(dir.c_str());
  if (!d) return false;
  std::vector<std::string> want;
  for (ino_t ino : inos) want.push_back("pipe:[" + std::to_string(ino) + "]");
  bool found = false;
  char target[64];
  while (!found) {
    struct dirent* e = ::readdir(d);
    if (!e) break;
    if (e->d_name[0] == '.') continue;
    ssize_t n = ::readlinkat(::dirfd(d), e->d_name, target, sizeof target);
    if (n <= 0) continue;
    std::string_view link(target, static_cast<size_t>(n));
    for (const auto& w : want) found |= link == w;
  }
  ::closedir(d);
  return found;
}

// SIGKILLs every process of process group `pgid` that still holds one of the pipes
// `inos`: what is left of a finished command and would otherwise run on unseen (its
// output goes nowhere now). Other members of the group, and holders that left it
// (setsid), are spared: only the pipe is taken from them. Best effort: without /proc
// nothing is found.
void KillPipeHolders(pid_t pgid, const std::vector<ino_t>& inos, uint32_t stream) {
  DIR* proc = ::opendir("/proc");
  if (!proc) return;
  while (struct dirent* e = ::readdir(proc)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end != '\0') continue;
    if (ProcessGroupOf(static_cast<pid_t>(pid)) != pgid) continue;
    if (!HoldsPipe(static_cast<pid_t>(pid), inos)) continue;
    // Holders are typically orphans reparented to the agent: their pids stay theirs
    // until the agent reaps them, on this same thread, so the kill cannot hit a
    // recycled pid. The pipe inode check keeps strangers out even where /proc shows
    // another pid namespace.
    AGENT_LOG_INFO("stream %u: killing pid %ld, left over in the command's group", stream, pid);
    ::kill(static_cast<pid_t>(pid), SIGKILL);
  }
  ::closedir(proc);
}

}  // namespace

struct Agent::Output {
  struct Chunk {
    uint64_t offset;
    std::string data;
  };
  sys::UniqueFd pipe;
  uint32_t events = 0;  // registered epoll interest; 0 = not registered
  bool eof = false;     // EOF seen, or the pipe was closed after lingering
  uint64_t produced = 0, acked = 0, sent = 0;
  // Lingering: the main process has exited, the pipe has not reached EOF yet. It is cut
  // at linger_deadline_ns (extended by output read, up to linger_limit_ns). While the
  // agent does not read it (backpressure) the clock stops: blocked_since_ns is set and
  // both deadlines move on by the time spent blocked.
  int64_t linger_deadline_ns = 0;  // 0 = not lingering
  int64_t linger_limit_ns = 0;
  int64_t blocked_since_ns = 0;
  // Coalescing (Nagle's rule): while output already sent is unacknowledged, small unsent
  // output is held for up to kCoalesceNs from when it was read (or until the ACK), so a
  // program writing in 4 KiB pieces is sent in large frames (fewer frames, ACKs and host
  // wake-ups). Output after a quiet spell is sent at once.
  int64_t unsent_since_ns = 0;  // 0 = nothing unsent
  std::deque<Chunk> chunks;  // [chunks.front().offset <= acked, produced)
};

struct Agent::Command {
  uint32_t stream = 0;
  std::string id;
  pid_t pid = -1;
  ExecRequest req;            // for error messages
  uint32_t exec_request = 0;  // the request answered once exec's outcome is known
  uint32_t exec_conn = 0;     // ... on the connection (generation) that carried it
  sys::UniqueFd exec_status;
  uint32_t exec_status_events = 0;
  bool started = false;  // exec succeeded
  bool exited = false;   // main process reaped
  // When the pipes began to linger (main process reaped and exec confirmed).
  int64_t linger_start_ns = 0;
  bool timed_out = false;
  bool exit_sent = false;  // EXIT sent on the current connection
  int exit_code = -1;
  int term_signal = 0;
  int64_t deadline_ns = 0;  // 0 = no timeout
  Output out[2];            // stdout, stderr
  sys::UniqueFd stdin_pipe;
  uint32_t stdin_events = 0;
  std::string stdin_buf;
  size_t stdin_pos = 0;
  bool stdin_eof = false;
  sys::UniqueFd pty_master;  // a pty command's terminal (for resizes); else invalid
};

Agent::Agent(const AgentOptions& opts, FileService files) : opts_(opts), files_(std::move(files)) {}

Agent::~Agent() = default;

Result<std::unique_ptr<Agent>> Agent::Create(const AgentOptions& opts) {
  if (opts.window == 0) return Fail(Errc::kInvalidArgument, "window must be positive");
  auto files = FileService::Open(opts.root);
  if (!files) return tl::unexpected(files.error());
  std::unique_ptr<Agent> a(new Agent(opts, std::move(*files)));
  // Not zero-filled: its pages cost memory only once a read touches them.
  a->scratch_.reset(new char[kScratchSize]);

  a->epoll_.Reset(::epoll_create1(EPOLL_CLOEXEC));
  if (!a->epoll_) return ErrnoFail("epoll_create1");

  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGCHLD, SIGTERM, SIGINT, SIGHUP}) sigaddset(&set, s);
  if (opts.checkpoint_signals) {
    sigaddset(&set, SIGUSR1);
    sigaddset(&set, SIGUSR2);
  }
  a->signal_fd_.Reset(::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC));
  if (!a->signal_fd_) return ErrnoFail("signalfd");
  uint32_t signal_events = 0;
  a->SetInterest(a->signal_fd_.get(), Tag(kSignalTag, 0), EPOLLIN, &signal_events);

  if (!opts.listen_path.empty()) {
    SPACE_TRY(a->Listen());
  } else if (opts.fd >= 0) {
    int fl = ::fcntl(opts.fd, F_GETFL);
    if (fl < 0 || ::fcntl(opts.fd, F_SETFL, fl | O_NONBLOCK) < 0 ||
        ::fcntl(opts.fd, F_SETFD, FD_CLOEXEC) < 0)
      return ErrnoFail("fd " + std::to_string(opts.fd));
    a->conn_.Reset(opts.fd);
    a->StartConnection();
  } else {
    return Fail(Errc::kInvalidArgument, "need --listen PATH or --fd N");
  }
  return a;
}

// ---------------------------------------------------------------------------------------
// The loop.

int Agent::Run() {
  epoll_event events[64];
  for (;;) {
    if (shutting_down_) {
      bool children = Reap();
      bool drained = true;
      if (connected()) {
        drained = OutPending() == 0;
        for (auto& [s, c] : commands_) drained &= !Finished(*c) || c->exit_sent;
      }
      if (!children && drained) break;
      if (MonotonicNanos() >= shutdown_deadline_ns_) {
        if (shutdown_killed_) break;
        AGENT_LOG_WARN("commands still running after SIGTERM; killing them");
        for (auto& [s, c] : commands_) SignalCommand(*c, SIGKILL);
        shutdown_killed_ = true;
        shutdown_deadline_ns_ = MonotonicNanos() + 1'000'000'000;
      }
    }
    int n = ::epoll_wait(epoll_.get(), events, 64, NextTimeoutMs());
    if (n < 0 && errno != EINTR) {
      AGENT_LOG_ERROR("epoll_wait: %s", strerror(errno));
      return 1;
    }
    for (int i = 0; i < n; ++i) {
      uint64_t tag = events[i].data.u64;
      uint32_t id = static_cast<uint32_t>(tag);
      uint32_t ev = events[i].events;
      Kind kind = static_cast<Kind>(tag >> 32);
      auto cmd = [&]() -> Command* {
        auto it = commands_.find(id);
        return it == commands_.end() ? nullptr : it->second.get();
      };
      switch (kind) {
        case kListenTag:
          Accept();
          break;
        case kConnTag:
          if (id == conn_gen_ && !conn_live_ && opts_.fd >= 0) {
            next_fd_poll_ns_ = 0;  // the port changed state: look now (below)
            break;
          }
          if (id != conn_gen_ || !conn_live_) break;
          if (ev & (EPOLLIN | EPOLLHUP | EPOLLERR)) ReadConnection();
          if (conn_live_ && (ev & EPOLLOUT)) Flush();
          break;
        case kSignalTag:
          OnSignals();
          break;
        case kStdoutTag:
        case kStderrTag:
          if (Command* c = cmd()) ReadOutput(*c, kind - kStdoutTag);
          break;
        case kStdinTag:
          if (Command* c = cmd()) FlushStdin(*c);
          break;
        case kExecStatusTag:
          if (Command* c = cmd(); c && c->exec_status) OnExecStatus(*c);
          break;
      }
    }
    CheckDeadlines();
    if (opts_.fd >= 0 && !conn_live_ && MonotonicNanos() >= next_fd_poll_ns_) {
      // A serial port reports hang-up while no host is attached; once it stops, a new
      // host is there and gets a HELLO like any new connection.
      struct pollfd p = {conn_.get(), POLLIN | POLLOUT, 0};
      if (::poll(&p, 1, 0) >= 0 && !(p.revents & (POLLHUP | POLLERR | POLLNVAL))) {
        StartConnection();
      } else {
        next_fd_poll_ns_ = MonotonicNanos() + kFdPollIntervalNs;
      }
    }
    Pump();
    Flush();
    UpdatePipeInterest();
    UpdateConnectionInterest();
  }
  Flush();
  AGENT_LOG_INFO("exiting");
  return 0;
}

int Agent::NextTimeoutMs() const {
  int64_t next = INT64_MAX;
  for (const auto& [s, c] : commands_) {
    if (c->deadline_ns) next = std::min(next, c->deadline_ns);
    for (const auto& o : c->out) {
      if (o.pipe && o.linger_deadline_ns && !o.blocked_since_ns)
        next = std::min(next, o.linger_deadline_ns);
      // Wake up when held output is due — only output held for coalescing; output that
      // waits for the socket (or the window) is woken by epoll, not by a timer.
      if (conn_live_ && o.unsent_since_ns && o.sent < o.produced && o.sent > o.acked &&
          o.produced - o.sent < kCoalesceBytes && OutPending() < kOutHighWater)
        next = std::min(next, o.unsent_since_ns + kCoalesceNs);
    }
  }
  if (shutting_down_) next = std::min(next, shutdown_deadline_ns_);
  if (opts_.fd >= 0 && !conn_live_) next = std::min(next, next_fd_poll_ns_);
  if (next == INT64_MAX) return -1;
  int64_t left = next - MonotonicNanos();
  if (left <= 0) return 0;
  return static_cast<int>(std::min<int64_t>((left + 999'999) / 1'000'000, 60'000));
}

void Agent::SetInterest(int fd, uint64_t tag, uint32_t events, uint32_t* current) {
  if (fd < 0 || events == *current) return;
  epoll_event ev = {};
  ev.events = events;
  ev.data.u64 = tag;
  int op = events == 0 ? EPOLL_CTL_DEL : (*current == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD);
  if (::epoll_ctl(epoll_.get(), op, fd, &ev) < 0) {
    AGENT_LOG_ERROR("epoll_ctl(%d, fd %d): %s", op, fd, strerror(errno));
    return;
  }
  *current = events;
}

// ---------------------------------------------------------------------------------------
// The connection.

Status Agent::Listen() {
  struct sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  if (opts_.listen_path.size() >= sizeof addr.sun_path)
    return Fail(Errc::kInvalidArgument, "socket path too long: " + opts_.listen_path);
  std::memcpy(addr.sun_path, opts_.listen_path.c_str(), opts_.listen_path.size() + 1);
  listen_.Reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!listen_) return ErrnoFail("socket");
  // gVisor refuses to unlink a host-backed socket (EPERM); its host removes it instead.
  if (::unlink(opts_.listen_path.c_str()) < 0 && errno != ENOENT && errno != EPERM)
    return ErrnoFail("remove stale socket " + opts_.listen_path);
  // The socket file is the only door to the agent: never let it exist with a wider
  // mode, not even between bind and chmod.
  mode_t old = ::umask(0177);
  int rc = ::bind(listen_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  int err = errno;
  ::umask(old);
  if (rc < 0) return ErrnoFail("bind " + opts_.listen_path, err);
  // gVisor's host-backed sockets (runsc --host-uds=create) refuse chmod and stat with
  // EPERM; the umask above already made the file 0600, which the chmod only re-asserts.
  if (::chmod(opts_.listen_path.c_str(), 0600) < 0 && errno != EPERM)
    return ErrnoFail("chmod " + opts_.listen_path);
  if (::listen(listen_.get(), 8) < 0) return ErrnoFail("listen " + opts_.listen_path);
  uint32_t listen_events = 0;
  SetInterest(listen_.get(), Tag(kListenTag, 0), EPOLLIN, &listen_events);
  return Ok();
}

void Agent::Accept() {
  for (;;) {
    int fd = ::accept4(listen_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN) AGENT_LOG_WARN("accept: %s", strerror(errno));
      return;
    }
    if (opts_.is_init && !FromOutsideNamespace(fd)) {
      ::close(fd);
      continue;
    }
    if (conn_) {
      // Frames the old host sent before this connection was made (typically its last
      // ACKs) are already queued on a unix socket: apply them before letting it go, so
      // the new connection does not retransmit what was acknowledged.
      ReadConnection();
      if (conn_) DropConnection("replaced by a new connection");
    }
    conn_.Reset(fd);
    StartConnection();
  }
}

void Agent::StartConnection() {
  // --fd mode: drop the edge-triggered watch of the disconnected port first.
  if (conn_events_) SetInterest(conn_.get(), 0, 0, &conn_events_);
  conn_live_ = true;
  ++conn_gen_;
  conn_events_ = 0;
  decoder_ = FrameDecoder();
  out_.clear();
  out_pos_ = 0;
  SendHello();
  AGENT_LOG_DEBUG("host connected (%zu commands remembered)", commands_.size());
  UpdateConnectionInterest();
}

void Agent::SendHello() {
  // Everything unacknowledged is sent again, each chunk at its absolute offset.
  for (auto& [s, c] : commands_) {
    for (auto& o : c->out) o.sent = o.acked;
    c->exit_sent = false;
  }
  SendFrame(FrameType::kHello, 0, Dump(Hello()));
}

void Agent::DropConnection(const char* why) {
  AGENT_LOG_INFO("host connection closed: %s", why);
  SetInterest(conn_.get(), 0, 0, &conn_events_);
  conn_live_ = false;
  out_.clear();
  out_pos_ = 0;
  decoder_ = FrameDecoder();
  if (opts_.fd >= 0) {
    next_fd_poll_ns_ = MonotonicNanos() + kFdPollIntervalNs;
    // A virtio-serial port wakes its pollers when the host attaches: edge-triggered
    // interest reports that change at once (the timer above stays as a fallback for
    // devices that do not). Level-triggered it would spin on the standing hang-up.
    ++conn_gen_;
    SetInterest(conn_.get(), Tag(kConnTag, conn_gen_), EPOLLIN | EPOLLOUT | EPOLLET,
                &conn_events_);
  } else {
    conn_.Reset();
  }
}

void Agent::UpdateConnectionInterest() {
  if (!conn_live_) return;
  uint32_t want = EPOLLIN | (OutPending() ? uint32_t{EPOLLOUT} : 0u);
  SetInterest(conn_.get(), Tag(kConnTag, conn_gen_), want, &conn_events_);
}

void Agent::ReadConnection() {
  // Bounded rounds keep one busy host from starving the pipes; epoll is level-triggered.
  for (int round = 0; round < 16 && conn_live_; ++round) {
    ssize_t n = ::read(conn_.get(), scratch_.get(), kScratchSize);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0) {
      DropConnection(n == 0 ? "end of stream" : strerror(errno));
      return;
    }
    decoder_.Feed(std::string_view(scratch_.get(), static_cast<size_t>(n)));
    for (;;) {
      auto f = decoder_.Next();
      if (!f) {
        // Oversized or unknown frame: this connection is unusable, the commands are not
        // affected.
        AGENT_LOG_WARN("protocol error: %s", f.error().message.c_str());
        DropConnection("protocol error");
        return;
      }
      if (!*f) break;
      HandleFrame(**f);
    }
  }
}

void Agent::HandleFrame(Frame& f) {
  if (f.type == FrameType::kRequest && f.stream == kHelloRequest) {
    // A host that (re)attached asks for the HELLO. On a serial port a quick detach and
    // re-attach may pass unnoticed, so the agent cannot tell whether its last HELLO went
    // to this host: it always starts over (a host that already got one sees a second).
    // Frames queued and not yet begun are dropped (they are retransmitted); a frame
    // partly written is finished first, so the stream stays well-formed.
    AGENT_LOG_DEBUG("host asked for HELLO");
    if (out_pos_ == 0) out_.clear();
    SendHello();
    return;
  }
  switch (f.type) {
    case FrameType::kRequest:
      HandleRequest(f.stream, f.payload);
      break;
    case FrameType::kAck:
      OnAck(f.stream, f.payload);
      break;
    case FrameType::kStdin:
      OnStdin(f.stream, f.payload);
      break;
    default:
      AGENT_LOG_WARN("ignoring frame type %d from the host", static_cast<int>(f.type));
      break;
  }
}

void Agent::SendFrame(FrameType type, uint32_t stream, std::string_view payload) {
  if (!conn_live_) return;
  EncodeFrame(type, stream, payload, &out_);
}

void Agent::Flush() {
  if (!conn_live_) return;
  while (out_pos_ < out_.size()) {
    ssize_t n = ::write(conn_.get(), out_.data() + out_pos_, out_.size() - out_pos_);
    if (n > 0) {
      out_pos_ += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    DropConnection(n == 0 ? "write returned 0" : strerror(errno));
    return;
  }
  if (out_pos_ == out_.size()) {
    out_pos_ = 0;
    // Give big buffers back once idle: many idle sandboxes each hold an agent.
    if (out_.capacity() > (256u << 10))
      std::string().swap(out_);
    else
      out_.clear();
  } else if (out_pos_ >= (1u << 20)) {
    out_.erase(0, out_pos_);
    out_pos_ = 0;
  }
}

void Agent::Respond(uint32_t request, const Json& json, std::string_view body) {
  if (!conn_live_) {
    AGENT_LOG_DEBUG("response to request %u dropped: no host connection", request);
    return;
  }
  std::string msg = EncodeMessage(json, body);
  if (msg.size() > kMaxPayload) {
    msg = EncodeMessage(ErrorJson(Error{Errc::kTooLarge, 0, "response exceeds the frame limit"}));
  }
  SendFrame(FrameType::kResponse, request, msg);
}

void Agent::RespondError(uint32_t request, const Error& e) {
  AGENT_LOG_DEBUG("request %u failed: %s", request, e.message.c_str());
  Respond(request, ErrorJson(e));
}

Json Agent::Hello() const {
  Json cmds = Json::array();
  for (const auto& [s, c] : commands_) {
    cmds.push_back({{"stream", s},
                    {"id", c->id},
                    {"running", !c->exited},
                    {"pid", c->pid},
                    {"stdout_acked", c->out[0].acked},
                    {"stderr_acked", c->out[1].acked},
                    {"stdout_produced", c->out[0].produced},
                    {"stderr_produced", c->out[1].produced}});
  }
  return {{"version", kProtocolVersion},
          {"pid", static_cast<int>(::getpid())},
          {"agent", kAgentVersion},
          {"features", Json::array({"pty"})},
          {"commands", std::move(cmds)}};
}

// ---------------------------------------------------------------------------------------
// Requests.


void Agent::HandleRequest(uint32_t request, std::string_view payload) {
  auto m = DecodeMessage(payload);
  if (!m) return RespondError(request, m.error());
  auto op = JsonString(m->json, "op");
  if (!op) return RespondError(request, Error{Errc::kInvalidArgument, 0, "request has no op"});
  try {
    if (*op == "ping") {
      Respond(request, {{"ok", true}, {"time_ns", RealtimeNanos()}});
    } else if (*op == "exec") {
      StartExec(request, m->json);
    } else if (*op == "signal") {
      SignalOp(request, m->json);
    } else if (*op == "resize") {
      ResizeOp(request, m->json);
    } else if (*op == "sync") {
      Respond(request, SyncIdentity(m->json));
    } else if (*op == "forward") {
      ForwardOp(request, m->json);
    } else if (FileService::IsFileOp(*op)) {
      auto r = files_.Handle(*op, m->json, m->body);
      if (!r) return RespondError(request, r.error());
      Respond(request, r->json, r->body);
    } else {
      RespondError(request, Error{Errc::kInvalidArgument, 0, "unknown op: " + *op});
    }
  } catch (const std::exception& e) {
    // Nothing above should throw; if a library does, the request fails, not the agent.
    RespondError(request, Error{Errc::kInternal, 0, std::string("agent: ") + e.what()});
  }
}

// A relay from the sandbox's address to a service on its loopback (agent/forward.h): one
// per target port, started on first use and again after it exited.
void Agent::ForwardOp(uint32_t request, const Json& j) {
  const int64_t port = JsonIntOr(j, "port", 0);
  const std::string address = JsonStringOr(j, "address", "");
  if (port < 1 || port > 65535)
    return RespondError(request, Error{Errc::kInvalidArgument, 0, "forward: port must be 1..65535"});
  if (!LoopbackListening(static_cast<int>(port)))
    return RespondError(request, Error{Errc::kNotFound, 0,
                                       "nothing is listening on 127.0.0.1:" + std::to_string(port) +
                                           " or [::1]:" + std::to_string(port)});
  auto it = forwards_.find(static_cast<int>(port));
  if (it == forwards_.end() || it->second.address != address) {
    if (it != forwards_.end()) {
      ::kill(-it->second.pid, SIGKILL);
      forwards_.erase(it);
    }
    auto started = StartForward(address, static_cast<int>(port));
    if (!started) return RespondError(request, started.error());
    AGENT_LOG_DEBUG("forward: %s:%d -> loopback:%d (pid %d)", address.c_str(),
                    started->listen_port, static_cast<int>(port), started->pid);
    it = forwards_.emplace(static_cast<int>(port), Forward{started->pid, started->listen_port, address})
             .first;
  }
  Respond(request, {{"address", address}, {"port", it->second.listen_port}});
}

void Agent::StartExec(uint32_t request, const Json& j) {
  auto req = ParseExecRequest(j);
  if (!req) return RespondError(request, req.error());
  if (shutting_down_)
    return RespondError(request, Error{Errc::kUnavailable, 0, "agent is shutting down"});
  if (commands_.count(req->stream))
    return RespondError(
        request, Error{Errc::kConflict, 0, "stream " + std::to_string(req->stream) + " is in use"});
  auto started = StartCommand(*req);
  if (!started) return RespondError(request, started.error());

  auto c = std::make_unique<Command>();
  c->stream = req->stream;
  c->id = req->id;
  c->pid = started->pid;
  c->exec_request = request;
  c->exec_conn = conn_gen_;
  c->exec_status = std::move(started->error_pipe);
  c->out[0].pipe = std::move(started->stdout_pipe);
  c->out[1].pipe = std::move(started->stderr_pipe);
  c->stdin_pipe = std::move(started->stdin_pipe);
  c->pty_master = std::move(started->pty_master);
  // A pty merges stderr into its one output stream: there is nothing to read there.
  if (!c->out[1].pipe) c->out[1].eof = true;
  if (req->timeout_ms > 0) c->deadline_ns = MonotonicNanos() + req->timeout_ms * 1'000'000;
  c->req = std::move(*req);
  SetInterest(c->exec_status.get(), Tag(kExecStatusTag, c->stream), EPOLLIN,
              &c->exec_status_events);
  pids_[c->pid] = c->stream;
  AGENT_LOG_DEBUG("stream %u: started pid %d", c->stream, c->pid);
  commands_[c->stream] = std::move(c);
}

void Agent::OnExecStatus(Command& c) {
  char buf[kExecFailureSize];
  ssize_t n;
  do {
    n = ::read(c.exec_status.get(), buf, sizeof buf);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && errno == EAGAIN) return;
  SetInterest(c.exec_status.get(), 0, 0, &c.exec_status_events);
  c.exec_status.Reset();
  if (n == static_cast<ssize_t>(kExecFailureSize)) {
    if (c.exec_conn == conn_gen_) RespondError(c.exec_request, ExecFailure(buf, c.req));
    Forget(c.stream);  // the child exits 127; waitpid(-1) reaps it as a stranger
    return;
  }
  c.started = true;
  if (c.exited) StartLinger(c);  // reaped before its exec status was read
  // Request ids are per connection: a new host may already use this one for something
  // else. It learns about the command from HELLO instead.
  if (c.exec_conn == conn_gen_) {
    Json ok = {{"ok", true}, {"pid", c.pid}};
    if (c.pty_master) ok["pty"] = true;
    Respond(c.exec_request, ok);
  }
}

void Agent::SignalOp(uint32_t request, const Json& j) {
  auto stream = JsonInt(j, "stream");
  auto sig = JsonInt(j, "signal");
  if (!stream || *stream <= 0 || *stream > 0xffffffffll)
    return RespondError(request, Error{Errc::kInvalidArgument, 0, "signal: bad stream"});
  if (!sig || *sig < 1 || *sig > 64)
    return RespondError(request, Error{Errc::kInvalidArgument, 0, "signal: number must be 1..64"});
  auto it = commands_.find(static_cast<uint32_t>(*stream));
  if (it == commands_.end())
    return RespondError(
        request, Error{Errc::kNotFound, 0, "no command on stream " + std::to_string(*stream)});
  Command& c = *it->second;
  if (Finished(c)) return RespondError(request, Error{Errc::kConflict, 0, "command has finished"});
  if (!SignalCommand(c, static_cast<int>(*sig))) {
    int err = errno;
    if (err == ESRCH)
      return RespondError(request, Error{Errc::kConflict, err, "command's processes are gone"});
    return RespondError(request, ErrnoFail("kill", err).value());
  }
  Respond(request, {{"ok", true}});
}

void Agent::ResizeOp(uint32_t request, const Json& j) {
  auto stream = JsonInt(j, "stream");
  if (!stream || *stream <= 0 || *stream > 0xffffffffll)
    return RespondError(request, Error{Errc::kInvalidArgument, 0, "resize: bad stream"});
  auto size = ParsePtySize(j);
  if (!size) return RespondError(request, size.error());
  auto it = commands_.find(static_cast<uint32_t>(*stream));
  if (it == commands_.end())
    return RespondError(
        request, Error{Errc::kNotFound, 0, "no command on stream " + std::to_string(*stream)});
  Command& c = *it->second;
  if (!c.pty_master)
    return RespondError(request, Error{Errc::kInvalidArgument, 0, "command has no pty"});
  if (Finished(c)) return RespondError(request, Error{Errc::kConflict, 0, "command has finished"});
  auto st = ResizePty(c.pty_master.get(), *size);
  if (!st) return RespondError(request, st.error());
  Respond(request, {{"ok", true}});
}

// ---------------------------------------------------------------------------------------
// Commands.

bool Agent::Finished(const Command& c) const {
  return c.started && c.exited && c.out[0].eof && c.out[1].eof;
}

bool Agent::SignalCommand(Command& c, int sig) {
  if (c.pid <= 0 || Finished(c)) {
    errno = ESRCH;
    return false;
  }
  // The group id is the main pid (setsid in the child). While the child has not reached
  // setsid yet the group does not exist, so fall back to the process itself.
  if (::kill(-c.pid, sig) == 0) return true;
  if (errno == ESRCH && !c.exited) return ::kill(c.pid, sig) == 0;
  return false;
}

void Agent::ReadOutput(Command& c, int index) {
  Output& o = c.out[index];
  const uint64_t produced_before = o.produced;
  for (int round = 0; !o.eof && round < 64; ++round) {
    uint64_t inflight = o.produced - o.acked;
    if (inflight >= opts_.window) break;
    size_t want = static_cast<size_t>(std::min<uint64_t>(opts_.window - inflight, kScratchSize));
    ssize_t n = ::read(o.pipe.get(), scratch_.get(), want);
    if (n > 0) {
      std::string_view data(scratch_.get(), static_cast<size_t>(n));
      if (!o.chunks.empty() && o.chunks.back().data.size() + data.size() <= kMaxDataChunk) {
        o.chunks.back().data.append(data);
      } else {
        o.chunks.push_back({o.produced, std::string(data)});
      }
      o.produced += static_cast<uint64_t>(n);
      if (static_cast<size_t>(n) < want) break;  // drained for now
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    // A pty master reads EIO, not 0, once every slave descriptor is closed: its EOF.
    if (n < 0 && !(errno == EIO && c.pty_master))
      AGENT_LOG_WARN("stream %u: read: %s", c.stream, strerror(errno));
    o.eof = true;
    SetInterest(o.pipe.get(), 0, 0, &o.events);
    o.pipe.Reset();
  }
  if (o.produced != produced_before && o.sent == produced_before && !o.unsent_since_ns) {
    o.unsent_since_ns = MonotonicNanos();
  }
  if (o.linger_deadline_ns && !o.eof && o.produced != produced_before) {
    // Output still flowing after the exit earns more time, but never past the limit: a
    // detached process that writes forever must not keep the command open.
    o.linger_deadline_ns = std::min(MonotonicNanos() + kOutputLingerNs, o.linger_limit_ns);
  }
}

void Agent::StartLinger(Command& c) {
  if (!c.started) return;  // OnExecStatus starts it once the exec is confirmed
  int64_t now = MonotonicNanos();
  c.linger_start_ns = now;
  for (auto& o : c.out) {
    if (!o.pipe || o.eof) continue;
    o.linger_deadline_ns = now + kOutputLingerNs;
    o.linger_limit_ns = now + kOutputLingerMaxNs;
    o.blocked_since_ns = 0;  // UpdatePipeInterest stops the clock if the pipe is held up
  }
}

void Agent::CheckLinger(Command& c, int64_t now) {
  if (!c.started || !c.exited) return;
  std::vector<ino_t> cut;
  for (int i = 0; i < 2; ++i) {
    Output& o = c.out[i];
    if (!o.pipe || o.eof || !o.linger_deadline_ns || o.blocked_since_ns) continue;
    if (now < o.linger_deadline_ns) continue;
    // A last look: whatever the pipe holds now was written before the deadline.
    ReadOutput(c, i);
    if (o.eof) continue;
    // Output is never dropped for backpressure: with the window full the pipe waits (and
    // its clock stops) until the host has acknowledged enough to read on.
    if (o.produced - o.acked >= opts_.window) continue;
    now = MonotonicNanos();
    if (now < o.linger_deadline_ns) continue;  // the last look found more output
    struct stat st;
    if (::fstat(o.pipe.get(), &st) == 0) cut.push_back(st.st_ino);
    CutOutput(c, i, now);
  }
  if (!cut.empty()) KillPipeHolders(c.pid, cut, c.stream);
}

void Agent::CutOutput(Command& c, int index, int64_t now) {
  Output& o = c.out[index];
  SetInterest(o.pipe.get(), 0, 0, &o.events);
  o.pipe.Reset();
  o.eof = true;
  AGENT_LOG_WARN(
      "stream %u: %s still open %lld ms after the command exited (a background process "
      "holds it); closed at %llu bytes",
      c.stream, index == 0 ? "stdout" : "stderr",
      static_cast<long long>((now - c.linger_start_ns) / 1'000'000),
      static_cast<unsigned long long>(o.produced));
}

void Agent::OnAck(uint32_t stream, std::string_view payload) {
  auto a = DecodeAck(payload);
  if (!a) {
    AGENT_LOG_WARN("stream %u: bad ACK: %s", stream, a.error().message.c_str());
    return;
  }
  auto it = commands_.find(stream);
  if (it == commands_.end()) return;
  Command& c = *it->second;
  if (a->fd == 0) {
    if (Finished(c)) Forget(stream);  // the host stored the exit: nothing left to keep
    return;
  }
  Output& o = c.out[a->fd - 1];
  if (a->offset <= o.acked) return;  // stale
  if (a->offset > o.produced) {
    AGENT_LOG_WARN("stream %u: ACK %llu beyond produced %llu ignored", stream,
                   static_cast<unsigned long long>(a->offset),
                   static_cast<unsigned long long>(o.produced));
    return;
  }
  o.acked = a->offset;
  // The host's log may be ahead of what this connection sent (it stored bytes from the
  // previous connection but died before acking them).
  o.sent = std::max(o.sent, o.acked);
  while (!o.chunks.empty() && o.chunks.front().offset + o.chunks.front().data.size() <= o.acked)
    o.chunks.pop_front();
}

void Agent::OnStdin(uint32_t stream, std::string_view payload) {
  auto it = commands_.find(stream);
  if (it == commands_.end() || !it->second->stdin_pipe) {
    AGENT_LOG_DEBUG("stream %u: STDIN for a command without open stdin dropped", stream);
    return;
  }
  Command& c = *it->second;
  if (payload.empty() && c.pty_master) {
    // Closing our side of a terminal tells the program nothing; end-of-file on a terminal
    // is the VEOF character (^D), which the line discipline turns into a zero-byte read.
    payload = "\x04";
  } else if (payload.empty()) {
    c.stdin_eof = true;
    FlushStdin(c);
    return;
  }
  if (c.stdin_buf.size() - c.stdin_pos + payload.size() > kMaxPendingStdin) {
    FlushStdin(c);  // the command may have made room since the last EPOLLOUT
    if (!c.stdin_pipe) return;
    if (c.stdin_buf.size() - c.stdin_pos + payload.size() > kMaxPendingStdin) {
      // There is no stdin credit in the protocol, so a host that ignores the limit
      // would grow the agent without bound. The command keeps running; it reads what
      // reached its pipe and then EOF.
      AGENT_LOG_WARN("stream %u: over %llu bytes of stdin waiting; closing the command's stdin",
                     c.stream, static_cast<unsigned long long>(kMaxPendingStdin));
      CloseStdin(c);
      return;
    }
  }
  c.stdin_buf.append(payload.data(), payload.size());
  FlushStdin(c);
}

void Agent::FlushStdin(Command& c) {
  if (!c.stdin_pipe) return;
  while (c.stdin_pos < c.stdin_buf.size()) {
    ssize_t n = ::write(c.stdin_pipe.get(), c.stdin_buf.data() + c.stdin_pos,
                        c.stdin_buf.size() - c.stdin_pos);
    if (n > 0) {
      c.stdin_pos += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      if (c.stdin_pos >= (1u << 20)) {
        c.stdin_buf.erase(0, c.stdin_pos);
        c.stdin_pos = 0;
      }
      return;  // UpdatePipeInterest waits for EPOLLOUT
    }
    CloseStdin(c);  // EPIPE: nobody reads stdin any more
    return;
  }
  c.stdin_buf.clear();
  c.stdin_pos = 0;
  if (c.stdin_eof) CloseStdin(c);
}

void Agent::CloseStdin(Command& c) {
  SetInterest(c.stdin_pipe.get(), 0, 0, &c.stdin_events);
  c.stdin_pipe.Reset();
  std::string().swap(c.stdin_buf);
  c.stdin_pos = 0;
}

void Agent::Forget(uint32_t stream) {
  auto it = commands_.find(stream);
  if (it == commands_.end()) return;
  Command& c = *it->second;
  SetInterest(c.exec_status.get(), 0, 0, &c.exec_status_events);
  for (auto& o : c.out) SetInterest(o.pipe.get(), 0, 0, &o.events);
  SetInterest(c.stdin_pipe.get(), 0, 0, &c.stdin_events);
  if (!c.exited) pids_.erase(c.pid);
  AGENT_LOG_DEBUG("stream %u: forgotten", stream);
  commands_.erase(it);
}

bool Agent::Reap() {
  for (;;) {
    int status = 0;
    pid_t p = ::waitpid(-1, &status, WNOHANG);
    if (p > 0) {
      auto pit = pids_.find(p);
      if (pit == pids_.end()) {
        // A relay, an orphan we inherited, or a failed exec.
        std::erase_if(forwards_, [p](const auto& f) { return f.second.pid == p; });
        continue;
      }
      auto cit = commands_.find(pit->second);
      pids_.erase(pit);
      if (cit == commands_.end()) continue;
      Command& c = *cit->second;
      c.exited = true;
      if (WIFEXITED(status)) c.exit_code = WEXITSTATUS(status);
      if (WIFSIGNALED(status)) c.term_signal = WTERMSIG(status);
      CloseStdin(c);
      StartLinger(c);
      AGENT_LOG_DEBUG("stream %u: pid %d exited (code %d, signal %d)", c.stream, p, c.exit_code,
                      c.term_signal);
      continue;
    }
    if (p == 0) return true;
    if (errno == EINTR) continue;
    return errno != ECHILD;
  }
}

void Agent::OnSignals() {
  struct signalfd_siginfo si;
  for (;;) {
    ssize_t n = ::read(signal_fd_.get(), &si, sizeof si);
    if (n < 0 && errno == EINTR) continue;
    if (n != static_cast<ssize_t>(sizeof si)) break;
    int sig = static_cast<int>(si.ssi_signo);
    if (sig == SIGCHLD) continue;  // reaped below, however many were coalesced
    if (opts_.checkpoint_signals && (sig == SIGUSR1 || sig == SIGUSR2) && !opts_.listen_path.empty()) {
      if (sig == SIGUSR1) {
        if (conn_live_) DropConnection("closed for a checkpoint");
        conn_.Reset();
        listen_.Reset();  // closing it takes it out of the epoll set
        ::unlink(opts_.listen_path.c_str());
        AGENT_LOG_INFO("listening socket closed for a checkpoint");
      } else if (!listen_) {
        if (auto st = Listen(); !st) AGENT_LOG_ERROR("listen again: %s", st.error().message.c_str());
        else AGENT_LOG_INFO("listening again on %s", opts_.listen_path.c_str());
      }
      continue;
    }
    for (auto& [s, c] : commands_) SignalCommand(*c, sig);
    if (sig == SIGTERM || (sig == SIGINT && !opts_.is_init)) {
      if (!shutting_down_) {
        AGENT_LOG_INFO("signal %d: stopping after the commands exit", sig);
        shutting_down_ = true;
        shutdown_deadline_ns_ = MonotonicNanos() + kShutdownGraceNs;
        // Relays serve connections only while the sandbox runs (their connections too:
        // each relay leads its own process group).
        for (const auto& [port, f] : forwards_) ::kill(-f.pid, SIGTERM);
      }
    }
  }
  Reap();
}

void Agent::CheckDeadlines() {
  int64_t now = MonotonicNanos();
  for (auto& [s, c] : commands_) {
    CheckLinger(*c, now);
    if (!c->deadline_ns || now < c->deadline_ns) continue;
    c->deadline_ns = 0;
    if (Finished(*c)) continue;
    if (!c->exited) c->timed_out = true;
    AGENT_LOG_DEBUG("stream %u: timeout, killing its process group", s);
    SignalCommand(*c, SIGKILL);
  }
}

void Agent::Pump() {
  if (!conn_live_) return;
  for (auto& [stream, cp] : commands_) {
    Command& c = *cp;
    if (!c.started) continue;
    for (int i = 0; i < 2; ++i) {
      Output& o = c.out[i];
      FrameType type = i == 0 ? FrameType::kStdout : FrameType::kStderr;
      // Nagle's rule: output goes out at once when nothing sent is still unacknowledged
      // (an interactive command's first line is not delayed); while the host has not caught
      // up, small output is held briefly so that it leaves in larger frames.
      if (o.sent < o.produced && o.sent > o.acked && !o.eof && o.pipe &&
          o.produced - o.sent < kCoalesceBytes && o.produced - o.acked < opts_.window &&
          MonotonicNanos() - o.unsent_since_ns < kCoalesceNs) {
        continue;  // hold small output briefly: more is likely on its way
      }
      auto chunk = o.chunks.begin();
      while (o.sent < o.produced && OutPending() < kOutHighWater) {
        while (chunk->offset + chunk->data.size() <= o.sent) ++chunk;
        size_t skip = static_cast<size_t>(o.sent - chunk->offset);
        size_t n = std::min<size_t>(chunk->data.size() - skip, kMaxDataChunk);
        EncodeDataFrame(type, stream, o.sent, std::string_view(chunk->data).substr(skip, n), &out_);
        o.sent += n;
      }
      if (o.sent == o.produced) o.unsent_since_ns = 0;
    }
    if (!c.exit_sent && Finished(c) && c.out[0].sent == c.out[0].produced &&
        c.out[1].sent == c.out[1].produced) {
      Json exit = {{"exit_code", nullptr},
                   {"signal", nullptr},
                   {"timed_out", c.timed_out},
                   {"stdout_end", c.out[0].produced},
                   {"stderr_end", c.out[1].produced}};
      if (c.term_signal)
        exit["signal"] = c.term_signal;
      else
        exit["exit_code"] = c.exit_code;
      SendFrame(FrameType::kExit, stream, Dump(exit));
      c.exit_sent = true;
    }
  }
}

void Agent::UpdatePipeInterest() {
  bool out_full = conn_live_ && OutPending() >= kOutHighWater;
  int64_t now = 0;
  for (auto& [stream, cp] : commands_) {
    Command& c = *cp;
    if (c.started) {
      for (int i = 0; i < 2; ++i) {
        Output& o = c.out[i];
        bool want = o.pipe && !o.eof && o.produced - o.acked < opts_.window && !out_full;
        SetInterest(o.pipe.get(), Tag(static_cast<Kind>(kStdoutTag + i), stream),
                    want ? uint32_t{EPOLLIN} : 0u, &o.events);
        if (!o.linger_deadline_ns || !o.pipe) continue;
        // The linger clock runs only while the agent reads the pipe: output held up by
        // the host is not cut off.
        if (want == !o.blocked_since_ns) continue;
        if (!now) now = MonotonicNanos();
        if (!want) {
          o.blocked_since_ns = now;
        } else {
          o.linger_deadline_ns += now - o.blocked_since_ns;
          o.linger_limit_ns += now - o.blocked_since_ns;
          o.blocked_since_ns = 0;
        }
      }
    }
    bool want_stdin = c.stdin_pipe && c.stdin_pos < c.stdin_buf.size();
    SetInterest(c.stdin_pipe.get(), Tag(kStdinTag, stream), want_stdin ? uint32_t{EPOLLOUT} : 0u,
                &c.stdin_events);
  }
}

}  // namespace space::agent
