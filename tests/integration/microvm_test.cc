// The microvm runtime end to end: real QEMU (TCG here; KVM only where a probe boot works),
// the real guest kernel and initramfs, driven through spaced's HTTP API. Kept small: every
// VM boot costs seconds under TCG, so most sandboxes start from the template snapshot.
#include <dirent.h>
#include <sys/stat.h>

#include <regex>
#include <sstream>

#include "common/json.h"
#include "sys/cgroups.h"

#include "tests/integration/harness.h"

namespace space::testing {
namespace {

using namespace std::chrono_literals;

#define SPACE_REQUIRE_VMS()                                          \
  do {                                                               \
    std::string why_;                                                \
    if (!CanRunVms(&why_)) GTEST_SKIP() << why_;                     \
  } while (0)

// Pids of QEMU processes serving VMs of this data dir: those of sandboxes, and with
// `pool` also the restore pool's (a VM whose slot vms/.pool-<hex> has not been taken).
std::vector<pid_t> QemuPids(const std::string& data_dir, bool pool = false) {
  std::vector<pid_t> out;
  DIR* d = ::opendir("/proc");
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    pid_t pid = std::atoi(e->d_name);
    if (pid <= 0) continue;
    auto cmd = sys::ReadFile("/proc/" + std::string(e->d_name) + "/cmdline");
    if (!cmd || cmd->find(data_dir + "/runtime/microvm/") == std::string::npos) continue;
    size_t at = cmd->find("space-vm-");
    if (at == std::string::npos) continue;
    std::string name = cmd->substr(at + 9, cmd->find('\0', at) - at - 9);
    struct stat st;
    bool pooled = name.rfind(".pool-", 0) == 0 &&
                  ::lstat((data_dir + "/runtime/microvm/vms/" + name).c_str(), &st) == 0 &&
                  S_ISDIR(st.st_mode);  // a taken VM leaves a link there
    if (!pooled || pool) out.push_back(pid);
  }
  ::closedir(d);
  return out;
}

// Slots of the restore pool holding a ready VM.
int ReadyPoolVms(const std::string& data_dir) {
  int n = 0;
  DIR* d = ::opendir((data_dir + "/runtime/microvm/vms").c_str());
  if (!d) return 0;
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    struct stat st;
    std::string path = data_dir + "/runtime/microvm/vms/" + name;
    if (name.rfind(".pool-", 0) == 0 && ::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode) &&
        sys::Exists(path + "/pooled"))
      ++n;
  }
  ::closedir(d);
  return n;
}

std::string WaitState(client::Client& c, const std::string& id, const std::string& want,
                      std::chrono::seconds limit = 30s) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  std::string state;
  while (std::chrono::steady_clock::now() < deadline) {
    auto sb = c.GetSandbox(id);
    state = sb ? (*sb)["state"].get<std::string>() : "<" + sb.error().message + ">";
    if (state == want) break;
    std::this_thread::sleep_for(100ms);
  }
  return state;
}

// A tiny initramfs whose /init runs `script` (busybox sh), for guests that misbehave.
std::string MakeInitrd(const std::string& dir, const std::string& script) {
  std::string root = dir + "/initrd-root";
  EXPECT_TRUE(sys::MkdirAll(root + "/bin"));
  EXPECT_TRUE(sys::WriteFileAtomic(root + "/init", "#!/bin/busybox sh\n" + script + "\n", 0755));
  auto bb = sys::ReadFile("/bin/busybox");
  EXPECT_TRUE(bb);
  EXPECT_TRUE(sys::WriteFileAtomic(root + "/bin/busybox", bb ? *bb : "", 0755));
  std::string out = dir + "/initrd.cpio";
  auto r = sys::Run({.argv = {"sh", "-c", "cd " + root + " && find . | cpio -o -H newc --quiet > " + out}});
  EXPECT_TRUE(r && r->ok());
  return out;
}

// ---------------------------------------------------------------- both runtimes

// A subset of the sandbox API checks, run against oci, microvm and gvisor alike.
class BothRuntimes : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    std::string why;
    if (!CanRunVms(&why)) return;
    daemon_ = new Daemon();
    if (!daemon_->Start()) return;
  }
  static void TearDownTestSuite() {
    delete daemon_;
    daemon_ = nullptr;
  }
  void SetUp() override {
    SPACE_REQUIRE_VMS();
    ASSERT_NE(daemon_, nullptr);
    auto& id = sandboxes_[GetParam()];
    if (id.empty()) id = CreateSandbox(c(), {{"runtime", GetParam()}, {"limits", {{"memory_bytes", 256 << 20}}}});
    ASSERT_FALSE(id.empty()) << daemon_->Log();
    id_ = id;
  }
  client::Client& c() { return daemon_->client(); }
  client::Client::RunOutput Run(const Json& body) {
    auto r = c().Run(id_, body);
    EXPECT_TRUE(r) << (r ? "" : r.error().message);
    return r ? *r : client::Client::RunOutput{};
  }

  std::string id_;
  static inline Daemon* daemon_ = nullptr;
  static inline std::map<std::string, std::string> sandboxes_;
};

TEST_P(BothRuntimes, ReportsItsRuntime) {
  auto sb = c().GetSandbox(id_);
  ASSERT_TRUE(sb);
  EXPECT_EQ((*sb)["runtime"], GetParam());
  EXPECT_EQ((*sb)["state"], "running");
}

TEST_P(BothRuntimes, CommandOutputAndExitCode) {
  auto r = Run({{"cmd", "echo out; echo err >&2; exit 3"}});
  EXPECT_EQ(r.out, "out\n");
  EXPECT_EQ(r.err, "err\n");
  EXPECT_EQ(r.exit_code, 3);
  auto big = Run({{"cmd", "i=0; while [ $i -lt 2000 ]; do echo line-$i; i=$((i+1)); done | wc -l"}});
  EXPECT_EQ(big.out, "2000\n");
  auto missing = c().StartCommand(id_, {{"argv", {"/no/such/program"}}});
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, Errc::kNotFound);
}

TEST_P(BothRuntimes, StdinReachesTheCommand) {
  auto cmd = c().StartCommand(id_, {{"argv", {"cat"}}, {"stdin", true}});
  ASSERT_TRUE(cmd) << cmd.error().message;
  std::string cid = (*cmd)["id"];
  ASSERT_TRUE(c().SendStdin(id_, cid, "through stdin\n", true));
  auto done = c().GetCommand(id_, cid, 30s);
  ASSERT_TRUE(done);
  EXPECT_EQ((*done)["state"], "exited");
  auto out = c().ReadOutput(id_, cid, "stdout", 0);
  ASSERT_TRUE(out);
  EXPECT_EQ(out->bytes, "through stdin\n");
}

TEST_P(BothRuntimes, FilesWriteReadListRemove) {
  std::string data(300000, 'x');
  data += "end";
  ASSERT_TRUE(c().WriteFile(id_, "/root/dir/f.bin", data));
  auto back = c().ReadFile(id_, "/root/dir/f.bin");
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(*back, data);
  auto list = c().ListFiles(id_, "/root/dir");
  ASSERT_TRUE(list);
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0]["name"], "f.bin");
  EXPECT_EQ((*list)[0]["size"], data.size());
  EXPECT_EQ(Run({{"cmd", "wc -c < /root/dir/f.bin"}}).out, std::to_string(data.size()) + "\n");
  auto r = c().Call("DELETE", "/v1/sandboxes/" + id_ + "/files?path=/root/dir&recursive=true");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(c().Stat(id_, "/root/dir").error().code, Errc::kNotFound);
}

TEST_P(BothRuntimes, PauseAndResume) {
  ASSERT_TRUE(c().TransitionAndWait(id_, client::Transition::kPause));
  EXPECT_EQ((*c().GetSandbox(id_))["state"], "paused");
  ASSERT_TRUE(c().TransitionAndWait(id_, client::Transition::kResume));
  EXPECT_EQ(Run({{"cmd", "echo alive"}}).out, "alive\n");
}

TEST_P(BothRuntimes, SnapshotStartsANewSandbox) {
  ASSERT_TRUE(c().WriteFile(id_, "/root/snap.txt", "before"));
  auto snap = c().SnapshotAndWait(id_);
  ASSERT_TRUE(snap) << snap.error().message;
  auto info = c().GetSnapshot(*snap);
  ASSERT_TRUE(info);
  EXPECT_EQ((*info)["kind"], GetParam() == "microvm" ? "full" : "filesystem");
  ASSERT_TRUE(c().WriteFile(id_, "/root/snap.txt", "after"));
  auto from = c().CreateSandboxAndWait({{"snapshot", *snap}}, 120s);
  ASSERT_TRUE(from) << from.error().message;
  std::string child = (*from)["id"];
  EXPECT_EQ((*from)["runtime"], GetParam());
  auto f = c().ReadFile(child, "/root/snap.txt");
  EXPECT_EQ(f ? *f : f.error().message, "before");
  EXPECT_TRUE(c().DeleteSandboxAndWait(child, 60s));
  auto del = c().Call("DELETE", "/v1/snapshots/" + *snap);
  EXPECT_TRUE(del) << del.error().message;
}

// gvisor: the shipped runtime plugin (plugins/runtime/gvisor), through the same checks.
INSTANTIATE_TEST_SUITE_P(Runtimes, BothRuntimes, ::testing::Values("oci", "microvm", "gvisor"),
                         [](const auto& info) { return info.param; });

// ---------------------------------------------------------------- microvm only

class MicrovmTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string why;
    if (!CanRunVms(&why)) return;
    daemon_ = new Daemon({"--default-runtime", "microvm"});
    if (!daemon_->Start()) return;
  }
  static void TearDownTestSuite() {
    delete daemon_;
    daemon_ = nullptr;
  }
  void SetUp() override {
    SPACE_REQUIRE_VMS();
    ASSERT_NE(daemon_, nullptr);
  }
  client::Client& c() { return daemon_->client(); }
  std::string Create(const Json& body = Json::object(), int64_t disk_bytes = 0) {
    Json b = body;
    b["limits"] = {{"memory_bytes", 256 << 20}};
    if (disk_bytes > 0) b["limits"]["disk_bytes"] = disk_bytes;
    return CreateSandbox(c(), b);
  }

  static inline Daemon* daemon_ = nullptr;
};

TEST_F(MicrovmTest, AccelerationIsChosenAndLogged) {
  std::string id = Create();
  ASSERT_FALSE(id.empty());
  // The probe's outcome and its reason are recorded (and logged: at warning level when
  // KVM does not work, which is what this test daemon's log level shows).
  auto accel = sys::ReadFile(daemon_->data_dir() + "/runtime/microvm/accel.json");
  ASSERT_TRUE(accel);
  auto j = ParseJson(*accel);
  ASSERT_TRUE(j);
  std::string chosen = JsonStringOr(*j, "accel", "");
  EXPECT_TRUE(chosen == "kvm" || chosen == "tcg") << *accel;
  EXPECT_FALSE(JsonStringOr(*j, "why", "").empty());
  if (chosen == "tcg") {
    EXPECT_NE(daemon_->Log().find("microvm: acceleration tcg"), std::string::npos) << daemon_->Log();
  }
  auto r = c().Run(id, std::vector<std::string>{"uname", "-r"});
  ASSERT_TRUE(r);
  EXPECT_NE(r->out.find("cloud-amd64"), std::string::npos) << r->out;
  // Clones of the template snapshot each get their own identity.
  std::string other = Create();
  ASSERT_FALSE(other.empty());
  auto a = c().ReadFile(id, "/etc/machine-id"), b = c().ReadFile(other, "/etc/machine-id");
  ASSERT_TRUE(a && b);
  EXPECT_NE(*a, *b);
  auto now = c().Run(other, std::vector<std::string>{"date", "+%s"});
  ASSERT_TRUE(now);
  EXPECT_NEAR(std::atoll(now->out.c_str()), NowUnixMillis() / 1000, 5);
  ASSERT_TRUE(c().DeleteSandboxAndWait(other, 60s));
  ASSERT_TRUE(c().DeleteSandboxAndWait(id, 60s));
  EXPECT_TRUE(QemuPids(daemon_->data_dir()).empty());
}

// The restore pool: after a start from the template snapshot, stopped and warmed-up VMs
// wait (at most --microvm-restore-pool of them); the next create takes one. It still gets
// its own identity and the right clock, and stopping spaced ends the pool's VMs (not the
// sandboxes').
TEST(MicrovmPoolTest, CreatesTakeFreshVmsFromThePool) {
  SPACE_REQUIRE_VMS();
  Daemon d({"--microvm-restore-pool", "1"});
  ASSERT_TRUE(d.Start());
  const Json body = {{"runtime", "microvm"}, {"limits", {{"memory_bytes", 256 << 20}}}};
  std::string first = CreateSandbox(d.client(), body);
  ASSERT_FALSE(first.empty()) << d.Log();
  auto deadline = std::chrono::steady_clock::now() + 60s;
  while (ReadyPoolVms(d.data_dir()) < 1 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(50ms);
  ASSERT_EQ(ReadyPoolVms(d.data_dir()), 1) << d.Log();
  EXPECT_EQ(QemuPids(d.data_dir(), true).size(), 2u);
  std::string pooled = CreateSandbox(d.client(), body);
  ASSERT_FALSE(pooled.empty()) << d.Log();
  auto pid = sys::ReadFile(d.data_dir() + "/runtime/microvm/vms/" + pooled + "/qemu.pid");
  ASSERT_TRUE(pid);
  auto cmd = sys::ReadFile("/proc/" + std::to_string(std::atoi(pid->c_str())) + "/cmdline");
  ASSERT_TRUE(cmd);
  EXPECT_NE(cmd->find("space-vm-.pool-"), std::string::npos) << "the create took the pool's VM";
  auto a = d.client().ReadFile(first, "/etc/machine-id"), b = d.client().ReadFile(pooled, "/etc/machine-id");
  ASSERT_TRUE(a && b);
  EXPECT_NE(*a, *b);
  EXPECT_EQ(b->size(), 33u);
  auto now = d.client().Run(pooled, std::vector<std::string>{"date", "+%s"});
  ASSERT_TRUE(now);
  EXPECT_NEAR(std::atoll(now->out.c_str()), NowUnixMillis() / 1000, 5);
  auto host = d.client().Run(pooled, std::vector<std::string>{"hostname"});
  ASSERT_TRUE(host);
  EXPECT_EQ(host->out, "sandbox\n");
  // The pool is refilled, never beyond its size.
  deadline = std::chrono::steady_clock::now() + 60s;
  while (ReadyPoolVms(d.data_dir()) < 1 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(50ms);
  EXPECT_EQ(ReadyPoolVms(d.data_dir()), 1);
  EXPECT_EQ(QemuPids(d.data_dir(), true).size(), 3u);
  // GET /metrics counts the pool's VM; a VM's figures are its QEMU's, seen from the host.
  {
    static const std::regex pool_line(R"(\nspaced_restore_pool_vms\{runtime="microvm",snapshot="[^"]+"\} (\d+)\n)");
    std::smatch got;
    std::string text;
    for (int i = 0; i < 100; ++i) {
      auto m = d.client().Request("GET", "/metrics");
      ASSERT_TRUE(m && m->status == 200);
      text = m->body;
      if (std::regex_search(text, got, pool_line) && got[1] == "1") break;
      std::this_thread::sleep_for(100ms);
    }
    ASSERT_TRUE(std::regex_search(text, got, pool_line)) << text;
    EXPECT_EQ(got[1], "1");
    auto usage = d.client().Call("GET", "/v1/sandboxes/" + first + "/metrics");
    ASSERT_TRUE(usage) << usage.error().message;
    EXPECT_EQ((*usage)["runtime"], "microvm");
    EXPECT_GT((*usage)["cpu_seconds"].get<double>(), 0);
    EXPECT_GT((*usage)["memory_bytes"].get<double>(), 16 << 20) << usage->dump();
    EXPECT_LE((*usage)["memory_bytes"].get<double>(), 1 << 30) << usage->dump();
    EXPECT_GT((*usage)["disk_bytes"].get<double>(), 0) << usage->dump();
    EXPECT_EQ((*usage)["memory_limit_bytes"], 256 << 20);
  }
  // A pooled VM is a sandbox like any other: it snapshots (QEMU reopens its disk by the
  // name it was started with), and deleted it leaves no process.
  auto snap = d.client().SnapshotAndWait(pooled);
  EXPECT_TRUE(snap) << snap.error().message;
  ASSERT_TRUE(d.client().DeleteSandboxAndWait(pooled, 60s));
  EXPECT_EQ(QemuPids(d.data_dir()).size(), 1u);
  d.Stop();
  EXPECT_EQ(QemuPids(d.data_dir(), true).size(), 1u) << "the pool's VM ends with spaced, the sandbox does not";
  EXPECT_EQ(ReadyPoolVms(d.data_dir()), 0);
}

TEST_F(MicrovmTest, SuspendAndWakeKeepARunningCommand) {
  std::string id = Create();
  ASSERT_FALSE(id.empty());
  auto cmd = c().StartCommand(id, {{"cmd", "i=0; while [ $i -lt 6 ]; do echo tick-$i; i=$((i+1)); sleep 0.5; done"}});
  ASSERT_TRUE(cmd);
  std::string cid = (*cmd)["id"];
  std::this_thread::sleep_for(1s);
  ASSERT_TRUE(c().TransitionAndWait(id, client::Transition::kSuspend));
  EXPECT_TRUE(QemuPids(daemon_->data_dir()).empty()) << "a suspended VM has no process";
  ASSERT_TRUE(c().TransitionAndWait(id, client::Transition::kWake));
  auto done = c().GetCommand(id, cid, 30s);
  ASSERT_TRUE(done);
  EXPECT_EQ((*done)["state"], "exited");
  auto out = c().ReadOutput(id, cid, "stdout", 0);
  ASSERT_TRUE(out);
  EXPECT_EQ(out->bytes, "tick-0\ntick-1\ntick-2\ntick-3\ntick-4\ntick-5\n");
  ASSERT_TRUE(c().DeleteSandboxAndWait(id, 60s));
}

// The guest's disk is limits.disk_bytes: filling it is ENOSPC inside, and the VM, its
// agent and spaced go on (issue: resource guards).
TEST_F(MicrovmTest, FillingTheDiskIsEnospcAndHarmsNothing) {
  std::string id = Create(Json::object(), 96ll << 20);
  ASSERT_FALSE(id.empty());
  auto fill = c().Run(id, Json{{"cmd", "dd if=/dev/zero of=/root/fill bs=1M count=400 2>&1; echo rc=$?"}});
  ASSERT_TRUE(fill) << fill.error().message;
  EXPECT_NE(fill->out.find("No space left on device"), std::string::npos) << fill->out;
  EXPECT_EQ(fill->out.find("rc=0"), std::string::npos) << fill->out;
  auto df = c().Run(id, Json{{"cmd", "df -m / | tail -1"}});
  ASSERT_TRUE(df);
  // The filesystem is the image's size, not the host's.
  std::istringstream in(df->out);
  std::string dev;
  int64_t total_mib = 0;
  in >> dev >> total_mib;
  EXPECT_GT(total_mib, 40) << df->out;
  EXPECT_LE(total_mib, 96) << df->out;
  auto again = c().Run(id, Json{{"cmd", "rm /root/fill && echo after > /root/x && cat /root/x"}});
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(again->out, "after\n");
  ASSERT_TRUE(c().Health());
  ASSERT_TRUE(c().DeleteSandboxAndWait(id, 60s));
}

// Full snapshots on a schedule (snapshot_every / keep_last), as for oci.
TEST_F(MicrovmTest, ScheduledFullSnapshots) {
  std::string id = Create({{"snapshot_every", 1}, {"keep_last", 2}});
  ASSERT_FALSE(id.empty());
  Json snaps = Json::array();
  size_t ready = 0;
  for (int i = 0; i < 100 && ready < 2; ++i) {
    std::this_thread::sleep_for(200ms);
    auto listed = c().Call("GET", "/v1/sandboxes/" + id + "/snapshots");
    ASSERT_TRUE(listed) << listed.error().message;
    snaps = (*listed)["snapshots"];
    ready = 0;
    for (const auto& s : snaps) ready += s["state"] == "ready";
  }
  EXPECT_GE(ready, 2u) << snaps.dump();
  EXPECT_LE(snaps.size(), 3u) << snaps.dump();  // keep_last + one in flight
  for (const auto& s : snaps) EXPECT_EQ(s["kind"], "full") << s.dump();
  ASSERT_TRUE(c().Call("DELETE", "/v1/sandboxes/" + id + "?wait=60s&delete_snapshots=1"));
}

TEST_F(MicrovmTest, ForkARunningVm) {
  std::string id = Create();
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(c().WriteFile(id, "/root/parent.txt", "p"));
  auto forks = c().ForkAndWait(id, 2);
  ASSERT_TRUE(forks) << forks.error().message;
  ASSERT_EQ(forks->size(), 2u);
  for (const auto& f : *forks) {
    EXPECT_EQ(f.state, "running") << f.error;
    auto r = c().ReadFile(f.id, "/root/parent.txt");
    EXPECT_EQ(r ? *r : r.error().message, "p");
    auto echo = c().Run(f.id, std::vector<std::string>{"echo", f.id});
    ASSERT_TRUE(echo);
    EXPECT_EQ(echo->out, f.id + "\n");
  }
  EXPECT_EQ(QemuPids(daemon_->data_dir()).size(), 3u);
  for (const auto& f : *forks) EXPECT_TRUE(c().DeleteSandboxAndWait(f.id, 60s));
  ASSERT_TRUE(c().DeleteSandboxAndWait(id, 60s));
  EXPECT_TRUE(QemuPids(daemon_->data_dir()).empty());
}

// As in a node Pod (docs/kubernetes.md): spaced runs in a cgroup of its own, and its end
// is the end of everything in that cgroup. QEMU has left it for one of its own, so the VM
// lives on, and the next spaced re-adopts it.
TEST_F(MicrovmTest, SurvivesARestartOfSpaced) {
  const auto hier = sys::CgroupHierarchies();
  const std::string pod = "/space-test-pod-" + std::to_string(::getpid());
  auto joined = sys::JoinCgroup(hier, pod, daemon_->pid());
  ASSERT_TRUE(joined) << joined.error().message;
  std::string id = Create();
  ASSERT_FALSE(id.empty());
  auto cmd = c().StartCommand(id, {{"cmd", "sleep 1; echo after-restart"}});
  ASSERT_TRUE(cmd);
  auto qemu = QemuPids(daemon_->data_dir());
  ASSERT_EQ(qemu.size(), 1u);
  auto cg = sys::ReadFile("/proc/" + std::to_string(qemu[0]) + "/cgroup");
  ASSERT_TRUE(cg);
  EXPECT_EQ(cg->find(pod), std::string::npos) << *cg;
  const size_t at = cg->find("/space-vm/");
  ASSERT_NE(at, std::string::npos) << *cg;
  const std::string vm_cgroup = cg->substr(at, cg->find('\n', at) - at);
  auto ended = sys::KillAndRemoveCgroup(hier, pod);
  ASSERT_TRUE(ended) << ended.error().message;
  daemon_->Kill();
  ASSERT_EQ(QemuPids(daemon_->data_dir()), qemu) << "QEMU runs on without spaced";
  ASSERT_TRUE(daemon_->Start());
  // The restore pool of the killed spaced (its VMs wait on connections that are gone) is
  // ended by the new one, which makes none until a create asks.
  EXPECT_EQ(QemuPids(daemon_->data_dir(), true).size(), 1u);
  auto done = c().GetCommand(id, (*cmd)["id"].get<std::string>(), 30s);
  ASSERT_TRUE(done);
  EXPECT_EQ((*done)["state"], "exited");
  auto out = c().ReadOutput(id, (*cmd)["id"].get<std::string>(), "stdout", 0);
  EXPECT_EQ(out ? out->bytes : out.error().message, "after-restart\n");
  ASSERT_TRUE(c().DeleteSandboxAndWait(id, 60s));
  EXPECT_TRUE(sys::ExistingCgroupDirs(hier, vm_cgroup).empty()) << vm_cgroup << " outlived its VM";
}

TEST_F(MicrovmTest, AVmKilledFromOutsideIsAnError) {
  std::string id = Create();
  ASSERT_FALSE(id.empty());
  auto pids = QemuPids(daemon_->data_dir());
  ASSERT_EQ(pids.size(), 1u);
  ::kill(pids[0], SIGKILL);
  EXPECT_EQ(WaitState(c(), id, "error"), "error");
  ASSERT_TRUE(c().DeleteSandboxAndWait(id, 60s));
}

TEST_F(MicrovmTest, CorruptOrTruncatedSnapshotsFailCleanly) {
  std::string id = Create();
  ASSERT_FALSE(id.empty());
  auto snap = c().SnapshotAndWait(id);
  ASSERT_TRUE(snap) << snap.error().message;
  ASSERT_TRUE(c().DeleteSandboxAndWait(id, 60s));
  std::string state = daemon_->data_dir() + "/runtime/microvm/snapshots/" + *snap + "/state";
  auto bytes = sys::ReadFile(state);
  ASSERT_TRUE(bytes);
  for (const std::string& bad : {bytes->substr(0, bytes->size() / 2), std::string(4096, 'z')}) {
    ASSERT_TRUE(sys::WriteFileAtomic(state, bad, 0600));
    auto from = c().CreateSandboxAndWait({{"snapshot", *snap}}, 60s);
    ASSERT_FALSE(from);
    EXPECT_NE(from.error().message.find("saved state could not be loaded"), std::string::npos)
        << from.error().message;
    EXPECT_TRUE(QemuPids(daemon_->data_dir()).empty());
  }
  auto list = c().ListSandboxes();
  ASSERT_TRUE(list);
  for (const auto& sb : *list) {
    EXPECT_EQ(sb["state"], "error");
    EXPECT_TRUE(c().DeleteSandboxAndWait(sb["id"].get<std::string>(), 60s));
  }
}

// ---------------------------------------------------------------- broken guests

class BrokenGuestTest : public ::testing::Test {
 protected:
  void SetUp() override { SPACE_REQUIRE_VMS(); }
  // Starts a daemon with `args`, creates a microvm sandbox, expects it to fail with a
  // message containing `want`, and no QEMU to be left.
  // `refused`: the runtime is listed unavailable, so the create is refused up front and
  // leaves no sandbox; otherwise the sandbox is kept in state error.
  void ExpectCreateFails(std::vector<std::string> args, const std::string& want, bool refused = false) {
    args.insert(args.end(), {"--microvm-accel", "tcg", "--no-microvm-template-snapshots",
                             "--microvm-boot-timeout-ms", "4000"});
    Daemon d(args);
    ASSERT_TRUE(d.Start());
    auto t0 = std::chrono::steady_clock::now();
    auto sb = d.client().CreateSandboxAndWait({{"runtime", "microvm"}}, 60s);
    ASSERT_FALSE(sb);
    EXPECT_NE(sb.error().message.find(want), std::string::npos) << sb.error().message;
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 30s);
    EXPECT_TRUE(QemuPids(d.data_dir()).empty());
    auto list = d.client().ListSandboxes();
    ASSERT_TRUE(list);
    if (refused) {
      EXPECT_TRUE(list->empty()) << list->dump();
    } else {
      ASSERT_EQ(list->size(), 1u);
      EXPECT_EQ((*list)[0]["state"], "error");
    }
    // The oci runtime is unaffected.
    std::string oci = CreateSandbox(d.client(), {{"runtime", "oci"}});
    EXPECT_FALSE(oci.empty());
  }
};

TEST_F(BrokenGuestTest, MissingKernel) {
  ExpectCreateFails({"--microvm-kernel", "/nonexistent/vmlinux"}, "guest kernel /nonexistent/vmlinux is missing",
                    /*refused=*/true);
}

TEST_F(BrokenGuestTest, QemuExitsDuringBoot) {
  auto dir = sys::TempDir::Create("/tmp", "space-initrd-");
  ASSERT_TRUE(dir);
  std::string initrd = MakeInitrd(dir->path(), "/bin/busybox poweroff -f");
  ExpectCreateFails({"--microvm-initrd", initrd}, "QEMU exited during boot");
}

TEST_F(BrokenGuestTest, AgentNeverComesUp) {
  auto dir = sys::TempDir::Create("/tmp", "space-initrd-");
  ASSERT_TRUE(dir);
  std::string initrd = MakeInitrd(dir->path(), "while true; do /bin/busybox sleep 100; done");
  ExpectCreateFails({"--microvm-initrd", initrd}, "did not come up within 4000 ms");
}

}  // namespace
}  // namespace space::testing
