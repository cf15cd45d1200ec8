// The runtime plugin conformance kit (docs/runtime-plugins.md): drives one plugin through
// the space-runtime/v1 contract, both directly through the adapter and as a runtime of a
// real spaced. The plugin under test is named by SPACE_CONFORMANCE_PLUGIN (an executable;
// its file name is the runtime's name); without it only the contract's own checks (bad
// plugins, written here as small /bin/sh scripts) run.
//
//   SPACE_CONFORMANCE_PLUGIN=/path/to/plugin runtime_conformance_test
#include <signal.h>
#include <sys/stat.h>

#include <dirent.h>

#include <fstream>

#include "runtime/plugin/plugin.h"
#include "tests/integration/harness.h"

namespace space::testing {
namespace {

using namespace std::chrono_literals;

std::string PluginUnderTest() {
  const char* p = std::getenv("SPACE_CONFORMANCE_PLUGIN");
  return p && *p ? std::string(p) : std::string();
}

std::string BaseName(const std::string& p) { return p.substr(p.find_last_of('/') + 1); }

void WriteExecutable(const std::string& path, const std::string& text, mode_t mode = 0755) {
  ASSERT_TRUE(sys::WriteFileAtomic(path, text, mode));
  ::chmod(path.c_str(), mode);
}

// Pids of processes whose command line or cgroup names `needle`.
std::vector<pid_t> ProcessesMentioning(const std::string& needle) {
  std::vector<pid_t> out;
  DIR* d = ::opendir("/proc");
  while (dirent* e = d ? ::readdir(d) : nullptr) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    pid_t pid = std::atoi(e->d_name);
    if (pid == ::getpid()) continue;
    std::string base = std::string("/proc/") + e->d_name;
    // Zombies hold nothing but their pid (and this host's init may be slow to reap them).
    auto stat = sys::ReadFile(base + "/stat");
    size_t rp = stat ? stat->rfind(')') : std::string::npos;
    if (rp == std::string::npos || rp + 2 >= stat->size() || (*stat)[rp + 2] == 'Z') continue;
    auto cmd = sys::ReadFile(base + "/cmdline");
    auto cg = sys::ReadFile(base + "/cgroup");
    if ((cmd && cmd->find(needle) != std::string::npos) || (cg && cg->find(needle) != std::string::npos))
      out.push_back(pid);
  }
  if (d) ::closedir(d);
  return out;
}

// A scratch host with a busybox root and the adapter's directories.
class Scratch {
 public:
  Scratch() {
    auto t = sys::TempDir::Create("/tmp", "space-conf-");
    if (!t) throw std::runtime_error(t.error().message);
    dir_ = std::move(*t);
    ::chmod(dir_.path().c_str(), 0711);
  }
  const std::string& path() const { return dir_.path(); }
  std::string MakeRoot(const std::string& name) {
    std::string root = path() + "/" + name;
    (void)sys::MkdirAll(root + "/bin");
    (void)sys::MkdirAll(root + "/root");
    (void)sys::MkdirAll(root + "/tmp");
    auto bb = sys::ReadFile("/bin/busybox");
    if (bb) (void)sys::WriteFileAtomic(root + "/bin/busybox", *bb, 0755);
    for (const char* l : {"sh", "echo", "cat", "sleep", "ls"})
      (void)::symlink("busybox", (root + "/bin/" + l).c_str());
    return root;
  }
  runtime::PluginOptions Options(const std::string& exe) {
    runtime::PluginOptions o;
    o.name = BaseName(exe);
    o.executable = exe;
    o.state_dir = path() + "/state/" + o.name;
    o.handle_dir = path() + "/handles/" + o.name;
    o.agent_binary = BinDir() + "/space-agent";
    return o;
  }

 private:
  sys::TempDir dir_;
};

runtime::InstanceSpec Spec(const std::string& root) {
  runtime::InstanceSpec s;
  s.id = NewId("sb");
  s.rootfs = root;
  s.hostname = "conformance";
  s.limits.memory_bytes = 256ll << 20;
  s.limits.pids = 128;
  return s;
}

// ------------------------------------------------------------ the contract's own checks

class ContractTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root";
  }
  // A /bin/sh plugin whose `version` and `info` are proper and whose other verbs run `body`.
  std::string ShPlugin(const std::string& name, const std::string& body,
                       const std::string& info_extra = "") {
    std::string exe = s_.path() + "/" + name;
    WriteExecutable(exe, "#!/bin/sh\n"
                         "case \"$1\" in\n"
                         "version) echo '{\"version\":\"space-runtime/v1\",\"supported_versions\":[\"space-runtime/v1\"]}'; exit 0;;\n"
                         "info) echo '{\"version\":\"space-runtime/v1\",\"available\":true," + info_extra +
                             "\"capabilities\":{\"pause\":true}}'; exit 0;;\n"
                         "list) echo '{\"version\":\"space-runtime/v1\",\"ids\":[]}'; exit 0;;\n"
                         "destroy) echo '{\"version\":\"space-runtime/v1\"}'; exit 0;;\n"
                         "esac\n" + body + "\n");
    return exe;
  }
  Result<std::unique_ptr<runtime::Runtime>> Load(const std::string& exe) {
    return runtime::CreatePluginRuntime(s_.Options(exe));
  }
  Scratch s_;
};

TEST_F(ContractTest, HangingPluginIsKilledAtItsTimeout) {
  std::string pidfile = s_.path() + "/hang.pid";
  auto exe = ShPlugin("hang", "echo $$ > " + pidfile + "; sleep 1000 & wait",
                      "\"timeouts_ms\":{\"start\":1500},");
  auto rt = Load(exe);
  ASSERT_TRUE(rt);
  auto t0 = std::chrono::steady_clock::now();
  auto st = (*rt)->Start(Spec(s_.MakeRoot("r")));
  auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().code, Errc::kDeadlineExceeded) << st.error().message;
  EXPECT_NE(st.error().message.find("process group was killed"), std::string::npos) << st.error().message;
  EXPECT_LT(took, 10s);
  auto pid = sys::ReadFile(pidfile);
  ASSERT_TRUE(pid);
  EXPECT_NE(::kill(std::atoi(pid->c_str()), 0), 0) << "the hanging plugin still runs";
  EXPECT_TRUE(ProcessesMentioning(pidfile).empty());
}

TEST_F(ContractTest, GarbageReplyIsAnError) {
  auto exe = ShPlugin("garbage", "echo 'this is not json {'; exit 0");
  auto rt = Load(exe);
  ASSERT_TRUE(rt);
  auto st = (*rt)->Pause("sb-aaaaaaaaaaaaaaaa");
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().code, Errc::kInternal);
  EXPECT_NE(st.error().message.find("not a JSON object"), std::string::npos) << st.error().message;
}

TEST_F(ContractTest, NonZeroExitWithErrorObjectKeepsItsCode) {
  auto exe = ShPlugin("errobj", "echo '{\"version\":\"space-runtime/v1\",\"error\":{\"code\":\"not_found\",\"message\":\"no such box\"}}'; exit 3");
  auto rt = Load(exe);
  ASSERT_TRUE(rt);
  auto st = (*rt)->Resume("sb-aaaaaaaaaaaaaaaa");
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().code, Errc::kNotFound);
  EXPECT_NE(st.error().message.find("no such box"), std::string::npos) << st.error().message;
}

TEST_F(ContractTest, NonZeroExitWithoutErrorObjectShowsStderr) {
  auto exe = ShPlugin("noobj", "echo 'runsc exploded: disk on fire' >&2; exit 7");
  auto rt = Load(exe);
  ASSERT_TRUE(rt);
  auto st = (*rt)->Pause("sb-aaaaaaaaaaaaaaaa");
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().code, Errc::kInternal);
  EXPECT_NE(st.error().message.find("exit 7"), std::string::npos) << st.error().message;
  EXPECT_NE(st.error().message.find("disk on fire"), std::string::npos) << st.error().message;
}

TEST_F(ContractTest, NotExecutableIsUnavailableWithReason) {
  std::string exe = s_.path() + "/noexec";
  WriteExecutable(exe, "#!/bin/sh\necho '{}'\n", 0644);
  auto rt = Load(exe);
  ASSERT_TRUE(rt);
  auto d = (*rt)->Describe();
  EXPECT_FALSE(d.available);
  EXPECT_NE(d.why_not.find("not executable"), std::string::npos) << d.why_not;
  auto st = (*rt)->Start(Spec(s_.MakeRoot("r")));
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().code, Errc::kUnavailable);
  EXPECT_NE(st.error().message.find("not executable"), std::string::npos);
}

TEST_F(ContractTest, UnknownContractVersionIsUnavailable) {
  std::string exe = s_.path() + "/future";
  WriteExecutable(exe, "#!/bin/sh\necho '{\"version\":\"space-runtime/v9\",\"supported_versions\":[\"space-runtime/v9\"]}'\n");
  auto rt = Load(exe);
  ASSERT_TRUE(rt);
  auto d = (*rt)->Describe();
  EXPECT_FALSE(d.available);
  EXPECT_NE(d.why_not.find("space-runtime/v9"), std::string::npos) << d.why_not;
}

TEST_F(ContractTest, OversizeReplyIsRefused) {
  auto exe = ShPlugin("big", "yes '{\"padding\":\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}' | head -c 3000000; exit 0");
  auto rt = Load(exe);
  ASSERT_TRUE(rt);
  auto st = (*rt)->Pause("sb-aaaaaaaaaaaaaaaa");
  ASSERT_FALSE(st);
  EXPECT_NE(st.error().message.find("larger than"), std::string::npos) << st.error().message;
}

TEST_F(ContractTest, ProcessLeftBehindIsKilledAndReported) {
  std::string pidfile = s_.path() + "/stray.pid";
  auto exe = ShPlugin("stray", "sleep 1000 >/dev/null 2>&1 </dev/null & echo $! > " + pidfile +
                                   "; echo '{\"version\":\"space-runtime/v1\"}'; exit 0");
  auto rt = Load(exe);
  ASSERT_TRUE(rt);
  auto st = (*rt)->Pause("sb-aaaaaaaaaaaaaaaa");
  ASSERT_FALSE(st);
  EXPECT_NE(st.error().message.find("left 1 process"), std::string::npos) << st.error().message;
  auto pid = sys::ReadFile(pidfile);
  ASSERT_TRUE(pid);
  pid_t p = std::atoi(pid->c_str());
  // Gone, or a zombie waiting for whoever inherited it.
  auto alive = [&] {
    auto stat = sys::ReadFile("/proc/" + std::to_string(p) + "/stat");
    if (!stat) return false;
    size_t rp = stat->rfind(')');
    return rp != std::string::npos && rp + 2 < stat->size() && (*stat)[rp + 2] != 'Z';
  };
  for (int i = 0; i < 100 && alive(); ++i) std::this_thread::sleep_for(10ms);
  EXPECT_FALSE(alive()) << "the stray process survived";
}

TEST_F(ContractTest, SpacedReportsBadPluginsAndStaysUp) {
  SPACE_REQUIRE_SANDBOXES();
  std::string dir = s_.path() + "/plugins";
  ASSERT_TRUE(sys::MkdirAll(dir));
  WriteExecutable(dir + "/broken", "#!/bin/sh\necho '{}'\n", 0644);
  WriteExecutable(dir + "/future", "#!/bin/sh\necho '{\"version\":\"space-runtime/v9\",\"supported_versions\":[\"space-runtime/v9\"]}'\n");
  Daemon d({"--runtime-plugin-dir", dir});
  ASSERT_TRUE(d.Start());
  auto list = d.client().ListRuntimes();
  ASSERT_TRUE(list) << list.error().message;
  std::map<std::string, Json> by_name;
  for (const auto& r : *list) by_name[r.value("name", "")] = r;
  ASSERT_TRUE(by_name.count("oci"));
  EXPECT_TRUE(by_name["oci"].value("available", false));
  ASSERT_TRUE(by_name.count("broken"));
  EXPECT_FALSE(by_name["broken"].value("available", true));
  EXPECT_NE(by_name["broken"].value("why_not", "").find("not executable"), std::string::npos);
  ASSERT_TRUE(by_name.count("future"));
  EXPECT_FALSE(by_name["future"].value("available", true));
  auto bad = d.client().CreateSandbox(Json{{"runtime", "broken"}});
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, Errc::kInvalidArgument);
  EXPECT_NE(bad.error().message.find("not executable"), std::string::npos) << bad.error().message;
  auto unknown = d.client().CreateSandbox(Json{{"runtime", "nosuch"}});
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().message.find("unknown runtime"), std::string::npos);
  EXPECT_TRUE(d.client().Health());
  EXPECT_TRUE(d.client().ListSandboxes()->empty());
}

// ------------------------------------------------------------ the plugin under test

class PluginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    exe_ = PluginUnderTest();
    if (exe_.empty()) GTEST_SKIP() << "SPACE_CONFORMANCE_PLUGIN names no plugin";
    SPACE_REQUIRE_SANDBOXES();
    auto rt = runtime::CreatePluginRuntime(s_.Options(exe_));
    ASSERT_TRUE(rt) << rt.error().message;
    rt_ = std::move(*rt);
    auto d = rt_->Describe();
    if (!d.available) GTEST_SKIP() << BaseName(exe_) << " is not available here: " << d.why_not;
  }
  void TearDown() override {
    if (!rt_) return;
    if (auto ids = rt_->List()) {
      for (const auto& id : *ids) (void)rt_->Destroy(id);
    }
  }
  // A spec for a new instance of the plugin: a plugin with its own disk (own_disk) makes
  // the root itself, from a template tree.
  runtime::InstanceSpec NewSpec(const std::string& root) {
    auto spec = Spec(root);
    if (rt_->Caps().own_disk) {
      spec.template_dir = root;
      spec.template_digest = "sha256:conformance";
      spec.rootfs.clear();
    }
    return spec;
  }
  bool WaitForSocket(const std::string& id) {
    std::string sock = rt_->AgentSocketPath(id);
    for (int i = 0; i < 300; ++i) {
      struct stat st;
      if (::lstat(sock.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) return true;
      std::this_thread::sleep_for(20ms);
    }
    return false;
  }
  std::string exe_;
  Scratch s_;
  std::unique_ptr<runtime::Runtime> rt_;
};

TEST_F(PluginTest, LifecycleThroughTheAdapter) {
  auto spec = NewSpec(s_.MakeRoot("root"));
  ASSERT_TRUE(rt_->Start(spec)) << "start";
  EXPECT_TRUE(WaitForSocket(spec.id)) << "no agent socket at " << rt_->AgentSocketPath(spec.id);
  auto st = rt_->Inspect(spec.id);
  ASSERT_TRUE(st) << st.error().message;
  EXPECT_EQ(*st, runtime::InstanceState::kRunning);
  auto again = rt_->Start(spec);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, Errc::kConflict);
  auto ids = rt_->List();
  ASSERT_TRUE(ids);
  EXPECT_NE(std::find(ids->begin(), ids->end(), spec.id), ids->end());
  if (rt_->Caps().pause) {
    ASSERT_TRUE(rt_->Pause(spec.id));
    ASSERT_TRUE(rt_->Pause(spec.id)) << "pausing a paused instance succeeds";
    EXPECT_EQ(*rt_->Inspect(spec.id), runtime::InstanceState::kPaused);
    ASSERT_TRUE(rt_->Resume(spec.id));
    EXPECT_EQ(*rt_->Inspect(spec.id), runtime::InstanceState::kRunning);
  }
  ASSERT_TRUE(rt_->Destroy(spec.id));
  EXPECT_EQ(*rt_->Inspect(spec.id), runtime::InstanceState::kMissing);
  EXPECT_TRUE(ProcessesMentioning(spec.id).empty());
  ids = rt_->List();
  ASSERT_TRUE(ids);
  EXPECT_EQ(std::find(ids->begin(), ids->end(), spec.id), ids->end());
}

TEST_F(PluginTest, DestroyIsIdempotent) {
  ASSERT_TRUE(rt_->Destroy("sb-neverexistedaaaaa"));
  auto spec = NewSpec(s_.MakeRoot("root"));
  ASSERT_TRUE(rt_->Start(spec));
  ASSERT_TRUE(rt_->Destroy(spec.id));
  ASSERT_TRUE(rt_->Destroy(spec.id));
  EXPECT_EQ(*rt_->Inspect(spec.id), runtime::InstanceState::kMissing);
}

TEST_F(PluginTest, DestroyAfterItsProcessesWereKilled) {
  auto spec = NewSpec(s_.MakeRoot("root"));
  ASSERT_TRUE(rt_->Start(spec));
  ASSERT_TRUE(WaitForSocket(spec.id));
  auto victims = ProcessesMentioning(spec.id);
  ASSERT_FALSE(victims.empty()) << "no process names the instance";
  for (pid_t p : victims) ::kill(p, SIGKILL);
  std::this_thread::sleep_for(300ms);
  auto st = rt_->Inspect(spec.id);
  ASSERT_TRUE(st) << st.error().message;
  EXPECT_NE(*st, runtime::InstanceState::kRunning);
  auto d = rt_->Destroy(spec.id);
  ASSERT_TRUE(d) << d.error().message;
  EXPECT_EQ(*rt_->Inspect(spec.id), runtime::InstanceState::kMissing);
  EXPECT_TRUE(ProcessesMentioning(spec.id).empty());
}

TEST_F(PluginTest, DestroyFromOnDiskStateAloneAfterTheHandleIsLost) {
  auto spec = NewSpec(s_.MakeRoot("root"));
  ASSERT_TRUE(rt_->Start(spec));
  // spaced lost its handle (a crash before it was stored): the plugin's own state suffices.
  ASSERT_TRUE(sys::RemoveAll(s_.path() + "/handles/" + BaseName(exe_) + "/handles/" + spec.id + ".json"));
  auto fresh = runtime::CreatePluginRuntime(s_.Options(exe_));
  ASSERT_TRUE(fresh);
  auto ids = (*fresh)->List();
  ASSERT_TRUE(ids);
  EXPECT_NE(std::find(ids->begin(), ids->end(), spec.id), ids->end()) << "list must report it";
  ASSERT_TRUE((*fresh)->Destroy(spec.id));
  EXPECT_TRUE(ProcessesMentioning(spec.id).empty());
}

// Through spaced: the plugin is a runtime like the built-ins.
class PluginDaemonTest : public PluginTest {
 protected:
  void SetUp() override {
    PluginTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    dir_ = s_.path() + "/plugins";
    ASSERT_TRUE(sys::MkdirAll(dir_));
    ASSERT_EQ(::symlink(exe_.c_str(), (dir_ + "/" + BaseName(exe_)).c_str()), 0);
  }
  std::string dir_;
};

TEST_F(PluginDaemonTest, SandboxLifeAndRecovery) {
  Daemon d({"--runtime-plugin-dir", dir_});
  ASSERT_TRUE(d.Start());
  auto& c = d.client();
  const std::string name = BaseName(exe_);
  auto list = c.ListRuntimes();
  ASSERT_TRUE(list);
  bool listed = false;
  for (const auto& r : *list) listed = listed || (r.value("name", "") == name && r.value("available", false));
  EXPECT_TRUE(listed) << list->dump();

  std::string id = CreateSandbox(c, {{"runtime", name}, {"limits", {{"memory_bytes", 128 << 20}, {"pids", 64}}}});
  ASSERT_FALSE(id.empty()) << d.Log();
  auto r = c.Run(id, Json{{"cmd", "echo hello; echo err >&2; exit 4"}});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->out, "hello\n");
  EXPECT_EQ(r->err, "err\n");
  EXPECT_EQ(r->exit_code, 4);
  ASSERT_TRUE(c.WriteFile(id, "/root/f.txt", "content"));
  EXPECT_EQ(*c.ReadFile(id, "/root/f.txt"), "content");
  auto sb = c.GetSandbox(id);
  ASSERT_TRUE(sb);
  EXPECT_EQ(sb->value("runtime", ""), name);
  if (rt_->Caps().pause) {
    ASSERT_TRUE(c.TransitionAndWait(id, client::Transition::kPause));
    EXPECT_EQ(c.GetSandbox(id)->value("state", ""), "paused");
    ASSERT_TRUE(c.TransitionAndWait(id, client::Transition::kResume));
  }
  auto snap = c.SnapshotAndWait(id);
  ASSERT_TRUE(snap) << snap.error().message;
  auto forks = c.ForkAndWait(id, 1);
  ASSERT_TRUE(forks) << forks.error().message;
  ASSERT_EQ(forks->size(), 1u);
  EXPECT_EQ((*forks)[0].state, "running") << (*forks)[0].error;
  EXPECT_EQ(*c.ReadFile((*forks)[0].id, "/root/f.txt"), "content");

  // spaced dies; the restarted one finds the instance through its stored handle.
  d.Kill();
  ASSERT_TRUE(d.Start());
  auto after = d.client().GetSandbox(id);
  ASSERT_TRUE(after);
  EXPECT_EQ(after->value("state", ""), "running") << after->dump();
  auto r2 = d.client().Run(id, Json{{"cmd", "cat /root/f.txt"}});
  ASSERT_TRUE(r2) << r2.error().message;
  EXPECT_EQ(r2->out, "content");
  ASSERT_TRUE(d.client().DeleteSandboxAndWait(id, 60s));
  ASSERT_TRUE(d.client().DeleteSandboxAndWait((*forks)[0].id, 60s));
  EXPECT_TRUE(ProcessesMentioning(id).empty());
}

TEST_F(PluginDaemonTest, SpacedKilledMidStartLeavesNothing) {
  // The plugin is wrapped so its start takes a while after the instance exists.
  const std::string name = BaseName(exe_);
  ASSERT_TRUE(sys::RemoveAll(dir_ + "/" + name));
  WriteExecutable(dir_ + "/" + name, "#!/bin/sh\nif [ \"$1\" = start ]; then\n  out=$(" + exe_ +
                                         " start) || { echo \"$out\"; exit 1; }\n  sleep 4\n  echo \"$out\"\n"
                                         "else exec " + exe_ + " \"$@\"; fi\n");
  Daemon d({"--runtime-plugin-dir", dir_});
  ASSERT_TRUE(d.Start());
  auto created = d.client().CreateSandbox(Json{{"runtime", name}});
  ASSERT_TRUE(created) << created.error().message;
  std::string id = (*created)["sandbox"].value("id", "");
  ASSERT_FALSE(id.empty()) << created->dump();
  for (int i = 0; i < 100 && ProcessesMentioning(id).empty(); ++i) std::this_thread::sleep_for(50ms);
  std::this_thread::sleep_for(500ms);
  d.Kill();  // mid-start: the instance runs, spaced never heard back
  ASSERT_TRUE(d.Start());
  for (int i = 0; i < 200; ++i) {
    auto sb = d.client().GetSandbox(id);
    if (!sb || sb->value("state", "") == "error") break;
    std::this_thread::sleep_for(50ms);
  }
  auto sb = d.client().GetSandbox(id);
  if (sb) {
    EXPECT_EQ(sb->value("state", ""), "error") << sb->dump();
    ASSERT_TRUE(d.client().DeleteSandboxAndWait(id, 60s));
  }
  // The wrapper's own sleep may still be finishing; the instance must be gone.
  for (int i = 0; i < 200 && !ProcessesMentioning(id).empty(); ++i) std::this_thread::sleep_for(50ms);
  EXPECT_TRUE(ProcessesMentioning(id).empty()) << d.Log();
}

// ------------------------------------------------------------ plugins with their own disk

// The verbs of own_disk (snapshot, delete-snapshot, list-snapshots, suspend, wake) through
// the adapter; skipped for plugins whose disk core's storage keeps.
TEST_F(PluginTest, OwnDiskVerbsThroughTheAdapter) {
  if (!rt_->Caps().own_disk) GTEST_SKIP() << BaseName(exe_) << " does not keep its own disk";
  std::string tmpl = s_.MakeRoot("template");
  ASSERT_TRUE(sys::WriteFileAtomic(tmpl + "/root/mark", "template", 0644));
  auto spec = NewSpec(tmpl);
  ASSERT_TRUE(rt_->Start(spec));
  ASSERT_TRUE(WaitForSocket(spec.id));
  const std::string snap = NewId("snap");
  auto st = rt_->Snapshot(spec.id, snap);
  ASSERT_TRUE(st) << st.error().message;
  EXPECT_TRUE(rt_->HasSnapshot(snap));
  EXPECT_EQ(*rt_->Inspect(spec.id), runtime::InstanceState::kRunning) << "thawed after the snapshot";
  auto size = rt_->SnapshotSize(snap);
  ASSERT_TRUE(size) << size.error().message;
  EXPECT_GT(*size, 0);
  auto again = rt_->Snapshot(spec.id, snap);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, Errc::kConflict);
  ASSERT_TRUE(rt_->Pause(spec.id));
  const std::string paused = NewId("snap");
  ASSERT_TRUE(rt_->Snapshot(spec.id, paused));
  EXPECT_EQ(*rt_->Inspect(spec.id), runtime::InstanceState::kPaused) << "a paused instance stays paused";
  ASSERT_TRUE(rt_->Resume(spec.id));
  ASSERT_TRUE(rt_->DeleteSnapshot(paused));
  auto none = rt_->Snapshot("sb-neverexistedaaaaa", NewId("snap"));
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code, Errc::kNotFound);

  // A second instance from the snapshot.
  auto from = Spec("");
  from.rootfs.clear();
  from.snapshot_id = snap;
  ASSERT_TRUE(rt_->Start(from));
  ASSERT_TRUE(WaitForSocket(from.id));
  auto missing = Spec("");
  missing.rootfs.clear();
  missing.snapshot_id = "snap-neverexistedaaa";
  auto bad = rt_->Start(missing);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, Errc::kNotFound) << bad.error().message;

  // Suspend stops the processes and keeps the instance (its disk) for wake.
  ASSERT_TRUE(rt_->Suspend(spec.id));
  EXPECT_EQ(*rt_->Inspect(spec.id), runtime::InstanceState::kStopped);
  EXPECT_TRUE(ProcessesMentioning(spec.id).empty());
  ASSERT_TRUE(rt_->Suspend(spec.id)) << "suspend is idempotent";
  auto ids = rt_->List();
  ASSERT_TRUE(ids);
  EXPECT_NE(std::find(ids->begin(), ids->end(), spec.id), ids->end()) << "a suspended instance is listed";
  const std::string cold = NewId("snap");
  ASSERT_TRUE(rt_->Snapshot(spec.id, cold)) << "a suspended instance is copied as it is";
  EXPECT_EQ(*rt_->Inspect(spec.id), runtime::InstanceState::kStopped);
  ASSERT_TRUE(rt_->DeleteSnapshot(cold));
  auto woken = NewSpec(tmpl);
  woken.id = spec.id;
  woken.template_dir.clear();
  ASSERT_TRUE(rt_->Wake(woken));
  ASSERT_TRUE(WaitForSocket(spec.id));
  EXPECT_EQ(*rt_->Inspect(spec.id), runtime::InstanceState::kRunning);

  // delete-snapshot is idempotent, and instances made from it do not depend on it.
  ASSERT_TRUE(rt_->DeleteSnapshot(snap));
  EXPECT_FALSE(rt_->HasSnapshot(snap));
  ASSERT_TRUE(rt_->DeleteSnapshot(snap));
  ASSERT_TRUE(rt_->DeleteSnapshot("snap-neverexistedaaa"));
  EXPECT_EQ(*rt_->Inspect(from.id), runtime::InstanceState::kRunning);
  ASSERT_TRUE(rt_->Destroy(spec.id));
  ASSERT_TRUE(rt_->Destroy(from.id));
  EXPECT_EQ(*rt_->Inspect(spec.id), runtime::InstanceState::kMissing);
  EXPECT_TRUE(rt_->ListSnapshots().empty());
  EXPECT_TRUE(ProcessesMentioning(spec.id).empty());
  EXPECT_TRUE(ProcessesMentioning(from.id).empty());
}

// Every entry of `dir` (recursively, as paths relative to it) that names `needle`.
std::vector<std::string> EntriesNaming(const std::string& dir, const std::string& needle,
                                       const std::string& rel = "") {
  std::vector<std::string> out;
  DIR* d = ::opendir((dir + "/" + rel).c_str());
  while (dirent* e = d ? ::readdir(d) : nullptr) {
    std::string n = e->d_name;
    if (n == "." || n == "..") continue;
    std::string path = rel.empty() ? n : rel + "/" + n;
    if (n.find(needle) != std::string::npos) {
      out.push_back(path);
      continue;
    }
    // Not into the sandboxes' roots and snapshots: their contents are the sandboxes' files.
    if (e->d_type == DT_DIR && rel.empty()) {
      for (auto& p : EntriesNaming(dir, needle, path)) out.push_back(p);
    }
  }
  if (d) ::closedir(d);
  return out;
}

// The same through spaced: snapshots, sandboxes from them, fork, suspend and wake, recovery.
TEST_F(PluginDaemonTest, OwnDiskSnapshotsSuspendAndRecovery) {
  if (!rt_->Caps().own_disk) GTEST_SKIP() << BaseName(exe_) << " does not keep its own disk";
  Daemon d({"--runtime-plugin-dir", dir_});
  ASSERT_TRUE(d.Start());
  auto& c = d.client();
  const std::string name = BaseName(exe_);
  const std::string state = d.data_dir() + "/runtime/" + name;
  auto read = [&](const std::string& id) {
    auto f = d.client().ReadFile(id, "/root/f.txt");
    return f ? *f : "(" + f.error().message + ")";
  };

  std::string id = CreateSandbox(c, {{"runtime", name}});
  ASSERT_FALSE(id.empty()) << d.Log();
  EXPECT_TRUE(sys::Exists(state + "/roots/" + id)) << "the plugin holds the root";
  ASSERT_TRUE(c.WriteFile(id, "/root/f.txt", "one"));
  auto snap = c.SnapshotAndWait(id);
  ASSERT_TRUE(snap) << snap.error().message << d.Log();
  auto info = c.GetSnapshot(*snap);
  ASSERT_TRUE(info);
  EXPECT_EQ((*info)["kind"], "filesystem") << info->dump();
  EXPECT_TRUE(sys::Exists(state + "/snapshots/" + *snap));
  ASSERT_TRUE(c.WriteFile(id, "/root/f.txt", "two"));

  auto from = c.CreateSandboxAndWait({{"snapshot", *snap}}, 60s);
  ASSERT_TRUE(from) << from.error().message << d.Log();
  std::string child = (*from)["id"];
  EXPECT_EQ((*from)["runtime"], name);
  EXPECT_EQ(read(child), "one");

  auto forks = c.ForkAndWait(id, 1);
  ASSERT_TRUE(forks) << forks.error().message;
  ASSERT_EQ(forks->size(), 1u);
  EXPECT_EQ((*forks)[0].state, "running") << (*forks)[0].error;
  std::string fork = (*forks)[0].id;
  EXPECT_EQ(read(fork), "two");

  // Suspend stops the processes and keeps the disk; wake brings a new agent on it.
  ASSERT_TRUE(c.TransitionAndWait(id, client::Transition::kSuspend));
  EXPECT_EQ(c.GetSandbox(id)->value("state", ""), "suspended");
  EXPECT_TRUE(ProcessesMentioning(id).empty());
  EXPECT_TRUE(sys::Exists(state + "/roots/" + id));
  ASSERT_TRUE(c.TransitionAndWait(id, client::Transition::kWake)) << d.Log();
  EXPECT_EQ(c.GetSandbox(id)->value("state", ""), "running");
  EXPECT_EQ(read(id), "two");
  auto r = c.Run(id, Json{{"cmd", "echo woke"}});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->out, "woke\n");

  // spaced dies with one sandbox running and one suspended; the restarted one re-inspects
  // the running one, keeps the suspended one's disk, and wakes it.
  ASSERT_TRUE(c.TransitionAndWait(child, client::Transition::kSuspend));
  d.Kill();
  ASSERT_TRUE(d.Start());
  auto& c2 = d.client();
  EXPECT_EQ(c2.GetSandbox(id)->value("state", ""), "running");
  EXPECT_EQ(read(id), "two");
  EXPECT_EQ(c2.GetSandbox(child)->value("state", ""), "suspended");
  EXPECT_TRUE(sys::Exists(state + "/roots/" + child));
  ASSERT_TRUE(c2.TransitionAndWait(child, client::Transition::kWake)) << d.Log();
  EXPECT_EQ(read(child), "one");

  // Deleting the snapshot removes the plugin's copy; the sandboxes made from it live on.
  ASSERT_TRUE(c2.DeleteSnapshot(*snap));
  EXPECT_FALSE(sys::Exists(state + "/snapshots/" + *snap));
  EXPECT_EQ(read(child), "one");

  // Deleting the sandboxes leaves nothing of them in the plugin's state dir.
  for (const std::string& sb : {id, child, fork}) {
    ASSERT_TRUE(c2.DeleteSandboxAndWait(sb, 60s));
    EXPECT_TRUE(ProcessesMentioning(sb).empty());
    auto left = EntriesNaming(state, sb);
    EXPECT_TRUE(left.empty()) << sb << " left " << ::testing::PrintToString(left);
  }
  EXPECT_TRUE(EntriesNaming(state + "/roots", "").empty());
  EXPECT_TRUE(EntriesNaming(state + "/snapshots", "").empty()) << "fork's base snapshot must go too";
}

}  // namespace
}  // namespace space::testing
