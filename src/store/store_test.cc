// Tests for Store against a real SQLite database in a temporary directory.
#include "store/store.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

namespace space::store {
namespace {

SandboxRecord MakeSandbox(const std::string& id, int64_t created_ms) {
  SandboxRecord r;
  r.id = id;
  r.template_ref = "base:latest";
  r.template_digest = "sha256:" + std::string(64, 'a');
  r.runtime = "oci";
  r.state = "running";
  r.reason = "because";
  r.spec = Json{{"limits", {{"cpu", 1.5}, {"memory_mb", 512}}},
                {"env", {{"A", "b"}, {"UNICODE", "h\u00e9llo \u2603"}}},
                {"network", false},
                {"argv", Json::array({"sh", "-c", "echo 'x'"})},
                {"timeout_ms", 60000}};
  r.metadata = Json{{"owner", "alice"}, {"team", "x\"y"}};
  r.next_stream = 7;
  r.created_ms = created_ms;
  r.updated_ms = created_ms + 5;
  return r;
}

CommandRecord MakeCommand(const std::string& id, const std::string& sandbox_id, uint32_t stream) {
  CommandRecord r;
  r.id = id;
  r.sandbox_id = sandbox_id;
  r.stream = stream;
  r.spec = Json{{"argv", Json::array({"ls", "-l"})}, {"cwd", "/tmp"}, {"stdin", true}};
  r.state = "exited";
  r.exit_code = -3;
  r.signal = 9;
  r.timed_out = true;
  r.reason = "killed";
  r.pid = 4242;
  r.started_ms = 1000 + stream;
  r.ended_ms = 2000 + stream;
  return r;
}

OperationRecord MakeOperation(const std::string& id, int64_t created_ms, const std::string& state) {
  OperationRecord r;
  r.id = id;
  r.kind = "create";
  r.target = "sb-x";
  r.state = state;
  r.request = Json{{"template", "base:latest"}, {"n", 3}};
  r.result = Json{{"sandbox", {{"id", "sb-x"}}}};
  r.error_code = "internal";
  r.error_message = "oops";
  r.created_ms = created_ms;
  r.updated_ms = created_ms + 1;
  return r;
}

TemplateRecord MakeTemplate(const std::string& name, const std::string& tag,
                            const std::string& digest, int64_t created_ms) {
  TemplateRecord r;
  r.name = name;
  r.tag = tag;
  r.digest = digest;
  r.config = Json{{"env", Json::array({"PATH=/bin"})}, {"workdir", "/w"}, {"user", "1000"}};
  r.created_ms = created_ms;
  return r;
}

void ExpectSame(const SandboxRecord& a, const SandboxRecord& b) {
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.template_ref, b.template_ref);
  EXPECT_EQ(a.template_digest, b.template_digest);
  EXPECT_EQ(a.runtime, b.runtime);
  EXPECT_EQ(a.state, b.state);
  EXPECT_EQ(a.reason, b.reason);
  EXPECT_EQ(a.spec, b.spec);
  EXPECT_EQ(a.metadata, b.metadata);
  EXPECT_EQ(a.next_stream, b.next_stream);
  EXPECT_EQ(a.created_ms, b.created_ms);
  EXPECT_EQ(a.updated_ms, b.updated_ms);
}

void ExpectSame(const CommandRecord& a, const CommandRecord& b) {
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.sandbox_id, b.sandbox_id);
  EXPECT_EQ(a.stream, b.stream);
  EXPECT_EQ(a.spec, b.spec);
  EXPECT_EQ(a.state, b.state);
  EXPECT_EQ(a.exit_code, b.exit_code);
  EXPECT_EQ(a.signal, b.signal);
  EXPECT_EQ(a.timed_out, b.timed_out);
  EXPECT_EQ(a.reason, b.reason);
  EXPECT_EQ(a.pid, b.pid);
  EXPECT_EQ(a.started_ms, b.started_ms);
  EXPECT_EQ(a.ended_ms, b.ended_ms);
}

void ExpectSame(const OperationRecord& a, const OperationRecord& b) {
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.target, b.target);
  EXPECT_EQ(a.state, b.state);
  EXPECT_EQ(a.request, b.request);
  EXPECT_EQ(a.result, b.result);
  EXPECT_EQ(a.error_code, b.error_code);
  EXPECT_EQ(a.error_message, b.error_message);
  EXPECT_EQ(a.created_ms, b.created_ms);
  EXPECT_EQ(a.updated_ms, b.updated_ms);
}

void ExpectSame(const TemplateRecord& a, const TemplateRecord& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.tag, b.tag);
  EXPECT_EQ(a.digest, b.digest);
  EXPECT_EQ(a.config, b.config);
  EXPECT_EQ(a.created_ms, b.created_ms);
}

// Runs SQL on the database through a separate raw connection (what a corrupting disk,
// an older build or a curious operator could do).
void RawExec(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_busy_timeout(db, 5000);
  char* err = nullptr;
  int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  EXPECT_EQ(rc, SQLITE_OK) << (err ? err : "");
  sqlite3_free(err);
  sqlite3_close(db);
}

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dir = sys::TempDir::Create("/tmp", "space-store-test-");
    ASSERT_TRUE(dir) << dir.error().message;
    dir_ = std::move(*dir);
    path_ = dir_.path() + "/db/space.db";  // parent does not exist yet: Open creates it
    Reopen();
  }
  void Reopen() {
    store_.reset();
    auto s = Store::Open(path_);
    ASSERT_TRUE(s) << s.error().message;
    store_ = std::move(*s);
  }

  sys::TempDir dir_;
  std::string path_;
  std::unique_ptr<Store> store_;
};

TEST_F(StoreTest, SandboxRoundTrip) {
  SandboxRecord r = MakeSandbox("sb-aaaaaaaaaaaaaaaa", 100);
  ASSERT_TRUE(store_->PutSandbox(r));
  auto got = store_->GetSandbox(r.id);
  ASSERT_TRUE(got) << got.error().message;
  ExpectSame(*got, r);
}

// After many deletes spaced hands SQLite's page cache back, so its pages do not pin the
// heap; the database reads the same afterwards.
TEST_F(StoreTest, ReleaseMemoryEmptiesThePageCacheAndLosesNothing) {
  for (int i = 0; i < 1000; ++i) {
    char id[32];
    std::snprintf(id, sizeof id, "sb-%016d", i);
    ASSERT_TRUE(store_->PutSandbox(MakeSandbox(id, 100 + i)));
  }
  ASSERT_TRUE(store_->ListSandboxes());
  const int64_t before = sqlite3_memory_used();
  store_->ReleaseMemory();
  const int64_t after = sqlite3_memory_used();
  EXPECT_LT(after, before - (256 << 10)) << before << " -> " << after;
  auto all = store_->ListSandboxes();
  ASSERT_TRUE(all);
  EXPECT_EQ(all->size(), 1000u);
}

TEST_F(StoreTest, SandboxDefaultsRoundTrip) {
  SandboxRecord r;
  r.id = "sb-empty";
  ASSERT_TRUE(store_->PutSandbox(r));
  auto got = store_->GetSandbox(r.id);
  ASSERT_TRUE(got) << got.error().message;
  ExpectSame(*got, r);
  EXPECT_TRUE(got->spec.is_object());
}

TEST_F(StoreTest, ValuesAreBoundNotSpliced) {
  SandboxRecord r = MakeSandbox("sb-'); DROP TABLE sandboxes; --", 1);
  r.reason = "it's \"quoted\"\n and has a nul:";
  r.reason.push_back('\0');
  r.reason += "tail";
  ASSERT_TRUE(store_->PutSandbox(r));
  auto got = store_->GetSandbox(r.id);
  ASSERT_TRUE(got) << got.error().message;
  ExpectSame(*got, r);
  auto list = store_->ListSandboxes();
  ASSERT_TRUE(list);
  EXPECT_EQ(list->size(), 1u);
}

TEST_F(StoreTest, InvalidUtf8InJsonDoesNotThrow) {
  SandboxRecord r = MakeSandbox("sb-utf8", 1);
  r.spec["env"]["BAD"] = std::string(
      "a\xff\xfe"
      "b");
  ASSERT_TRUE(store_->PutSandbox(r));
  auto got = store_->GetSandbox(r.id);
  ASSERT_TRUE(got) << got.error().message;
  // The invalid bytes are replaced (U+FFFD), everything else survives.
  EXPECT_TRUE(got->spec["env"]["BAD"].is_string());
  EXPECT_EQ(got->spec["env"]["A"], "b");
}

TEST_F(StoreTest, PutSandboxUpdatesAndKeepsCommands) {
  SandboxRecord r = MakeSandbox("sb-1", 100);
  ASSERT_TRUE(store_->PutSandbox(r));
  ASSERT_TRUE(store_->PutCommand(MakeCommand("cmd-1", r.id, 1)));
  r.state = "paused";
  r.reason = "";
  r.metadata = Json{{"k", "v2"}};
  r.updated_ms = 999;
  r.next_stream = 9;
  ASSERT_TRUE(store_->PutSandbox(r));
  auto got = store_->GetSandbox(r.id);
  ASSERT_TRUE(got);
  ExpectSame(*got, r);
  // Regression: INSERT OR REPLACE would delete the row and cascade to the commands.
  auto cmds = store_->ListCommands(r.id);
  ASSERT_TRUE(cmds);
  EXPECT_EQ(cmds->size(), 1u);
  auto all = store_->ListSandboxes();
  ASSERT_TRUE(all);
  EXPECT_EQ(all->size(), 1u);
}

TEST_F(StoreTest, PutSandboxNeverLowersNextStream) {
  SandboxRecord r = MakeSandbox("sb-1", 100);
  r.next_stream = 1;
  ASSERT_TRUE(store_->PutSandbox(r));
  SandboxRecord stale = *store_->GetSandbox(r.id);
  ASSERT_EQ(*store_->AllocateStream(r.id), 1u);
  ASSERT_EQ(*store_->AllocateStream(r.id), 2u);
  stale.state = "paused";
  ASSERT_TRUE(store_->PutSandbox(stale));  // carries next_stream = 1
  auto got = store_->GetSandbox(r.id);
  ASSERT_TRUE(got);
  EXPECT_EQ(got->state, "paused");
  EXPECT_EQ(got->next_stream, 3u);
  EXPECT_EQ(*store_->AllocateStream(r.id), 3u);
}

TEST_F(StoreTest, MissingRowsAreNotFoundNamingTheId) {
  auto sb = store_->GetSandbox("sb-nope");
  ASSERT_FALSE(sb);
  EXPECT_EQ(sb.error().code, Errc::kNotFound);
  EXPECT_NE(sb.error().message.find("sb-nope"), std::string::npos) << sb.error().message;

  ASSERT_TRUE(store_->PutSandbox(MakeSandbox("sb-1", 1)));
  auto cmd = store_->GetCommand("sb-1", "cmd-nope");
  ASSERT_FALSE(cmd);
  EXPECT_EQ(cmd.error().code, Errc::kNotFound);
  EXPECT_NE(cmd.error().message.find("cmd-nope"), std::string::npos) << cmd.error().message;

  auto op = store_->GetOperation("op-nope");
  ASSERT_FALSE(op);
  EXPECT_EQ(op.error().code, Errc::kNotFound);
  EXPECT_NE(op.error().message.find("op-nope"), std::string::npos);

  auto t = store_->GetTemplate("base", "nope");
  ASSERT_FALSE(t);
  EXPECT_EQ(t.error().code, Errc::kNotFound);
  EXPECT_NE(t.error().message.find("base:nope"), std::string::npos);

  auto td = store_->GetTemplateByDigest("sha256:0000");
  ASSERT_FALSE(td);
  EXPECT_EQ(td.error().code, Errc::kNotFound);
  EXPECT_NE(td.error().message.find("sha256:0000"), std::string::npos);

  auto s = store_->AllocateStream("sb-nope");
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, Errc::kNotFound);
  EXPECT_NE(s.error().message.find("sb-nope"), std::string::npos);
}

TEST_F(StoreTest, ListSandboxesByCreation) {
  ASSERT_TRUE(store_->PutSandbox(MakeSandbox("sb-c", 300)));
  ASSERT_TRUE(store_->PutSandbox(MakeSandbox("sb-a", 100)));
  ASSERT_TRUE(store_->PutSandbox(MakeSandbox("sb-b", 200)));
  ASSERT_TRUE(store_->PutSandbox(MakeSandbox("sb-0", 200)));  // tie: by id
  auto list = store_->ListSandboxes();
  ASSERT_TRUE(list) << list.error().message;
  std::vector<std::string> ids;
  for (const auto& r : *list) ids.push_back(r.id);
  EXPECT_EQ(ids, (std::vector<std::string>{"sb-a", "sb-0", "sb-b", "sb-c"}));
  ExpectSame((*list)[0], MakeSandbox("sb-a", 100));
}

TEST_F(StoreTest, CommandRoundTripWithAndWithoutNulls) {
  ASSERT_TRUE(store_->PutSandbox(MakeSandbox("sb-1", 1)));
  CommandRecord full = MakeCommand("cmd-full", "sb-1", 3);
  ASSERT_TRUE(store_->PutCommand(full));
  auto got = store_->GetCommand("sb-1", "cmd-full");
  ASSERT_TRUE(got) << got.error().message;
  ExpectSame(*got, full);

  CommandRecord running = MakeCommand("cmd-run", "sb-1", 4);
  running.state = "running";
  running.exit_code.reset();
  running.signal.reset();
  running.timed_out = false;
  running.ended_ms = 0;
  ASSERT_TRUE(store_->PutCommand(running));
  got = store_->GetCommand("sb-1", "cmd-run");
  ASSERT_TRUE(got);
  ExpectSame(*got, running);
  EXPECT_FALSE(got->exit_code.has_value());
  EXPECT_FALSE(got->signal.has_value());

  // Update via Put: the command ends with exit code 0 (not NULL), no signal.
  running.state = "exited";
  running.exit_code = 0;
  running.ended_ms = 77;
  ASSERT_TRUE(store_->PutCommand(running));
  got = store_->GetCommand("sb-1", "cmd-run");
  ASSERT_TRUE(got);
  ExpectSame(*got, running);
  ASSERT_TRUE(got->exit_code.has_value());
  EXPECT_EQ(*got->exit_code, 0);
}

TEST_F(StoreTest, CommandIsScopedToItsSandbox) {
  ASSERT_TRUE(store_->PutSandbox(MakeSandbox("sb-1", 1)));
  ASSERT_TRUE(store_->PutSandbox(MakeSandbox("sb-2", 2)));
  ASSERT_TRUE(store_->PutCommand(MakeCommand("cmd-1", "sb-1", 1)));
  auto wrong = store_->GetCommand("sb-2", "cmd-1");
  ASSERT_FALSE(wrong);
  EXPECT_EQ(wrong.error().code, Errc::kNotFound);
}

TEST_F(StoreTest, CommandForMissingSandboxIsConflict) {
  auto st = store_->PutCommand(MakeCommand("cmd-1", "sb-ghost", 1));
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().code, Errc::kConflict);
  EXPECT_NE(st.error().message.find("put command cmd-1"), std::string::npos) << st.error().message;
  EXPECT_NE(st.error().message.find("FOREIGN KEY"), std::string::npos) << st.error().message;
}

TEST_F(StoreTest, ListCommandsFiltersAndOrders) {
  ASSERT_TRUE(store_->PutSandbox(MakeSandbox("sb-1", 1)));
  ASSERT_TRUE(store_->PutSandbox(MakeSandbox("sb-2", 2)));
  ASSERT_TRUE(store_->PutCommand(MakeCommand("cmd-c", "sb-1", 3)));
  ASSERT_TRUE(store_->PutCommand(MakeCommand("cmd-a", "sb-1", 1)));
  ASSERT_TRUE(store_->PutCommand(MakeCommand("cmd-x", "sb-2", 1)));
  ASSERT_TRUE(store_->PutCommand(MakeCommand("cmd-b", "sb-1", 2)));
  auto list = store_->ListCommands("sb-1");
  ASSERT_TRUE(list) << list.error().message;
  std::vector<std::string> ids;
  for (const auto& c : *list) ids.push_back(c.id);
  EXPECT_EQ(ids, (std::vector<std::string>{"cmd-a", "cmd-b", "cmd-c"}));
  ExpectSame((*list)[1], MakeCommand("cmd-b", "sb-1", 2));
  auto none = store_->ListCommands("sb-none");
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->empty());
}

TEST_F(StoreTest, DeleteSandboxCascadesToCommands) {
  ASSERT_TRUE(store_->PutSandbox(MakeSandbox("sb-1", 1)));
  ASSERT_TRUE(store_->PutSandbox(MakeSandbox("sb-2", 2)));
  ASSERT_TRUE(store_->PutCommand(MakeCommand("cmd-1", "sb-1", 1)));
  ASSERT_TRUE(store_->PutCommand(MakeCommand("cmd-2", "sb-1", 2)));
  ASSERT_TRUE(store_->PutCommand(MakeCommand("cmd-3", "sb-2", 1)));
  ASSERT_TRUE(store_->DeleteSandbox("sb-1"));
  EXPECT_EQ(store_->GetSandbox("sb-1").error().code, Errc::kNotFound);
  EXPECT_EQ(store_->GetCommand("sb-1", "cmd-1").error().code, Errc::kNotFound);
  EXPECT_TRUE(store_->ListCommands("sb-1")->empty());
  EXPECT_EQ(store_->ListCommands("sb-2")->size(), 1u);
  // The command id is free again (it is the commands table's primary key).
  ASSERT_TRUE(store_->PutCommand(MakeCommand("cmd-1", "sb-2", 2)));
  // Deleting a missing sandbox is fine.
  EXPECT_TRUE(store_->DeleteSandbox("sb-1"));
  EXPECT_TRUE(store_->DeleteSandbox("sb-never"));
}

TEST_F(StoreTest, CascadeAlsoWorksOnRawDelete) {
  // Proves the FK is really declared ON DELETE CASCADE (DeleteSandbox deletes explicitly too).
  ASSERT_TRUE(store_->PutSandbox(MakeSandbox("sb-1", 1)));
  ASSERT_TRUE(store_->PutCommand(MakeCommand("cmd-1", "sb-1", 1)));
  RawExec(path_, "PRAGMA foreign_keys = ON; DELETE FROM sandboxes WHERE id = 'sb-1';");
  EXPECT_TRUE(store_->ListCommands("sb-1")->empty());
}

TEST_F(StoreTest, AllocateStreamIncrementsAcrossReopen) {
  SandboxRecord r = MakeSandbox("sb-1", 1);
  r.next_stream = 1;
  ASSERT_TRUE(store_->PutSandbox(r));
  EXPECT_EQ(*store_->AllocateStream("sb-1"), 1u);
  EXPECT_EQ(*store_->AllocateStream("sb-1"), 2u);
  Reopen();
  EXPECT_EQ(*store_->AllocateStream("sb-1"), 3u);
  EXPECT_EQ(store_->GetSandbox("sb-1")->next_stream, 4u);

  // Stream 0 is reserved: a record stored with next_stream 0 starts at 1.
  SandboxRecord z = MakeSandbox("sb-0", 1);
  z.next_stream = 0;
  ASSERT_TRUE(store_->PutSandbox(z));
  EXPECT_EQ(*store_->AllocateStream("sb-0"), 1u);
  EXPECT_EQ(*store_->AllocateStream("sb-0"), 2u);

  // The u32 never wraps.
  SandboxRecord full = MakeSandbox("sb-full", 1);
  full.next_stream = UINT32_MAX - 1;
  ASSERT_TRUE(store_->PutSandbox(full));
  EXPECT_EQ(*store_->AllocateStream("sb-full"), UINT32_MAX - 1);
  auto exhausted = store_->AllocateStream("sb-full");
  ASSERT_FALSE(exhausted);
  EXPECT_EQ(exhausted.error().code, Errc::kResourceExhausted);
}

TEST_F(StoreTest, AllocateStreamIsAtomicAcrossThreads) {
  SandboxRecord r = MakeSandbox("sb-1", 1);
  r.next_stream = 1;
  ASSERT_TRUE(store_->PutSandbox(r));
  constexpr int kThreads = 4, kEach = 25;
  std::vector<std::vector<uint32_t>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        auto s = store_->AllocateStream("sb-1");
        if (s) got[t].push_back(*s);
      }
    });
  }
  for (auto& th : threads) th.join();
  std::vector<uint32_t> all;
  for (auto& v : got) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  ASSERT_EQ(all.size(), size_t{kThreads * kEach});
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i], i + 1);
}

TEST_F(StoreTest, OperationRoundTripAndUpdate) {
  OperationRecord op = MakeOperation("op-1", 10, "running");
  ASSERT_TRUE(store_->PutOperation(op));
  auto got = store_->GetOperation("op-1");
  ASSERT_TRUE(got) << got.error().message;
  ExpectSame(*got, op);
  op.state = "succeeded";
  op.result = Json::array({1, 2, 3});  // any JSON, not only objects
  op.request = nullptr;
  op.error_code.clear();
  op.error_message.clear();
  op.updated_ms = 50;
  ASSERT_TRUE(store_->PutOperation(op));
  got = store_->GetOperation("op-1");
  ASSERT_TRUE(got);
  ExpectSame(*got, op);
  EXPECT_TRUE(got->request.is_null());
}

TEST_F(StoreTest, ListOperationsNewestFirstWithLimitAndFilter) {
  ASSERT_TRUE(store_->PutOperation(MakeOperation("op-a", 100, "succeeded")));
  ASSERT_TRUE(store_->PutOperation(MakeOperation("op-b", 300, "running")));
  ASSERT_TRUE(store_->PutOperation(MakeOperation("op-c", 200, "failed")));
  ASSERT_TRUE(store_->PutOperation(MakeOperation("op-d", 300, "pending")));  // tie with op-b
  ASSERT_TRUE(store_->PutOperation(MakeOperation("op-e", 50, "running")));
  auto ids = [](const std::vector<OperationRecord>& v) {
    std::vector<std::string> out;
    for (const auto& o : v) out.push_back(o.id);
    return out;
  };
  auto all = store_->ListOperations();
  ASSERT_TRUE(all) << all.error().message;
  EXPECT_EQ(ids(*all), (std::vector<std::string>{"op-b", "op-d", "op-c", "op-a", "op-e"}));
  ExpectSame((*all)[2], MakeOperation("op-c", 200, "failed"));

  auto two = store_->ListOperations(2);
  ASSERT_TRUE(two);
  EXPECT_EQ(ids(*two), (std::vector<std::string>{"op-b", "op-d"}));

  auto running = store_->ListOperations(0, "running");
  ASSERT_TRUE(running);
  EXPECT_EQ(ids(*running), (std::vector<std::string>{"op-b", "op-e"}));

  auto one_running = store_->ListOperations(1, "running");
  ASSERT_TRUE(one_running);
  EXPECT_EQ(ids(*one_running), (std::vector<std::string>{"op-b"}));

  auto none = store_->ListOperations(0, "cancelled");
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->empty());

  auto huge = store_->ListOperations(SIZE_MAX);
  ASSERT_TRUE(huge);
  EXPECT_EQ(huge->size(), 5u);
}

TEST_F(StoreTest, TemplatesByNameTagAndDigest) {
  const std::string d1 = "sha256:" + std::string(64, '1'), d2 = "sha256:" + std::string(64, '2');
  TemplateRecord latest = MakeTemplate("base", "latest", d1, 10);
  TemplateRecord v1 = MakeTemplate("base", "v1", d1, 5);
  TemplateRecord py = MakeTemplate("python", "3.11", d2, 20);
  py.config = Json::object();
  ASSERT_TRUE(store_->PutTemplate(py));
  ASSERT_TRUE(store_->PutTemplate(latest));
  ASSERT_TRUE(store_->PutTemplate(v1));

  auto got = store_->GetTemplate("base", "latest");
  ASSERT_TRUE(got) << got.error().message;
  ExpectSame(*got, latest);
  got = store_->GetTemplate("python", "3.11");
  ASSERT_TRUE(got);
  ExpectSame(*got, py);

  // Two tags share d1: the newest answers.
  auto by_digest = store_->GetTemplateByDigest(d1);
  ASSERT_TRUE(by_digest);
  ExpectSame(*by_digest, latest);

  auto list = store_->ListTemplates();
  ASSERT_TRUE(list);
  ASSERT_EQ(list->size(), 3u);
  EXPECT_EQ((*list)[0].tag, "latest");
  EXPECT_EQ((*list)[1].tag, "v1");
  EXPECT_EQ((*list)[2].name, "python");

  // Re-tagging "latest" to a new digest updates in place.
  latest.digest = d2;
  latest.created_ms = 30;
  ASSERT_TRUE(store_->PutTemplate(latest));
  got = store_->GetTemplate("base", "latest");
  ASSERT_TRUE(got);
  ExpectSame(*got, latest);
  EXPECT_EQ(store_->ListTemplates()->size(), 3u);
  by_digest = store_->GetTemplateByDigest(d1);
  ASSERT_TRUE(by_digest);
  ExpectSame(*by_digest, v1);

  // Deleting a name leaves the others, also those of the same digest; a missing one is Ok.
  ASSERT_TRUE(store_->DeleteTemplate("base", "v1"));
  EXPECT_EQ(store_->GetTemplate("base", "v1").error().code, Errc::kNotFound);
  EXPECT_EQ(store_->ListTemplates()->size(), 2u);
  EXPECT_EQ(store_->GetTemplateByDigest(d1).error().code, Errc::kNotFound);
  EXPECT_TRUE(store_->GetTemplateByDigest(d2));
  EXPECT_TRUE(store_->DeleteTemplate("base", "v1"));
}

TEST_F(StoreTest, Settings) {
  auto missing = store_->GetSetting("api_key_hash");
  ASSERT_TRUE(missing);
  EXPECT_FALSE(missing->has_value());
  ASSERT_TRUE(store_->PutSetting("api_key_hash", "abc"));
  ASSERT_TRUE(store_->PutSetting("empty", ""));
  EXPECT_EQ(**store_->GetSetting("api_key_hash"), "abc");
  EXPECT_EQ(**store_->GetSetting("empty"), "");
  ASSERT_TRUE(store_->PutSetting("api_key_hash", "def"));
  EXPECT_EQ(**store_->GetSetting("api_key_hash"), "def");
}

TEST_F(StoreTest, EverythingPersistsAcrossReopen) {
  SandboxRecord sb = MakeSandbox("sb-1", 1);
  CommandRecord cmd = MakeCommand("cmd-1", "sb-1", 1);
  cmd.exit_code.reset();
  OperationRecord op = MakeOperation("op-1", 5, "pending");
  TemplateRecord t = MakeTemplate("base", "latest", "sha256:ab", 3);
  ASSERT_TRUE(store_->PutSandbox(sb));
  ASSERT_TRUE(store_->PutCommand(cmd));
  ASSERT_TRUE(store_->PutOperation(op));
  ASSERT_TRUE(store_->PutTemplate(t));
  ASSERT_TRUE(store_->PutSetting("k", "v"));
  store_.reset();  // closes: checkpoints and removes the WAL
  Reopen();
  ExpectSame(*store_->GetSandbox("sb-1"), sb);
  ExpectSame(*store_->GetCommand("sb-1", "cmd-1"), cmd);
  ExpectSame(*store_->GetOperation("op-1"), op);
  ExpectSame(*store_->GetTemplate("base", "latest"), t);
  EXPECT_EQ(**store_->GetSetting("k"), "v");
}

TEST_F(StoreTest, WritesAreVisibleToAnotherConnectionBeforeClose) {
  // Every Put is committed when it returns: a second Store (another process, in effect)
  // sees it while the first is still open.
  ASSERT_TRUE(store_->PutSandbox(MakeSandbox("sb-1", 1)));
  auto other = Store::Open(path_);
  ASSERT_TRUE(other) << other.error().message;
  auto got = (*other)->GetSandbox("sb-1");
  ASSERT_TRUE(got) << got.error().message;
  ExpectSame(*got, MakeSandbox("sb-1", 1));
  ASSERT_TRUE((*other)->PutSetting("from", "other"));
  EXPECT_EQ(**store_->GetSetting("from"), "other");
}

TEST_F(StoreTest, CorruptRowsAreErrorsNotCrashes) {
  ASSERT_TRUE(store_->PutSandbox(MakeSandbox("sb-1", 1)));
  ASSERT_TRUE(store_->PutSandbox(MakeSandbox("sb-2", 2)));
  ASSERT_TRUE(store_->PutCommand(MakeCommand("cmd-1", "sb-1", 1)));
  ASSERT_TRUE(store_->PutCommand(MakeCommand("cmd-2", "sb-1", 2)));
  ASSERT_TRUE(store_->PutOperation(MakeOperation("op-1", 1, "running")));
  ASSERT_TRUE(store_->PutTemplate(MakeTemplate("base", "latest", "sha256:ab", 1)));
  RawExec(path_,
          "UPDATE sandboxes SET spec = '{\"limits\": {garbage' WHERE id = 'sb-1';"
          "UPDATE commands SET spec = '' WHERE id = 'cmd-1';"
          "UPDATE commands SET exit_code = 99999999999 WHERE id = 'cmd-2';"
          "UPDATE operations SET result = 'nul' WHERE id = 'op-1';"
          "UPDATE templates SET config = '[1,2' WHERE name = 'base';");

  auto sb = store_->GetSandbox("sb-1");
  ASSERT_FALSE(sb);
  EXPECT_EQ(sb.error().code, Errc::kInternal);
  EXPECT_NE(sb.error().message.find("sb-1"), std::string::npos) << sb.error().message;
  EXPECT_NE(sb.error().message.find("spec"), std::string::npos) << sb.error().message;
  EXPECT_TRUE(store_->GetSandbox("sb-2"));  // the healthy row still reads
  EXPECT_FALSE(store_->ListSandboxes());

  auto c1 = store_->GetCommand("sb-1", "cmd-1");
  ASSERT_FALSE(c1);
  EXPECT_EQ(c1.error().code, Errc::kInternal);
  auto c2 = store_->GetCommand("sb-1", "cmd-2");
  ASSERT_FALSE(c2);
  EXPECT_NE(c2.error().message.find("exit_code"), std::string::npos) << c2.error().message;
  EXPECT_FALSE(store_->ListCommands("sb-1"));

  auto op = store_->GetOperation("op-1");
  ASSERT_FALSE(op);
  EXPECT_NE(op.error().message.find("result"), std::string::npos) << op.error().message;
  EXPECT_FALSE(store_->ListOperations());

  EXPECT_FALSE(store_->GetTemplate("base", "latest"));
  EXPECT_FALSE(store_->GetTemplateByDigest("sha256:ab"));
  EXPECT_FALSE(store_->ListTemplates());

  // Rewriting the rows through the Store repairs them.
  ASSERT_TRUE(store_->PutSandbox(MakeSandbox("sb-1", 1)));
  EXPECT_TRUE(store_->GetSandbox("sb-1"));
  EXPECT_TRUE(store_->ListSandboxes());
}

TEST_F(StoreTest, SchemaVersionAndNewerSchemaRefused) {
  store_.reset();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int(st, 0), 4);
  sqlite3_finalize(st);
  ASSERT_EQ(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)), "wal");
  sqlite3_finalize(st);
  sqlite3_close(db);

  RawExec(path_, "PRAGMA user_version = 99");
  auto s = Store::Open(path_);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("newer"), std::string::npos) << s.error().message;
  RawExec(path_, "PRAGMA user_version = 4");
  Reopen();
}

TEST_F(StoreTest, VolumesAreFoundByIdOrNameAndNamesAreUnique) {
  ASSERT_TRUE(store_->PutVolume({"vol-a", "data", 1 << 20, "ready", 10}));
  ASSERT_TRUE(store_->PutVolume({"vol-b", "cache", 2 << 20, "creating", 20}));
  EXPECT_EQ(store_->PutVolume({"vol-c", "data", 1, "ready", 30}).error().code, Errc::kConflict);
  Reopen();
  auto by_name = store_->GetVolume("data");
  ASSERT_TRUE(by_name) << by_name.error().message;
  EXPECT_EQ(by_name->id, "vol-a");
  EXPECT_EQ(by_name->size_bytes, 1 << 20);
  auto by_id = store_->GetVolume("vol-b");
  ASSERT_TRUE(by_id);
  EXPECT_EQ(by_id->name, "cache");
  EXPECT_EQ(by_id->state, "creating");
  EXPECT_EQ(store_->GetVolume("nope").error().code, Errc::kNotFound);
  ASSERT_EQ(store_->ListVolumes()->size(), 2u);
  EXPECT_EQ((*store_->ListVolumes())[0].name, "data");
  ASSERT_TRUE(store_->DeleteVolume("vol-a"));
  ASSERT_TRUE(store_->DeleteVolume("vol-a"));
  EXPECT_EQ(store_->ListVolumes()->size(), 1u);
}

TEST_F(StoreTest, ApiKeysAreStoredByHashWithUniqueNames) {
  ApiKeyRecord a{"key-a", "default", std::string(64, 'a'), "sk-aaaaaa", 10};
  ApiKeyRecord b{"key-b", "ci", std::string(64, 'b'), "sk-bbbbbb", 20};
  ASSERT_TRUE(store_->PutApiKey(a));
  ASSERT_TRUE(store_->PutApiKey(b));
  ApiKeyRecord same_name{"key-c", "ci", std::string(64, 'c'), "sk-cccccc", 30};
  EXPECT_EQ(store_->PutApiKey(same_name).error().code, Errc::kConflict);
  ApiKeyRecord same_hash{"key-d", "other", std::string(64, 'a'), "sk-aaaaaa", 40};
  EXPECT_EQ(store_->PutApiKey(same_hash).error().code, Errc::kConflict);
  a.hash = std::string(64, 'e');  // an update by id (the bootstrap key file changed)
  ASSERT_TRUE(store_->PutApiKey(a));
  Reopen();
  auto list = store_->ListApiKeys();
  ASSERT_TRUE(list) << list.error().message;
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].name, "default");
  EXPECT_EQ((*list)[0].hash, std::string(64, 'e'));
  EXPECT_EQ((*list)[0].hint, "sk-aaaaaa");
  EXPECT_EQ((*list)[1].id, "key-b");
  EXPECT_EQ((*list)[1].created_ms, 20);
  ASSERT_TRUE(store_->DeleteApiKey("key-b"));
  ASSERT_TRUE(store_->DeleteApiKey("key-b"));  // missing is fine
  EXPECT_EQ(store_->ListApiKeys()->size(), 1u);
}

TEST_F(StoreTest, MigrationThreeAddsApiKeysToAVersionTwoDatabase) {
  ASSERT_TRUE(store_->PutSetting("kept", "yes"));
  store_.reset();
  RawExec(path_, "DROP TABLE api_keys");
  RawExec(path_, "DROP TABLE volumes");
  RawExec(path_, "PRAGMA user_version = 2");
  Reopen();
  EXPECT_EQ(store_->GetSetting("kept")->value_or(""), "yes");
  ASSERT_TRUE(store_->PutApiKey({"key-a", "default", std::string(64, 'a'), "sk-a", 1}));
  EXPECT_EQ(store_->ListApiKeys()->size(), 1u);
}

TEST_F(StoreTest, MigrationsCreateExpectedIndexes) {
  store_.reset();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db,
                               "SELECT name FROM sqlite_schema WHERE type = 'index' AND "
                               "name NOT LIKE 'sqlite_autoindex%' ORDER BY name",
                               -1, &st, nullptr),
            SQLITE_OK);
  std::vector<std::string> names;
  while (sqlite3_step(st) == SQLITE_ROW) {
    names.emplace_back(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)));
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  EXPECT_EQ(names,
            (std::vector<std::string>{"commands_sandbox", "operations_created", "operations_state",
                                      "sandboxes_created", "snapshots_sandbox",
                                      "templates_digest"}));
}

TEST(StoreFiles, DatabaseAndWalAreMode0600) {
  auto dir = sys::TempDir::Create("/tmp", "space-store-test-");
  ASSERT_TRUE(dir);
  const std::string path = dir->path() + "/space.db";
  mode_t old = ::umask(0);  // prove the modes do not come from the umask
  auto s = Store::Open(path);
  ::umask(old);
  ASSERT_TRUE(s) << s.error().message;
  ASSERT_TRUE((*s)->PutSetting("k", "v"));  // the WAL exists once something is written
  for (const char* suffix : {"", "-wal", "-shm"}) {
    struct stat st;
    std::string p = path + suffix;
    ASSERT_EQ(::stat(p.c_str(), &st), 0) << p;
    EXPECT_EQ(st.st_mode & 0777, 0600u) << p;
  }
}

TEST(StoreFiles, ExistingLooseModesAreTightened) {
  auto dir = sys::TempDir::Create("/tmp", "space-store-test-");
  ASSERT_TRUE(dir);
  const std::string path = dir->path() + "/space.db";
  { ASSERT_TRUE(Store::Open(path)); }
  ASSERT_EQ(::chmod(path.c_str(), 0644), 0);
  auto s = Store::Open(path);
  ASSERT_TRUE(s);
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST(StoreFiles, UnopenablePathIsAnError) {
  auto dir = sys::TempDir::Create("/tmp", "space-store-test-");
  ASSERT_TRUE(dir);
  // A directory where the database file should be.
  auto s = Store::Open(dir->path());
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find(dir->path()), std::string::npos) << s.error().message;
  EXPECT_FALSE(Store::Open(""));
}

TEST_F(StoreTest, ConcurrentPutsAndGetsFromFourThreads) {
  for (int t = 0; t < 4; ++t) {
    ASSERT_TRUE(store_->PutSandbox(MakeSandbox("sb-" + std::to_string(t), t)));
  }
  constexpr int kEach = 40;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      const std::string sb = "sb-" + std::to_string(t);
      for (int i = 0; i < kEach; ++i) {
        CommandRecord c = MakeCommand("cmd-" + std::to_string(t) + "-" + std::to_string(i), sb,
                                      static_cast<uint32_t>(i + 1));
        if (!store_->PutCommand(c)) ++failures;
        auto got = store_->GetCommand(sb, c.id);
        if (!got || got->stream != c.stream || got->spec != c.spec) ++failures;
        // Reads of other threads' sandboxes interleave with their writes.
        if (!store_->GetSandbox("sb-" + std::to_string((t + 1) % 4))) ++failures;
        if (i % 10 == 0 && !store_->ListCommands(sb)) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  for (int t = 0; t < 4; ++t) {
    auto list = store_->ListCommands("sb-" + std::to_string(t));
    ASSERT_TRUE(list);
    EXPECT_EQ(list->size(), size_t{kEach});
  }
}

// Not asserted: prints the durable PutCommand rate (each Put is one fsync'd commit).
TEST_F(StoreTest, BenchPutCommandRate) {
  ASSERT_TRUE(store_->PutSandbox(MakeSandbox("sb-1", 1)));
  constexpr int kN = 300;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kN; ++i) {
    ASSERT_TRUE(store_->PutCommand(MakeCommand("cmd-" + std::to_string(i), "sb-1", i + 1)));
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int64_t reads = 0;
  auto t1 = std::chrono::steady_clock::now();
  for (int i = 0; i < kN; ++i)
    reads += store_->GetCommand("sb-1", "cmd-" + std::to_string(i)) ? 1 : 0;
  double rsecs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  EXPECT_EQ(reads, kN);
  std::printf(
      "[bench] PutCommand: %d puts in %.3f s = %.0f puts/s (%.2f ms each, synchronous=FULL)\n", kN,
      secs, kN / secs, secs * 1000 / kN);
  std::printf("[bench] GetCommand: %d gets in %.3f s = %.0f gets/s\n", kN, rsecs, kN / rsecs);
}

}  // namespace
}  // namespace space::store

namespace space::store {
namespace {

TEST(SnapshotStoreTest, RoundTripListAndDelete) {
  auto dir = sys::TempDir::Create();
  ASSERT_TRUE(dir);
  auto store = Store::Open(dir->path() + "/space.db");
  ASSERT_TRUE(store);
  SnapshotRecord a{"snap-a", "sb-1", "filesystem", "ready", {{"template", "base:latest"}}, 42, 10};
  SnapshotRecord b{"snap-b", "sb-2", "filesystem", "creating", Json::object(), 0, 20};
  ASSERT_TRUE((*store)->PutSnapshot(a));
  ASSERT_TRUE((*store)->PutSnapshot(b));
  auto got = (*store)->GetSnapshot("snap-a");
  ASSERT_TRUE(got);
  EXPECT_EQ(got->sandbox_id, "sb-1");
  EXPECT_EQ(got->source["template"], "base:latest");
  EXPECT_EQ(got->size, 42);
  b.state = "ready";
  ASSERT_TRUE((*store)->PutSnapshot(b));
  EXPECT_EQ((*store)->GetSnapshot("snap-b")->state, "ready");
  EXPECT_EQ((*store)->ListSnapshots()->size(), 2u);
  EXPECT_EQ((*store)->ListSnapshots("sb-2")->size(), 1u);
  ASSERT_TRUE((*store)->DeleteSnapshot("snap-a"));
  EXPECT_EQ((*store)->GetSnapshot("snap-a").error().code, Errc::kNotFound);
  // Deleting its sandbox keeps a snapshot.
  ASSERT_TRUE((*store)->DeleteSandbox("sb-2"));
  EXPECT_TRUE((*store)->GetSnapshot("snap-b"));
}

}  // namespace
}  // namespace space::store
