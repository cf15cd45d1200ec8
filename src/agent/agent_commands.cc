// agent/agent_commands.cc: the Agent's commands (agent.h): starting them, their output
// (window, coalescing, lingering after the main process exits), stdin, signals, deadlines
// and reaping.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "agent/agent_internal.h"
#include "agent/log.h"
#include "common/json.h"

namespace space::agent {
namespace {

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

bool Agent::TeeOutput(Command& c, Output& o) {
  if (!tee_ok_ || !conn_live_ || !outq_.splicing() || c.pty_master || !o.pipe) return false;
  int avail = 0;
  if (o.keep_pipes >= kMaxKeepPipes) return false;
  if (::ioctl(o.pipe.get(), FIONREAD, &avail) != 0 || static_cast<size_t>(avail) < kTeeMin)
    return false;
  const uint64_t inflight = o.produced - o.acked;
  if (inflight >= opts_.window) return false;
  const size_t want = static_cast<size_t>(std::min<uint64_t>(
      {static_cast<uint64_t>(avail), kMaxDataChunk, opts_.window - inflight}));
  if (!o.src) {
    auto src = std::make_shared<PipeSource>();
    src->fd.Reset(::fcntl(o.pipe.get(), F_DUPFD_CLOEXEC, 0));
    if (!src->fd) return false;
    src->head = o.produced;
    o.src = std::move(src);
  }
  int p[2];
  if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) return false;  // fd or pipe limits: read it
  sys::UniqueFd keep(p[0]), keep_w(p[1]);
  // Room for every page of the output (a smaller keep pipe just takes a smaller piece).
  (void)::fcntl(keep_w.get(), F_SETPIPE_SZ, static_cast<int>(want));
  ssize_t n;
  do {
    n = ::tee(o.pipe.get(), keep_w.get(), want, SPLICE_F_NONBLOCK);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) {
    if (n < 0 && errno != EAGAIN) {
      AGENT_LOG_WARN("stream %u: tee: %s; output is read from here on", c.stream, strerror(errno));
      tee_ok_ = false;
    }
    return false;
  }
  o.chunks.push_back({o.produced, nullptr, std::move(keep), static_cast<uint64_t>(n)});
  ++o.keep_pipes;
  o.produced += static_cast<uint64_t>(n);
  return true;
}

Result<BlockRef> Agent::CopyKept(int keep, uint64_t offset, uint64_t from, size_t n) {
  // tee(2) links from the front of the keep pipe only: the bytes up to the wanted ones go
  // into a scratch pipe as big as the keep pipe, and are read from there.
  int p[2];
  if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) return ErrnoFail("pipe2");
  sys::UniqueFd r(p[0]), w(p[1]);
  int size = ::fcntl(keep, F_GETPIPE_SZ);
  if (size > 0) (void)::fcntl(w.get(), F_SETPIPE_SZ, size);
  const size_t skip = static_cast<size_t>(from - offset);
  ssize_t t;
  do {
    t = ::tee(keep, w.get(), skip + n, SPLICE_F_NONBLOCK);
  } while (t < 0 && errno == EINTR);
  if (t < 0) return ErrnoFail("tee kept output");
  if (static_cast<size_t>(t) < skip + n) return Fail(Errc::kInternal, "kept output is short");
  BlockRef b = blocks_.Get(MonotonicNanos());
  for (size_t left = skip; left > 0;) {
    ssize_t k = ::read(r.get(), scratch_.get(), std::min(left, kScratchSize));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return ErrnoFail("read kept output");
    left -= static_cast<size_t>(k);
  }
  while (b->used < n) {
    ssize_t k = ::read(r.get(), b->data.get() + b->used, n - b->used);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return ErrnoFail("read kept output");
    b->used += static_cast<size_t>(k);
  }
  return b;
}

void Agent::ClosePipe(Output& o) {
  SetInterest(o.pipe.get(), 0, 0, &o.events);
  o.pipe.Reset();
  o.eof = true;
  if (o.src) {
    o.src->release = true;
    o.src->MaybeRelease();
  }
}

void Agent::ReadOutput(Command& c, int index) {
  Output& o = c.out[index];
  // Bytes teed from the pipe are still in it, on their way into the socket: nothing more is
  // taken from it until they have left.
  if (o.src && o.src->head != o.produced) return;
  const uint64_t produced_before = o.produced;
  for (int round = 0; !o.eof && round < 64 && !TeeOutput(c, o); ++round) {
    uint64_t inflight = o.produced - o.acked;
    if (inflight >= opts_.window) break;
    // Straight into the block the bytes will be kept (and sent) from: no copy.
    if (o.chunks.empty() || !o.chunks.back().block ||
        o.chunks.back().block->room() < kMinBlockRead)
      o.chunks.push_back({o.produced, blocks_.Get(MonotonicNanos())});
    OutBlock& b = *o.chunks.back().block;
    size_t want = static_cast<size_t>(std::min<uint64_t>(opts_.window - inflight, b.room()));
    ssize_t n = ::read(o.pipe.get(), b.data.get() + b.used, want);
    if (n > 0) {
      b.used += static_cast<size_t>(n);
      o.produced += static_cast<uint64_t>(n);
      if (o.src) o.src->head = o.produced;  // read bytes have left the pipe too
      if (static_cast<size_t>(n) < want) break;  // drained for now
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    // A pty master reads EIO, not 0, once every slave descriptor is closed: its EOF.
    if (n < 0 && !(errno == EIO && c.pty_master))
      AGENT_LOG_WARN("stream %u: read: %s", c.stream, strerror(errno));
    ClosePipe(o);
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
  ClosePipe(o);
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
  while (!o.chunks.empty() && o.chunks.front().end() <= o.acked) {
    if (!o.chunks.front().block) --o.keep_pipes;
    o.chunks.pop_front();
  }
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
          MonotonicNanos() - o.unsent_since_ns < kCoalesceNs && o.chunks.back().block) {
        continue;  // hold small output briefly: more is likely on its way
      }
      auto chunk = o.chunks.begin();
      while (o.sent < o.produced && OutPending() < kOutHighWater) {
        while (chunk->end() <= o.sent) ++chunk;
        if (!chunk->block) {
          // Teed output: spliced from the pipe when it is next at the pipe's front, else
          // (a retransmission) copied from the keep pipe, up to the bytes still in the pipe.
          PipeSource* src = o.src.get();
          const bool in_pipe = src && src->fd && !src->release;
          const uint64_t front = in_pipe ? src->head + src->claimed : 0;
          size_t n = static_cast<size_t>(chunk->end() - o.sent);
          if (in_pipe && o.sent == front) {
            outq_.PushPipeData(type, stream, o.sent, o.src, n);
          } else {
            if (in_pipe && front > o.sent)
              n = static_cast<size_t>(std::min<uint64_t>(n, front - o.sent));
            auto copy = CopyKept(chunk->keep.get(), chunk->offset, o.sent, n);
            if (!copy) {
              AGENT_LOG_ERROR("stream %u: %s", stream, copy.error().message.c_str());
              break;
            }
            outq_.PushData(type, stream, o.sent, std::move(*copy), 0, n, /*may_splice=*/false);
          }
          o.sent += n;
          o.sent_max = std::max(o.sent_max, o.sent);
          continue;
        }
        // A frame per block (OutBlock::kCapacity <= kMaxDataChunk), referring to its bytes;
        // a retransmitted part and a first one are never in one frame (see sent_max).
        size_t begin = static_cast<size_t>(o.sent - chunk->offset);
        size_t n = chunk->block->used - begin;
        const bool again = o.sent < o.sent_max;
        if (again) n = static_cast<size_t>(std::min<uint64_t>(n, o.sent_max - o.sent));
        outq_.PushData(type, stream, o.sent, chunk->block, begin, n, /*may_splice=*/!again);
        o.sent += n;
        o.sent_max = std::max(o.sent_max, o.sent);
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
        bool want = o.pipe && !o.eof && o.produced - o.acked < opts_.window && !out_full &&
                    !(o.src && o.src->head != o.produced);
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
