#include "core/agent_session.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

namespace space::core {

using agent::Frame;
using agent::FrameType;

namespace {

// The rest of a STDOUT/STDERR frame is left in the socket (and spliced into the log) when
// at least this much of its output is still to come; less is read into memory.
constexpr size_t kSpliceMin = 16u << 10;
// While output keeps arriving, a stream is ACKed every this many durable bytes (a quarter
// of the agent's window), not after every read (FlushAcks).
constexpr uint64_t kAckEvery = agent::kOutputWindow / 4;

store::OutputStream OutputStreamOf(agent::FrameType t) {
  return t == agent::FrameType::kStdout ? store::OutputStream::kStdout
                                        : store::OutputStream::kStderr;
}

// Connects to the agent's socket without following symlinks: the socket's directory is
// writable from inside the sandbox, which could otherwise swap agent.sock for a link to
// another host socket (another sandbox's agent, or a host service).
Result<sys::UniqueFd> ConnectUnix(const std::string& path) {
  sys::UniqueFd pfd(::open(path.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
  if (!pfd) return ErrnoFail("open " + path);
  struct stat st;
  if (::fstat(pfd.get(), &st) != 0) return ErrnoFail("stat " + path);
  if (!S_ISSOCK(st.st_mode)) return Fail(Errc::kPermissionDenied, path + " is not a socket");
  std::string via = "/proc/self/fd/" + std::to_string(pfd.get());
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, via.c_str(), via.size() + 1);
  sys::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return ErrnoFail("socket");
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    return ErrnoFail("connect " + path);
  // Large buffers: output arrives in chunks of up to 1 MiB.
  int sz = 4 << 20;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz);
  ::setsockopt(fd.get(), SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
  // One per sandbox for as long as it runs: above the descriptors a spawned crun copies.
  return sys::MoveFdHigh(std::move(fd));
}

}  // namespace

AgentSession::AgentSession(sys::UniqueFd fd, Handlers handlers)
    : fd_(std::move(fd)), handlers_(std::move(handlers)) {}

AgentSession::~AgentSession() { Close(); }

Result<std::shared_ptr<AgentSession>> AgentSession::Connect(const std::string& socket_path,
                                                            Handlers handlers, int64_t timeout_ms,
                                                            Json* hello) {
  const int64_t deadline = MonotonicNanos() + timeout_ms * 1000000;
  sys::UniqueFd fd;
  Error last{Errc::kUnavailable, 0, "agent socket did not appear"};
  int delay_us = 100;
  for (;;) {
    auto c = ConnectUnix(socket_path);
    if (c) {
      fd = std::move(*c);
      break;
    }
    last = c.error();
    if (MonotonicNanos() > deadline) {
      return Fail(Errc::kDeadlineExceeded, "agent did not come up within " +
                                               std::to_string(timeout_ms) + " ms: " + last.message);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
    // A fresh agent binds its socket within a ms of the runtime's return (0.5 ms p50 after
    // crun's): look after 0.1, 0.3, 0.7 ms and then every ms at first (a failed connect
    // costs microseconds), then back off to 20 ms.
    const bool early = MonotonicNanos() < deadline - (timeout_ms - 200) * 1000000;
    delay_us = early ? std::min(delay_us * 2, 1000) : std::min(delay_us * 2, 20000);
  }
  // Ask for the HELLO explicitly: an agent on a serial port may not have noticed that its
  // previous host went away (a quick detach and re-attach), and would otherwise go on
  // as if nothing happened. An agent that just sent its HELLO ignores the request.
  std::string hello_request = agent::EncodeFrame(FrameType::kRequest, agent::kHelloRequest,
                                                 agent::EncodeMessage(Json{{"op", "hello"}}));
  if (auto st = sys::WriteAll(fd.get(), hello_request); !st)
    return Fail(Errc::kUnavailable, "agent write: " + st.error().message);
  std::shared_ptr<AgentSession> s(new AgentSession(std::move(fd), std::move(handlers)));
  // The hub holds only a weak reference: the session's owner decides its lifetime.
  if (!AgentHub::Get().Add(s->fd_.get(), std::static_pointer_cast<AgentHub::Conn>(s), &s->hub_key_))
    return ErrnoFail("agent hub: epoll_ctl");
  std::unique_lock lock(s->mu_);
  auto left = std::chrono::nanoseconds(std::max<int64_t>(deadline - MonotonicNanos(), 0));
  if (!s->cv_.wait_for(lock, left, [&] { return s->hello_.has_value() || !s->connected_; })) {
    lock.unlock();
    s->Close();
    return Fail(Errc::kDeadlineExceeded, "agent sent no HELLO within the timeout");
  }
  if (!s->hello_) {
    lock.unlock();
    s->Close();
    return Fail(Errc::kUnavailable, "agent closed the connection before HELLO");
  }
  if (hello) *hello = *s->hello_;
  return s;
}

void AgentSession::Close() {
  {
    std::unique_lock l(state_mu_);
    closing_ = true;
    // A handler running on another hub thread finishes first; one running on this thread
    // (Close from inside a handler) is not waited for: OnReady calls no handler after it.
    state_cv_.wait(l, [&] { return !busy_ || busy_thread_ == std::this_thread::get_id(); });
  }
  AgentHub::Get().Remove(fd_.get(), hub_key_);
  hub_key_ = 0;
  if (fd_) ::shutdown(fd_.get(), SHUT_RDWR);
  {
    std::lock_guard lock(write_mu_);
    connected_ = false;
  }
  FailPending(Error{Errc::kUnavailable, 0, "agent connection closed"});
}

Status AgentSession::Send(const std::string& wire) {
  // Sent from hub threads too (ACKs): an agent that stops reading its socket must not hold
  // one forever. No byte taken for kStallMs ends the connection (a partly written frame
  // would corrupt the stream anyway).
  constexpr int kStallMs = 15000;
  std::lock_guard lock(write_mu_);
  if (!connected_) return Fail(Errc::kUnavailable, "agent connection closed");
  std::string_view left = wire;
  while (!left.empty()) {
    ssize_t n = ::send(fd_.get(), left.data(), left.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      left.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd_.get(), POLLOUT, 0};
      int r = ::poll(&p, 1, kStallMs);
      if (r < 0 && errno == EINTR) continue;
      if (r > 0) continue;
      ::shutdown(fd_.get(), SHUT_RDWR);
      return Fail(Errc::kUnavailable, "agent write: the agent took no bytes for " +
                                          std::to_string(kStallMs / 1000) + " s");
    }
    int e = errno;
    return Fail(Errc::kUnavailable, std::string("agent write: ") + std::strerror(e));
  }
  return Ok();
}

void AgentSession::FailPending(const Error& e) {
  std::lock_guard lock(mu_);
  for (auto& [id, slot] : pending_) {
    if (!slot) slot = tl::unexpected(e);
  }
  cv_.notify_all();
}

Result<agent::Message> AgentSession::Call(const Json& request, std::string_view body,
                                          int64_t timeout_ms) {
  return Call(request, body, timeout_ms, nullptr, nullptr);
}

Result<agent::Message> AgentSession::Call(const Json& request, std::string_view body,
                                          int64_t timeout_ms,
                                          const std::function<Status()>& meanwhile,
                                          Status* meanwhile_st) {
  uint32_t id;
  {
    std::lock_guard lock(mu_);
    if (!connected_) return Fail(Errc::kUnavailable, "sandbox agent is not connected");
    id = next_request_++;
    if (next_request_ == 0 || next_request_ == agent::kHelloRequest) next_request_ = 1;
    pending_[id];
  }
  auto st = Send(agent::EncodeFrame(FrameType::kRequest, id, agent::EncodeMessage(request, body)));
  if (meanwhile) *meanwhile_st = meanwhile();
  std::unique_lock lock(mu_);
  if (!st) {
    pending_.erase(id);
    return tl::unexpected(st.error());
  }
  bool done = cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                           [&] { return pending_[id].has_value(); });
  if (!done) {
    pending_.erase(id);
    return Fail(Errc::kDeadlineExceeded,
                "agent did not answer " + JsonStringOr(request, "op", "request") + " within " +
                    std::to_string(timeout_ms) + " ms");
  }
  auto res = std::move(*pending_[id]);
  pending_.erase(id);
  if (!res) return res;
  if (auto err = agent::ErrorFromJson(res->json)) return tl::unexpected(*err);
  return res;
}

Status AgentSession::SendStdin(uint32_t stream, std::string_view bytes, bool eof) {
  while (!bytes.empty()) {
    size_t n = std::min<size_t>(bytes.size(), agent::kMaxDataChunk);
    SPACE_TRY(Send(agent::EncodeFrame(FrameType::kStdin, stream, bytes.substr(0, n))));
    bytes.remove_prefix(n);
  }
  if (eof) SPACE_TRY(Send(agent::EncodeFrame(FrameType::kStdin, stream, "")));
  return Ok();
}

Status AgentSession::RequestHello() {
  return Send(agent::EncodeFrame(FrameType::kRequest, agent::kHelloRequest,
                                 agent::EncodeMessage(Json{{"op", "hello"}})));
}

void AgentSession::OnReady(char* scratch, size_t size) {
  {
    std::lock_guard l(state_mu_);
    if (closing_) return;
    busy_ = true;
    busy_thread_ = std::this_thread::get_id();
  }
  // One read per turn, then the fd is re-armed: a connection that always has more to say
  // takes its turn with the others instead of holding the thread.
  Error why{Errc::kUnavailable, 0, "agent closed the connection"};
  bool alive = true;
  if (spliced_.left > 0) {
    alive = ContinueSplice(&why);
  } else {
    // The rest of a frame whose header is in goes straight into the session's buffer (then
    // it is not copied again), up to a data frame's offset first: its output may stay in
    // the socket (MaybeSplice). Anything else is read into the hub thread's scratch and
    // handled there.
    char* buf = scratch;
    size_t cap = size;
    const size_t have = decoder_.buffered();
    size_t want = 0;
    if (have > 0) {
      want = decoder_.Needed();
      if (have < agent::kDataHeaderSize) want = std::min(want, agent::kDataHeaderSize - have);
    } else if (headers_only_) {
      want = agent::kDataHeaderSize;
    }
    headers_only_ = false;
    if (want > 0) {
      buf = decoder_.Prepare(want);
      cap = want;
    }
    ssize_t n = ::recv(fd_.get(), buf, cap, MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) {
      // spurious wake-up: nothing to do
    } else if (n <= 0) {
      if (n < 0) why = Error{Errc::kUnavailable, errno, std::string("agent read: ") + strerror(errno)};
      alive = false;
    } else {
      if (want > 0) decoder_.Commit(static_cast<size_t>(n));
      alive = Consume(want > 0 ? std::string_view() : std::string_view(scratch, static_cast<size_t>(n)),
                      &why);
    }
  }
  if (alive && !Closing()) {
    if (auto st = FlushAcks(/*force=*/false); !st) {
      why = st.error();
      alive = false;
    }
  }
  if (!alive) Lost(why);
  std::lock_guard l(state_mu_);
  busy_ = false;
  if (alive && !closing_) AgentHub::Get().Rearm(fd_.get(), hub_key_);
  state_cv_.notify_all();
}

bool AgentSession::Consume(std::string_view in, Error* why) {
  for (;;) {
    if (Closing()) return true;  // Close() from a handler: no more handlers
    agent::FrameView f;
    if (decoder_.buffered() > 0) {
      // Complete the frame in progress, copying no more than it needs.
      size_t k = std::min(decoder_.Needed(), in.size());
      decoder_.Feed(in.substr(0, k));
      in.remove_prefix(k);
      auto v = decoder_.NextView();
      if (!v) {
        *why = std::move(v.error()).Wrap("agent protocol error");
        return false;
      }
      if (!*v) {
        if (!in.empty()) continue;  // its header is complete now: Needed() knows the rest
        auto spliced = MaybeSplice(decoder_.Pending());
        if (!spliced) {
          *why = std::move(spliced.error());
          return false;
        }
        if (*spliced) decoder_.Clear();
        return true;
      }
      f = **v;
    } else {
      // Frames that arrived whole are handled where the read put them.
      auto v = agent::PeekFrame(in);
      if (!v) {
        *why = std::move(v.error()).Wrap("agent protocol error");
        return false;
      }
      if (!*v) {
        auto spliced = MaybeSplice(in);
        if (!spliced) {
          *why = std::move(spliced.error());
          return false;
        }
        if (!*spliced && !in.empty()) decoder_.Feed(in);  // the start of a frame: kept until it is whole
        return true;
      }
      f = **v;
      in.remove_prefix(agent::kHeaderSize + f.payload.size());
    }
    auto st = HandleFrame(f);
    // The frame's payload may live in decoder_: free it once handled.
    decoder_.Release();
    if (!st) {
      *why = std::move(st.error());
      return false;
    }
  }
}

void AgentSession::Lost(const Error& why) {
  {
    std::lock_guard lock(write_mu_);
    connected_ = false;
  }
  ::shutdown(fd_.get(), SHUT_RDWR);
  AgentHub::Get().Remove(fd_.get(), hub_key_);
  decoder_.Clear();
  spliced_ = Spliced();
  pending_acks_.clear();
  acks_sent_.clear();
  FailPending(why);
  if (!Closing() && handlers_.on_disconnect) handlers_.on_disconnect(why);
}

Status AgentSession::FlushAcks(bool force) {
  if (pending_acks_.empty()) return Ok();
  if (!force) {
    // Each ACK wakes the agent: while more output is queued on the socket, ACK only once
    // a stream has kAckEvery more durable bytes. When the socket is drained (the agent has
    // nothing in flight, or waits for credit) everything is ACKed at once, so small output
    // gets its credit back promptly and no window can starve.
    bool due = false;
    for (const auto& [key, offset] : pending_acks_) {
      auto it = acks_sent_.find(key);
      due |= offset >= (it == acks_sent_.end() ? 0 : it->second) + kAckEvery;
    }
    int queued = 0;
    if (!due && ::ioctl(fd_.get(), FIONREAD, &queued) == 0 && queued > 0) return Ok();
  }
  std::string wire;
  for (const auto& [key, offset] : pending_acks_) {
    agent::EncodeFrame(FrameType::kAck, key.first, agent::EncodeAck(key.second, offset), &wire);
    acks_sent_[key] = offset;
  }
  pending_acks_.clear();
  return Send(wire);
}

Status AgentSession::HandleData(uint32_t stream, store::OutputStream s, uint64_t offset,
                                store::OutputBytes& bytes) {
  auto size = handlers_.on_output(stream, s, offset, bytes);
  if (!size) {
    // Unknown stream or a gap: the agent misbehaves; dropping the connection makes it
    // retransmit from the last ACK on the next one.
    return tl::unexpected(std::move(size.error()).Wrap("agent output"));
  }
  // What the handler did not take (already stored, or held) goes; the agent keeps it.
  SPACE_TRY(bytes.Drop());
  // ACKs go out batched (FlushAcks), not one per piece.
  uint64_t& acked = pending_acks_[{stream, static_cast<uint8_t>(s)}];
  acked = std::max(acked, *size);
  return Ok();
}

Result<bool> AgentSession::MaybeSplice(std::string_view start) {
  auto h = agent::PeekDataHeader(start);
  if (!h) return false;
  const size_t here = start.size() - agent::kDataHeaderSize;  // < h->length: incomplete
  const size_t rest = h->length - here;
  if (rest < kSpliceMin) return false;  // assembled in memory: not worth a splice
  const store::OutputStream s = OutputStreamOf(h->type);
  if (here > 0) {
    store::OutputBytes bytes(start.substr(agent::kDataHeaderSize));
    SPACE_TRY(HandleData(h->stream, s, h->offset, bytes));
  }
  spliced_ = Spliced{h->stream, s, h->offset + here, rest};
  return true;
}

bool AgentSession::ContinueSplice(Error* why) {
  if (Closing()) return true;
  int queued = 0;
  if (::ioctl(fd_.get(), FIONREAD, &queued) != 0) {
    *why = Error{Errc::kUnavailable, errno, std::string("agent socket: ") + strerror(errno)};
    return false;
  }
  if (queued <= 0) {
    // Readable with nothing queued: the agent hung up (or a spurious wake-up).
    char c;
    ssize_t r = ::recv(fd_.get(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (r == 0) return false;
    if (r < 0 && errno != EAGAIN && errno != EINTR) {
      *why = Error{Errc::kUnavailable, errno, std::string("agent read: ") + strerror(errno)};
      return false;
    }
    return true;
  }
  const size_t piece = std::min(static_cast<size_t>(queued), spliced_.left);
  store::OutputBytes bytes(fd_.get(), piece);
  if (auto st = HandleData(spliced_.stream, spliced_.s, spliced_.offset, bytes); !st) {
    *why = std::move(st.error());
    return false;
  }
  spliced_.offset += piece;
  spliced_.left -= piece;
  if (spliced_.left == 0) headers_only_ = true;  // more large frames are likely to follow
  return true;
}

Status AgentSession::HandleFrame(const agent::FrameView& f) {
  switch (f.type) {
    case FrameType::kHello: {
      auto j = ParseJson(f.payload);
      if (!j || !j->is_object()) return Fail(Errc::kInvalidArgument, "agent HELLO is not JSON");
      bool again;
      {
        std::lock_guard lock(mu_);
        again = hello_.has_value();
        hello_ = *j;
        cv_.notify_all();
      }
      if (again && handlers_.on_hello) handlers_.on_hello(*j);
      return Ok();
    }
    case FrameType::kResponse: {
      auto m = agent::DecodeMessage(f.payload);
      std::lock_guard lock(mu_);
      auto it = pending_.find(f.stream);
      if (it == pending_.end()) return Ok();  // the caller gave up (timeout)
      if (m) {
        it->second = std::move(*m);
      } else {
        it->second = tl::unexpected(std::move(m.error()).Wrap("agent response"));
      }
      cv_.notify_all();
      return Ok();
    }
    case FrameType::kStdout:
    case FrameType::kStderr: {
      auto d = agent::DecodeData(f.payload);
      if (!d) return tl::unexpected(d.error());
      store::OutputBytes bytes(d->bytes);
      return HandleData(f.stream, OutputStreamOf(f.type), d->offset, bytes);
    }
    case FrameType::kExit: {
      auto j = ParseJson(f.payload);
      if (!j || !j->is_object()) return Fail(Errc::kInvalidArgument, "agent EXIT is not JSON");
      SPACE_TRY(FlushAcks(/*force=*/true));
      // The command's output is complete: its ACK bookkeeping goes (streams are reused).
      acks_sent_.erase({f.stream, uint8_t{1}});
      acks_sent_.erase({f.stream, uint8_t{2}});
      auto st = handlers_.on_exit(f.stream, *j);
      if (!st && st.error().code == Errc::kResourceExhausted) return Ok();  // output held
      if (!st) {
        if (st.error().code == Errc::kNotFound) {
          // A command we do not know (e.g. its sandbox record was rebuilt): let the agent
          // forget it.
          return Send(agent::EncodeFrame(FrameType::kAck, f.stream, agent::EncodeAck(0, 0)));
        }
        return st;
      }
      return Send(agent::EncodeFrame(FrameType::kAck, f.stream, agent::EncodeAck(0, 0)));
    }
    default:
      return Fail(Errc::kInvalidArgument,
                  "unexpected agent frame type " + std::to_string(static_cast<int>(f.type)));
  }
}

}  // namespace space::core
