// harness: starts a real spaced on a free loopback port with a temporary data dir, and
// tears everything down afterwards — even when the test failed or spaced crashed:
// sandboxes (through the API if spaced lives, else through a fresh oci runtime object on
// the same state dir, exactly as a restarted daemon would), mounts under the data dir, the
// storage pool, and the temporary directory.
#pragma once

#include <gtest/gtest.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cli/client.h"
#include "runtime/microvm/microvm.h"
#include "runtime/oci/oci.h"
#include "storage/storage.h"
#include "sys/sys.h"

namespace space::testing {

inline std::string BinDir() { return sys::SelfExeDir(); }

inline bool CanRunSandboxes(std::string* why) {
  if (::geteuid() != 0) {
    *why = "needs root (namespaces, cgroups, loop devices)";
    return false;
  }
  if (!sys::Exists("/usr/bin/crun") || !sys::Exists("/bin/busybox")) {
    *why = "needs crun and busybox-static (make deps)";
    return false;
  }
  return true;
}

// The microVM guest artefacts the build makes beside bin/.
inline std::string GuestDir() { return BinDir() + "/../share/space/microvm"; }

// Whether this host can boot microVMs (QEMU and the guest kernel and initramfs).
inline bool CanRunVms(std::string* why) {
  if (!CanRunSandboxes(why)) return false;
  if (!sys::Exists("/usr/bin/qemu-system-x86_64")) {
    *why = "needs qemu-system-x86 (make deps)";
    return false;
  }
  if (!sys::Exists(GuestDir() + "/vmlinux") || !sys::Exists(GuestDir() + "/initrd.cpio")) {
    *why = "needs the guest kernel (linux-image-cloud-amd64) and a build of the initramfs";
    return false;
  }
  return true;
}


#define SPACE_REQUIRE_SANDBOXES()                                   \
  do {                                                              \
    std::string why_;                                               \
    if (!::space::testing::CanRunSandboxes(&why_)) GTEST_SKIP() << why_; \
  } while (0)

class Daemon {
 public:
  explicit Daemon(std::vector<std::string> extra_args = {}) : extra_(std::move(extra_args)) {
    auto t = sys::TempDir::Create("/tmp", "space-it-");
    if (!t) throw std::runtime_error(t.error().message);
    dir_ = std::move(*t);
    // The sandboxes' unprivileged root must be able to traverse down to the data dir.
    ::chmod(dir_.path().c_str(), 0711);
    data_dir_ = dir_.path() + "/data";
  }
  ~Daemon() { Cleanup(); }

  const std::string& data_dir() const { return data_dir_; }
  pid_t pid() const { return child_.pid(); }
  client::Client& client() { return *client_; }
  std::string url() const { return url_; }
  std::string api_key() const { return key_; }

  // Starts spaced and waits until /healthz answers. Returns false (with a test failure) if
  // it does not come up within 60 s.
  bool Start() {
    std::vector<std::string> argv = {BinDir() + "/spaced", "--listen", "127.0.0.1:0",
                                     "--data-dir", data_dir_, "--log-level", "warn"};
    argv.insert(argv.end(), extra_.begin(), extra_.end());
    // Sanitizer builds have no static agent of their own.
    if (const char* agent = std::getenv("SPACE_TEST_AGENT"); agent && *agent) {
      argv.push_back("--agent-binary");
      argv.push_back(agent);
    }
    (void)sys::RemoveAll(data_dir_ + "/url");
    std::string log = dir_.path() + "/spaced.log";
    auto fd = sys::Open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (!fd) {
      ADD_FAILURE() << fd.error().message;
      return false;
    }
    // If the test binary crashes, spaced dies with it (its sandboxes are removed by the
    // integration_cleanup step that ctest runs afterwards).
    auto child = sys::Spawn({.argv = argv, .die_with_parent = true, .stdout_fd = fd->get(),
                             .stderr_fd = fd->get()});
    if (!child) {
      ADD_FAILURE() << "spawn spaced: " << child.error().message;
      return false;
    }
    child_ = std::move(*child);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < deadline) {
      int st;
      if (::waitpid(child_.pid(), &st, WNOHANG) == child_.pid()) {
        child_.Release();
        ADD_FAILURE() << "spaced exited during start-up:\n" << Log();
        return false;
      }
      auto url = sys::ReadFile(data_dir_ + "/url");
      auto key = sys::ReadFile(data_dir_ + "/api-key");
      if (url && key && !url->empty()) {
        url_ = Trim(*url);
        key_ = Trim(*key);
        client_ = std::make_unique<client::Client>(url_, key_);
        if (client_->Health()) return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ADD_FAILURE() << "spaced did not come up in 60 s:\n" << Log();
    return false;
  }

  // Replaces the extra command-line arguments used by the next Start().
  void SetExtraArgs(std::vector<std::string> args) { extra_ = std::move(args); }

  // Waits up to `limit` for spaced to exit by itself; true if it did.
  bool WaitExit(std::chrono::milliseconds limit) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (child_.pid() > 0 && std::chrono::steady_clock::now() < deadline) {
      int st;
      if (::waitpid(child_.pid(), &st, WNOHANG) == child_.pid()) {
        child_.Release();
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return child_.pid() <= 0;
  }

  // SIGKILLs spaced (sandboxes keep running, as after a crash).
  void Kill() {
    if (child_.pid() > 0) {
      ::kill(child_.pid(), SIGKILL);
      (void)child_.Wait();
    }
  }
  // SIGTERM and wait: a clean stop.
  void Stop() {
    if (child_.pid() > 0) {
      ::kill(child_.pid(), SIGTERM);
      (void)child_.Wait();
    }
  }

  std::string Log() const {
    auto l = sys::ReadFile(dir_.path() + "/spaced.log");
    return l ? *l : "";
  }

  // Deletes every sandbox, stops spaced, and removes everything it left on the host.
  void Cleanup() {
    if (cleaned_) return;
    cleaned_ = true;
    if (::testing::UnitTest::GetInstance()->failed_test_count() > 0 ||
        ::testing::Test::HasFailure()) {
      std::string log = Log();
      if (log.size() > 6000) log = "..." + log.substr(log.size() - 6000);
      std::fprintf(stderr, "---- spaced log (%s) ----\n%s\n----\n", data_dir_.c_str(), log.c_str());
    }
    if (client_ && child_.pid() > 0) {
      if (auto list = client_->ListSandboxes(); list && list->is_array()) {
        for (const auto& sb : *list) {
          (void)client_->DeleteSandboxAndWait(sb.value("id", ""), std::chrono::seconds(30));
        }
      }
    }
    Stop();
    // Anything spaced did not remove (it crashed, or a test killed it): destroy it the way
    // a restarted daemon would.
    runtime::OciOptions o;
    o.state_dir = data_dir_ + "/runtime/oci";
    o.agent_binary = BinDir() + "/space-agent";
    if (const char* agent = std::getenv("SPACE_TEST_AGENT"); agent && *agent) o.agent_binary = agent;
    if (sys::Exists(o.state_dir)) {
      if (auto rt = runtime::CreateOciRuntime(o)) {
        if (auto ids = (*rt)->List()) {
          for (const auto& id : *ids) (void)(*rt)->Destroy(id);
        }
      }
    }
    // VMs likewise (their QEMU runs detached, found through the runtime's state dir).
    runtime::MicrovmOptions m;
    m.state_dir = data_dir_ + "/runtime/microvm";
    m.accel = "tcg";
    m.kernel = BinDir() + "/../share/space/microvm/vmlinux";
    m.initrd = BinDir() + "/../share/space/microvm/initrd.cpio";
    if (sys::Exists(m.state_dir + "/vms")) {
      if (auto rt = runtime::CreateMicrovmRuntime(m)) {
        if (auto ids = (*rt)->List()) {
          for (const auto& id : *ids) (void)(*rt)->Destroy(id);
        }
      }
    }
    if (auto st = storage::Driver::Teardown(data_dir_); !st) {
      ADD_FAILURE() << "storage teardown: " << st.error().message;
    }
    for (const auto& m : sys::MountsUnder(dir_.path())) ::umount2(m.c_str(), MNT_DETACH);
  }

  static std::string Trim(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
  }

 private:
  std::vector<std::string> extra_;
  sys::TempDir dir_;
  std::string data_dir_;
  sys::ChildProcess child_;
  std::unique_ptr<client::Client> client_;
  std::string url_, key_;
  bool cleaned_ = false;
};

// A suite whose tests share one spaced: started once before the first test, torn down (with
// everything it made) after the last. Suite may define `static std::vector<std::string>
// DaemonArgs()` for extra flags.
template <class Suite>
class SharedDaemonTest : public ::testing::Test {
 protected:
  static std::vector<std::string> DaemonArgs() { return {}; }
  static void SetUpTestSuite() {
    std::string why;
    if (!CanRunSandboxes(&why)) return;
    daemon_ = new Daemon(Suite::DaemonArgs());
    if (!daemon_->Start()) return;
  }
  static void TearDownTestSuite() {
    delete daemon_;
    daemon_ = nullptr;
  }
  void SetUp() override {
    SPACE_REQUIRE_SANDBOXES();
    ASSERT_NE(daemon_, nullptr);
  }
  client::Client& c() { return daemon_->client(); }

  static inline Daemon* daemon_ = nullptr;
};

// A sandbox created for a test; deleted when the guard goes out of scope.
inline std::string CreateSandbox(client::Client& c, const Json& body = Json::object()) {
  auto sb = c.CreateSandboxAndWait(body, std::chrono::seconds(60));
  if (!sb) {
    ADD_FAILURE() << "create sandbox: " << sb.error().message;
    return "";
  }
  return sb->value("id", "");
}

// One API request's answer: its status, its body, and the body parsed as JSON (null when
// it is not JSON).
struct ApiReply {
  int status = 0;
  Json json;
  std::string body;
};

// `method path` with `body` of `type` (no body and no type when empty). A request that gets
// no answer fails the test and returns status 0.
inline ApiReply ApiRequest(client::Client& c, const std::string& method, const std::string& path,
                           const std::string& body = "", const std::string& type = "application/json") {
  auto r = c.Request(method, path, body, body.empty() ? "" : type);
  if (!r) {
    ADD_FAILURE() << method << " " << path << ": " << r.error().message;
    return {};
  }
  ApiReply out{r->status, Json(), r->body};
  if (auto j = ParseJson(r->body)) out.json = *j;
  return out;
}

// Host processes (this one aside) whose command line contains `needle`.
inline std::vector<pid_t> HostProcessesWith(const std::string& needle) {
  std::vector<pid_t> out;
  DIR* d = ::opendir("/proc");
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    pid_t pid = std::atoi(e->d_name);
    if (pid <= 0 || pid == ::getpid()) continue;
    auto cmd = sys::ReadFile("/proc/" + std::string(e->d_name) + "/cmdline");
    if (cmd && cmd->find(needle) != std::string::npos) out.push_back(pid);
  }
  ::closedir(d);
  return out;
}

// POST /v1/templates {"builtin":name}?wait=... and waits for the operation to succeed.
inline ::testing::AssertionResult EnsureBuiltin(client::Client& c, const std::string& name) {
  auto r = c.Request("POST", "/v1/templates?wait=1200s", Json{{"builtin", name}}.dump(),
                     "application/json");
  if (!r) return ::testing::AssertionFailure() << r.error().message;
  auto body = ParseJson(r->body);
  if (r->status == 202 && body) {
    const Json* op = JsonField(*body, "operation");
    auto done = c.WaitOperation(JsonStringOr(op ? *op : Json(), "id", ""), std::chrono::seconds(1200));
    if (!done) return ::testing::AssertionFailure() << done.error().message;
    if (JsonStringOr(*done, "state", "") != "succeeded")
      return ::testing::AssertionFailure() << done->dump();
    return ::testing::AssertionSuccess();
  }
  if (r->status != 201) return ::testing::AssertionFailure() << r->status << " " << r->body;
  return ::testing::AssertionSuccess();
}

}  // namespace space::testing
