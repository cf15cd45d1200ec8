#include "agent/agent.h"
#include "agent/agent_internal.h"

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


}  // namespace

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
    if (blocks_.TrimIfIdle(MonotonicNanos())) outq_.ReleasePipe();
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
  if (int64_t trim = blocks_.NextTrimNs()) next = std::min(next, trim);
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
    // Output leaves in frames of up to 1 MiB: a default-sized send buffer (~200 KiB) would
    // take each in pieces, a wake-up (and a host read) per piece. Capped by wmem_max.
    int sndbuf = 4 << 20;
    (void)::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
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
  outq_.Clear();
  struct stat st;
  outq_.AllowSplice(::fstat(conn_.get(), &st) == 0 && S_ISSOCK(st.st_mode));
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
  outq_.Clear();
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
    outq_.DropUnstarted();
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
  outq_.PushFrame(type, stream, payload);
}

void Agent::Flush() {
  if (!conn_live_) return;
  if (int err = outq_.Flush(conn_.get())) DropConnection(strerror(err));
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

}  // namespace space::agent
