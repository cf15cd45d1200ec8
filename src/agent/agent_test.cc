// Drives the real space-agent binary over its unix socket with a small client built on
// protocol.h: commands, durable output and flow control, reconnects, file operations and
// confinement, and robustness against malformed input.
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

namespace space::agent {
namespace {

using namespace std::chrono_literals;

std::string AgentPath() { return sys::SelfExeDir() + "/space-agent"; }

int64_t NowMs() { return MonotonicNanos() / 1'000'000; }

std::string ReadText(const std::string& path) {
  auto r = sys::ReadFile(path);
  return r ? *r : "";
}

// The state letter of /proc/<pid>/stat ('R', 'S', 'Z', ...), or 0 when gone.
char ProcState(pid_t pid) {
  std::string stat = ReadText("/proc/" + std::to_string(pid) + "/stat");
  size_t p = stat.rfind(')');
  if (p == std::string::npos || p + 2 >= stat.size()) return 0;
  return stat[p + 2];
}

// Resident memory of a process in KiB (VmRSS), or -1.
long RssKiB(pid_t pid) {
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

TEST_F(AgentTest, HelloAndPing) {
  StartAgent();
  Json hello;
  auto c = Connect(&hello);
  ASSERT_TRUE(c);
  EXPECT_EQ(hello["version"], 1);
  EXPECT_EQ(hello["pid"], agent_.pid());
  EXPECT_TRUE(hello["commands"].is_array() && hello["commands"].empty()) << hello.dump();
  struct stat st;
  ASSERT_EQ(::stat(sock_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  auto r = Call(*c, {{"op", "ping"}});
  EXPECT_EQ(r.json["ok"], true);
  int64_t t = JsonIntOr(r.json, "time_ns", 0);
  EXPECT_LT(std::llabs(t / 1'000'000 - NowUnixMillis()), 5000);
}

TEST_F(AgentTest, ExecArgvAndShellWithEnvAndCwd) {
  StartAgent();
  auto c = Connect();
  ASSERT_TRUE(c);
  auto o = Run(*c, 1,
               {{"argv", {"/bin/sh", "-c", "echo \"$FOO\"; pwd"}},
                {"env", {{"FOO", "bar baz"}}},
                {"cwd", tmp_.path()}});
  EXPECT_EQ(o.out, "bar baz\n" + tmp_.path() + "\n");
  EXPECT_EQ(o.exit["exit_code"], 0);

  // A bare name is looked up in the PATH the request sets.
  o = Run(
      *c, 2,
      {{"argv", {"printenv", "FOO"}}, {"env", {{"FOO", "x"}, {"PATH", "/nope:/usr/bin:/bin"}}}});
  EXPECT_EQ(o.out, "x\n");

  o = Run(*c, 3, {{"shell", "echo $((6*7)) $0; cd /; pwd"}, {"cwd", "/usr"}});
  EXPECT_EQ(o.out, "42 /bin/sh\n/\n");
  EXPECT_EQ(o.exit["stdout_end"], o.out.size());
}

TEST_F(AgentTest, StdoutAndStderrAreSeparateWithOwnOffsets) {
  StartAgent();
  auto c = Connect();
  ASSERT_TRUE(c);
  auto o = Run(*c, 7,
               {{"shell",
                 "printf out1; printf err1 >&2; sleep 0.05; printf out2; "
                 "printf err-2 >&2"}});
  EXPECT_EQ(o.out, "out1out2");
  EXPECT_EQ(o.err, "err1err-2");
  EXPECT_EQ(o.overlap, 0u);
  EXPECT_EQ(o.exit["stdout_end"], 8);
  EXPECT_EQ(o.exit["stderr_end"], 9);
  EXPECT_EQ(o.exit["timed_out"], false);
}

TEST_F(AgentTest, ExitCodeAndSignalOfDeath) {
  StartAgent();
  auto c = Connect();
  ASSERT_TRUE(c);
  auto o = Run(*c, 1, {{"shell", "exit 3"}});
  EXPECT_EQ(o.exit["exit_code"], 3);
  EXPECT_TRUE(o.exit["signal"].is_null());
  o = Run(*c, 2, {{"shell", "kill -9 $$"}});
  EXPECT_TRUE(o.exit["exit_code"].is_null()) << o.exit.dump();
  EXPECT_EQ(o.exit["signal"], 9);
}

TEST_F(AgentTest, ExecErrorsAreResponses) {
  StartAgent();
  auto c = Connect();
  ASSERT_TRUE(c);
  Json r = Exec(*c, 1, {{"argv", {"/no/such/binary"}}});
  EXPECT_EQ(ErrorCode(r), "not_found") << r.dump();
  r = Exec(*c, 1, {{"argv", {"no-such-program-xyz"}}});
  EXPECT_EQ(ErrorCode(r), "not_found") << r.dump();
  r = Exec(*c, 1, {{"argv", {"true"}}, {"cwd", "/no/such/dir"}});
  EXPECT_EQ(ErrorCode(r), "not_found") << r.dump();
  std::string noexec = tmp_.path() + "/noexec";
  ASSERT_TRUE(sys::WriteFileAtomic(noexec, "#!/bin/sh\n", 0644));
  r = Exec(*c, 1, {{"argv", {noexec}}});
  EXPECT_EQ(ErrorCode(r), "permission_denied") << r.dump();
  r = Exec(*c, 1, {{"argv", {"true"}}, {"user", "no-such-user-xyz"}});
  EXPECT_EQ(ErrorCode(r), "not_found") << r.dump();

  // Failed starts leave nothing behind: the stream is free and HELLO lists nothing.
  auto o = Run(*c, 1, {{"argv", {"true"}}});
  EXPECT_EQ(o.exit["exit_code"], 0);
  // A stream in use is a conflict.
  r = Exec(*c, 2, {{"argv", {"sleep", "5"}}});
  ASSERT_EQ(r["ok"], true);
  r = Exec(*c, 2, {{"argv", {"true"}}});
  EXPECT_EQ(ErrorCode(r), "conflict");
  EXPECT_EQ(Call(*c, {{"op", "signal"}, {"stream", 2}, {"signal", 9}}).json["ok"], true);
  o = Collect(*c, 2);
  EXPECT_EQ(o.exit["signal"], 9);
}

TEST_F(AgentTest, StdinFramesAndClose) {
  StartAgent();
  auto c = Connect();
  ASSERT_TRUE(c);
  Json r = Exec(*c, 5, {{"argv", {"cat"}}, {"stdin", true}});
  ASSERT_EQ(r["ok"], true);
  c->Send(FrameType::kStdin, 5, "hello ");
  c->Send(FrameType::kStdin, 5, "world");
  std::string big(3 << 20, 'x');  // more than a pipe holds: buffered by the agent
  c->Send(FrameType::kStdin, 5, big);
  c->Send(FrameType::kStdin, 5, "");
  auto o = Collect(*c, 5);
  EXPECT_EQ(o.out.size(), 11 + big.size());
  EXPECT_EQ(o.out.substr(0, 11), "hello world");
  EXPECT_EQ(o.exit["exit_code"], 0);

  // Without "stdin": /dev/null, so cat ends at once; STDIN frames are dropped.
  r = Exec(*c, 6, {{"argv", {"cat"}}});
  ASSERT_EQ(r["ok"], true);
  c->Send(FrameType::kStdin, 6, "ignored");
  o = Collect(*c, 6);
  EXPECT_EQ(o.out, "");
  EXPECT_EQ(o.exit["exit_code"], 0);
}

// The host must keep less than 8 MiB of stdin waiting; past that the agent closes the
// command's stdin instead of buffering without bound, and the command runs on.
TEST_F(AgentTest, PendingStdinIsCapped) {
  StartAgent();
  auto c = Connect();
  ASSERT_TRUE(c);
  ASSERT_EQ(Call(*c, {{"op", "ping"}}).json["ok"], true);
  long rss_before = RssKiB(agent_.pid());
  ASSERT_GT(rss_before, 0);
  Json r = Exec(*c, 1, {{"argv", {"sleep", "5"}}, {"stdin", true}});
  ASSERT_EQ(r["ok"], true) << r.dump();
  pid_t sleeper = JsonIntOr(r, "pid", 0);
  std::string mib(1 << 20, 'y');
  for (int i = 0; i < 16; ++i) c->Send(FrameType::kStdin, 1, mib);
  EXPECT_EQ(Call(*c, {{"op", "ping"}}).json["ok"], true);
  long rss = RssKiB(agent_.pid());
  std::printf("agent RSS: %ld KiB before, %ld KiB after 16 MiB of stdin\n", rss_before, rss);
  EXPECT_LT(rss, 40 << 10);
  EXPECT_LT(rss - rss_before, 14 << 10) << "the agent holds more than the cap";
  char state = ProcState(sleeper);
  EXPECT_TRUE(state != 0 && state != 'Z') << "the command did not keep running";
  EXPECT_EQ(Call(*c, {{"op", "signal"}, {"stream", 1}, {"signal", 9}}).json["ok"], true);
  auto o = Collect(*c, 1);
  EXPECT_EQ(o.exit["signal"], 9);

  // The command reads what reached its pipe, then EOF: it is not left waiting for more.
  r = Exec(*c, 2, {{"shell", "sleep 0.3; wc -c"}, {"stdin", true}});
  ASSERT_EQ(r["ok"], true) << r.dump();
  for (int i = 0; i < 16; ++i) c->Send(FrameType::kStdin, 2, mib);
  o = Collect(*c, 2);
  EXPECT_EQ(o.exit["exit_code"], 0) << o.exit.dump();
  EXPECT_LT(std::atol(o.out.c_str()), 1 << 20) << o.out;
}

TEST_F(AgentTest, SignalOp) {
  StartAgent();
  auto c = Connect();
  ASSERT_TRUE(c);
  Json r = Exec(*c, 3,
                {{"shell",
                  "trap 'echo got-term; exit 7' TERM; echo ready; "
                  "while true; do sleep 0.05; done"}});
  ASSERT_EQ(r["ok"], true);
  ASSERT_TRUE(c->Next([](const Frame& f) { return f.type == FrameType::kStdout; }, 5000));
  EXPECT_EQ(ErrorCode(Call(*c, {{"op", "signal"}, {"stream", 3}, {"signal", 0}}).json),
            "invalid_argument");
  EXPECT_EQ(ErrorCode(Call(*c, {{"op", "signal"}, {"stream", 3}, {"signal", 65}}).json),
            "invalid_argument");
  EXPECT_EQ(ErrorCode(Call(*c, {{"op", "signal"}, {"stream", 99}, {"signal", 15}}).json),
            "not_found");
  EXPECT_EQ(Call(*c, {{"op", "signal"}, {"stream", 3}, {"signal", 15}}).json["ok"], true);
  auto o = Collect(*c, 3, true, 10000, Output{"ready\n"});
  EXPECT_EQ(o.out, "ready\ngot-term\n");
  EXPECT_EQ(o.exit["exit_code"], 7);
  EXPECT_EQ(ErrorCode(Call(*c, {{"op", "signal"}, {"stream", 3}, {"signal", 15}}).json),
            "not_found");
}

// Reads a command's stdout (acknowledging it) until it contains `want`; returns all read.
std::string ReadUntil(Client& c, uint32_t stream, std::string* seen, const std::string& want) {
  int64_t deadline = NowMs() + 10000;
  while (seen->find(want) == std::string::npos) {
    int64_t left = deadline - NowMs();
    auto f = c.Next(
        [stream](const Frame& f) { return f.type == FrameType::kStdout && f.stream == stream; },
        static_cast<int>(std::max<int64_t>(left, 0)));
    if (!f) {
      ADD_FAILURE() << "no \"" << want << "\" in output; got: " << *seen;
      break;
    }
    auto d = DecodeData(f->payload);
    EXPECT_TRUE(d);
    if (!d) break;
    EXPECT_EQ(d->offset, seen->size());
    seen->append(d->bytes);
    c.Ack(stream, 1, seen->size());
  }
  return *seen;
}

TEST_F(AgentTest, PtyIsTheControllingTerminalWithItsSize) {
  StartAgent();
  Json hello;
  auto c = Connect(&hello);
  ASSERT_TRUE(c);
  EXPECT_NE(hello["features"].dump().find("pty"), std::string::npos) << hello.dump();
  auto o = Run(*c, 1,
               {{"shell", "tty; stty size; echo \"term=$TERM\"; [ -t 0 ] && [ -t 2 ] && echo err>&2"},
                {"pty", {{"cols", 100}, {"rows", 30}}}});
  EXPECT_NE(o.out.find("/dev/pts/"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("30 100\r\n"), std::string::npos) << o.out;  // the tty adds \r
  EXPECT_NE(o.out.find("term=xterm\r\n"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("err\r\n"), std::string::npos) << "stderr goes to the terminal: " << o.out;
  EXPECT_EQ(o.err, "");
  EXPECT_EQ(o.exit["exit_code"], 0) << o.exit.dump();

  // The request's TERM wins.
  o = Run(*c, 2, {{"shell", "echo \"term=$TERM\""}, {"env", {{"TERM", "dumb"}}},
                  {"pty", {{"cols", 80}, {"rows", 24}}}});
  EXPECT_NE(o.out.find("term=dumb"), std::string::npos) << o.out;

  for (Json bad : {Json{{"cols", 0}, {"rows", 24}}, Json{{"cols", 80}}, Json("x"),
                   Json{{"cols", 80}, {"rows", 5000}}}) {
    Json r = Exec(*c, 3, {{"shell", "true"}, {"pty", bad}});
    EXPECT_EQ(ErrorCode(r), "invalid_argument") << bad.dump();
  }
}

TEST_F(AgentTest, PtyInputResizeAndEndOfFile) {
  StartAgent();
  auto c = Connect();
  ASSERT_TRUE(c);
  Json r = Exec(*c, 1, {{"argv", {"/bin/sh"}}, {"pty", {{"cols", 90}, {"rows", 20}}}});
  ASSERT_EQ(r["ok"], true) << r.dump();
  std::string seen;
  c->Send(FrameType::kStdin, 1, "stty size\n");
  ReadUntil(*c, 1, &seen, "20 90");
  EXPECT_EQ(Call(*c, {{"op", "resize"}, {"stream", 1}, {"cols", 132}, {"rows", 43}}).json["ok"],
            true);
  c->Send(FrameType::kStdin, 1, "stty size\n");
  ReadUntil(*c, 1, &seen, "43 132");
  EXPECT_EQ(ErrorCode(Call(*c, {{"op", "resize"}, {"stream", 1}, {"cols", 0}, {"rows", 43}}).json),
            "invalid_argument");
  EXPECT_EQ(ErrorCode(Call(*c, {{"op", "resize"}, {"stream", 9}, {"cols", 80}, {"rows", 24}}).json),
            "not_found");
  c->Send(FrameType::kStdin, 1, "exit 5\n");
  auto o = Collect(*c, 1, true, 10000, Output{seen});
  EXPECT_EQ(o.exit["exit_code"], 5) << o.exit.dump();

  // An empty STDIN frame is end-of-file (^D) on a terminal.
  r = Exec(*c, 2, {{"argv", {"cat"}}, {"pty", {{"cols", 80}, {"rows", 24}}}});
  ASSERT_EQ(r["ok"], true) << r.dump();
  c->Send(FrameType::kStdin, 2, "abc\n");
  c->Send(FrameType::kStdin, 2, "");
  o = Collect(*c, 2);
  EXPECT_NE(o.out.find("abc\r\n"), std::string::npos) << o.out;
  EXPECT_EQ(o.exit["exit_code"], 0) << o.exit.dump();

  // Commands without a pty cannot be resized.
  r = Exec(*c, 3, {{"argv", {"sleep", "5"}}});
  ASSERT_EQ(r["ok"], true);
  EXPECT_EQ(ErrorCode(Call(*c, {{"op", "resize"}, {"stream", 3}, {"cols", 80}, {"rows", 24}}).json),
            "invalid_argument");
  EXPECT_EQ(Call(*c, {{"op", "signal"}, {"stream", 3}, {"signal", 9}}).json["ok"], true);
  Collect(*c, 3);
}

TEST_F(AgentTest, TimeoutKillsTheProcessGroup) {
  StartAgent();
  auto c = Connect();
  ASSERT_TRUE(c);
  int64_t t0 = NowMs();
  // The background sleep keeps stdout open: the command only ends if the whole group dies.
  auto o = Run(*c, 4, {{"shell", "sleep 100 & sleep 100"}, {"timeout_ms", 300}});
  int64_t took = NowMs() - t0;
  EXPECT_EQ(o.exit["timed_out"], true) << o.exit.dump();
  EXPECT_EQ(o.exit["signal"], 9);
  EXPECT_GE(took, 250);
  EXPECT_LT(took, 5000);
  o = Run(*c, 5, {{"argv", {"true"}}, {"timeout_ms", 5000}});
  EXPECT_EQ(o.exit["timed_out"], false);
}

// A detached background process (its own session) inherits stdout and never closes it:
// EOF never comes, yet the command must finish, shortly after its main process.
TEST_F(AgentTest, DetachedProcessHoldingThePipesDoesNotKeepTheCommandOpen) {
  StartAgent();
  auto c = Connect();
  ASSERT_TRUE(c);
  std::string pid_file = tmp_.path() + "/detached.pid";
  LeftoverKiller cleanup(pid_file, "sleep");
  int64_t t0 = NowMs();
  auto o =
      Run(*c, 1,
          {{"shell", "(setsid sh -c 'echo $$ >" + pid_file + "; exec sleep 1000' &) ; echo done"}});
  int64_t took = NowMs() - t0;
  EXPECT_EQ(o.out, "done\n");
  EXPECT_EQ(o.err, "");
  EXPECT_EQ(o.exit["exit_code"], 0) << o.exit.dump();
  EXPECT_EQ(o.exit["stdout_end"], 5);
  EXPECT_EQ(o.exit["stderr_end"], 0);
  EXPECT_GE(took, 200) << "the pipes get their grace period first";
  EXPECT_LT(took, 1000);
  // It left the command's process group: the agent took its pipes, not its life.
  pid_t detached = std::atoi(ReadText(pid_file).c_str());
  ASSERT_GT(detached, 0);
  EXPECT_NE(ProcState(detached), 0);
  EXPECT_EQ(Call(*c, {{"op", "ping"}}).json["ok"], true);

  // A background child that finishes within the grace period is heard in full.
  o = Run(*c, 2, {{"shell", "echo a; (sleep 0.1; echo b) & "}});
  EXPECT_EQ(o.out, "a\nb\n");
  EXPECT_EQ(o.exit["exit_code"], 0);
  EXPECT_EQ(o.exit["stdout_end"], 4);
}

// A leftover that stayed in the command's process group and holds the pipes is killed
// when they are closed; one that let go of them (redirected) is not touched.
TEST_F(AgentTest, LeftoverHoldingThePipesInTheGroupIsKilled) {
  StartAgent();
  auto c = Connect();
  ASSERT_TRUE(c);
  LeftoverKiller cleanup("", "sleep");
  int64_t t0 = NowMs();
  auto o = Run(*c, 1, {{"shell", "sleep 1000 >/dev/null 2>&1 & echo $!; sleep 1000 & echo $!"}});
  int64_t took = NowMs() - t0;
  std::istringstream in(o.out);
  pid_t quiet = 0, holder = 0;
  in >> quiet >> holder;
  ASSERT_GT(quiet, 0) << o.out;
  ASSERT_GT(holder, 0) << o.out;
  cleanup.Add(quiet);
  cleanup.Add(holder);
  EXPECT_EQ(o.exit["exit_code"], 0) << o.exit.dump();
  EXPECT_LT(took, 1000);
  int64_t deadline = NowMs() + 3000;
  while (ProcState(holder) != 0 && NowMs() < deadline) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(ProcState(holder), 0) << "the pipe holder in the group survived";
  char state = ProcState(quiet);
  EXPECT_TRUE(state != 0 && state != 'Z') << "a group member without the pipes was killed";
}

// Output held up by backpressure is never cut off by the grace period: its clock stops
// while the window is full, so a host that is slow (or away) loses nothing.
TEST_F(AgentTest, GracePeriodNeverDropsOutputHeldUpByTheWindow) {
  constexpr uint64_t kWindow = 64 << 10;
  constexpr size_t kSize = 600000;  // fits the command's 1 MiB pipe: it exits at once
  StartAgent({"--window", std::to_string(kWindow)});
  auto c = Connect();
  ASSERT_TRUE(c);
  std::string pid_file = tmp_.path() + "/detached.pid";
  LeftoverKiller cleanup(pid_file, "sleep");
  Json r =
      Exec(*c, 1,
           {{"shell", "(setsid sh -c 'echo $$ >" + pid_file + "; exec sleep 1000' &); head -c " +
                          std::to_string(kSize) + " /dev/zero | tr '\\0' x; echo end"}});
  ASSERT_EQ(r["ok"], true) << r.dump();
  // No ACKs for well over the grace period, then a reconnect.
  std::this_thread::sleep_for(700ms);
  c.reset();
  Json hello;
  c = Connect(&hello);
  ASSERT_TRUE(c);
  ASSERT_EQ(hello["commands"].size(), 1u) << hello.dump();
  EXPECT_EQ(hello["commands"][0]["running"], false) << "the main process has not exited yet";
  EXPECT_LE(hello["commands"][0]["stdout_produced"].get<uint64_t>(), kWindow);
  auto o = Collect(*c, 1);
  EXPECT_EQ(o.out.size(), kSize + 4);
  EXPECT_TRUE(o.out == std::string(kSize, 'x') + "end\n") << "content differs";
  EXPECT_EQ(o.overlap, 0u);
  EXPECT_EQ(o.exit["stdout_end"], kSize + 4);
  EXPECT_EQ(o.exit["exit_code"], 0);
}

// A detached process that keeps writing extends the grace period, but only up to 2 s.
TEST_F(AgentTest, GracePeriodEndsEvenWhileOutputKeepsComing) {
  StartAgent();
  auto c = Connect();
  ASSERT_TRUE(c);
  std::string pid_file = tmp_.path() + "/writer.pid";
  LeftoverKiller cleanup(pid_file, "sh");
  int64_t t0 = NowMs();
  auto o = Run(*c, 1,
               {{"shell", "(setsid sh -c 'echo $$ >" + pid_file +
                              "; while :; do echo x; sleep 0.05; done' &) ; echo done"}});
  int64_t took = NowMs() - t0;
  EXPECT_EQ(o.exit["exit_code"], 0) << o.exit.dump();
  // The detached writer races the shell: its first "x" may come before "done".
  EXPECT_NE(o.out.find("done\n"), std::string::npos) << o.out;
  EXPECT_GT(o.out.size(), 5u + 2 * 10) << "output after the exit was not read";
  EXPECT_EQ(o.exit["stdout_end"], o.out.size());
  EXPECT_GE(took, 1800);
  EXPECT_LT(took, 3500);
}

TEST_F(AgentTest, OrphanedGrandchildIsReaped) {
  StartAgent();
  auto c = Connect();
  ASSERT_TRUE(c);
  auto o = Run(*c, 1, {{"shell", "sleep 0.3 >/dev/null 2>&1 & echo $!"}});
  pid_t orphan = std::stoi(o.out);
  ASSERT_GT(orphan, 0);
  // Its shell is gone, so the agent (a subreaper) is its parent now.
  std::string status = ReadText("/proc/" + std::to_string(orphan) + "/status");
  if (!status.empty()) {
    EXPECT_NE(status.find("PPid:\t" + std::to_string(agent_.pid()) + "\n"), std::string::npos)
        << status;
  }
  int64_t deadline = NowMs() + 5000;
  char state = ProcState(orphan);
  while (state != 0 && NowMs() < deadline) {
    std::this_thread::sleep_for(20ms);
    state = ProcState(orphan);
  }
  EXPECT_EQ(state, 0) << "orphan " << orphan << " is still there in state " << state;
}

TEST_F(AgentTest, ReconnectRetransmitsUnackedOutput) {
  StartAgent();
  auto c = Connect();
  ASSERT_TRUE(c);
  ASSERT_EQ(Exec(*c, 9, {{"shell", "printf hello; printf oops >&2"}, {"id", "cmd-x"}})["ok"], true);
  auto o = Collect(*c, 9, /*ack=*/false);
  EXPECT_EQ(o.out, "hello");
  c.reset();  // disconnect without any ACK

  Json hello;
  c = Connect(&hello);
  ASSERT_TRUE(c);
  ASSERT_EQ(hello["commands"].size(), 1u) << hello.dump();
  Json cmd = hello["commands"][0];
  EXPECT_EQ(cmd["stream"], 9);
  EXPECT_EQ(cmd["id"], "cmd-x");
  EXPECT_EQ(cmd["running"], false);
  EXPECT_EQ(cmd["stdout_produced"], 5);
  EXPECT_EQ(cmd["stderr_produced"], 4);
  EXPECT_EQ(cmd["stdout_acked"], 0);
  o = Collect(*c, 9, false);  // everything again, from offset 0
  EXPECT_EQ(o.out, "hello");
  EXPECT_EQ(o.err, "oops");
  EXPECT_EQ(o.overlap, 0u);
  EXPECT_EQ(o.exit["stdout_end"], 5);

  // Partial ACK: the next connection resumes at it.
  c->Ack(9, 1, 3);
  c->Ack(9, 1, 2);   // stale: ignored
  c->Ack(9, 2, 99);  // beyond produced: ignored
  c.reset();
  c = Connect(&hello);
  ASSERT_TRUE(c);
  EXPECT_EQ(hello["commands"][0]["stdout_acked"], 3);
  EXPECT_EQ(hello["commands"][0]["stderr_acked"], 0);
  auto f = c->Next([](const Frame& f) { return f.type == FrameType::kStdout; }, 5000);
  ASSERT_TRUE(f);
  auto d = DecodeData(f->payload);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->offset, 3u);
  EXPECT_EQ(d->bytes, "lo");
  o = Collect(*c, 9, true, 10000, Output{"hello"});
  EXPECT_EQ(o.err, "oops");
  EXPECT_EQ(o.exit["exit_code"], 0);

  // The exit was acknowledged: the agent forgot the command.
  c.reset();
  c = Connect(&hello);
  ASSERT_TRUE(c);
  EXPECT_TRUE(hello["commands"].empty()) << hello.dump();
  // And the stream id is free again.
  EXPECT_EQ(Run(*c, 9, {{"argv", {"true"}}}).exit["exit_code"], 0);
}

TEST_F(AgentTest, NewConnectionReplacesTheOldOne) {
  StartAgent();
  auto a = Connect();
  ASSERT_TRUE(a);
  auto b = Connect();
  ASSERT_TRUE(b);
  EXPECT_TRUE(a->WaitClosed(5000));
  EXPECT_EQ(Call(*b, {{"op", "ping"}}).json["ok"], true);
}

std::string SeqOutput(size_t limit) {
  std::string s;
  s.reserve(limit + 16);
  for (uint64_t i = 1; s.size() < limit; ++i) {
    s += std::to_string(i);
    s += '\n';
  }
  s.resize(limit);
  return s;
}

TEST_F(AgentTest, BackpressureHoldsTheCommandAtTheWindow) {
  constexpr uint64_t kWindow = 64 << 10;
  constexpr size_t kTotal = 64 << 20;
  StartAgent({"--window", std::to_string(kWindow)});
  auto c = Connect();
  ASSERT_TRUE(c);
  Json r = Exec(*c, 1, {{"shell", "seq 1 10000000 | head -c " + std::to_string(kTotal)}});
  ASSERT_EQ(r["ok"], true);

  // No ACKs: the agent sends at most one window and the command blocks in write().
  Output early;
  int64_t until = NowMs() + 600;
  while (NowMs() < until) {
    auto f = c->Next([](const Frame& f) { return f.type == FrameType::kStdout; },
                     static_cast<int>(std::max<int64_t>(until - NowMs(), 1)));
    if (!f) continue;
    auto d = DecodeData(f->payload);
    ASSERT_TRUE(d);
    ASSERT_EQ(d->offset, early.out.size());
    early.out.append(d->bytes);
  }
  EXPECT_GT(early.out.size(), 0u);
  EXPECT_LE(early.out.size(), kWindow);
  EXPECT_TRUE(c->backlog().empty() ||
              std::none_of(c->backlog().begin(), c->backlog().end(),
                           [](const Frame& f) { return f.type == FrameType::kExit; }));

  // A second connection sees the command running with produced - acked <= window.
  c.reset();
  Json hello;
  c = Connect(&hello);
  ASSERT_TRUE(c);
  ASSERT_EQ(hello["commands"].size(), 1u);
  EXPECT_EQ(hello["commands"][0]["running"], true);
  EXPECT_LE(hello["commands"][0]["stdout_produced"].get<uint64_t>(), kWindow);
  EXPECT_EQ(ProcState(JsonIntOr(r, "pid", 0)) != 0, true);

  // ACKing lets it finish; every byte arrives once, in order.
  int64_t t0 = NowMs();
  auto o = Collect(*c, 1, true, 120000);
  EXPECT_EQ(o.out.size(), kTotal);
  EXPECT_TRUE(o.out == SeqOutput(kTotal)) << "content differs";
  EXPECT_EQ(o.overlap, 0u);
  EXPECT_EQ(o.exit["stdout_end"], kTotal);
  std::printf("64 MiB through a 64 KiB window: %lld ms, %llu frames\n",
              static_cast<long long>(NowMs() - t0), static_cast<unsigned long long>(o.frames));
}

TEST_F(AgentTest, ConnectionsDroppedMidStreamLoseNothingAndRetransmitTheSameBytes) {
  // Large output goes out as pages spliced from the agent's blocks; blocks are reused once
  // acknowledged. Connections are dropped while frames are in flight (once with ACKs
  // flowing, once with the window full and nothing ACKed): every retransmitted byte must
  // equal what was received before (Collect checks), and the stream ends whole.
  constexpr size_t kTotal = 48 << 20;
  StartAgent();
  auto c = Connect();
  ASSERT_TRUE(c);
  Json r = Exec(*c, 1, {{"shell", "seq 1 10000000 | head -c " + std::to_string(kTotal)}});
  ASSERT_EQ(r["ok"], true);
  Output o;
  auto receive_until = [&](size_t limit, bool ack) {
    while (o.out.size() < limit) {
      auto f = c->Next([](const Frame& f) { return f.type == FrameType::kStdout; }, 10000);
      ASSERT_TRUE(f) << "no output at " << o.out.size();
      auto d = DecodeData(f->payload);
      ASSERT_TRUE(d);
      ASSERT_LE(d->offset, o.out.size()) << "gap";
      size_t dup = std::min<size_t>(o.out.size() - d->offset, d->bytes.size());
      ASSERT_EQ(o.out.compare(d->offset, dup, d->bytes.data(), dup), 0) << "retransmission differs";
      o.overlap += dup;
      o.out.append(d->bytes.substr(dup));
      if (ack) c->Ack(1, 1, o.out.size());
    }
  };
  receive_until(12 << 20, /*ack=*/true);
  c.reset();  // mid-stream: frames queued and in flight are lost with the connection
  c = Connect();
  ASSERT_TRUE(c);
  receive_until(24 << 20, /*ack=*/true);
  // Now nothing is ACKed: the agent fills its window and waits; drop that connection too.
  const size_t unacked_from = o.out.size();
  receive_until(unacked_from + (4 << 20), /*ack=*/false);
  c.reset();
  Json hello;
  c = Connect(&hello);
  ASSERT_TRUE(c);
  EXPECT_LE(hello["commands"][0]["stdout_acked"].get<uint64_t>(), unacked_from);
  o = Collect(*c, 1, true, 120000, o);
  EXPECT_EQ(o.out.size(), kTotal);
  EXPECT_TRUE(o.out == SeqOutput(kTotal)) << "content differs";
  EXPECT_GT(o.overlap, 0u);  // the unacknowledged part came again
  EXPECT_EQ(o.exit["stdout_end"], kTotal);
}

TEST_F(AgentTest, Throughput) {
  constexpr size_t kTotal = 256 << 20;
  StartAgent();
  auto c = Connect();
  ASSERT_TRUE(c);
  int64_t t0 = MonotonicNanos();
  Json r = Exec(*c, 1, {{"argv", {"head", "-c", std::to_string(kTotal), "/dev/zero"}}});
  ASSERT_EQ(r["ok"], true);
  auto o = Collect(*c, 1, true, 120000);
  double secs = static_cast<double>(MonotonicNanos() - t0) / 1e9;
  EXPECT_EQ(o.out.size(), kTotal);
  EXPECT_EQ(o.overlap, 0u);
  EXPECT_EQ(o.out.find_first_not_of('\0'), std::string::npos);
  std::printf("throughput: 256 MiB in %.3f s = %.0f MB/s (%llu frames)\n", secs,
              kTotal / secs / 1e6, static_cast<unsigned long long>(o.frames));
}

TEST_F(AgentTest, WritesAndMkdirsAsAUserAndNamesOwners) {
  // The sandbox's own account files (inside the root, not the host's).
  ASSERT_EQ(::mkdir((root_ + "/etc").c_str(), 0755), 0);
  ASSERT_TRUE(sys::WriteFileAtomic(root_ + "/etc/passwd",
                                   "root:x:0:0:root:/root:/bin/sh\nuser:x:1234:2345::/home/user:/bin/sh\n"));
  ASSERT_TRUE(sys::WriteFileAtomic(root_ + "/etc/group", "root:x:0:\nusers:x:2345:\n"));
  StartAgent();
  auto c = Connect();
  ASSERT_TRUE(c);
  auto call = [&](Json req, std::string_view body = {}) { return Call(*c, req, body); };
  auto owner = [&](const std::string& p) {
    struct stat st {};
    EXPECT_EQ(::lstat((root_ + p).c_str(), &st), 0) << p;
    return std::make_pair(st.st_uid, st.st_gid);
  };
  using Ids = std::pair<uid_t, gid_t>;

  auto w = call({{"op", "write"}, {"path", "/home/user/d/f.txt"}, {"create_parents", true}, {"user", "user"}},
                "mine");
  ASSERT_EQ(w.json["ok"], true) << w.json.dump();
  EXPECT_EQ(owner("/home/user/d/f.txt"), Ids(1234, 2345));
  EXPECT_EQ(owner("/home/user/d"), Ids(1234, 2345));
  EXPECT_EQ(owner("/home"), Ids(1234, 2345));  // made for this call too
  // A later piece leaves the owner; a write from offset 0 by root takes the file back.
  ASSERT_EQ(::chown((root_ + "/home/user/d/f.txt").c_str(), 0, 0), 0);
  EXPECT_EQ(call({{"op", "write"}, {"path", "/home/user/d/f.txt"}, {"offset", 4}, {"user", "user"}}, "!")
                .json["ok"], true);
  EXPECT_EQ(owner("/home/user/d/f.txt"), Ids(0, 0));
  EXPECT_EQ(call({{"op", "write"}, {"path", "/home/user/d/f.txt"}, {"truncate", true}, {"user", 1234}}, "x")
                .json["ok"], true);
  EXPECT_EQ(owner("/home/user/d/f.txt"), Ids(1234, 2345));
  // Without a user nothing changes hands (existing dirs stay as they are).
  EXPECT_EQ(call({{"op", "write"}, {"path", "/home/user/d/root.txt"}}, "r").json["ok"], true);
  EXPECT_EQ(owner("/home/user/d/root.txt"), Ids(0, 0));

  EXPECT_EQ(call({{"op", "mkdir"}, {"path", "/home/user/m/n"}, {"parents", true}, {"user", "user"}}).json["ok"], true);
  EXPECT_EQ(owner("/home/user/m"), Ids(1234, 2345));
  EXPECT_EQ(owner("/home/user/m/n"), Ids(1234, 2345));
  EXPECT_EQ(call({{"op", "mkdir"}, {"path", "/home/user/m/solo"}, {"user", "user"}}).json["ok"], true);
  EXPECT_EQ(owner("/home/user/m/solo"), Ids(1234, 2345));

  // Entries name their owners from the sandbox's files; unknown ids have no names.
  auto st = call({{"op", "stat"}, {"path", "/home/user/d/f.txt"}});
  EXPECT_EQ(st.json["entry"]["user"], "user") << st.json.dump();
  EXPECT_EQ(st.json["entry"]["group"], "users");
  ASSERT_EQ(::chown((root_ + "/home/user/d/root.txt").c_str(), 4242, 4242), 0);
  auto ls = call({{"op", "list"}, {"path", "/home/user/d"}});
  ASSERT_EQ(ls.json["entries"].size(), 2u) << ls.json.dump();
  for (const Json& e : ls.json["entries"]) {
    if (e["name"] == "root.txt") {
      EXPECT_FALSE(e.contains("user")) << e.dump();
      EXPECT_EQ(e["uid"], 4242);
    } else {
      EXPECT_EQ(e["user"], "user") << e.dump();
    }
  }
  EXPECT_EQ(call({{"op", "stat"}, {"path", "/"}}).json["entry"]["user"], "root");

  // Bad users: unknown names, wrong types; nothing is written.
  EXPECT_EQ(ErrorCode(call({{"op", "write"}, {"path", "/x1"}, {"user", "nobody-here"}}, "x").json), "not_found");
  EXPECT_EQ(ErrorCode(call({{"op", "write"}, {"path", "/x2"}, {"user", true}}, "x").json), "invalid_argument");
  EXPECT_EQ(ErrorCode(call({{"op", "mkdir"}, {"path", "/x3"}, {"user", -5}}).json), "invalid_argument");
  EXPECT_NE(::access((root_ + "/x1").c_str(), F_OK), 0);
  EXPECT_NE(::access((root_ + "/x2").c_str(), F_OK), 0);
  EXPECT_NE(::access((root_ + "/x3").c_str(), F_OK), 0);
}

TEST_F(AgentTest, WritesSetExtendedAttributesAndEntriesShowThem) {
  StartAgent();
  auto c = Connect();
  ASSERT_TRUE(c);
  auto call = [&](Json req, std::string_view body = {}) { return Call(*c, req, body); };
  auto xattr = [&](const std::string& p, const char* name) {
    char buf[256];
    ssize_t n = ::lgetxattr((root_ + p).c_str(), name, buf, sizeof buf);
    return n < 0 ? std::string("<none>") : std::string(buf, static_cast<size_t>(n));
  };
  const Json attrs = {{"user.e2b.author", "mish"}, {"user.e2b.purpose", "upload"}};
  auto w = call({{"op", "write"}, {"path", "/m.txt"}, {"xattr_prefix", "user.e2b."}, {"xattrs", attrs}}, "hi");
  ASSERT_EQ(w.json["ok"], true) << w.json.dump();
  EXPECT_EQ(xattr("/m.txt", "user.e2b.author"), "mish");
  // An attribute of another prefix is left alone by a rewrite; those under it are replaced.
  ASSERT_EQ(::setxattr((root_ + "/m.txt").c_str(), "user.other", "keep", 4, 0), 0);
  auto st = call({{"op", "stat"}, {"path", "/m.txt"}, {"xattr_prefix", "user.e2b."}});
  EXPECT_EQ(st.json["entry"]["xattrs"], attrs) << st.json.dump();
  EXPECT_FALSE(call({{"op", "stat"}, {"path", "/m.txt"}}).json["entry"].contains("xattrs"));
  ASSERT_EQ(call({{"op", "mkdir"}, {"path", "/d"}}).json["ok"], true);
  ASSERT_EQ(call({{"op", "rename"}, {"from", "/m.txt"}, {"to", "/d/m.txt"}}).json["ok"], true);
  auto ls = call({{"op", "list"}, {"path", "/d"}, {"xattr_prefix", "user.e2b."}});
  ASSERT_EQ(ls.json["entries"].size(), 1u) << ls.json.dump();
  EXPECT_EQ(ls.json["entries"][0]["xattrs"], attrs);
  // A later piece (offset > 0) keeps them; a new write from 0 with none clears its prefix.
  EXPECT_EQ(call({{"op", "write"}, {"path", "/d/m.txt"}, {"offset", 2}, {"xattr_prefix", "user.e2b."}}, "!")
                .json["ok"], true);
  EXPECT_EQ(xattr("/d/m.txt", "user.e2b.author"), "mish");
  EXPECT_EQ(call({{"op", "write"}, {"path", "/d/m.txt"}, {"truncate", true}, {"xattr_prefix", "user.e2b."}}, "x")
                .json["ok"], true);
  EXPECT_EQ(xattr("/d/m.txt", "user.e2b.author"), "<none>");
  EXPECT_EQ(xattr("/d/m.txt", "user.other"), "keep");
  EXPECT_FALSE(call({{"op", "stat"}, {"path", "/d/m.txt"}, {"xattr_prefix", "user.e2b."}})
                   .json["entry"].contains("xattrs"));
  // Values that are not text are not shown.
  ASSERT_EQ(::setxattr((root_ + "/d/m.txt").c_str(), "user.e2b.bin", "\x01\x02", 2, 0), 0);
  EXPECT_FALSE(call({{"op", "stat"}, {"path", "/d/m.txt"}, {"xattr_prefix", "user.e2b."}})
                   .json["entry"].contains("xattrs"));

  // Only the user namespace, inside the prefix, bounded; a refused write writes nothing.
  for (const Json& bad : {Json{{"trusted.x", "v"}}, Json{{"security.capability", "v"}},
                          Json{{"user.", "v"}}, Json{{"user.e2b.k", 5}}, Json{{"user.nope", "v"}},
                          Json{{"user.e2b." + std::string(300, 'k'), "v"}},
                          Json{{"user.e2b.k", std::string(5000, 'v')}}, Json("x")}) {
    auto r = call({{"op", "write"}, {"path", "/bad.txt"}, {"xattr_prefix", "user.e2b."}, {"xattrs", bad}}, "x");
    EXPECT_EQ(ErrorCode(r.json), "invalid_argument") << bad.dump();
  }
  EXPECT_EQ(ErrorCode(call({{"op", "stat"}, {"path", "/d"}, {"xattr_prefix", "trusted."}}).json), "invalid_argument");
  EXPECT_EQ(ErrorCode(call({{"op", "list"}, {"path", "/d"}, {"xattr_prefix", 7}}).json), "invalid_argument");
  EXPECT_NE(::access((root_ + "/bad.txt").c_str(), F_OK), 0);

  // A symlink's entry says where it leads, resolved inside the root, and to what.
  ASSERT_EQ(::symlink("m.txt", (root_ + "/d/link").c_str()), 0);
  ASSERT_EQ(::symlink("/d", (root_ + "/dirlink").c_str()), 0);
  ASSERT_EQ(::symlink("/nowhere", (root_ + "/dangling").c_str()), 0);
  auto l = call({{"op", "stat"}, {"path", "/d/link"}}).json["entry"];
  EXPECT_EQ(l["type"], "symlink") << l.dump();
  EXPECT_EQ(l["link_target"], "m.txt");
  EXPECT_EQ(l["target_path"], "/d/m.txt");
  EXPECT_EQ(l["target_type"], "file");
  l = call({{"op", "stat"}, {"path", "/dirlink"}}).json["entry"];
  EXPECT_EQ(l["target_path"], "/d") << l.dump();
  EXPECT_EQ(l["target_type"], "dir");
  l = call({{"op", "stat"}, {"path", "/dangling"}}).json["entry"];
  EXPECT_FALSE(l.contains("target_path")) << l.dump();
}

TEST_F(AgentTest, FileOpsRoundTrip) {
  StartAgent();
  auto c = Connect();
  ASSERT_TRUE(c);
  auto call = [&](Json req, std::string_view body = {}) { return Call(*c, req, body); };

  auto w = call({{"op", "write"}, {"path", "/a/b/c.txt"}, {"create_parents", true}, {"mode", 0600}},
                "hello world");
  ASSERT_EQ(w.json["ok"], true) << w.json.dump();
  EXPECT_EQ(w.json["size"], 11);
  EXPECT_EQ(ReadText(root_ + "/a/b/c.txt"), "hello world");
  struct stat st;
  ASSERT_EQ(::stat((root_ + "/a/b/c.txt").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  auto rd = call({{"op", "read"}, {"path", "/a/b/c.txt"}, {"offset", 6}, {"length", 3}});
  EXPECT_EQ(rd.body, "wor");
  EXPECT_EQ(rd.json["size"], 11);
  EXPECT_EQ(rd.json["eof"], false);
  rd = call({{"op", "read"}, {"path", "/a/b/c.txt"}, {"offset", 6}});
  EXPECT_EQ(rd.body, "world");
  EXPECT_EQ(rd.json["eof"], true);

  // Overwrite in place, then truncate.
  EXPECT_EQ(call({{"op", "write"}, {"path", "/a/b/c.txt"}, {"offset", 6}}, "WORLD!").json["size"],
            12);
  EXPECT_EQ(ReadText(root_ + "/a/b/c.txt"), "hello WORLD!");
  EXPECT_EQ(call({{"op", "write"}, {"path", "/a/b/c.txt"}, {"truncate", true}}, "x").json["size"],
            1);
  EXPECT_EQ(ReadText(root_ + "/a/b/c.txt"), "x");

  // A file larger than one chunk, written and read in pieces.
  std::string big(3 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7 + i / 4096);
  ASSERT_EQ(call({{"op", "write"}, {"path", "/big"}}, std::string_view(big).substr(0, 2 << 20))
                .json["ok"],
            true);
  ASSERT_EQ(call({{"op", "write"}, {"path", "/big"}, {"offset", 2 << 20}},
                 std::string_view(big).substr(2 << 20))
                .json["ok"],
            true);
  rd = call({{"op", "read"}, {"path", "/big"}, {"length", 100 << 20}});  // clamped to 2 MiB
  EXPECT_EQ(rd.body.size(), kMaxFileChunk);
  EXPECT_EQ(rd.json["eof"], false);
  auto rd2 = call({{"op", "read"}, {"path", "/big"}, {"offset", rd.body.size()}});
  EXPECT_EQ(rd2.json["eof"], true);
  EXPECT_TRUE(rd.body + rd2.body == big);

  auto s = call({{"op", "stat"}, {"path", "/a/b/c.txt"}});
  ASSERT_EQ(s.json["ok"], true) << s.json.dump();
  EXPECT_EQ(s.json["entry"]["type"], "file");
  EXPECT_EQ(s.json["entry"]["size"], 1);
  EXPECT_EQ(s.json["entry"]["mode"], 0600);
  EXPECT_EQ(s.json["entry"]["path"], "/a/b/c.txt");
  EXPECT_EQ(s.json["entry"]["name"], "c.txt");
  EXPECT_GT(s.json["entry"]["mtime_ms"].get<int64_t>(), 0);
  EXPECT_EQ(call({{"op", "stat"}, {"path", "/"}}).json["entry"]["type"], "dir");

  // mkdir: -p is idempotent, plain mkdir of an existing dir is a conflict.
  EXPECT_EQ(call({{"op", "mkdir"}, {"path", "/d/e/f"}, {"parents", true}}).json["ok"], true);
  EXPECT_EQ(call({{"op", "mkdir"}, {"path", "/d/e/f"}, {"parents", true}}).json["ok"], true);
  EXPECT_EQ(ErrorCode(call({{"op", "mkdir"}, {"path", "/d/e"}}).json), "conflict");
  EXPECT_EQ(ErrorCode(call({{"op", "mkdir"}, {"path", "/x/y"}}).json), "not_found");
  EXPECT_EQ(call({{"op", "mkdir"}, {"path", "/d/g"}, {"mode", 0700}}).json["ok"], true);
  ASSERT_EQ(::stat((root_ + "/d/g").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(::symlink("a/b", (root_ + "/lnk").c_str()), 0);

  auto names = [](const Json& entries) {
    std::vector<std::string> v;
    for (const auto& e : entries) v.push_back(e["path"].get<std::string>());
    return v;
  };
  auto l = call({{"op", "list"}, {"path", "/"}});
  ASSERT_EQ(l.json["ok"], true) << l.json.dump();
  EXPECT_EQ(names(l.json["entries"]), (std::vector<std::string>{"/a", "/big", "/d", "/lnk"}));
  EXPECT_EQ(l.json["entries"][3]["type"], "symlink");
  EXPECT_EQ(l.json["entries"][3]["link_target"], "a/b");
  l = call({{"op", "list"}, {"path", "/d"}, {"depth", 2}});
  EXPECT_EQ(names(l.json["entries"]), (std::vector<std::string>{"/d/e", "/d/e/f", "/d/g"}));
  l = call({{"op", "list"}, {"path", "/"}, {"depth", 16}});
  EXPECT_EQ(l.json["entries"].size(), 9u) << l.json.dump();  // the symlink is not followed
  EXPECT_EQ(ErrorCode(call({{"op", "list"}, {"path", "/"}, {"depth", 17}}).json),
            "invalid_argument");
  EXPECT_EQ(ErrorCode(call({{"op", "list"}, {"path", "/big"}}).json), "invalid_argument");

  // rename, remove.
  EXPECT_EQ(call({{"op", "rename"}, {"from", "/a/b/c.txt"}, {"to", "/d/moved.txt"}}).json["ok"],
            true);
  EXPECT_EQ(ReadText(root_ + "/d/moved.txt"), "x");
  EXPECT_EQ(ErrorCode(call({{"op", "stat"}, {"path", "/a/b/c.txt"}}).json), "not_found");
  EXPECT_EQ(ErrorCode(call({{"op", "remove"}, {"path", "/d"}}).json), "conflict");  // not empty
  EXPECT_EQ(call({{"op", "remove"}, {"path", "/lnk"}}).json["ok"], true);           // the link only
  EXPECT_TRUE(sys::Exists(root_ + "/a/b"));
  EXPECT_EQ(call({{"op", "remove"}, {"path", "/d"}, {"recursive", true}}).json["ok"], true);
  EXPECT_FALSE(sys::Exists(root_ + "/d"));
  EXPECT_EQ(call({{"op", "remove"}, {"path", "/big"}}).json["ok"], true);
  EXPECT_EQ(ErrorCode(call({{"op", "remove"}, {"path", "/big"}}).json), "not_found");
  EXPECT_EQ(ErrorCode(call({{"op", "remove"}, {"path", "/"}, {"recursive", true}}).json),
            "invalid_argument");
  EXPECT_EQ(ErrorCode(call({{"op", "remove"}, {"path", "/a/.."}, {"recursive", true}}).json),
            "invalid_argument");
  EXPECT_TRUE(sys::Exists(root_ + "/a"));
  EXPECT_EQ(ErrorCode(call({{"op", "read"}, {"path", "relative"}}).json), "invalid_argument");
  EXPECT_EQ(ErrorCode(call({{"op", "read"}, {"path", "/a"}}).json), "invalid_argument");
  EXPECT_EQ(ErrorCode(call({{"op", "read"}, {"path", 5}}).json), "invalid_argument");
  EXPECT_EQ(ErrorCode(call({{"op", "write"}, {"path", "/f"}, {"offset", -1}}).json),
            "invalid_argument");

  // A name that is not UTF-8 is listed (replaced characters), not a crash.
  ASSERT_TRUE(sys::WriteFileAtomic(root_ + "/a/bad\xff\xfe", "x"));
  l = call({{"op", "list"}, {"path", "/a"}});
  ASSERT_EQ(l.json["ok"], true) << l.json.dump();
  EXPECT_EQ(l.json["entries"].size(), 2u);

  // A FIFO planted in the sandbox must not hang the agent.
  ASSERT_EQ(::mkfifo((root_ + "/fifo").c_str(), 0644), 0);
  EXPECT_EQ(ErrorCode(call({{"op", "read"}, {"path", "/fifo"}}).json), "invalid_argument");
  EXPECT_NE(ErrorCode(call({{"op", "write"}, {"path", "/fifo"}}, "x").json), "ok");
  EXPECT_EQ(call({{"op", "stat"}, {"path", "/fifo"}}).json["entry"]["type"], "other");
}

TEST_F(AgentTest, PathsCannotEscapeTheRoot) {
  StartAgent();
  auto c = Connect();
  ASSERT_TRUE(c);
  ASSERT_TRUE(sys::MkdirAll(root_ + "/etc"));
  ASSERT_TRUE(sys::WriteFileAtomic(root_ + "/etc/passwd", "fake-passwd\n"));
  ASSERT_TRUE(sys::MkdirAll(root_ + "/sub"));
  ASSERT_EQ(::symlink("/etc/passwd", (root_ + "/abs-link").c_str()), 0);
  ASSERT_EQ(::symlink("../../../../../../../etc/passwd", (root_ + "/sub/rel-link").c_str()), 0);
  ASSERT_EQ(::symlink("/", (root_ + "/rootlink").c_str()), 0);
  ASSERT_EQ(::symlink(tmp_.path().c_str(), (root_ + "/hostdir").c_str()), 0);

  for (std::string p : {"/../../etc/passwd", "/abs-link", "/sub/rel-link", "/rootlink/etc/passwd",
                        "/sub/../../../etc/passwd", "/rootlink/../etc/passwd"}) {
    auto r = Call(*c, {{"op", "read"}, {"path", p}});
    EXPECT_EQ(r.body, "fake-passwd\n") << p << " " << r.json.dump();
  }
  // An absolute host path behind a symlink resolves inside the root, where it is missing.
  auto r = Call(*c, {{"op", "list"}, {"path", "/hostdir"}});
  EXPECT_EQ(ErrorCode(r.json), "not_found") << r.json.dump();
  // Writes through links stay inside too: once the same path exists inside the root,
  // both land there and nothing appears on the host.
  std::string outside = tmp_.path() + "/escaped";
  ASSERT_EQ(::symlink(outside.c_str(), (root_ + "/wlink").c_str()), 0);
  r = Call(*c, {{"op", "write"}, {"path", "/wlink"}}, "x");
  EXPECT_EQ(ErrorCode(r.json), "not_found") << r.json.dump();
  EXPECT_FALSE(sys::Exists(outside));
  ASSERT_EQ(Call(*c, {{"op", "mkdir"}, {"path", tmp_.path()}, {"parents", true}}).json["ok"], true);
  r = Call(*c, {{"op", "write"}, {"path", "/hostdir/escaped"}}, "x");
  EXPECT_EQ(r.json["ok"], true) << r.json.dump();
  r = Call(*c, {{"op", "write"}, {"path", "/wlink"}, {"offset", 1}}, "y");
  EXPECT_EQ(r.json["ok"], true) << r.json.dump();
  EXPECT_FALSE(sys::Exists(outside));
  EXPECT_EQ(ReadText(root_ + outside), "xy");
  // mkdir -p through a link to "/" creates inside the root.
  EXPECT_EQ(
      Call(*c, {{"op", "mkdir"}, {"path", "/rootlink/made/here"}, {"parents", true}}).json["ok"],
      true);
  EXPECT_TRUE(sys::Exists(root_ + "/made/here"));
  // stat shows the link itself.
  r = Call(*c, {{"op", "stat"}, {"path", "/abs-link"}});
  EXPECT_EQ(r.json["entry"]["type"], "symlink");
  EXPECT_EQ(r.json["entry"]["link_target"], "/etc/passwd");
}

TEST_F(AgentTest, MalformedRequestsGetErrorsAndTheAgentStaysUsable) {
  StartAgent();
  auto c = Connect();
  ASSERT_TRUE(c);
  auto raw = [&](std::string payload) {
    uint32_t id = next_request_++;
    c->Send(FrameType::kRequest, id, payload);
    auto f = c->Next(
        [id](const Frame& f) { return f.type == FrameType::kResponse && f.stream == id; }, 5000);
    if (!f) return std::string("none");
    auto m = DecodeMessage(f->payload);
    return m ? ErrorCode(m->json) : std::string("undecodable");
  };
  EXPECT_EQ(raw(""), "invalid_argument");
  EXPECT_EQ(raw("xx"), "invalid_argument");
  EXPECT_EQ(raw(std::string("\x05\x00\x00\x00{\"op\"", 9)), "invalid_argument");
  EXPECT_EQ(raw(EncodeMessage(Json::array())), "invalid_argument");
  EXPECT_EQ(raw(EncodeMessage({{"op", 5}})), "invalid_argument");
  EXPECT_EQ(raw(EncodeMessage({{"op", "launch-missiles"}})), "invalid_argument");
  for (Json bad : {Json{{"op", "exec"}, {"stream", 1}, {"argv", 5}},
                   Json{{"op", "exec"}, {"stream", 1}, {"argv", Json::array()}},
                   Json{{"op", "exec"}, {"stream", 1}, {"argv", {"true"}}, {"shell", "true"}},
                   Json{{"op", "exec"}, {"stream", 0}, {"argv", {"true"}}},
                   Json{{"op", "exec"}, {"argv", {"true"}}},
                   Json{{"op", "exec"}, {"stream", 1}, {"argv", {"true"}}, {"env", {{"A", 1}}}},
                   Json{{"op", "exec"}, {"stream", 1}, {"argv", {"true"}}, {"env", {{"A=B", "1"}}}},
                   Json{{"op", "exec"}, {"stream", 1}, {"argv", {"true"}}, {"timeout_ms", -5}},
                   Json{{"op", "exec"}, {"stream", 1}, {"argv", {"true"}}, {"stdin", "yes"}},
                   Json{{"op", "exec"}, {"stream", 1}, {"argv", {std::string("a\0b", 3)}}},
                   Json{{"op", "exec"}, {"stream", 1}, {"argv", {"true"}}, {"user", -1}},
                   Json{{"op", "stat"}}, Json{{"op", "list"}, {"path", "/"}, {"depth", "deep"}}}) {
    EXPECT_EQ(raw(EncodeMessage(bad)), "invalid_argument") << bad.dump();
  }
  // Random payloads: each gets an answer, none takes the agent down.
  uint64_t seed = 88172645463325252ull;
  for (int i = 0; i < 200; ++i) {
    std::string junk(i % 37, '\0');
    for (char& ch : junk) {
      seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
      ch = static_cast<char>(seed);
    }
    if (i % 2) junk = EncodeMessage({{"op", i % 4 == 1 ? "exec" : "write"}, {"path", junk}}, junk);
    EXPECT_NE(raw(junk), "none") << i;
  }
  // Frames the agent does not expect or cannot decode are ignored.
  c->Send(FrameType::kAck, 1, "short");
  c->Send(FrameType::kAck, 12345, EncodeAck(1, 10));
  c->Send(FrameType::kStdin, 12345, "x");
  c->Send(FrameType::kHello, 0, "{}");
  c->Send(FrameType::kStdout, 1, "junk");
  EXPECT_EQ(Call(*c, {{"op", "ping"}}).json["ok"], true);
  EXPECT_EQ(Run(*c, 1, {{"argv", {"echo", "still here"}}}).out, "still here\n");
}

TEST_F(AgentTest, ProtocolErrorClosesOnlyThatConnection) {
  StartAgent();
  auto c = Connect();
  ASSERT_TRUE(c);
  ASSERT_EQ(Exec(*c, 1, {{"shell", "sleep 0.5; echo survived"}})["ok"], true);
  // A 5 MiB frame header: over the 4 MiB limit.
  std::string header = EncodeFrame(FrameType::kRequest, 1, "");
  header[0] = 0;
  header[1] = 0;
  header[2] = 0x50;
  header[3] = 0;
  c->SendRaw(header);
  EXPECT_TRUE(c->WaitClosed(5000));

  c = Connect();
  ASSERT_TRUE(c);
  std::string unknown = EncodeFrame(FrameType::kAck, 1, "");
  unknown[4] = 99;
  c->SendRaw(unknown);
  EXPECT_TRUE(c->WaitClosed(5000));

  c = Connect();
  ASSERT_TRUE(c);
  EXPECT_EQ(Call(*c, {{"op", "ping"}}).json["ok"], true);
  auto o = Collect(*c, 1);
  EXPECT_EQ(o.out, "survived\n");
  EXPECT_EQ(o.exit["exit_code"], 0);
}

TEST_F(AgentTest, RunsCommandsAsTheRequestedUser) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to switch users";
  StartAgent();
  auto c = Connect();
  ASSERT_TRUE(c);
  auto o = Run(*c, 1, {{"shell", "id -u; id -g; echo $HOME $USER; pwd"}, {"user", "nobody"}});
  EXPECT_EQ(o.out, "65534\n65534\n/nonexistent nobody\n/\n") << o.err;
  o = Run(*c, 2, {{"shell", "id -u; id -g; id -G"}, {"user", 12345}});
  EXPECT_EQ(o.out, "12345\n0\n0\n") << o.err;
  // Root's supplementary groups come from /etc/group, HOME from /etc/passwd.
  o = Run(*c, 3,
          {{"shell", "echo $HOME; pwd"}, {"user", "root"}, {"env", {{"HOME", "/override"}}}});
  EXPECT_EQ(o.out, "/override\n/root\n");
}

TEST_F(AgentTest, SigtermStopsCommandsThenTheAgent) {
  StartAgent();
  auto c = Connect();
  ASSERT_TRUE(c);
  Json r = Exec(*c, 1, {{"argv", {"sleep", "100"}}});
  ASSERT_EQ(r["ok"], true);
  pid_t sleeper = JsonIntOr(r, "pid", 0);
  ASSERT_GT(sleeper, 0);
  int64_t t0 = NowMs();
  ::kill(agent_.pid(), SIGTERM);
  auto st = agent_.Wait();
  ASSERT_TRUE(st);
  agent_.Release();
  EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << *st;
  EXPECT_LT(NowMs() - t0, 3000);
  EXPECT_EQ(ProcState(sleeper), 0);
}

namespace {
// A TCP listener on 127.0.0.1 (port chosen by the kernel); -1 on failure.
int ListenLoopback(int* port) {
  int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (s < 0 || ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) < 0 || ::listen(s, 8) < 0 ||
      ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) < 0)
    return -1;
  *port = ntohs(a.sin_port);
  return s;
}

int ConnectLoopbackPort(int port) {
  int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct timeval tv = {10, 0};  // a broken relay fails the test rather than hanging it
  ::setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) < 0) {
    ::close(s);
    return -1;
  }
  return s;
}

std::string ReadToEnd(int fd) {
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) return out;
    out.append(buf, static_cast<size_t>(n));
  }
}
}  // namespace

// op forward (agent/forward.h): a relay on the given address joins connections to a
// service on loopback; one relay per port, half-closes passed on, large bodies both ways,
// a clear error when nothing listens, and no relay left once the agent stops.
TEST_F(AgentTest, ForwardRelaysToALoopbackService) {
  int svc_port = 0;
  sys::UniqueFd svc(ListenLoopback(&svc_port));
  ASSERT_GE(svc.get(), 0);
  // The service: for each connection (the agent's probe for a listener is one too),
  // everything read up to the client's half-close, back with a prefix.
  std::thread server([&] {
    for (;;) {
      int c = ::accept(svc.get(), nullptr, nullptr);
      if (c < 0) return;
      std::string got = ReadToEnd(c);
      (void)sys::WriteAll(c, "echo:" + got);
      ::close(c);
    }
  });
  StartAgent();
  auto c = Connect();
  ASSERT_TRUE(c);
  auto r = Call(*c, {{"op", "forward"}, {"port", svc_port}, {"address", "127.0.0.1"}});
  ASSERT_EQ(ErrorCode(r.json), "ok") << r.json.dump();
  const int relay = static_cast<int>(JsonIntOr(r.json, "port", 0));
  ASSERT_GT(relay, 0);
  EXPECT_NE(relay, svc_port);
  const std::string big(3 << 20, 'q');  // larger than any buffer on the way
  for (const std::string& body : {std::string("abc"), big, std::string()}) {
    sys::UniqueFd s(ConnectLoopbackPort(relay));
    ASSERT_GE(s.get(), 0);
    std::thread writer([&] {
      (void)sys::WriteAll(s.get(), body);
      ::shutdown(s.get(), SHUT_WR);
    });
    std::string back = ReadToEnd(s.get());
    writer.join();
    EXPECT_EQ(back.size(), body.size() + 5);
    EXPECT_TRUE(back == "echo:" + body) << back.substr(0, 40);
  }
  // Asked again: the same relay.
  r = Call(*c, {{"op", "forward"}, {"port", svc_port}, {"address", "127.0.0.1"}});
  EXPECT_EQ(JsonIntOr(r.json, "port", 0), relay) << r.json.dump();
  ::shutdown(svc.get(), SHUT_RDWR);  // ends the server's accept
  server.join();
  // Nothing listening, a bad port, a bad address: errors, and the agent goes on.
  svc.Reset();
  r = Call(*c, {{"op", "forward"}, {"port", svc_port}, {"address", "127.0.0.1"}});
  EXPECT_EQ(ErrorCode(r.json), "not_found") << r.json.dump();
  r = Call(*c, {{"op", "forward"}, {"port", 70000}, {"address", "127.0.0.1"}});
  EXPECT_EQ(ErrorCode(r.json), "invalid_argument") << r.json.dump();
  int other_port = 0;
  sys::UniqueFd other(ListenLoopback(&other_port));
  ASSERT_GE(other.get(), 0);
  r = Call(*c, {{"op", "forward"}, {"port", other_port}, {"address", "not-an-address"}});
  EXPECT_EQ(ErrorCode(r.json), "invalid_argument") << r.json.dump();
  EXPECT_EQ(Call(*c, {{"op", "ping"}}).json["ok"], true);
  // The agent stops: so does its relay.
  ::kill(agent_.pid(), SIGTERM);
  auto st = agent_.Wait();
  ASSERT_TRUE(st);
  agent_.Release();
  EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << *st;
  int left = -1;
  for (int i = 0; i < 50; ++i) {
    left = ConnectLoopbackPort(relay);
    if (left < 0) break;
    ::close(left);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_LT(left, 0) << "the relay outlived the agent";
}

// --fd mode (a serial port in microVMs): the agent speaks on an inherited stream; when
// the peer hangs up it keeps running, idle, waiting for the port to come back.
TEST_F(AgentTest, ServesAnInheritedFd) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  sys::UniqueFd ours(sv[0]), theirs(sv[1]);
  sys::SpawnOptions o;
  o.argv = {AgentPath(), "--fd", "0", "--root", root_};
  o.stdin_fd = theirs.get();
  o.stderr_fd = 2;
  auto child = sys::Spawn(o);
  ASSERT_TRUE(child) << child.error().message;
  agent_ = std::move(*child);
  theirs.Reset();

  Client c(std::move(ours));
  auto h = c.NextOfType(FrameType::kHello);
  ASSERT_TRUE(h);
  EXPECT_EQ(ParseJson(h->payload).value_or(Json())["pid"], agent_.pid());
  EXPECT_EQ(Call(c, {{"op", "ping"}}).json["ok"], true);
  // The command's stdin is /dev/null, not the agent's fd 0.
  auto out = Run(c, 1, {{"shell", "cat; echo done"}});
  EXPECT_EQ(out.out, "done\n");

  // Hang up: the agent stays, without spinning on the hung-up fd.
  c = Client(sys::UniqueFd());
  auto cpu_ticks = [&] {
    std::string stat = ReadText("/proc/" + std::to_string(agent_.pid()) + "/stat");
    std::istringstream in(stat.substr(stat.rfind(')') + 2));
    std::string field;
    long ticks = 0;
    for (int i = 3; i <= 15 && in >> field; ++i)
      if (i == 14 || i == 15) ticks += std::stol(field);  // utime + stime
    return ticks;
  };
  std::this_thread::sleep_for(100ms);
  long before = cpu_ticks();
  std::this_thread::sleep_for(1000ms);
  EXPECT_NE(ProcState(agent_.pid()), 0);
  EXPECT_NE(ProcState(agent_.pid()), 'Z');
  EXPECT_LE(cpu_ticks() - before, 10) << "the agent is busy while disconnected";
}

// As PID 1 of fresh pid and network namespaces: lo comes up, orphans are reaped, SIGTERM
// is forwarded and the agent exits after its commands.
TEST_F(AgentTest, AsInitOfItsOwnNamespaces) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root for namespaces";
  if (!sys::Exists("/usr/bin/unshare")) GTEST_SKIP() << "no unshare(1)";
  StartAgent({}, {"/usr/bin/unshare", "--pid", "--net", "--mount", "--mount-proc", "--fork",
                  "--kill-child"});
  Json hello;
  auto c = Connect(&hello);
  ASSERT_TRUE(c);
  EXPECT_EQ(hello["pid"], 1);
  auto o =
      Run(*c, 1,
          {{"shell", "ip -o link show lo"}, {"env", {{"PATH", "/usr/sbin:/usr/bin:/sbin:/bin"}}}});
  EXPECT_NE(o.out.find(",UP"), std::string::npos) << o.out << o.err;

  o = Run(*c, 2, {{"shell", "sleep 0.2 >/dev/null 2>&1 & echo $!"}});
  std::string orphan = o.out.substr(0, o.out.find('\n'));
  std::this_thread::sleep_for(700ms);
  o = Run(*c, 3, {{"shell", "cat /proc/" + orphan + "/stat 2>/dev/null || echo gone"}});
  EXPECT_EQ(o.out, "gone\n") << "orphan " << orphan;

  // A leftover holding the pipes is found through the namespace's /proc and killed.
  int64_t t0 = NowMs();
  o = Run(*c, 6, {{"shell", "sleep 1000 & echo $!"}});
  EXPECT_LT(NowMs() - t0, 1000);
  std::string holder = o.out.substr(0, o.out.find('\n'));
  o = Run(*c, 7,
          {{"shell", "for i in $(seq 100); do [ -e /proc/" + holder +
                         " ] || break; sleep 0.02; done; cat /proc/" + holder +
                         "/stat 2>/dev/null || echo gone"}});
  EXPECT_EQ(o.out, "gone\n") << "pipe holder " << holder;

  // A process of the sandbox cannot take the host's place on the socket.
  if (sys::Exists("/usr/bin/perl")) {
    o = Run(*c, 5,
            {{"argv",
              {"/usr/bin/perl", "-MSocket", "-e",
               "socket(S, PF_UNIX, SOCK_STREAM, 0) or die; "
               "connect(S, sockaddr_un($ARGV[0])) or die qq(connect: $!); "
               "my $n = sysread(S, my $b, 100); print defined $n ? $n : -1",
               sock_}}});
    EXPECT_EQ(o.out, "0") << o.err;
    EXPECT_EQ(Call(*c, {{"op", "ping"}}).json["ok"], true) << "the host connection was replaced";
  }

  Json r = Exec(*c, 4, {{"shell", "trap 'exit 0' TERM; while :; do sleep 0.05; done"}});
  ASSERT_EQ(r["ok"], true);
  std::string children = ReadText("/proc/" + std::to_string(agent_.pid()) + "/task/" +
                                  std::to_string(agent_.pid()) + "/children");
  pid_t init = std::atoi(children.c_str());
  ASSERT_GT(init, 0) << children;
  t0 = NowMs();
  ASSERT_EQ(::kill(init, SIGTERM), 0);
  auto st = agent_.Wait();  // unshare exits with its child
  ASSERT_TRUE(st);
  agent_.Release();
  EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << *st;
  EXPECT_LT(NowMs() - t0, 3000);
}

}  // namespace
}  // namespace space::agent
