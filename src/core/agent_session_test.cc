// AgentSession on the AgentHub: many sessions served by a few threads, frames in order
// (also when they arrive in pieces), ACK credit, Close from inside a handler, disconnects,
// a blocked handler that holds only its own session. The peer is the test itself speaking
// the agent protocol over a unix socket (agent_test drives the real agent).
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <thread>

#include "agent/protocol.h"
#include "core/agent_session.h"
#include "sys/sys.h"

namespace space::core {
namespace {

using namespace std::chrono_literals;
using agent::FrameType;

size_t ThreadCount() { return sys::CountDirEntries("/proc/self/task"); }

// The agent's end of one session: listens on a socket path, accepts the host.
class Peer {
 public:
  explicit Peer(const std::string& path) : path_(path) {
    lfd_ = sys::UniqueFd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
    EXPECT_EQ(::bind(lfd_.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << strerror(errno);
    EXPECT_EQ(::listen(lfd_.get(), 4), 0);
  }
  // Accepts the host's connection and sends HELLO.
  void Accept() {
    fd_ = sys::UniqueFd(::accept4(lfd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    ASSERT_TRUE(fd_) << strerror(errno);
    Write(agent::EncodeFrame(FrameType::kHello, 0, R"({"version":1,"commands":[]})"));
  }
  void Write(std::string_view bytes) { ASSERT_TRUE(sys::WriteAll(fd_.get(), bytes)); }
  // Reads frames until `pred` is satisfied by one (or the connection ends); false if not.
  template <class P>
  bool ReadUntil(P pred, std::chrono::milliseconds limit = 20s) {
    const auto end = std::chrono::steady_clock::now() + limit;
    char buf[65536];
    for (;;) {
      for (;;) {
        auto f = decoder_.Next();
        if (!f || !*f) break;
        if (pred(**f)) return true;
      }
      timeval tv{0, 100000};
      ::setsockopt(fd_.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      ssize_t n = ::read(fd_.get(), buf, sizeof buf);
      if (n == 0) return false;
      if (n > 0) decoder_.Feed(std::string_view(buf, n));
      if (std::chrono::steady_clock::now() > end) return false;
    }
  }
  void CloseConn() { fd_.Reset(); }
  int fd() const { return fd_.get(); }

 private:
  std::string path_;
  sys::UniqueFd lfd_, fd_;
  agent::FrameDecoder decoder_;
};

struct Connected {
  std::unique_ptr<Peer> peer;
  std::shared_ptr<AgentSession> session;  // destroyed first: Close() before the peer goes
};

Connected Open(const std::string& path, AgentSession::Handlers h) {
  Connected c;
  c.peer = std::make_unique<Peer>(path);
  auto fut = std::async(std::launch::async, [&] {
    Json hello;
    return AgentSession::Connect(path, std::move(h), 10000, &hello);
  });
  c.peer->Accept();
  auto s = fut.get();
  EXPECT_TRUE(s) << (s ? "" : s.error().message);
  if (s) c.session = *s;
  return c;
}

class AgentSessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto d = sys::TempDir::Create("/tmp", "space-hub-test-");
    ASSERT_TRUE(d);
    dir_ = std::move(*d);
  }
  std::string Path(int i) { return dir_.path() + "/s" + std::to_string(i) + ".sock"; }
  sys::TempDir dir_;
};

TEST_F(AgentSessionTest, ManySessionsInOrderOnAFewThreads) {
  // Make the hub's threads first, so the count below sees only what sessions add.
  (void)AgentHub::Get();
  const size_t threads0 = ThreadCount();
  constexpr int kSessions = 150, kFrames = 40;
  struct State {
    std::mutex mu;
    uint64_t size = 0;
    int out_of_order = 0;
  };
  std::vector<std::shared_ptr<State>> states;
  std::vector<Connected> conns;
  for (int i = 0; i < kSessions; ++i) {
    auto st = std::make_shared<State>();
    states.push_back(st);
    AgentSession::Handlers h;
    h.on_output = [st](uint32_t, store::OutputStream, uint64_t offset,
                       store::OutputBytes& bytes) -> Result<uint64_t> {
      std::lock_guard l(st->mu);
      if (offset != st->size) ++st->out_of_order;
      st->size = offset + bytes.size();
      return st->size;
    };
    h.on_exit = [](uint32_t, const Json&) -> Status { return Ok(); };
    h.on_disconnect = [i](const Error& e) { ADD_FAILURE() << "session " << i << " lost: " << e.message; };
    conns.push_back(Open(Path(i), std::move(h)));
    ASSERT_TRUE(conns.back().session);
  }
  EXPECT_LE(ThreadCount(), threads0 + 1) << "sessions must not bring threads of their own";
  // Every peer sends its frames in pieces of odd sizes that cut headers and payloads.
  std::vector<uint64_t> totals(kSessions, 0);
  std::vector<std::thread> writers;
  for (int i = 0; i < kSessions; ++i) {
    std::string wire;
    uint64_t off = 0;
    for (int k = 0; k < kFrames; ++k) {
      std::string bytes(1 + (k * 37 + i) % 3000, static_cast<char>('a' + k % 26));
      agent::EncodeDataFrame(FrameType::kStdout, 1, off, bytes, &wire);
      off += bytes.size();
    }
    totals[i] = off;
    writers.emplace_back([&conns, i, wire] {
      std::string_view left = wire;
      size_t piece = 1 + i % 7;
      while (!left.empty()) {
        size_t n = std::min(left.size(), piece);
        (void)sys::WriteAll(conns[i].peer->fd(), left.substr(0, n));
        left.remove_prefix(n);
        piece = piece * 3 % 4093 + 1;
      }
    });
  }
  for (auto& w : writers) w.join();
  // Each peer is ACKed up to its total: the credit return of durable output.
  for (int i = 0; i < kSessions; ++i) {
    bool acked = conns[i].peer->ReadUntil([&](const agent::Frame& f) {
      if (f.type != FrameType::kAck) return false;
      auto a = agent::DecodeAck(f.payload);
      return a && a->fd == 1 && a->offset == totals[i];
    });
    EXPECT_TRUE(acked) << "session " << i;
    std::lock_guard l(states[i]->mu);
    EXPECT_EQ(states[i]->size, totals[i]);
    EXPECT_EQ(states[i]->out_of_order, 0) << "session " << i;
  }
  // Calls are answered on every session (the response is matched by its id).
  for (int i = 0; i < kSessions; i += 15) {
    auto s = conns[i].session;
    auto fut = std::async(std::launch::async, [s] { return s->Call(Json{{"op", "ping"}}, {}, 10000); });
    uint32_t id = 0;
    ASSERT_TRUE(conns[i].peer->ReadUntil([&](const agent::Frame& f) {
      if (f.type != FrameType::kRequest || f.stream == agent::kHelloRequest) return false;
      id = f.stream;
      return true;
    }));
    conns[i].peer->Write(agent::EncodeFrame(FrameType::kResponse, id,
                                            agent::EncodeMessage(Json{{"ok", true}, {"n", i}})));
    auto r = fut.get();
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->json["n"], i);
  }
  const size_t before = AgentHub::Get().connections();
  conns.clear();  // sessions destroyed: their fds leave the hub
  EXPECT_EQ(AgentHub::Get().connections(), before - kSessions);
}

// The output the test agent sends: byte i of a stream is a function of i (and the stream),
// so a misplaced piece shows.
char OutputByte(store::OutputStream s, uint64_t i) {
  return static_cast<char>((i * 131 + (i >> 12) * 7 + static_cast<int>(s)) & 0xff);
}
std::string OutputBytesAt(store::OutputStream s, uint64_t offset, size_t n) {
  std::string b(n, '\0');
  for (size_t i = 0; i < n; ++i) b[i] = OutputByte(s, offset + i);
  return b;
}

// Writes `wire` in pieces of odd sizes (cutting headers, offsets and payloads), as a
// socket may deliver them.
void WriteInPieces(int fd, std::string_view wire, size_t seed) {
  size_t step = 1 + seed % 7;
  while (!wire.empty()) {
    size_t n = std::min(wire.size(), step);
    ASSERT_TRUE(sys::WriteAll(fd, wire.substr(0, n)));
    wire.remove_prefix(n);
    step = step * 5 % 300007 + 3;  // from a few bytes to ~300 KiB
  }
}

// Handlers that store output in a real OutputLog up to `limit` (as core's guards hold
// output at a quota: frames past a held stream's end wait for the retransmission), counting
// the calls and keeping the first error.
struct LogSink {
  explicit LogSink(const std::string& dir, const std::string& cid) {
    auto l = store::OutputLog::Open(dir, cid);
    EXPECT_TRUE(l);
    if (l) log = std::move(*l);
  }
  AgentSession::Handlers Handlers() {
    AgentSession::Handlers h;
    h.on_output = [this](uint32_t, store::OutputStream s, uint64_t o,
                         store::OutputBytes& b) -> Result<uint64_t> {
      std::lock_guard l(mu);
      ++calls;
      if (o > log->Size(s)) return log->Size(s);
      auto size = log->Append(s, o, b, limit);
      if (!size && error.empty()) error = size.error().message;
      return size;
    };
    h.on_exit = [](uint32_t, const Json&) -> Status { return Ok(); };
    h.on_disconnect = [](const Error& e) { ADD_FAILURE() << "lost: " << e.message; };
    return h;
  }
  std::mutex mu;
  std::unique_ptr<store::OutputLog> log;
  uint64_t limit = UINT64_MAX;
  int calls = 0;
  std::string error;
};

TEST_F(AgentSessionTest, LargeFramesGoIntoTheLogInPiecesAndAreAcked) {
  // 1 MiB frames (the agent's largest) on both streams, sent in pieces of odd sizes: their
  // output is moved from the socket into a real OutputLog (spliced, never assembled), in
  // order, and ACKed to the end.
  LogSink sink(dir_.path() + "/logs", "cmd-1");
  ASSERT_TRUE(sink.log);
  auto c = Open(Path(0), sink.Handlers());
  ASSERT_TRUE(c.session);
  constexpr int kFrames = 24;
  const size_t kErrFrame = 300000;  // stderr frames in between, not a multiple of a page
  std::thread writer([&] {
    std::string wire;
    uint64_t out = 0, err = 0;
    for (int k = 0; k < kFrames; ++k) {
      agent::EncodeDataFrame(FrameType::kStdout, 1, out,
                             OutputBytesAt(store::OutputStream::kStdout, out, agent::kMaxDataChunk),
                             &wire);
      out += agent::kMaxDataChunk;
      if (k % 3 == 0) {
        agent::EncodeDataFrame(FrameType::kStderr, 1, err,
                               OutputBytesAt(store::OutputStream::kStderr, err, kErrFrame), &wire);
        err += kErrFrame;
      }
    }
    WriteInPieces(c.peer->fd(), wire, 3);
  });
  const uint64_t total = uint64_t{kFrames} * agent::kMaxDataChunk;
  EXPECT_TRUE(c.peer->ReadUntil([&](const agent::Frame& f) {
    auto a = agent::DecodeAck(f.payload);
    return f.type == FrameType::kAck && a && a->fd == 1 && a->offset == total;
  }));
  writer.join();
  std::lock_guard l(sink.mu);
  EXPECT_EQ(sink.error, "");
  EXPECT_GT(sink.calls, kFrames + 8);  // in pieces, not one call per frame
  for (auto s : {store::OutputStream::kStdout, store::OutputStream::kStderr}) {
    const uint64_t want = s == store::OutputStream::kStdout ? total : 8 * kErrFrame;
    ASSERT_EQ(sink.log->Size(s), want);
    auto got = store::ReadOutput(dir_.path() + "/logs", "cmd-1", s, 0, want);
    ASSERT_TRUE(got);
    EXPECT_TRUE(*got == OutputBytesAt(s, 0, want)) << "stream " << static_cast<int>(s);
  }
}

TEST_F(AgentSessionTest, OutputAHandlerLeavesIsDroppedAndTheStreamStaysInStep) {
  // A handler that stores only up to a limit (a quota, a full disk) leaves the rest of a
  // spliced frame in the socket: the session drops it, reads the frames after it correctly,
  // and ACKs only what was stored; the retransmission from there completes the log.
  LogSink sink(dir_.path() + "/logs", "cmd-2");
  ASSERT_TRUE(sink.log);
  sink.limit = 1500000;  // in the middle of the second frame
  auto c = Open(Path(0), sink.Handlers());
  ASSERT_TRUE(c.session);
  const auto kOut = store::OutputStream::kStdout;
  auto frames = [&](uint64_t from, uint64_t to) {
    std::string wire;
    for (uint64_t o = from; o < to; o += agent::kMaxDataChunk) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(agent::kMaxDataChunk, to - o));
      agent::EncodeDataFrame(FrameType::kStdout, 1, o, OutputBytesAt(kOut, o, n), &wire);
    }
    return wire;
  };
  const uint64_t total = 4 * agent::kMaxDataChunk;
  // Everything, then a RESPONSE-free marker: an EXIT of another stream, which the session
  // must still parse after the dropped bytes (it ACKs it with fd 0).
  std::string wire = frames(0, total);
  agent::EncodeFrame(FrameType::kExit, 7, R"({"exit_code":0})", &wire);
  WriteInPieces(c.peer->fd(), wire, 5);
  EXPECT_TRUE(c.peer->ReadUntil([&](const agent::Frame& f) {
    auto a = agent::DecodeAck(f.payload);
    return f.type == FrameType::kAck && f.stream == 7 && a && a->fd == 0;
  }));
  {
    std::lock_guard l(sink.mu);
    EXPECT_EQ(sink.log->Size(kOut), sink.limit);
    sink.limit = UINT64_MAX;
  }
  // The agent retransmits from the last ACK (the durable size).
  WriteInPieces(c.peer->fd(), frames(1500000 - 1500000 % 4096, total), 2);
  EXPECT_TRUE(c.peer->ReadUntil([&](const agent::Frame& f) {
    auto a = agent::DecodeAck(f.payload);
    return f.type == FrameType::kAck && a && a->fd == 1 && a->offset == total;
  }));
  std::lock_guard l(sink.mu);
  EXPECT_EQ(sink.error, "");
  auto got = store::ReadOutput(dir_.path() + "/logs", "cmd-2", kOut, 0, total);
  ASSERT_TRUE(got);
  EXPECT_TRUE(*got == OutputBytesAt(kOut, 0, total));
}

TEST_F(AgentSessionTest, CloseFromInsideAHandlerStopsFurtherHandlers) {
  std::atomic<int> outputs{0}, disconnects{0};
  auto holder = std::make_shared<std::weak_ptr<AgentSession>>();
  AgentSession::Handlers h;
  h.on_output = [&, holder](uint32_t, store::OutputStream, uint64_t offset,
                            store::OutputBytes& bytes) -> Result<uint64_t> {
    ++outputs;
    if (auto s = holder->lock()) s->Close();  // must not deadlock
    return offset + bytes.size();
  };
  h.on_exit = [](uint32_t, const Json&) -> Status { return Ok(); };
  h.on_disconnect = [&](const Error&) { ++disconnects; };
  auto c = Open(Path(0), std::move(h));
  ASSERT_TRUE(c.session);
  *holder = c.session;
  // Three frames in one write: only the first reaches a handler.
  std::string wire;
  for (int k = 0; k < 3; ++k) agent::EncodeDataFrame(FrameType::kStdout, 1, k * 5, "hello", &wire);
  c.peer->Write(wire);
  for (int i = 0; i < 200 && c.session->connected(); ++i) std::this_thread::sleep_for(10ms);
  EXPECT_FALSE(c.session->connected());
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(outputs.load(), 1);
  EXPECT_EQ(disconnects.load(), 0) << "on_disconnect is not called after Close()";
  auto r = c.session->Call(Json{{"op", "ping"}}, {}, 1000);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::kUnavailable);
}

TEST_F(AgentSessionTest, DisconnectIsReportedOnceAndFailsWaitingCalls) {
  std::atomic<int> disconnects{0};
  std::promise<std::string> why;
  AgentSession::Handlers h;
  h.on_output = [](uint32_t, store::OutputStream, uint64_t o, store::OutputBytes& b) -> Result<uint64_t> {
    return o + b.size();
  };
  h.on_exit = [](uint32_t, const Json&) -> Status { return Ok(); };
  h.on_disconnect = [&](const Error& e) {
    if (++disconnects == 1) why.set_value(e.message);
  };
  auto c = Open(Path(0), std::move(h));
  ASSERT_TRUE(c.session);
  auto s = c.session;
  auto call = std::async(std::launch::async, [s] { return s->Call(Json{{"op", "ping"}}, {}, 20000); });
  ASSERT_TRUE(c.peer->ReadUntil([](const agent::Frame& f) {
    return f.type == FrameType::kRequest && f.stream != agent::kHelloRequest;
  }));
  c.peer->CloseConn();
  auto r = call.get();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::kUnavailable);
  auto w = why.get_future();
  ASSERT_EQ(w.wait_for(10s), std::future_status::ready);
  EXPECT_NE(w.get().find("closed"), std::string::npos);
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(disconnects.load(), 1);
  EXPECT_FALSE(c.session->connected());
}

TEST_F(AgentSessionTest, ProtocolErrorEndsOnlyThatSession) {
  std::atomic<int> lost{0};
  AgentSession::Handlers h;
  h.on_output = [](uint32_t, store::OutputStream, uint64_t o, store::OutputBytes& b) -> Result<uint64_t> {
    return o + b.size();
  };
  h.on_exit = [](uint32_t, const Json&) -> Status { return Ok(); };
  h.on_disconnect = [&](const Error&) { ++lost; };
  auto bad = Open(Path(0), h);
  auto good = Open(Path(1), h);
  ASSERT_TRUE(bad.session && good.session);
  // A header announcing 5 MiB: beyond the 4 MiB bound, so nothing is buffered for it.
  std::string header(agent::kHeaderSize, '\0');
  header[0] = 0;
  header[1] = 0;
  header[2] = 0x50;  // 0x500000
  header[4] = static_cast<char>(FrameType::kStdout);
  bad.peer->Write(header);
  // on_disconnect runs just after the session is marked disconnected.
  for (int i = 0; i < 200 && (bad.session->connected() || lost == 0); ++i)
    std::this_thread::sleep_for(10ms);
  EXPECT_FALSE(bad.session->connected());
  EXPECT_EQ(lost.load(), 1);
  std::string wire;
  agent::EncodeDataFrame(FrameType::kStdout, 1, 0, "still here", &wire);
  good.peer->Write(wire);
  EXPECT_TRUE(good.peer->ReadUntil([](const agent::Frame& f) { return f.type == FrameType::kAck; }));
  EXPECT_TRUE(good.session->connected());
}

TEST_F(AgentSessionTest, ABlockedHandlerHoldsOnlyItsOwnSession) {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<bool> blocked{false};
  AgentSession::Handlers slow;
  slow.on_output = [&, released](uint32_t, store::OutputStream, uint64_t o,
                                 store::OutputBytes& b) -> Result<uint64_t> {
    blocked = true;
    released.wait();  // a durable write that takes its time
    return o + b.size();
  };
  slow.on_exit = [](uint32_t, const Json&) -> Status { return Ok(); };
  AgentSession::Handlers fast = slow;
  fast.on_output = [](uint32_t, store::OutputStream, uint64_t o, store::OutputBytes& b) -> Result<uint64_t> {
    return o + b.size();
  };
  auto s = Open(Path(0), slow);
  ASSERT_TRUE(s.session);
  std::string wire;
  agent::EncodeDataFrame(FrameType::kStdout, 1, 0, "slow", &wire);
  s.peer->Write(wire);
  for (int i = 0; i < 500 && !blocked; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(blocked);
  // Other sessions go on: new ones connect (HELLO is handled) and their output is ACKed.
  for (int i = 1; i <= 3; ++i) {
    auto f = Open(Path(i), fast);
    ASSERT_TRUE(f.session);
    std::string w;
    agent::EncodeDataFrame(FrameType::kStdout, 1, 0, "quick", &w);
    f.peer->Write(w);
    EXPECT_TRUE(f.peer->ReadUntil([](const agent::Frame& fr) { return fr.type == FrameType::kAck; }, 5s));
  }
  // Close from another thread waits for the running handler, then no handler runs again.
  auto closing = std::async(std::launch::async, [&] { s.session->Close(); });
  EXPECT_EQ(closing.wait_for(200ms), std::future_status::timeout);
  release.set_value();
  EXPECT_EQ(closing.wait_for(10s), std::future_status::ready);
}

}  // namespace
}  // namespace space::core
