// Kill spaced at each step of snapshot, fork, pause, suspend and wake (a test-only
// --crash-at point exits the daemon abruptly, like SIGKILL, at that instant), restart it,
// and check every operation ended finished or rolled back: never half-done.
#include <sqlite3.h>

#include <set>
#include <sstream>
#include <string>

#include "tests/integration/harness.h"

namespace space::testing {
namespace {

using namespace std::chrono_literals;

class CrashTest : public ::testing::TestWithParam<const char*> {};

// A test name for a crash point ("snapshot.frozen" -> "snapshot_frozen").
std::string PointName(const ::testing::TestParamInfo<const char*>& info) {
  std::string n = info.param;
  for (auto& ch : n) if (ch == '.') ch = '_';
  return n;
}

// Starts a daemon armed to crash at `point`, prepares a sandbox, triggers the operation,
// waits for the crash, and restarts the daemon unarmed. Returns the sandbox id.
struct Crashed {
  std::string sandbox;
  std::string op_id;
};

Crashed CrashDuring(Daemon& d, const std::string& point) {
  Crashed out;
  d.SetExtraArgs({"--crash-at", point});
  if (!d.Start()) return out;
  auto& c = d.client();
  out.sandbox = CreateSandbox(c);
  if (out.sandbox.empty()) return out;
  EXPECT_TRUE(c.WriteFile(out.sandbox, "/root/precious", "data"));
  std::string family = point.substr(0, point.find('.'));
  std::string path = "/v1/sandboxes/" + out.sandbox + "/";
  Result<Json> r = Fail(Errc::kInternal, "not sent");
  if (family == "wake") {
    EXPECT_TRUE(c.Call("POST", path + "suspend?wait=60s"));
    r = c.Call("POST", path + "wake");
  } else if (family == "snapshot") {
    r = c.Call("POST", path + "snapshots");
  } else if (family == "fork") {
    r = c.Call("POST", path + "fork", Json{{"count", 2}});
  } else {
    r = c.Call("POST", path + family);
  }
  if (r) out.op_id = (*r)["operation"]["id"];
  EXPECT_TRUE(d.WaitExit(30s)) << "spaced did not reach crash point " << point;
  d.SetExtraArgs({});
  EXPECT_TRUE(d.Start());
  return out;
}

TEST_P(CrashTest, OperationEndsDefinite) {
  SPACE_REQUIRE_SANDBOXES();
  const std::string point = GetParam();
  Daemon d;
  Crashed x = CrashDuring(d, point);
  ASSERT_FALSE(x.sandbox.empty());
  auto& c = d.client();
  // The operation ended, one way or the other; nothing is left pending or running.
  if (!x.op_id.empty()) {
    auto op = c.GetOperation(x.op_id);
    ASSERT_TRUE(op);
    EXPECT_TRUE((*op)["state"] == "succeeded" || (*op)["state"] == "failed") << op->dump();
  }
  auto pending = c.ListOperations("pending");
  auto running = c.ListOperations("running");
  ASSERT_TRUE(pending && running);
  EXPECT_TRUE(pending->empty()) << pending->dump();
  EXPECT_TRUE(running->empty()) << running->dump();
  // The sandbox is in a definite state and its data is intact.
  auto sb = c.GetSandbox(x.sandbox);
  ASSERT_TRUE(sb);
  std::string state = (*sb)["state"];
  std::string family = point.substr(0, point.find('.'));
  if (family == "suspend" || family == "wake") {
    EXPECT_EQ(state, "suspended") << sb->dump();
    ASSERT_TRUE(c.Call("POST", "/v1/sandboxes/" + x.sandbox + "/wake?wait=60s"));
  } else {
    // Pause, snapshot and fork roll a frozen instance back to running.
    EXPECT_EQ(state, "running") << sb->dump();
  }
  auto r = c.Run(x.sandbox, Json{{"cmd", "cat /root/precious"}});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->out, "data");
  // Snapshots: every record is ready and backed by storage; no storage orphans.
  auto snaps = c.Call("GET", "/v1/snapshots");
  ASSERT_TRUE(snaps);
  ASSERT_TRUE(snaps->contains("snapshots")) << snaps->dump();
  const Json& list = (*snaps)["snapshots"];
  for (const auto& s : list) EXPECT_EQ(s.value("state", ""), "ready") << s.dump();
  EXPECT_EQ(sys::CountDirEntries(d.data_dir() + "/storage/pool/snapshots"), list.size());
  // Forks: each child is usable or marked error; none is stuck creating.
  auto all = c.ListSandboxes();
  ASSERT_TRUE(all) << all.error().message;
  for (const auto& s : *all) {
    std::string st = s.value("state", ""), sid = s.value("id", "");
    EXPECT_TRUE(st == "running" || st == "error") << s.dump();
    if (st == "running" && sid != x.sandbox) {
      auto rc = c.Run(sid, Json{{"cmd", "cat /root/precious"}});
      ASSERT_TRUE(rc);
      EXPECT_EQ(rc->out, "data");
    }
  }
}

// A crash after the agent was asked to start a command but before its record was
// committed: nobody heard of the command, so after the restart it does not exist — its
// process is killed, it is not listed, and later commands work.
TEST(CrashCommandTest, CommandStartedBeforeItsRecordIsKilled) {
  SPACE_REQUIRE_SANDBOXES();
  Daemon d({"--crash-at", "command.sent"});
  ASSERT_TRUE(d.Start());
  std::string sb = CreateSandbox(d.client());
  ASSERT_FALSE(sb.empty());
  auto started = d.client().StartCommand(sb, {{"argv", {"sleep", "1000"}}});
  EXPECT_FALSE(started) << "the daemon should have crashed before answering";
  ASSERT_TRUE(d.WaitExit(30s));
  d.SetExtraArgs({});
  ASSERT_TRUE(d.Start());
  auto& c = d.client();
  auto cmds = c.ListCommands(sb);
  ASSERT_TRUE(cmds) << cmds.error().message;
  EXPECT_TRUE(cmds->empty()) << cmds->dump();
  std::string ps;
  for (int i = 0; i < 40; ++i) {
    auto r = c.Run(sb, Json{{"cmd", "ps -o args | grep -v grep | grep 'sleep 1000' || true"}});
    ASSERT_TRUE(r) << r.error().message;
    ps = r->out;
    if (ps.empty()) break;
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_EQ(ps, "") << "the unrecorded command still runs";
  auto r = c.Run(sb, Json{{"argv", {"echo", "after"}}});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->out, "after\n");
}

// A crash at each step of a create. The create's end (the sandbox running, its operation
// succeeded) is committed while the instance starts, so after the restart the sandbox
// either runs and answers (the end was in and the instance came up: recovery adopts it)
// or is marked error with no instance left (the end was not in, or the instance never
// came up; the root goes with an interrupted create); a create whose record was not in
// leaves nothing. Before the start ("create.root") only the second can be, past the end's
// commit ("create.committed") only the first. Creates work afterwards.
class CrashCreateTest : public ::testing::TestWithParam<const char*> {};

TEST_P(CrashCreateTest, EndsRunningOrRolledBack) {
  SPACE_REQUIRE_SANDBOXES();
  const std::string point = GetParam();
  Daemon d({"--crash-at", point});
  ASSERT_TRUE(d.Start());
  auto created = d.client().Call("POST", "/v1/sandboxes?wait=60s", Json::object());
  EXPECT_FALSE(created) << "the daemon should have crashed before answering";
  ASSERT_TRUE(d.WaitExit(30s));
  d.SetExtraArgs({});
  ASSERT_TRUE(d.Start());
  auto& c = d.client();
  auto all = c.ListSandboxes();
  ASSERT_TRUE(all) << all.error().message;
  if (point == "create.ended" || point == "create.committed") {
    EXPECT_EQ(all->size(), 1u) << "the record was in";
  }
  size_t running = 0;
  for (const auto& s : *all) {
    const std::string state = s.value("state", "");
    if (point == "create.committed") {
      EXPECT_EQ(state, "running") << s.dump();
    }
    if (point == "create.root") {
      EXPECT_EQ(state, "error") << s.dump();
    }
    if (state == "running") {
      ++running;
      auto r = c.Run(s.value("id", ""), Json{{"argv", {"echo", "adopted"}}});
      ASSERT_TRUE(r) << r.error().message;
      EXPECT_EQ(r->out, "adopted\n");
    } else {
      EXPECT_EQ(state, "error") << s.dump();
    }
  }
  std::printf("crash at %s: %zu of %zu sandboxes adopted running\n", point.c_str(), running,
              all->size());
  // Only what runs has an instance; a sandbox marked error keeps its root if its record
  // said running (as any whose processes died), and nothing of one that never was is left.
  EXPECT_EQ(sys::CountDirEntries(d.data_dir() + "/runtime/oci/crun"), running);
  const size_t roots = sys::CountDirEntries(d.data_dir() + "/storage/pool/roots");
  EXPECT_GE(roots, running);
  EXPECT_LE(roots, all->size());
  if (point == "create.root") {
    EXPECT_EQ(roots, 0u);
  }
  std::string sb = CreateSandbox(c);
  ASSERT_FALSE(sb.empty());
  auto r = c.Run(sb, Json{{"argv", {"echo", "after"}}});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->out, "after\n");
}

// A create that fails after its end was committed (its agent never answers, by a test
// hook): nobody polling saw it succeed or run meanwhile; the failure is committed over
// the end in one step, so the sandbox is error and its operation failed, also after a
// restart, with no instance or root left.
TEST(CreateFailureTest, AfterTheEndWasCommittedEndsFailedAndStaysFailed) {
  SPACE_REQUIRE_SANDBOXES();
  Daemon d({"--fail-at", "create.connect"});
  ASSERT_TRUE(d.Start());
  auto& c = d.client();
  auto created = c.Call("POST", "/v1/sandboxes", Json::object());
  ASSERT_TRUE(created) << created.error().message;
  const std::string id = (*created)["sandbox"]["id"];
  const std::string op_id = (*created)["operation"]["id"];
  // Polled as fast as it answers until the operation ends: the store holds the end from
  // the start's first moment, but it is not told before the create has finished.
  std::set<std::string> op_states, sb_states;
  for (int i = 0; i < 20000; ++i) {
    auto op = c.GetOperation(op_id);
    auto sb = c.GetSandbox(id);
    ASSERT_TRUE(op && sb);
    op_states.insert(JsonStringOr(*op, "state", ""));
    sb_states.insert(JsonStringOr(*sb, "state", ""));
    if (JsonStringOr(*op, "state", "") == "failed" && JsonStringOr(*sb, "state", "") == "error") break;
  }
  EXPECT_EQ(op_states.count("succeeded"), 0u) << "a poller saw the failed create succeed";
  EXPECT_EQ(sb_states.count("running"), 0u) << "a poller saw the failed create run";
  EXPECT_EQ(op_states.count("failed"), 1u);
  auto check = [&](const char* when) {
    auto& c = d.client();  // a new one after each Start
    auto op = c.WaitOperation(op_id, 60s);
    ASSERT_TRUE(op) << when << ": " << op.error().message;
    EXPECT_EQ(JsonStringOr(*op, "state", ""), "failed") << when << ": " << op->dump();
    EXPECT_NE(op->dump().find("fail point create.connect"), std::string::npos) << when << ": " << op->dump();
    auto sb = c.GetSandbox(id);
    ASSERT_TRUE(sb) << when << ": " << sb.error().message;
    EXPECT_EQ(JsonStringOr(*sb, "state", ""), "error") << when << ": " << sb->dump();
    EXPECT_EQ(sys::CountDirEntries(d.data_dir() + "/runtime/oci/crun"), 0u) << when;
    EXPECT_EQ(sys::CountDirEntries(d.data_dir() + "/storage/pool/roots"), 0u) << when;
  };
  check("after the create");
  d.Stop();
  d.SetExtraArgs({});
  ASSERT_TRUE(d.Start());
  check("after a restart");
}

// The state column of one row, read from spaced's database behind its back ("" if none).
std::string StoredState(const std::string& data_dir, const std::string& table, const std::string& id) {
  sqlite3* db = nullptr;
  std::string out;
  if (sqlite3_open_v2((data_dir + "/space.db").c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_busy_timeout(db, 1000);
    sqlite3_stmt* st = nullptr;
    const std::string sql = "SELECT state FROM " + table + " WHERE id = ?1";
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK) {
      sqlite3_bind_text(st, 1, id.c_str(), -1, SQLITE_TRANSIENT);
      if (sqlite3_step(st) == SQLITE_ROW) out = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
      sqlite3_finalize(st);
    }
  }
  sqlite3_close(db);
  return out;
}

// The sum of `spaced_sandboxes` samples with state="`state`" in a /metrics text.
double SandboxGauge(const std::string& text, const std::string& state) {
  double sum = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("spaced_sandboxes{", 0) != 0) continue;
    if (line.find("state=\"" + state + "\"") == std::string::npos) continue;
    sum += std::stod(line.substr(line.rfind(' ') + 1));
  }
  return sum;
}

// While a cold create waits for its agent (a test hook holds it there for 2 s), its end is
// already committed: every reader still sees the sandbox creating and its operation
// pending, including the lists filtered by state and the metrics' gauges; once the agent
// has answered they see the end.
TEST(CreateWindowTest, ReadersSeeTheCreateUnfinishedUntilItsAgentAnswers) {
  SPACE_REQUIRE_SANDBOXES();
  Daemon d({"--pause-at", "create.connect"});
  ASSERT_TRUE(d.Start());
  auto& c = d.client();
  // An operation that ended before: a list of the succeeded ones limited to one is that.
  auto before = c.Call("POST", "/v1/sandboxes?wait=60s", Json::object());
  ASSERT_TRUE(before) << before.error().message;
  const std::string before_id = (*before)["sandbox"]["id"];
  auto gone = c.Call("DELETE", "/v1/sandboxes/" + before_id + "?wait=60s");
  ASSERT_TRUE(gone) << gone.error().message;
  const std::string before_op = (*gone)["operation"]["id"];
  ASSERT_EQ(JsonStringOr((*gone)["operation"], "state", ""), "succeeded") << gone->dump();
  const Json body = {{"metadata", {{"suite", "window"}}}};
  auto created = c.Call("POST", "/v1/sandboxes", body);
  ASSERT_TRUE(created) << created.error().message;
  const std::string id = (*created)["sandbox"]["id"], op_id = (*created)["operation"]["id"];
  // The end reaches the store while the create is held (else this test tests nothing).
  bool stored = false;
  for (int i = 0; i < 150 && !stored; ++i) {
    stored = StoredState(d.data_dir(), "operations", op_id) == "succeeded" &&
             StoredState(d.data_dir(), "sandboxes", id) == "running";
    if (!stored) std::this_thread::sleep_for(10ms);
  }
  ASSERT_TRUE(stored) << "the create's end was not in the store within 1.5 s";
  auto ids_in = [&](const std::string& query) {
    std::set<std::string> ids;
    auto r = c.Call("GET", "/v1/operations" + query);
    EXPECT_TRUE(r) << (r ? "" : r.error().message);
    if (r) {
      for (const auto& op : (*r)["operations"]) ids.insert(JsonStringOr(op, "id", ""));
    }
    return ids;
  };
  auto op = c.GetOperation(op_id);
  ASSERT_TRUE(op) << op.error().message;
  EXPECT_EQ(JsonStringOr(*op, "state", ""), "pending") << op->dump();
  // A read of the sandbox (alone, in the list, its network) does not wait for the
  // operation that holds it.
  const auto asked = std::chrono::steady_clock::now();
  auto sb = c.GetSandbox(id);
  EXPECT_LT(std::chrono::steady_clock::now() - asked, 500ms) << "GET of the sandbox waited for its create";
  ASSERT_TRUE(sb) << sb.error().message;
  EXPECT_EQ(JsonStringOr(*sb, "state", ""), "creating") << sb->dump();
  const auto listed_at = std::chrono::steady_clock::now();
  auto listed = c.Call("GET", "/v1/sandboxes");
  EXPECT_LT(std::chrono::steady_clock::now() - listed_at, 500ms) << "the list waited for the create";
  ASSERT_TRUE(listed) << listed.error().message;
  ASSERT_EQ((*listed)["sandboxes"].size(), 1u) << listed->dump();
  EXPECT_EQ(JsonStringOr((*listed)["sandboxes"][0], "state", ""), "creating") << listed->dump();
  const auto net_at = std::chrono::steady_clock::now();
  auto net = c.Call("GET", "/v1/sandboxes/" + id + "/network");
  EXPECT_LT(std::chrono::steady_clock::now() - net_at, 500ms) << "the network read waited for the create";
  ASSERT_TRUE(net) << net.error().message;
  EXPECT_EQ(JsonStringOr(*net, "mode", ""), "none") << net->dump();
  EXPECT_EQ(ids_in("?state=pending").count(op_id), 1u) << "missing from the pending operations";
  EXPECT_EQ(ids_in("?state=succeeded").count(op_id), 0u) << "listed as succeeded early";
  EXPECT_EQ(ids_in("?state=succeeded&limit=1"), std::set<std::string>{before_op})
      << "the newest succeeded operation before the create";
  auto all = c.Call("GET", "/v1/operations");
  ASSERT_TRUE(all) << all.error().message;
  for (const auto& o : (*all)["operations"]) {
    if (JsonStringOr(o, "id", "") == op_id) {
      EXPECT_EQ(JsonStringOr(o, "state", ""), "pending") << o.dump();
    }
  }
  // A bulk delete does not wait for the create either: the sandbox is busy, as for its
  // own DELETE, and stays.
  const auto bulk_at = std::chrono::steady_clock::now();
  auto bulk = c.Call("DELETE", "/v1/sandboxes?label=suite=window");
  EXPECT_LT(std::chrono::steady_clock::now() - bulk_at, 500ms) << "the bulk delete waited for the create";
  ASSERT_TRUE(bulk) << bulk.error().message;
  EXPECT_EQ((*bulk)["count"], 0) << bulk->dump();
  ASSERT_EQ((*bulk)["errors"].size(), 1u) << bulk->dump();
  EXPECT_EQ(JsonStringOr((*bulk)["errors"][0], "sandbox_id", ""), id) << bulk->dump();
  EXPECT_EQ(JsonStringOr((*bulk)["errors"][0]["error"], "code", ""), "conflict") << bulk->dump();
  auto metrics = c.Request("GET", "/metrics");
  ASSERT_TRUE(metrics) << metrics.error().message;
  EXPECT_EQ(SandboxGauge(metrics->body, "running"), 0) << metrics->body;
  EXPECT_EQ(SandboxGauge(metrics->body, "creating"), 1) << metrics->body;
  // Still held: the checks above ran inside the window.
  EXPECT_EQ(StoredState(d.data_dir(), "operations", op_id), "succeeded");
  auto done = c.WaitOperation(op_id, 60s);
  ASSERT_TRUE(done) << done.error().message;
  EXPECT_EQ(JsonStringOr(*done, "state", ""), "succeeded") << done->dump();
  EXPECT_EQ(ids_in("?state=pending").count(op_id), 0u);
  EXPECT_EQ(ids_in("?state=succeeded").count(op_id), 1u);
  auto r = c.Run(id, Json{{"argv", {"echo", "up"}}});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->out, "up\n");
  auto metrics_after = c.Request("GET", "/metrics");
  ASSERT_TRUE(metrics_after);
  EXPECT_EQ(SandboxGauge(metrics_after->body, "running"), 1) << metrics_after->body;
  EXPECT_TRUE(c.DeleteSandboxAndWait(id, 60s));
}

INSTANTIATE_TEST_SUITE_P(Points, CrashCreateTest,
                         ::testing::Values("create.root", "create.started", "create.ended",
                                           "create.committed"),
                         PointName);

INSTANTIATE_TEST_SUITE_P(Points, CrashTest,
                         ::testing::Values("snapshot.frozen", "snapshot.taken",
                                           "fork.parent_snapshot", "fork.child",
                                           "pause.frozen", "suspend.stopping", "suspend.stopped",
                                           "wake.started"),
                         PointName);

}  // namespace
}  // namespace space::testing
