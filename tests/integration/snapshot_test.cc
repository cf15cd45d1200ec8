// Snapshots and fork of real sandboxes: consistency, independence, lifetimes, schedules,
// and bad input.
#include "tests/integration/harness.h"

namespace space::testing {
namespace {

using namespace std::chrono_literals;

class SnapshotTest : public SharedDaemonTest<SnapshotTest> {
 protected:
  std::string Snapshot(const std::string& id) {
    auto r = c().Call("POST", "/v1/sandboxes/" + id + "/snapshots?wait=60s");
    EXPECT_TRUE(r) << (r ? "" : r.error().message);
    if (!r) return "";
    EXPECT_EQ((*r)["snapshot"]["state"], "ready") << r->dump();
    return (*r)["snapshot"]["id"].get<std::string>();
  }
  std::string Cat(const std::string& id, const std::string& path) {
    auto f = c().ReadFile(id, path);
    return f ? *f : "<" + f.error().message + ">";
  }
};

TEST_F(SnapshotTest, CreateFromSnapshotSeesThatMoment) {
  std::string id = CreateSandbox(c());
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(c().WriteFile(id, "/root/state.txt", "v1"));
  // A command keeps writing while the snapshot is taken: the sandbox is frozen for it.
  auto writer = c().StartCommand(id, {{"cmd", "i=0; while [ $i -lt 100 ]; do echo $i >> /root/log; i=$((i+1)); sleep 0.01; done"}});
  ASSERT_TRUE(writer);
  std::string snap = Snapshot(id);
  ASSERT_FALSE(snap.empty());
  ASSERT_TRUE(c().WriteFile(id, "/root/state.txt", "v2"));

  auto from = c().CreateSandboxAndWait({{"snapshot", snap}}, 60s);
  ASSERT_TRUE(from) << from.error().message;
  std::string child = (*from)["id"];
  EXPECT_EQ(Cat(child, "/root/state.txt"), "v1");
  EXPECT_EQ(Cat(id, "/root/state.txt"), "v2");
  // The log in the snapshot is a consistent prefix: whole lines 0..k.
  std::string log = Cat(child, "/root/log");
  ASSERT_FALSE(log.empty());
  ASSERT_EQ(log.back(), '\n');
  int expect = 0;
  size_t pos = 0;
  while (pos < log.size()) {
    size_t nl = log.find('\n', pos);
    EXPECT_EQ(log.substr(pos, nl - pos), std::to_string(expect));
    ++expect;
    pos = nl + 1;
  }
  // The child is independent of the parent.
  ASSERT_TRUE(c().WriteFile(child, "/root/child-only", "x"));
  EXPECT_FALSE(c().Stat(id, "/root/child-only"));
  auto r = c().Run(child, std::vector<std::string>{"cat", "/root/state.txt"});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->out, "v1");
}

TEST_F(SnapshotTest, SnapshotsOutliveTheirSandboxUnlessAsked) {
  std::string id = CreateSandbox(c());
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(c().WriteFile(id, "/root/keep", "kept"));
  std::string s1 = Snapshot(id);
  std::string s2 = Snapshot(id);
  auto listed = c().Call("GET", "/v1/sandboxes/" + id + "/snapshots");
  ASSERT_TRUE(listed);
  EXPECT_EQ((*listed)["snapshots"].size(), 2u);
  auto one = c().Call("GET", "/v1/snapshots/" + s1);
  ASSERT_TRUE(one);
  EXPECT_EQ((*one)["sandbox_id"], id);
  EXPECT_EQ((*one)["kind"], "filesystem");

  ASSERT_TRUE(c().DeleteSandboxAndWait(id, 60s));
  auto still = c().Call("GET", "/v1/snapshots/" + s1);
  ASSERT_TRUE(still) << "deleting a sandbox must keep its snapshots";
  auto revived = c().CreateSandboxAndWait({{"snapshot", s2}}, 60s);
  ASSERT_TRUE(revived) << revived.error().message;
  std::string rid = (*revived)["id"];
  EXPECT_EQ(Cat(rid, "/root/keep"), "kept");

  // Deleting a snapshot; then deleting a sandbox with its snapshots.
  ASSERT_TRUE(c().Call("DELETE", "/v1/snapshots/" + s1));
  auto gone = c().Call("GET", "/v1/snapshots/" + s1);
  ASSERT_FALSE(gone);
  EXPECT_EQ(gone.error().code, Errc::kNotFound);
  std::string s3 = Snapshot(rid);
  auto del = c().Call("DELETE", "/v1/sandboxes/" + rid + "?wait=60s&delete_snapshots=1");
  ASSERT_TRUE(del) << del.error().message;
  EXPECT_FALSE(c().Call("GET", "/v1/snapshots/" + s3));
  EXPECT_FALSE(sys::Exists(daemon_->data_dir() + "/storage/pool/snapshots/" + s3));
  ASSERT_TRUE(c().Call("DELETE", "/v1/snapshots/" + s2));
}

TEST_F(SnapshotTest, ForkMakesIndependentCopiesOfARunningSandbox) {
  std::string id = CreateSandbox(c());
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(c().WriteFile(id, "/root/origin", "parent"));
  auto forked = c().Call("POST", "/v1/sandboxes/" + id + "/fork?wait=60s", Json{{"count", 3}});
  ASSERT_TRUE(forked) << forked.error().message;
  auto op = (*forked)["operation"];
  ASSERT_EQ(op["state"], "succeeded") << forked->dump();
  auto kids = op["result"]["sandboxes"];
  ASSERT_EQ(kids.size(), 3u);
  std::vector<std::string> ids;
  for (const auto& k : kids) {
    EXPECT_EQ(k["state"], "running") << k.dump();
    ids.push_back(k["id"]);
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(Cat(ids[i], "/root/origin"), "parent");
    ASSERT_TRUE(c().WriteFile(ids[i], "/root/me", std::to_string(i)));
  }
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(Cat(ids[i], "/root/me"), std::to_string(i));
  EXPECT_FALSE(c().Stat(id, "/root/me"));
  // The parent keeps running and its temporary fork snapshot is gone.
  auto parent = c().GetSandbox(id);
  ASSERT_TRUE(parent);
  EXPECT_EQ((*parent)["state"], "running");
  auto r = c().Run(id, std::vector<std::string>{"echo", "alive"});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->out, "alive\n");
  for (const auto& k : ids) ASSERT_TRUE(c().DeleteSandboxAndWait(k, 60s));
}

TEST_F(SnapshotTest, BadRequestsAreRefusedCleanly) {
  std::string id = CreateSandbox(c());
  ASSERT_FALSE(id.empty());
  for (const Json& body : {Json{{"count", 0}}, Json{{"count", 100000}}, Json{{"count", "3"}},
                           Json{{"count", -1}}}) {
    auto r = c().Call("POST", "/v1/sandboxes/" + id + "/fork", body);
    ASSERT_FALSE(r) << body.dump();
    EXPECT_EQ(r.error().code, Errc::kInvalidArgument) << body.dump();
  }
  auto unknown = c().CreateSandbox({{"snapshot", "snap-aaaaaaaaaaaaaaaa"}});
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code, Errc::kNotFound);
  auto both = c().CreateSandbox({{"snapshot", "snap-aaaaaaaaaaaaaaaa"}, {"template", "base"}});
  ASSERT_FALSE(both);
  EXPECT_EQ(both.error().code, Errc::kInvalidArgument);
  auto missing = c().Call("POST", "/v1/sandboxes/sb-aaaaaaaaaaaaaaaa/snapshots");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, Errc::kNotFound);
  // Suspended sandboxes can be snapshotted but not forked.
  ASSERT_TRUE(c().Call("POST", "/v1/sandboxes/" + id + "/suspend?wait=60s"));
  auto fork_suspended = c().Call("POST", "/v1/sandboxes/" + id + "/fork", Json{{"count", 1}});
  ASSERT_FALSE(fork_suspended);
  EXPECT_EQ(fork_suspended.error().code, Errc::kConflict);
  std::string snap = Snapshot(id);
  EXPECT_FALSE(snap.empty());
  // A snapshot request racing another operation on the sandbox is refused, not queued.
  auto wake = c().Call("POST", "/v1/sandboxes/" + id + "/wake");
  ASSERT_TRUE(wake);
  auto racing = c().Call("POST", "/v1/sandboxes/" + id + "/snapshots");
  if (!racing) {
    EXPECT_EQ(racing.error().code, Errc::kConflict);
  }
  ASSERT_TRUE(c().WaitOperation((*wake)["operation"]["id"].get<std::string>(), 60s));
  // A wake that was over before the snapshot request came lets the snapshot run: wait for
  // it too, or the delete below would meet it.
  if (racing) ASSERT_TRUE(c().WaitOperation((*racing)["operation"]["id"].get<std::string>(), 60s));
  ASSERT_TRUE(c().DeleteSandboxAndWait(id, 60s));
  // Deleted sandbox: snapshot is not found.
  auto after = c().Call("POST", "/v1/sandboxes/" + id + "/snapshots");
  ASSERT_FALSE(after);
  EXPECT_EQ(after.error().code, Errc::kNotFound);
}

TEST_F(SnapshotTest, ScheduledSnapshotsKeepTheLastN) {
  std::string id = CreateSandbox(c(), {{"snapshot_every", 1}, {"keep_last", 2}});
  ASSERT_FALSE(id.empty());
  std::this_thread::sleep_for(5s);
  auto listed = c().Call("GET", "/v1/sandboxes/" + id + "/snapshots");
  ASSERT_TRUE(listed);
  size_t ready = 0;
  for (const auto& s : (*listed)["snapshots"]) ready += s["state"] == "ready";
  EXPECT_GE(ready, 1u) << listed->dump();
  EXPECT_LE((*listed)["snapshots"].size(), 3u) << listed->dump();  // keep_last + one in flight
  ASSERT_TRUE(c().Call("DELETE", "/v1/sandboxes/" + id + "?wait=60s&delete_snapshots=1"));
}

}  // namespace
}  // namespace space::testing
