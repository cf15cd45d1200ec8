// agent/agent_test_fixture: what the agent tests share (agent_test.cc: commands and
// processes; agent_connection_test.cc: durable output, flow control, reconnects, malformed
// input; agent_files_test.cc: file operations, confinement, forwarding). They drive the real
// space-agent binary over its unix socket with a small client built on protocol.h.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <deque>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "agent/protocol.h"
#include "common/json.h"
#include "sys/sys.h"

namespace space::agent::testing {

using namespace std::chrono_literals;

inline std::string AgentPath() { return sys::SelfExeDir() + "/space-agent"; }

inline int64_t NowMs() { return MonotonicNanos() / 1'000'000; }

inline std::string ReadText(const std::string& path) {
  auto r = sys::ReadFile(path);
  return r ? *r : "";
}

// The state letter of /proc/<pid>/stat ('R', 'S', 'Z', ...), or 0 when gone.
inline char ProcState(pid_t pid) {
  std::string stat = ReadText("/proc/" + std::to_string(pid) + "/stat");
  size_t p = stat.rfind(')');
  if (p == std::string::npos || p + 2 >= stat.size()) return 0;
  return stat[p + 2];
}

// Resident memory of a process in KiB (VmRSS), or -1.
inline long RssKiB(pid_t pid) {
  std::string status = ReadText("/proc/" + std::to_string(pid) + "/status");
  size_t p = status.find("VmRSS:");
  if (p == std::string::npos) return -1;
  return std::strtol(status.c_str() + p + 6, nullptr, 10);
}

// Background processes a test's commands leave behind on purpose (detached from the
// agent's reach): SIGKILLed at scope exit, even when the test fails. Pids come from
// Add() or from a file the command wrote (one per line); a pid is killed only while its
// command line still holds `name`, so a reused pid is left alone.
class LeftoverKiller {
 public:
  LeftoverKiller(std::string pid_file, std::string name)
      : pid_file_(std::move(pid_file)), name_(std::move(name)) {}
  ~LeftoverKiller() {
    std::istringstream in(ReadText(pid_file_));
    for (pid_t p; in >> p;) pids_.push_back(p);
    for (pid_t p : pids_) {
      std::string cmdline = ReadText("/proc/" + std::to_string(p) + "/cmdline");
      if (p > 0 && cmdline.find(name_) != std::string::npos) ::kill(p, SIGKILL);
    }
  }
  void Add(pid_t p) { pids_.push_back(p); }

 private:
  std::string pid_file_, name_;
  std::vector<pid_t> pids_;
};

// One connection to the agent. Frames not asked for yet wait in a backlog.
class Client {
 public:
  explicit Client(sys::UniqueFd fd) : fd_(std::move(fd)) {}

  void Send(FrameType type, uint32_t stream, std::string_view payload) {
    SendRaw(EncodeFrame(type, stream, payload));
  }
  void SendRaw(std::string_view bytes) {
    auto st = sys::WriteAll(fd_.get(), bytes);
    ASSERT_TRUE(st) << st.error().message;
  }
  void Ack(uint32_t stream, uint8_t fd, uint64_t offset) {
    Send(FrameType::kAck, stream, EncodeAck(fd, offset));
  }

  // The first frame (backlog first) matching `pred`; nullopt on timeout or end of stream.
  std::optional<Frame> Next(const std::function<bool(const Frame&)>& pred, int timeout_ms) {
    int64_t deadline = NowMs() + timeout_ms;
    for (;;) {
      for (auto it = backlog_.begin(); it != backlog_.end(); ++it) {
        if (pred(*it)) {
          Frame f = std::move(*it);
          backlog_.erase(it);
          return f;
        }
      }
      if (eof_) return std::nullopt;
      int64_t left = deadline - NowMs();
      if (left <= 0) return std::nullopt;
      if (!Fill(static_cast<int>(left))) return std::nullopt;
    }
  }
  std::optional<Frame> NextOfType(FrameType t, int timeout_ms = 5000) {
    return Next([t](const Frame& f) { return f.type == t; }, timeout_ms);
  }

  // True when the agent closed the connection within the timeout.
  bool WaitClosed(int timeout_ms) {
    int64_t deadline = NowMs() + timeout_ms;
    while (!eof_) {
      int64_t left = deadline - NowMs();
      if (left <= 0) return false;
      Fill(static_cast<int>(left));
    }
    return true;
  }
  bool eof() const { return eof_; }
  std::deque<Frame>& backlog() { return backlog_; }

 private:
  // Reads whatever arrives within timeout_ms into the backlog; false on timeout.
  bool Fill(int timeout_ms) {
    struct pollfd p = {fd_.get(), POLLIN, 0};
    int n = ::poll(&p, 1, timeout_ms);
    if (n <= 0) return false;
    std::string buf(1 << 20, '\0');
    ssize_t r = ::read(fd_.get(), buf.data(), buf.size());
    if (r <= 0) {
      eof_ = true;
      return true;
    }
    decoder_.Feed(std::string_view(buf.data(), static_cast<size_t>(r)));
    for (;;) {
      auto f = decoder_.Next();
      EXPECT_TRUE(f) << "agent sent a malformed frame";
      if (!f || !*f) break;
      backlog_.push_back(std::move(**f));
    }
    return true;
  }

  sys::UniqueFd fd_;
  FrameDecoder decoder_;
  std::deque<Frame> backlog_;
  bool eof_ = false;
};

struct Output {
  std::string out, err;
  Json exit;             // null when no EXIT arrived
  uint64_t overlap = 0;  // bytes received more than once
  uint64_t frames = 0;
};

class AgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto t = sys::TempDir::Create("/tmp", "agent-test-");
    ASSERT_TRUE(t);
    tmp_ = std::move(*t);
    root_ = tmp_.path() + "/root";
    sock_ = tmp_.path() + "/agent.sock";
    ASSERT_EQ(::mkdir(root_.c_str(), 0755), 0);
    ASSERT_TRUE(sys::Exists(AgentPath())) << AgentPath();
  }
  void TearDown() override { StopAgent(); }

  // agent_connection_test.cc: output of `shell` (`total` bytes of SeqOutput) survives
  // connections dropped mid-stream.
  void DropConnectionsMidStream(const std::string& shell, size_t total);

  void StartAgent(std::vector<std::string> extra = {}, std::vector<std::string> prefix = {}) {
    sys::SpawnOptions o;
    o.argv = prefix;
    for (std::string a :
         {AgentPath(), std::string("--listen"), sock_, std::string("--root"), root_})
      o.argv.push_back(a);
    o.argv.insert(o.argv.end(), extra.begin(), extra.end());
    o.stderr_fd = 2;
    auto c = sys::Spawn(o);
    ASSERT_TRUE(c) << c.error().message;
    agent_ = std::move(*c);
  }

  // SIGTERM, then SIGKILL (ChildProcess's destructor) if it does not stop in time.
  void StopAgent(int sig = SIGTERM) {
    if (agent_.pid() <= 0) return;
    ::kill(agent_.pid(), sig);
    for (int i = 0; i < 800; ++i) {
      int status;
      if (::waitpid(agent_.pid(), &status, WNOHANG) == agent_.pid()) {
        agent_.Release();
        return;
      }
      std::this_thread::sleep_for(10ms);
    }
    agent_ = sys::ChildProcess();
  }

  // Connects (waiting for the socket to appear) and consumes the HELLO.
  std::unique_ptr<Client> Connect(Json* hello = nullptr) {
    int64_t deadline = NowMs() + 5000;
    for (;;) {
      int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      struct sockaddr_un addr = {};
      addr.sun_family = AF_UNIX;
      std::strncpy(addr.sun_path, sock_.c_str(), sizeof addr.sun_path - 1);
      if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
        auto c = std::make_unique<Client>(sys::UniqueFd(fd));
        auto h = c->NextOfType(FrameType::kHello);
        EXPECT_TRUE(h) << "no HELLO";
        if (h && hello) {
          auto j = ParseJson(h->payload);
          EXPECT_TRUE(j);
          if (j) *hello = *j;
        }
        return c;
      }
      ::close(fd);
      if (NowMs() > deadline) {
        ADD_FAILURE() << "cannot connect to " << sock_;
        return nullptr;
      }
      std::this_thread::sleep_for(5ms);
    }
  }

  Message Call(Client& c, const Json& req, std::string_view body = {}) {
    uint32_t id = next_request_++;
    c.Send(FrameType::kRequest, id, EncodeMessage(req, body));
    auto f = c.Next(
        [id](const Frame& f) { return f.type == FrameType::kResponse && f.stream == id; }, 10000);
    if (!f) {
      ADD_FAILURE() << "no response to " << req.dump();
      return Message{Json{{"ok", false}}, {}};
    }
    auto m = DecodeMessage(f->payload);
    EXPECT_TRUE(m);
    return m ? *m : Message{};
  }

  // Starts a command; returns the exec response.
  Json Exec(Client& c, uint32_t stream, Json req) {
    req["op"] = "exec";
    req["stream"] = stream;
    if (!req.contains("id")) req["id"] = "cmd-" + std::to_string(stream);
    return Call(c, req).json;
  }

  // Receives a command's output until EXIT, checking each chunk's offset: a gap fails,
  // an overlap (retransmission) must repeat the same bytes. ACKs as it goes when asked.
  Output Collect(Client& c, uint32_t stream, bool ack = true, int timeout_ms = 10000,
                 Output start = {}) {
    Output o = std::move(start);
    int64_t deadline = NowMs() + timeout_ms;
    for (;;) {
      int64_t left = deadline - NowMs();
      auto f = c.Next(
          [stream](const Frame& f) {
            return f.stream == stream &&
                   (f.type == FrameType::kStdout || f.type == FrameType::kStderr ||
                    f.type == FrameType::kExit);
          },
          static_cast<int>(std::max<int64_t>(left, 0)));
      if (!f) {
        ADD_FAILURE() << "stream " << stream << ": no EXIT in time";
        return o;
      }
      if (f->type == FrameType::kExit) {
        auto j = ParseJson(f->payload);
        EXPECT_TRUE(j);
        o.exit = j ? *j : Json();
        if (ack) c.Ack(stream, 0, 0);
        return o;
      }
      auto d = DecodeData(f->payload);
      EXPECT_TRUE(d);
      if (!d) return o;
      ++o.frames;
      std::string& buf = f->type == FrameType::kStdout ? o.out : o.err;
      EXPECT_LE(d->offset, buf.size()) << "gap in stream " << stream;
      if (d->offset > buf.size()) return o;
      size_t dup = std::min<size_t>(buf.size() - d->offset, d->bytes.size());
      EXPECT_EQ(buf.compare(d->offset, dup, d->bytes.data(), dup), 0) << "retransmission differs";
      o.overlap += dup;
      buf.append(d->bytes.substr(dup));
      if (ack) c.Ack(stream, f->type == FrameType::kStdout ? 1 : 2, buf.size());
    }
  }

  Output Run(Client& c, uint32_t stream, Json req) {
    Json r = Exec(c, stream, std::move(req));
    EXPECT_EQ(r["ok"], true) << r.dump();
    if (r["ok"] != true) return {};
    return Collect(c, stream);
  }

  static std::string ErrorCode(const Json& r) {
    auto e = ErrorFromJson(r);
    return e ? std::string(ErrcName(e->code)) : "ok";
  }

  sys::TempDir tmp_;
  std::string root_, sock_;
  sys::ChildProcess agent_;
  uint32_t next_request_ = 1;
};

}  // namespace space::agent::testing
