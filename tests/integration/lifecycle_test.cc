// Lifecycle transitions of a real sandbox: pause/resume (frozen, nothing lost),
// suspend/wake (filesystem kept, processes stopped and reported lost), illegal and
// concurrent transitions, and suspended sandboxes across a daemon crash.
#include "tests/integration/harness.h"

namespace space::testing {
namespace {

using namespace std::chrono_literals;

Result<Json> Act(client::Client& c, const std::string& id, const std::string& action) {
  return c.Call("POST", "/v1/sandboxes/" + id + "/" + action + "?wait=60s");
}

std::string Counter(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += std::to_string(i) + "\n";
  return s;
}

TEST(LifecycleTest, PauseFreezesAndResumeLosesNothing) {
  SPACE_REQUIRE_SANDBOXES();
  Daemon d;
  ASSERT_TRUE(d.Start());
  auto& c = d.client();
  std::string id = CreateSandbox(c);
  ASSERT_FALSE(id.empty());
  auto caps = c.GetSandbox(id);
  ASSERT_TRUE(caps);
  EXPECT_EQ((*caps)["capabilities"]["pause_keeps_memory"], true);
  EXPECT_EQ((*caps)["capabilities"]["suspend_keeps_processes"], false);
  auto started = c.StartCommand(
      id, {{"cmd", "i=0; while [ $i -lt 40 ]; do echo $i; i=$((i+1)); sleep 0.05; done"}});
  ASSERT_TRUE(started);
  std::string cid = (*started)["id"];
  std::this_thread::sleep_for(300ms);

  auto paused = Act(c, id, "pause");
  ASSERT_TRUE(paused) << paused.error().message;
  EXPECT_EQ((*paused)["sandbox"]["state"], "paused");
  auto before = c.GetCommand(id, cid);
  ASSERT_TRUE(before);
  std::this_thread::sleep_for(500ms);
  auto during = c.GetCommand(id, cid);
  ASSERT_TRUE(during);
  EXPECT_EQ((*during)["stdout_size"], (*before)["stdout_size"]) << "a paused sandbox made progress";
  EXPECT_EQ((*during)["state"], "running");
  // No new commands or file access while frozen.
  auto refused = c.StartCommand(id, {{"cmd", "true"}});
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, Errc::kConflict);
  auto again = Act(c, id, "pause");
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, Errc::kConflict);

  auto resumed = Act(c, id, "resume");
  ASSERT_TRUE(resumed) << resumed.error().message;
  EXPECT_EQ((*resumed)["sandbox"]["state"], "running");
  auto done = c.GetCommand(id, cid, 30s);
  ASSERT_TRUE(done);
  EXPECT_EQ((*done)["state"], "exited");
  auto out = c.ReadOutput(id, cid, "stdout", 0);
  ASSERT_TRUE(out);
  EXPECT_EQ(out->bytes, Counter(40));
}

TEST(LifecycleTest, SuspendKeepsFilesAndWakeRuns) {
  SPACE_REQUIRE_SANDBOXES();
  Daemon d;
  ASSERT_TRUE(d.Start());
  auto& c = d.client();
  std::string id = CreateSandbox(c);
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(c.WriteFile(id, "/root/work.txt", "precious"));
  // /dev/shm is a directory of /dev's tmpfs that the agent makes at every start.
  const std::vector<std::string> shm = {
      "sh", "-c", "stat -c %a /dev/shm && echo hi >/dev/shm/x && cat /dev/shm/x"};
  auto shm_before = c.Run(id, shm);
  ASSERT_TRUE(shm_before);
  EXPECT_EQ(shm_before->out, "1777\nhi\n");
  auto sleeper = c.StartCommand(id, {{"argv", {"sleep", "1000"}}});
  ASSERT_TRUE(sleeper);
  std::string cid = (*sleeper)["id"];

  auto suspended = Act(c, id, "suspend");
  ASSERT_TRUE(suspended) << suspended.error().message;
  EXPECT_EQ((*suspended)["sandbox"]["state"], "suspended");
  auto lost = c.GetCommand(id, cid);
  ASSERT_TRUE(lost);
  EXPECT_EQ((*lost)["state"], "lost");
  EXPECT_NE((*lost)["reason"].get<std::string>().find("suspended"), std::string::npos);
  auto refused = c.StartCommand(id, {{"cmd", "true"}});
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, Errc::kConflict);
  for (const char* illegal : {"pause", "resume", "suspend"}) {
    auto r = Act(c, id, illegal);
    ASSERT_FALSE(r) << illegal;
    EXPECT_EQ(r.error().code, Errc::kConflict) << illegal;
  }

  // Suspended sandboxes survive a daemon crash.
  d.Kill();
  ASSERT_TRUE(d.Start());
  auto& c2 = d.client();
  auto sb = c2.GetSandbox(id);
  ASSERT_TRUE(sb);
  EXPECT_EQ((*sb)["state"], "suspended");

  auto woken = Act(c2, id, "wake");
  ASSERT_TRUE(woken) << woken.error().message;
  EXPECT_EQ((*woken)["sandbox"]["state"], "running");
  auto file = c2.ReadFile(id, "/root/work.txt");
  ASSERT_TRUE(file) << file.error().message;
  EXPECT_EQ(*file, "precious");
  auto r = c2.Run(id, std::vector<std::string>{"cat", "/root/work.txt"});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->out, "precious");
  auto shm_after = c2.Run(id, shm);
  ASSERT_TRUE(shm_after);
  EXPECT_EQ(shm_after->out, "1777\nhi\n");
  auto wake_again = Act(c2, id, "wake");
  ASSERT_FALSE(wake_again);
  EXPECT_EQ(wake_again.error().code, Errc::kConflict);
}

TEST(LifecycleTest, ConcurrentTransitionsAreRefused) {
  SPACE_REQUIRE_SANDBOXES();
  Daemon d;
  ASSERT_TRUE(d.Start());
  auto& c = d.client();
  std::string id = CreateSandbox(c);
  ASSERT_FALSE(id.empty());
  // Fire a suspend without waiting, then immediately ask for more.
  auto first = c.Call("POST", "/v1/sandboxes/" + id + "/suspend");
  ASSERT_TRUE(first);
  auto second = c.Call("POST", "/v1/sandboxes/" + id + "/pause");
  auto del = c.DeleteSandbox(id);
  // Either refused while busy, or (if the suspend already finished) refused as illegal.
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().code, Errc::kConflict);
  auto op = c.WaitOperation((*first)["operation"]["id"].get<std::string>(), 60s);
  ASSERT_TRUE(op);
  EXPECT_EQ((*op)["state"], "succeeded");
  if (!del) {
    EXPECT_EQ(del.error().code, Errc::kConflict);
    EXPECT_TRUE(c.DeleteSandboxAndWait(id, 60s));
  }
  auto bogus = c.Call("POST", "/v1/sandboxes/sb-aaaaaaaaaaaaaaaa/pause");
  ASSERT_FALSE(bogus);
  EXPECT_EQ(bogus.error().code, Errc::kNotFound);
}

}  // namespace
}  // namespace space::testing

namespace space::testing {
namespace {

using namespace std::chrono_literals;

// Polls until the sandbox is in `state` (or gone, for "gone"), up to `limit`.
bool WaitForState(client::Client& c, const std::string& id, const std::string& state,
                  std::chrono::milliseconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    auto sb = c.GetSandbox(id);
    if (!sb && state == "gone" && sb.error().code == Errc::kNotFound) return true;
    if (sb && (*sb)["state"] == state) return true;
    std::this_thread::sleep_for(100ms);
  }
  return false;
}

TEST(TimeoutTest, ExpiryAppliesOnTimeoutAndCanBeExtended) {
  SPACE_REQUIRE_SANDBOXES();
  Daemon d;
  ASSERT_TRUE(d.Start());
  auto& c = d.client();
  // Default: 300 s, delete.
  std::string plain = CreateSandbox(c);
  auto sb = c.GetSandbox(plain);
  ASSERT_TRUE(sb);
  EXPECT_EQ((*sb)["timeout"], 300);
  EXPECT_EQ((*sb)["on_timeout"], "delete");
  EXPECT_TRUE((*sb)["expires_at"].is_string());

  std::string extended = CreateSandbox(c, {{"timeout", 3}});
  std::string pausing = CreateSandbox(c, {{"timeout", 2}, {"on_timeout", "pause"}});
  std::string doomed = CreateSandbox(c, {{"timeout", 2}});
  ASSERT_FALSE(doomed.empty() || pausing.empty() || extended.empty());
  // A command that runs past the timeout is not what keeps a sandbox alive...
  auto cmd = c.StartCommand(doomed, {{"argv", {"sleep", "1000"}}});
  ASSERT_TRUE(cmd);
  // ... but extending the timeout is.
  auto ext = c.Call("POST", "/v1/sandboxes/" + extended + "/timeout", Json{{"timeout", 600}});
  ASSERT_TRUE(ext) << ext.error().message;
  EXPECT_EQ((*ext)["timeout"], 600);

  EXPECT_TRUE(WaitForState(c, doomed, "gone", 10s));
  EXPECT_TRUE(WaitForState(c, pausing, "paused", 10s));
  auto still = c.GetSandbox(extended);
  ASSERT_TRUE(still);
  EXPECT_EQ((*still)["state"], "running");
  // Resuming re-arms the timeout.
  auto resumed = c.Call("POST", "/v1/sandboxes/" + pausing + "/resume?wait=30s");
  ASSERT_TRUE(resumed) << resumed.error().message;
  EXPECT_EQ((*resumed)["sandbox"]["state"], "running") << resumed->dump();
  EXPECT_TRUE(WaitForState(c, pausing, "paused", 10s)) << c.GetSandbox(pausing)->dump();

  auto bad = c.Call("POST", "/v1/sandboxes/" + extended + "/timeout", Json{{"timeout", -1}});
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, Errc::kInvalidArgument);
  auto bad_action = c.CreateSandbox({{"on_timeout", "explode"}});
  ASSERT_FALSE(bad_action);
  EXPECT_EQ(bad_action.error().code, Errc::kInvalidArgument);
}

TEST(TimeoutTest, IdleTimeoutWaitsForCommandsToEnd) {
  SPACE_REQUIRE_SANDBOXES();
  Daemon d;
  ASSERT_TRUE(d.Start());
  auto& c = d.client();
  std::string id = CreateSandbox(c, {{"idle_timeout", 1}, {"on_timeout", "suspend"}});
  ASSERT_FALSE(id.empty());
  auto cmd = c.StartCommand(id, {{"argv", {"sleep", "2.5"}}});
  ASSERT_TRUE(cmd);
  std::this_thread::sleep_for(2s);
  auto busy = c.GetSandbox(id);
  ASSERT_TRUE(busy);
  EXPECT_EQ((*busy)["state"], "running") << "idle timeout fired while a command ran";
  EXPECT_TRUE(WaitForState(c, id, "suspended", 10s));
}

}  // namespace
}  // namespace space::testing
