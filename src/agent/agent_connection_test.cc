// The agent's connection: durable output and its window, retransmission over new
// connections (also mid-stream), throughput, malformed and broken input, an inherited fd
// (fixture: agent_test_fixture.h).
#include "agent/agent_test_fixture.h"

namespace space::agent::testing {
namespace {

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

// Large output goes out as pages spliced from the agent's blocks (blocks are reused once
// acknowledged), or, when it piles up in the command's pipe, as the pipe's own pages teed
// into keep pipes and spliced from the command's pipe. Connections are dropped while frames
// are in flight (once with ACKs flowing, once with the window full and nothing ACKed):
// every retransmitted byte must equal what was received before, and the stream ends whole.
}  // namespace (a member of the fixture is defined here)

void AgentTest::DropConnectionsMidStream(const std::string& shell, size_t total) {
  const size_t kTotal = total;
  auto c = Connect();
  ASSERT_TRUE(c);
  Json r = Exec(*c, 1, {{"shell", shell}});
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
      // ACKs lag a little, so a retransmission starts inside a frame, not at its start.
      if (ack && o.out.size() > 1000) c->Ack(1, 1, o.out.size() - 1000);
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

namespace {

TEST_F(AgentTest, ConnectionsDroppedMidStreamLoseNothingAndRetransmitTheSameBytes) {
  // seq's output trickles into the pipe: the agent reads it into blocks.
  constexpr size_t kTotal = 48 << 20;
  StartAgent();
  DropConnectionsMidStream("seq 1 10000000 | head -c " + std::to_string(kTotal), kTotal);
}

TEST_F(AgentTest, TeedOutputDroppedMidStreamLosesNothing) {
  // cat writes 128 KiB at a time, faster than the host reads: its pipe fills (to 1 MiB
  // while the window is full) and the agent tees and splices it. Both drops happen with
  // teed bytes in keep pipes, so the retransmissions are copies out of them.
  constexpr size_t kTotal = 48 << 20;
  const std::string file = root_ + "/seq";
  StartAgent();
  DropConnectionsMidStream("seq 1 10000000 | head -c " + std::to_string(kTotal) + " > " + file +
                               " && exec cat " + file,
                           kTotal);
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

}  // namespace
}  // namespace space::agent::testing
