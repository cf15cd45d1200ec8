// The sandbox, command and file API of a real spaced, driven over HTTP on loopback.
#include <set>

#include "tests/integration/harness.h"

namespace space::testing {
namespace {

using namespace std::chrono_literals;

class SandboxApiTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string why;
    if (!CanRunSandboxes(&why)) return;
    daemon_ = new Daemon({"--max-file-bytes", "8388608"});
    if (!daemon_->Start()) return;
    sandbox_ = CreateSandbox(daemon_->client(), {{"metadata", {{"suite", "api"}}}});
  }
  static void TearDownTestSuite() {
    delete daemon_;
    daemon_ = nullptr;
  }
  void SetUp() override {
    SPACE_REQUIRE_SANDBOXES();
    ASSERT_NE(daemon_, nullptr);
    ASSERT_FALSE(sandbox_.empty()) << daemon_->Log();
  }
  client::Client& c() { return daemon_->client(); }
  client::Client::RunOutput Run(const Json& body) {
    auto r = c().Run(sandbox_, body);
    EXPECT_TRUE(r) << (r ? "" : r.error().message);
    return r ? *r : client::Client::RunOutput{};
  }

  static Daemon* daemon_;
  static std::string sandbox_;
};
Daemon* SandboxApiTest::daemon_ = nullptr;
std::string SandboxApiTest::sandbox_;

TEST_F(SandboxApiTest, HealthNeedsNoKeyButEverythingElseDoes) {
  client::Client anon(daemon_->url(), "");
  EXPECT_TRUE(anon.Health());
  auto r = anon.ListSandboxes();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::kUnauthenticated);
  client::Client wrong(daemon_->url(), std::string(daemon_->api_key().size(), 'x'));
  EXPECT_EQ(wrong.ListSandboxes().error().code, Errc::kUnauthenticated);
}

TEST_F(SandboxApiTest, SandboxIsListedAndFilteredByLabel) {
  auto sb = c().GetSandbox(sandbox_);
  ASSERT_TRUE(sb) << sb.error().message;
  EXPECT_EQ((*sb)["state"], "running");
  EXPECT_EQ((*sb)["template"], "base:latest");
  EXPECT_TRUE(StartsWith((*sb)["template_digest"].get<std::string>(), "sha256:"));
  auto list = c().ListSandboxes({{"suite", "api"}});
  ASSERT_TRUE(list);
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0]["id"], sandbox_);
  auto other = c().ListSandboxes({{"suite", "other"}});
  ASSERT_TRUE(other) << other.error().message;
  EXPECT_TRUE(other->empty()) << other->dump();
  auto running = c().ListSandboxes({}, "running");
  ASSERT_TRUE(running) << running.error().message;
  EXPECT_EQ(running->size(), 1u);
}

TEST_F(SandboxApiTest, BulkDeleteByLabelTakesOnlyWhatMatches) {
  std::vector<std::string> xs;
  for (int i = 0; i < 2; ++i) xs.push_back(CreateSandbox(c(), {{"metadata", {{"batch", "x"}}}}));
  auto y = c().CreateSandbox({{"metadata", {{"batch", "y"}}}}, 60s);
  ASSERT_TRUE(y) << y.error().message;
  const std::string y_id = (*y)["sandbox"]["id"], y_token = (*y)["token"];
  ASSERT_FALSE(xs[0].empty());
  ASSERT_FALSE(xs[1].empty());

  // Never everything by accident, and the filter is checked.
  EXPECT_EQ(ApiRequest(c(), "DELETE", "/v1/sandboxes").status, 400);
  EXPECT_EQ(ApiRequest(c(), "DELETE", "/v1/sandboxes?state=running").status, 400);
  EXPECT_EQ(ApiRequest(c(), "DELETE", "/v1/sandboxes?label=nokey").status, 400);
  EXPECT_EQ(ApiRequest(c(), "DELETE", "/v1/sandboxes?label=batch=x&wait=soon").status, 400);
  // A sandbox's own token cannot delete others (nor itself this way): operators only.
  client::Client scoped(daemon_->url(), y_token);
  EXPECT_EQ(ApiRequest(scoped, "DELETE", "/v1/sandboxes?label=batch=y").status, 403);

  auto r = ApiRequest(c(), "DELETE", "/v1/sandboxes?label=batch=x&wait=60s");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json["count"], 2) << r.body;
  EXPECT_TRUE(r.json["errors"].empty()) << r.body;
  std::set<std::string> targets;
  for (const auto& op : r.json["operations"]) {
    EXPECT_EQ(op["state"], "succeeded") << op.dump();
    targets.insert(op["target"].get<std::string>());
  }
  EXPECT_EQ(targets, std::set<std::string>(xs.begin(), xs.end()));
  for (const auto& id : xs) EXPECT_EQ(c().GetSandbox(id).error().code, Errc::kNotFound) << id;
  auto left = c().ListSandboxes({{"batch", "y"}});
  ASSERT_TRUE(left) << left.error().message;
  ASSERT_EQ(left->size(), 1u);
  EXPECT_EQ((*left)[0]["id"], y_id);
  auto suite = c().GetSandbox(sandbox_);
  ASSERT_TRUE(suite) << suite.error().message;
  EXPECT_EQ((*suite)["state"], "running");

  // Nothing matching: an empty answer, not an error.
  auto none = ApiRequest(c(), "DELETE", "/v1/sandboxes?label=batch=x");
  EXPECT_EQ(none.status, 202) << none.body;
  EXPECT_EQ(none.json["count"], 0) << none.body;
  auto rest = ApiRequest(c(), "DELETE", "/v1/sandboxes?label=batch=y&wait=60s");
  EXPECT_EQ(rest.status, 200) << rest.body;
  EXPECT_EQ(rest.json["count"], 1) << rest.body;
}

TEST_F(SandboxApiTest, TemplatesResolveByNameAndByDigest) {
  auto sb = c().GetSandbox(sandbox_);
  ASSERT_TRUE(sb);
  std::string digest = (*sb)["template_digest"];
  auto pinned = c().CreateSandboxAndWait({{"template", digest}}, 60s);
  ASSERT_TRUE(pinned) << pinned.error().message;
  EXPECT_EQ((*pinned)["template"], "base:latest");
  EXPECT_EQ((*pinned)["template_digest"], digest);
  ASSERT_TRUE(c().DeleteSandboxAndWait((*pinned)["id"].get<std::string>(), 60s));
  auto unknown = c().CreateSandbox({{"template", "sha256:" + std::string(64, 'f')}});
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code, Errc::kNotFound);
  auto bad = c().CreateSandbox({{"template", "sha256:xyz"}});
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, Errc::kInvalidArgument);
}

TEST_F(SandboxApiTest, EchoWithExitCodeAndSeparateStreams) {
  auto r = Run({{"cmd", "echo out; echo err >&2; exit 7"}});
  EXPECT_EQ(r.out, "out\n");
  EXPECT_EQ(r.err, "err\n");
  EXPECT_EQ(r.exit_code, 7);
  EXPECT_EQ(r.command["state"], "exited");
}

TEST_F(SandboxApiTest, ArgvEnvCwdAndUser) {
  auto r = Run({{"argv", {"/bin/sh", "-c", "echo $FOO; pwd; id -u"}},
                {"env", {{"FOO", "bar baz"}}},
                {"cwd", "/tmp"},
                {"user", "user"}});
  EXPECT_EQ(r.out, "bar baz\n/tmp\n1000\n");
  EXPECT_EQ(r.exit_code, 0);
}

TEST_F(SandboxApiTest, SandboxIsIsolated) {
  // PID 1 is the agent, only loopback exists, and root is not the host's root.
  auto r = Run({{"cmd", "cat /proc/1/cmdline | tr '\\0' ' '; echo; cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '; hostname"}});
  EXPECT_NE(r.out.find("space-agent"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nlo\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("eth0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("sandbox"), std::string::npos) << r.out;
}

TEST_F(SandboxApiTest, MissingProgramIsNotFound) {
  auto r = c().StartCommand(sandbox_, {{"argv", {"/no/such/program"}}});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::kNotFound) << r.error().message;
}

TEST_F(SandboxApiTest, StdinIsForwardedAndClosed) {
  auto started = c().StartCommand(sandbox_, {{"argv", {"cat"}}, {"stdin", true}});
  ASSERT_TRUE(started) << started.error().message;
  std::string cid = (*started)["id"];
  ASSERT_TRUE(c().SendStdin(sandbox_, cid, "hello "));
  ASSERT_TRUE(c().SendStdin(sandbox_, cid, "world", true));
  auto cmd = c().GetCommand(sandbox_, cid, 20s);
  ASSERT_TRUE(cmd);
  EXPECT_EQ((*cmd)["state"], "exited");
  auto out = c().ReadOutput(sandbox_, cid, "stdout", 0);
  ASSERT_TRUE(out);
  EXPECT_EQ(out->bytes, "hello world");
}

// A pty command: a terminal of the asked size, input typed into it, resizable.
TEST_F(SandboxApiTest, PtyCommandTakesInputAndResizes) {
  auto started = c().StartCommand(sandbox_, {{"argv", {"/bin/sh"}}, {"pty", {{"cols", 90}, {"rows", 20}}}});
  ASSERT_TRUE(started) << started.error().message;
  std::string cid = (*started)["id"];
  EXPECT_EQ((*started)["command"]["pty"], Json({{"cols", 90}, {"rows", 20}}));
  auto wait_for = [&](const std::string& want) {
    for (int i = 0; i < 200; ++i) {
      auto out = c().ReadOutput(sandbox_, cid, "stdout", 0);
      if (out && out->bytes.find(want) != std::string::npos) return true;
      std::this_thread::sleep_for(50ms);
    }
    auto out = c().ReadOutput(sandbox_, cid, "stdout", 0);
    ADD_FAILURE() << "no \"" << want << "\" in " << (out ? out->bytes : out.error().message);
    return false;
  };
  ASSERT_TRUE(c().SendStdin(sandbox_, cid, "stty size; tty\n"));
  EXPECT_TRUE(wait_for("20 90"));
  EXPECT_TRUE(wait_for("/dev/pts/"));
  auto r = c().Call("POST", "/v1/sandboxes/" + sandbox_ + "/commands/" + cid + "/resize",
                    Json{{"cols", 120}, {"rows", 40}});
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_TRUE(c().SendStdin(sandbox_, cid, "stty size\n"));
  EXPECT_TRUE(wait_for("40 120"));
  auto bad = c().Call("POST", "/v1/sandboxes/" + sandbox_ + "/commands/" + cid + "/resize",
                      Json{{"cols", 0}, {"rows", 40}});
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, Errc::kInvalidArgument);
  ASSERT_TRUE(c().SendStdin(sandbox_, cid, "exit 4\n"));
  auto cmd = c().GetCommand(sandbox_, cid, 20s);
  ASSERT_TRUE(cmd);
  EXPECT_EQ((*cmd)["exit_code"], 4) << cmd->dump();
  EXPECT_EQ((*cmd)["stderr_size"], 0);

  // A command without a pty cannot be resized; a bad pty size is refused at the start.
  auto plain = c().StartCommand(sandbox_, {{"argv", {"sleep", "30"}}});
  ASSERT_TRUE(plain);
  std::string pcid = (*plain)["id"];
  auto no_pty = c().Call("POST", "/v1/sandboxes/" + sandbox_ + "/commands/" + pcid + "/resize",
                         Json{{"cols", 80}, {"rows", 24}});
  ASSERT_FALSE(no_pty);
  EXPECT_EQ(no_pty.error().code, Errc::kInvalidArgument);
  ASSERT_TRUE(c().Signal(sandbox_, pcid, "KILL"));
  auto refused = c().StartCommand(sandbox_, {{"argv", {"true"}}, {"pty", {{"cols", 80}}}});
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, Errc::kInvalidArgument);
}

TEST_F(SandboxApiTest, SignalKillsCommand) {
  auto started = c().StartCommand(sandbox_, {{"argv", {"sleep", "1000"}}});
  ASSERT_TRUE(started);
  std::string cid = (*started)["id"];
  ASSERT_TRUE(c().Signal(sandbox_, cid, "TERM"));
  auto cmd = c().GetCommand(sandbox_, cid, 20s);
  ASSERT_TRUE(cmd);
  EXPECT_EQ((*cmd)["state"], "exited");
  EXPECT_EQ((*cmd)["signal"], SIGTERM);
  // Signalling an ended command is a conflict, not a crash.
  auto again = c().Signal(sandbox_, cid, "KILL");
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, Errc::kConflict);
}

TEST_F(SandboxApiTest, TimeoutEndsACommandThatNeverEnds) {
  auto r = Run({{"argv", {"sleep", "1000"}}, {"timeout", 0.3}});
  EXPECT_EQ(r.command["timed_out"], true);
  EXPECT_EQ(r.exit_code, 124);
}

TEST_F(SandboxApiTest, OutputReadableFromAnyOffsetAfterTheEnd) {
  auto r = Run({{"cmd", "seq 1 10000"}});
  ASSERT_EQ(r.exit_code, 0);
  std::string cid = r.command["id"];
  std::string expect;
  for (int i = 1; i <= 10000; ++i) expect += std::to_string(i) + "\n";
  EXPECT_EQ(r.out, expect);
  auto tail = c().ReadOutput(sandbox_, cid, "stdout", expect.size() - 6);
  ASSERT_TRUE(tail);
  EXPECT_EQ(tail->bytes, "10000\n");
  EXPECT_EQ(tail->next_offset, expect.size());
  EXPECT_EQ(tail->state, "exited");
  auto past = c().ReadOutput(sandbox_, cid, "stdout", expect.size() + 100);
  ASSERT_TRUE(past);
  EXPECT_EQ(past->bytes, "");
}

TEST_F(SandboxApiTest, LongPollWaitsForNewOutput) {
  auto started = c().StartCommand(sandbox_, {{"cmd", "sleep 0.3; echo late"}});
  ASSERT_TRUE(started);
  std::string cid = (*started)["id"];
  auto t0 = std::chrono::steady_clock::now();
  auto out = c().ReadOutput(sandbox_, cid, "stdout", 0, 10s);
  ASSERT_TRUE(out);
  EXPECT_EQ(out->bytes, "late\n");
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 250ms);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
}

TEST_F(SandboxApiTest, ServerSentEventsStreamOutputAndExit) {
  auto started = c().StartCommand(sandbox_, {{"cmd", "echo one; sleep 0.1; echo two >&2"}});
  ASSERT_TRUE(started);
  std::string cid = (*started)["id"];
  ASSERT_TRUE(c().GetCommand(sandbox_, cid, 20s));
  auto r = c().Request("GET", "/v1/sandboxes/" + sandbox_ + "/commands/" + cid + "/output?format=sse");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->body.find("event: stdout\n"), std::string::npos) << r->body;
  EXPECT_NE(r->body.find("event: stderr\n"), std::string::npos) << r->body;
  EXPECT_NE(r->body.find("\"data\":\"b25lCg==\""), std::string::npos) << r->body;  // "one\n"
  EXPECT_NE(r->body.find("event: exit\n"), std::string::npos) << r->body;
}

TEST_F(SandboxApiTest, LargeOutputArrivesWhole) {
  // 64 MiB of pseudo-random bytes; the stored log must hash the same as inside.
  auto started = c().StartCommand(
      sandbox_, {{"cmd", "head -c 67108864 /dev/urandom > /tmp/big && md5sum < /tmp/big >&2 && cat /tmp/big"}});
  ASSERT_TRUE(started);
  std::string cid = (*started)["id"];
  client::MuxOffsets off;
  std::string out, err;
  auto fin = c().FollowOutput(sandbox_, cid, off, [&](client::MuxKind k, std::string_view b) {
    if (k == client::MuxKind::kStdout) out.append(b);
    if (k == client::MuxKind::kStderr) err.append(b);
    return true;
  });
  ASSERT_TRUE(fin) << fin.error().message;
  ASSERT_EQ(out.size(), 64u << 20);
  // Compare with md5sum computed on the host from the bytes we received.
  auto tmp = sys::TempDir::Create();
  ASSERT_TRUE(tmp);
  ASSERT_TRUE(sys::WriteFileAtomic(tmp->path() + "/big", out));
  auto md5 = sys::RunChecked({.argv = {"md5sum", tmp->path() + "/big"}});
  ASSERT_TRUE(md5);
  EXPECT_EQ(err.substr(0, 32), md5->out.substr(0, 32));
  (void)c().Remove(sandbox_, "/tmp/big");
}

TEST_F(SandboxApiTest, FilesRoundTrip) {
  std::string data(3 << 20, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 131 + 7);
  ASSERT_TRUE(c().WriteFile(sandbox_, "/work/dir/blob.bin", data));
  auto back = c().ReadFile(sandbox_, "/work/dir/blob.bin");
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_TRUE(*back == data);
  auto st = c().Stat(sandbox_, "/work/dir/blob.bin");
  ASSERT_TRUE(st);
  EXPECT_EQ((*st)["size"], data.size());
  EXPECT_EQ((*st)["type"], "file");
  ASSERT_TRUE(c().Mkdir(sandbox_, "/work/a/b/c"));
  ASSERT_TRUE(c().Rename(sandbox_, "/work/dir/blob.bin", "/work/a/b/c/moved.bin"));
  auto list = c().ListFiles(sandbox_, "/work", 4);
  ASSERT_TRUE(list);
  std::string names;
  for (const auto& e : *list) names += e.value("path", "") + ",";
  EXPECT_NE(names.find("/work/a/b/c/moved.bin"), std::string::npos) << names;
  // The command sees what the file API wrote.
  auto r = Run({{"cmd", "wc -c < /work/a/b/c/moved.bin"}});
  EXPECT_EQ(r.out, std::to_string(data.size()) + "\n");
  ASSERT_TRUE(c().Remove(sandbox_, "/work", true));
  auto gone = c().Stat(sandbox_, "/work");
  ASSERT_FALSE(gone);
  EXPECT_EQ(gone.error().code, Errc::kNotFound);
}

TEST_F(SandboxApiTest, PathEscapesStayInside) {
  // A symlink to an absolute host path resolves inside the sandbox.
  Run({{"cmd", "echo inside > /tmp/marker; ln -sf /etc/space-host-only /tmp/link; ln -sf / /tmp/rootlink"}});
  auto a = c().ReadFile(sandbox_, "/../../../tmp/marker");
  ASSERT_TRUE(a);
  EXPECT_EQ(*a, "inside\n");
  auto host = sys::ReadFile("/etc/hostname");
  auto b = c().ReadFile(sandbox_, "/tmp/rootlink/etc/hostname");
  ASSERT_TRUE(b);
  EXPECT_EQ(*b, "sandbox\n");
  auto missing = c().ReadFile(sandbox_, "/tmp/link");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, Errc::kNotFound);
  // Writing through a symlink that points "outside" lands inside too.
  ASSERT_TRUE(c().WriteFile(sandbox_, "/tmp/rootlink/tmp/escaped", "x"));
  EXPECT_FALSE(sys::Exists("/tmp/escaped"));
  auto rel = c().ReadFile(sandbox_, "relative/path");
  ASSERT_FALSE(rel);
  EXPECT_EQ(rel.error().code, Errc::kInvalidArgument);
}

TEST_F(SandboxApiTest, BadRequestsGetClearErrors) {
  auto check = [&](const char* method, const std::string& path, const std::string& body,
                   int status) {
    auto r = c().Request(method, path, body, "application/json");
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, status) << method << " " << path << ": " << r->body;
    auto j = ParseJson(r->body);
    ASSERT_TRUE(j) << r->body;
    EXPECT_TRUE((*j)["error"]["code"].is_string()) << r->body;
    EXPECT_TRUE((*j)["error"]["message"].is_string()) << r->body;
  };
  std::string sb = "/v1/sandboxes/" + sandbox_;
  check("POST", "/v1/sandboxes", "{not json", 400);
  check("POST", "/v1/sandboxes", "[1,2]", 400);
  check("POST", "/v1/sandboxes", R"({"template":"nope:latest"})", 404);
  check("POST", "/v1/sandboxes", R"({"template":"../../etc"})", 400);
  check("POST", "/v1/sandboxes", R"({"runtime":"vmware"})", 400);
  check("POST", "/v1/sandboxes", R"({"limits":{"memory_bytes":-5}})", 400);
  check("POST", "/v1/sandboxes", R"({"bogus":1})", 400);
  check("POST", "/v1/sandboxes", std::string(2 << 20, ' '), 413);
  check("GET", "/v1/sandboxes/sb-doesnotexist", "", 404);
  check("GET", "/v1/sandboxes/..%2F..%2Fetc", "", 404);
  check("DELETE", "/v1/sandboxes/sb-aaaaaaaaaaaaaaaa", "", 404);
  check("GET", "/v1/operations/op-nope", "", 404);
  check("GET", "/v1/nothing-here", "", 404);
  check("POST", sb + "/commands", R"({"argv":[]})", 400);
  check("POST", sb + "/commands", R"({"argv":"ls"})", 400);
  check("POST", sb + "/commands", R"({"argv":["ls"],"cmd":"ls"})", 400);
  check("POST", sb + "/commands", R"({"cmd":"ls","timeout":-1})", 400);
  check("POST", sb + "/commands?stream=sse", R"({"cmd":"ls"})", 400);
  check("POST", sb + "/commands?stream=mux", R"({"argv":["/no/such/program"]})", 404);
  check("GET", sb + "/commands/cmd-nope", "", 404);
  check("GET", sb + "/commands/cmd-nope/output", "", 404);
  check("GET", sb + "/files?path=/nonexistent", "", 404);
  check("GET", sb + "/files?path=/etc", "", 400);
  check("GET", sb + "/files:list?path=/&depth=99", "", 400);
  check("GET", sb + "/operations?wait=forever", "", 404);
  check("GET", "/v1/operations/op-x?wait=forever", "", 400);
  check("GET", "/v1/operations?limit=abc", "", 400);
  // The daemon is still fine.
  EXPECT_TRUE(c().Health());
  EXPECT_EQ(Run({{"cmd", "echo ok"}}).out, "ok\n");
}

TEST_F(SandboxApiTest, OversizedFileWriteIsRefused) {
  // This suite's daemon accepts files up to 8 MiB.
  std::string big((8 << 20) + 1, 'x');
  auto r = c().WriteFile(sandbox_, "/tmp/huge", big);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::kTooLarge) << r.error().message;
  EXPECT_FALSE(c().Stat(sandbox_, "/tmp/huge"));  // refused before anything was written
  ASSERT_TRUE(c().WriteFile(sandbox_, "/tmp/ok", std::string(8 << 20, 'y')));
  EXPECT_EQ((*c().Stat(sandbox_, "/tmp/ok"))["size"], 8 << 20);
  (void)c().Remove(sandbox_, "/tmp/ok");
}

TEST_F(SandboxApiTest, StartAndStreamInOneRequest) {
  client::MuxOffsets off;
  std::string cid;
  std::string out;
  // Hang up after the first record; the command goes on, and its id is known.
  (void)c().StartAndStream(sandbox_, {{"cmd", "echo first; sleep 0.2; echo second; exit 3"}}, off,
                           [&](client::MuxKind k, std::string_view b) {
                             if (k == client::MuxKind::kStdout) out.append(b);
                             return out.empty();
                           }, &cid);
  EXPECT_EQ(out, "first\n");
  ASSERT_TRUE(IsValidId(cid, "cmd")) << cid;
  auto rest = c().FollowOutput(sandbox_, cid, off, [&](client::MuxKind k, std::string_view b) {
    if (k == client::MuxKind::kStdout) out.append(b);
    return true;
  });
  ASSERT_TRUE(rest) << rest.error().message;
  EXPECT_EQ(out, "first\nsecond\n");
  EXPECT_EQ((*rest)["exit_code"], 3);
}

TEST_F(SandboxApiTest, ClientDisconnectMidStreamLosesNothing) {
  auto started = c().StartCommand(sandbox_, {{"cmd", "for i in $(seq 1 50); do echo line$i; sleep 0.01; done"}});
  ASSERT_TRUE(started);
  std::string cid = (*started)["id"];
  client::MuxOffsets off;
  int records = 0;
  // Stop after the first record: the client hangs up mid-stream.
  (void)c().StreamMux(sandbox_, cid, off, [&](client::MuxKind, std::string_view) {
    return ++records < 1;
  });
  auto done = c().GetCommand(sandbox_, cid, 20s);
  ASSERT_TRUE(done);
  auto all = c().ReadOutput(sandbox_, cid, "stdout", 0);
  ASSERT_TRUE(all);
  std::string expect;
  for (int i = 1; i <= 50; ++i) expect += "line" + std::to_string(i) + "\n";
  EXPECT_EQ(all->bytes, expect);
}

TEST_F(SandboxApiTest, DeleteTwiceIsAConflictAndThenNotFound) {
  std::string id = CreateSandbox(c());
  ASSERT_FALSE(id.empty());
  auto op = c().DeleteSandbox(id);
  ASSERT_TRUE(op) << op.error().message;
  auto again = c().DeleteSandbox(id);
  if (!again) {
    EXPECT_TRUE(again.error().code == Errc::kConflict || again.error().code == Errc::kNotFound)
        << again.error().message;
  }
  auto fin = c().WaitOperation((*op)["operation"]["id"].get<std::string>(), 30s);
  ASSERT_TRUE(fin);
  EXPECT_EQ((*fin)["state"], "succeeded");
  auto gone = c().GetSandbox(id);
  ASSERT_FALSE(gone);
  EXPECT_EQ(gone.error().code, Errc::kNotFound);
  auto cmd = c().StartCommand(id, {{"cmd", "true"}});
  ASSERT_FALSE(cmd);
  EXPECT_EQ(cmd.error().code, Errc::kNotFound);
}

}  // namespace
}  // namespace space::testing
