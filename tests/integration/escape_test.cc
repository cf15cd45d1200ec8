// The escape-attempt suite: a real spaced, hostile code in its sandboxes. Each case runs
// the static probe (tests/escape/probe.cc) inside a sandbox, where it really attempts one
// kind of escape and reports BLOCKED or ESCAPED; the test expects BLOCKED and, where the
// effect would show on the host, checks the host too (its files, hostname and clock, a
// sibling sandbox that must stay responsive, leftover processes). docs/security.md lists
// the cases.
#include <arpa/inet.h>
#include <dirent.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>

#include <algorithm>
#include <set>
#include <sstream>

#include "tests/integration/harness.h"

namespace space::testing {
namespace {

using namespace std::chrono_literals;

// Small limits, so the exhaustion cases finish in a second or two.
constexpr int64_t kMemoryMb = 64, kPids = 64, kDiskMb = 32, kNofile = 256;

std::string RandomToken() {
  std::string t = "tok";
  unsigned char b[8];
  auto fd = sys::Open("/dev/urandom", O_RDONLY);
  if (fd && ::read(fd->get(), b, sizeof b) == sizeof b) {
    for (unsigned char c : b) t += "0123456789abcdef"[c & 15];
  }
  return t + std::to_string(::getpid());
}

std::string HostName() {
  char buf[256] = {};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

// CLOCK_REALTIME - CLOCK_MONOTONIC in ms: changes only if someone sets the clock.
int64_t ClockOffsetMs() {
  timespec r{}, m{};
  ::clock_gettime(CLOCK_REALTIME, &r);
  ::clock_gettime(CLOCK_MONOTONIC, &m);
  return (r.tv_sec - m.tv_sec) * 1000 + (r.tv_nsec - m.tv_nsec) / 1000000;
}

std::vector<std::string> HostIpv4() {
  std::vector<std::string> out;
  ifaddrs* ifs = nullptr;
  if (::getifaddrs(&ifs) != 0) return out;
  for (ifaddrs* i = ifs; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
    char buf[INET_ADDRSTRLEN];
    auto* in = reinterpret_cast<sockaddr_in*>(i->ifa_addr);
    ::inet_ntop(AF_INET, &in->sin_addr, buf, sizeof buf);
    if (std::string(buf) != "127.0.0.1") out.push_back(buf);
  }
  ::freeifaddrs(ifs);
  return out;
}

struct ProbeResult {
  std::string verdict, detail, raw;
  int exit_code = -1;
};

class EscapeTest : public ::testing::TestWithParam<std::string> {
 public:
  static void SetUpTestSuite() {
    std::string why;
    if (!CanRunSandboxes(&why)) return;
    token_ = RandomToken();
    other_token_ = RandomToken() + "other";
    if (!PlantHostSecrets()) return;
    daemon_ = new Daemon();
    if (!daemon_->Start()) return;
    auto& c = daemon_->client();
    // The sibling: holds a secret file and a marker process the probe must not see.
    other_ = CreateSandbox(c);
    if (other_.empty() || !CopyProbe(other_)) return;
    if (!c.WriteFile(other_, "/tmp/secret", other_token_ + "\n", 0644)) return;
    Json sleeper = {{"argv", {"/tmp/probe", "sleep", "marker-" + other_token_}}};
    if (!c.StartCommand(other_, sleeper)) return;
    for (const char* base : {"/storage/pool/roots/", "/storage/btrfs/roots/"}) {
      if (sys::Exists(daemon_->data_dir() + base + other_)) other_root_ = daemon_->data_dir() + base + other_;
    }
    victim_ = CreateSandbox(c, LimitsBody());
    if (victim_.empty() || !CopyProbe(victim_)) victim_.clear();
  }
  static void TearDownTestSuite() {
    delete daemon_;
    daemon_ = nullptr;
    if (tcp_fd_ >= 0) ::close(tcp_fd_);
    if (unix_fd_ >= 0) ::close(unix_fd_);
    tcp_fd_ = unix_fd_ = -1;
    delete host_dir_;
    host_dir_ = nullptr;
  }

 protected:
  void SetUp() override {
    SPACE_REQUIRE_SANDBOXES();
    ASSERT_NE(daemon_, nullptr);
    ASSERT_FALSE(victim_.empty()) << daemon_->Log();
    ASSERT_FALSE(other_root_.empty()) << "cannot find the sibling's root under " << daemon_->data_dir();
  }
  client::Client& c() { return daemon_->client(); }

  static Json LimitsBody() {
    return {{"limits",
             {{"memory_bytes", kMemoryMb << 20},
              {"pids", kPids},
              {"disk_bytes", kDiskMb << 20},
              {"nofile", kNofile},
              {"cpus", 1.0}}}};
  }

  // A host file the sandbox could read only by escaping: world-readable, under a
  // world-searchable directory, so only isolation (not permissions) keeps it out.
  static bool PlantHostSecrets() {
    auto dir = sys::TempDir::Create("/tmp", "space-escape-host-");
    if (!dir) {
      ADD_FAILURE() << dir.error().message;
      return false;
    }
    host_dir_ = new sys::TempDir(std::move(*dir));
    ::chmod(host_dir_->path().c_str(), 0755);
    marker_ = host_dir_->path() + "/secret";
    if (!sys::WriteFileAtomic(marker_, token_ + "\n", 0644)) return false;
    struct stat st;
    ::stat(marker_.c_str(), &st);
    marker_mtime_ = st.st_mtim.tv_sec * 1000000000ll + st.st_mtim.tv_nsec;
    // Host services on loopback (and every address): a TCP listener and an abstract unix
    // socket. Connections are never accepted; a completed connect() is the escape.
    tcp_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    socklen_t len = sizeof a;
    if (::bind(tcp_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(tcp_fd_, 64) != 0 ||
        ::getsockname(tcp_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      ADD_FAILURE() << "host listener: " << std::strerror(errno);
      return false;
    }
    tcp_port_ = ntohs(a.sin_port);
    abstract_ = "space-escape-" + token_;
    unix_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un u{};
    u.sun_family = AF_UNIX;
    std::memcpy(u.sun_path + 1, abstract_.data(), abstract_.size());
    socklen_t ulen = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + abstract_.size());
    if (::bind(unix_fd_, reinterpret_cast<sockaddr*>(&u), ulen) != 0 || ::listen(unix_fd_, 64) != 0) {
      ADD_FAILURE() << "host abstract socket: " << std::strerror(errno);
      return false;
    }
    hostname_ = HostName();
    clock_offset_ms_ = ClockOffsetMs();
    return true;
  }

  static bool CopyProbe(const std::string& id) {
    auto w = daemon_->client().WriteFileFrom(id, "/tmp/probe", BinDir() + "/space-escape-probe", 0755);
    if (!w) ADD_FAILURE() << "copy probe: " << w.error().message;
    return static_cast<bool>(w);
  }

  static int SpacedPort() {
    std::string url = daemon_->url();
    return std::atoi(url.substr(url.rfind(':') + 1).c_str());
  }

  static std::vector<std::string> ProbeArgs(const std::string& name) {
    std::string ips;
    for (const auto& ip : HostIpv4()) ips += (ips.empty() ? "" : ",") + ip;
    return {"/tmp/probe",
            name,
            "marker=" + marker_,
            "token=" + token_,
            "other_root=" + other_root_,
            "other_token=" + other_token_,
            "ports=" + std::to_string(tcp_port_) + "," + std::to_string(SpacedPort()),
            "port=" + std::to_string(tcp_port_),
            "host_ips=" + ips,
            "abstract=" + abstract_,
            "spaced_pid=" + std::to_string(daemon_->pid()),
            "pids=" + std::to_string(kPids),
            "memory_mb=" + std::to_string(kMemoryMb),
            "disk_mb=" + std::to_string(kDiskMb),
            "nofile=" + std::to_string(kNofile)};
  }

  ProbeResult RunProbe(const std::string& id, const std::string& name) {
    ProbeResult res;
    Json body = {{"argv", ProbeArgs(name)}, {"timeout", 60}};
    auto r = c().Run(id, body);
    if (!r) {
      res.verdict = "RUN-FAILED";
      res.detail = r.error().message;
      return res;
    }
    res.exit_code = r->exit_code;
    res.raw = r->out + r->err;
    std::istringstream in(r->out);
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream words(line);
      std::string tag, got;
      words >> tag >> got;
      if (tag != "CASE" || got != name) continue;
      words >> res.verdict;
      std::getline(words, res.detail);
    }
    if (res.verdict.empty()) res.verdict = "NO-RESULT";
    return res;
  }

  // The sibling sandbox and spaced still answer.
  void ExpectHostAndSiblingHealthy() {
    EXPECT_TRUE(c().Health()) << "spaced stopped answering";
    auto t0 = std::chrono::steady_clock::now();
    auto r = c().Run(other_, std::vector<std::string>{"echo", "alive"});
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->out, "alive\n");
    // Generous: these machines are shared; a starved sibling would take far longer.
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s) << "the sibling answered slowly";
  }

  void CheckProbeList();
  void CheckLimits();
  void CheckHostUnchanged();

  static inline Daemon* daemon_ = nullptr;
  static inline sys::TempDir* host_dir_ = nullptr;
  static inline std::string victim_, other_, other_root_, token_, other_token_, marker_, abstract_,
      hostname_;
  static inline int64_t marker_mtime_ = 0, clock_offset_ms_ = 0;
  static inline int tcp_fd_ = -1, unix_fd_ = -1, tcp_port_ = 0;
};

// Every case the probe knows, in the order they run (the resource-exhaustion ones last,
// with the ones that leave the sandbox unusable — the daemon — in a sandbox of their own).
const std::vector<std::string>& AllCases() {
  static const std::vector<std::string> cases = {
      "proc1_root",     "proc_cwd_root",  "proc_fd_walk",   "dotdot",
      "chroot_breakout", "symlink",       "hardlink",       "agent_binary_write",
      "open_by_handle", "other_sandbox_files", "host_processes", "ptrace_outside",
      "mount_tmpfs",    "mount_proc",     "mount_sysfs",    "mount_bind",
      "mount_cgroup",   "new_mount_api",  "kernel_module",  "mknod",
      "raw_socket",     "vsock",          "clock",          "hostname",
      "unshare",        "setns",          "keyring",        "bpf",
      "perf_event",     "userfaultfd",    "io_uring",       "reboot_kexec",
      "kernel_log",     "fanotify",       "personality",    "numa_policy",
      "sysrq_trigger",  "masked_proc",    "proc_sys_write", "sys_write",
      "cgroup_write",   "host_loopback",  "host_addresses", "host_abstract_unix",
      "agent_socket",   "template_write", "fork_bomb",      "memory_hog",
      "disk_fill",      "disk_fill_subvolume", "shm_fill",  "fd_exhaust",
      "daemon",
  };
  return cases;
}

// The probe's own list and this suite's agree: no case is left out.
void EscapeTest::CheckProbeList() {
  auto r = c().Run(victim_, std::vector<std::string>{"/tmp/probe", "list"});
  ASSERT_TRUE(r) << r.error().message;
  std::set<std::string> probe, suite(AllCases().begin(), AllCases().end());
  std::istringstream in(r->out);
  for (std::string l; std::getline(in, l);) probe.insert(l);
  EXPECT_EQ(probe, suite);
  EXPECT_GE(suite.size(), 30u);
}

// After every case: the host's secret is untouched, and the sibling's marker process (never
// visible to the probe: host_processes) still runs in its own sandbox.
void EscapeTest::CheckHostUnchanged() {
  auto data = sys::ReadFile(marker_);
  ASSERT_TRUE(data);
  EXPECT_EQ(*data, token_ + "\n");
  struct stat st;
  ASSERT_EQ(::stat(marker_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mtim.tv_sec * 1000000000ll + st.st_mtim.tv_nsec, marker_mtime_);
  EXPECT_EQ(HostName(), hostname_);
  EXPECT_FALSE(HostProcessesWith("marker-" + other_token_).empty());
  ExpectHostAndSiblingHealthy();
}

// The limits the suite relies on are accepted and reported at create; nonsense is refused.
void EscapeTest::CheckLimits() {
  auto sb = c().GetSandbox(victim_);
  ASSERT_TRUE(sb) << sb.error().message;
  // Every limit asked for, plus the output quota every sandbox gets (--max-output-bytes).
  Json want = LimitsBody()["limits"];
  want["output_bytes"] = int64_t{2} << 30;
  EXPECT_EQ((*sb)["limits"], want) << sb->dump();
  for (const auto& [key, value] : std::vector<std::pair<std::string, Json>>{
           {"nofile", 10}, {"nofile", Json(1ll << 30)}, {"disk_bytes", 4096}, {"disk_bytes", -1},
           {"nofile", "many"}, {"inodes", 5}}) {
    Json body = {{"limits", {{key, value}}}};
    auto bad = c().CreateSandbox(body);
    ASSERT_FALSE(bad) << key << "=" << value.dump();
    EXPECT_EQ(bad.error().code, Errc::kInvalidArgument) << key << "=" << value.dump();
  }
}

TEST_P(EscapeTest, Case) {
  const std::string name = GetParam();
  if (name == "probe_list") return CheckProbeList();
  if (name == "limits") return CheckLimits();
  if (name == "host_unchanged") return CheckHostUnchanged();
  std::string sandbox = victim_;
  if (name == "daemon") {
    sandbox = CreateSandbox(c());
    ASSERT_FALSE(sandbox.empty());
    ASSERT_TRUE(CopyProbe(sandbox));
  }
  ProbeResult r = RunProbe(sandbox, name);
  std::printf("CASE %s %s%s\n", name.c_str(), r.verdict.c_str(), r.detail.c_str());
  EXPECT_EQ(r.verdict, "BLOCKED") << r.detail << "\n" << r.raw;

  // What the host sees afterwards.
  if (name == "symlink") {
    // spaced resolves file paths inside the sandbox: the planted link to the host's
    // secret must not make the files API read it.
    auto via_api = c().ReadFile(sandbox, "/tmp/escape-link0");
    if (via_api) {
      EXPECT_EQ(via_api->find(token_), std::string::npos) << "files API followed the link";
    }
  } else if (name == "hostname") {
    EXPECT_EQ(HostName(), hostname_);
  } else if (name == "clock") {
    EXPECT_LT(std::llabs(ClockOffsetMs() - clock_offset_ms_), 1000) << "the host's clock moved";
  } else if (name == "template_write") {
    // The write stayed in the sandbox's own root: a new sandbox of the same template does
    // not see it.
    std::string fresh = CreateSandbox(c());
    ASSERT_FALSE(fresh.empty());
    auto st = c().Stat(fresh, "/etc/escape-template");
    EXPECT_FALSE(st) << "the template changed";
    auto mine = c().Stat(sandbox, "/etc/escape-template");
    EXPECT_TRUE(mine) << "the probe's write is missing in its own sandbox";
    EXPECT_TRUE(c().DeleteSandboxAndWait(fresh, 60s));
  } else if (name == "fork_bomb" || name == "memory_hog" || name == "disk_fill" ||
             name == "disk_fill_subvolume" || name == "shm_fill" || name == "fd_exhaust") {
    ExpectHostAndSiblingHealthy();
    // The sandbox that was attacked recovers too.
    auto again = c().Run(sandbox, std::vector<std::string>{"echo", "ok"});
    ASSERT_TRUE(again) << again.error().message;
    EXPECT_EQ(again->out, "ok\n");
  } else if (name == "daemon") {
    // The grandchild may still be on its way to exec under load.
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (HostProcessesWith("daemon-" + token_).empty() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(20ms);
    ASSERT_FALSE(HostProcessesWith("daemon-" + token_).empty())
        << "the double-forked daemon did not start (nothing to check)";
    ASSERT_TRUE(c().DeleteSandboxAndWait(sandbox, 60s));
    auto left = HostProcessesWith("daemon-" + token_);
    EXPECT_TRUE(left.empty()) << left.size() << " processes of the deleted sandbox survive";
  }
}

// The probe cases between two checks of the suite itself, all on one spaced.
std::vector<std::string> SuiteSteps() {
  std::vector<std::string> steps = {"probe_list", "limits"};
  steps.insert(steps.end(), AllCases().begin(), AllCases().end());
  steps.push_back("host_unchanged");
  return steps;
}

INSTANTIATE_TEST_SUITE_P(Probe, EscapeTest, ::testing::ValuesIn(SuiteSteps()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace space::testing
