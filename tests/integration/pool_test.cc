// Warm pools: creates claim started sandboxes, which take on the request's env, labels and
// timeout; pools refill in the background, stay hidden, and survive a daemon restart.
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tests/integration/harness.h"

namespace space::testing {
namespace {

using namespace std::chrono_literals;

// Creates a sandbox and reports whether it came from the warm pool.
bool CreateIsWarm(client::Client& c, const Json& body, std::string* id) {
  auto r = c.CreateSandbox(body, 30s);
  if (!r) {
    ADD_FAILURE() << r.error().message;
    return false;
  }
  *id = (*r)["sandbox"]["id"];
  return JsonBoolOr((*r)["operation"]["result"], "warm", false);
}

// Waits until a create would be warm again (the pool refilled), by polling cheaply.
void WaitForPool(Daemon& d, int members) {
  auto deadline = std::chrono::steady_clock::now() + 60s;
  while (std::chrono::steady_clock::now() < deadline) {
    auto dirs = sys::Run({.argv = {"sh", "-c", "ls " + d.data_dir() + "/runtime/oci/run | wc -l"}});
    if (dirs && std::atoi(dirs->out.c_str()) >= members) {
      std::this_thread::sleep_for(200ms);  // let the last member's agent connect
      return;
    }
    std::this_thread::sleep_for(100ms);
  }
  ADD_FAILURE() << "warm pool did not fill";
}

TEST(PoolTest, CreatesClaimWarmSandboxesAndPoolsRefill) {
  SPACE_REQUIRE_SANDBOXES();
  Daemon d({"--warm-pool", "base=2"});
  ASSERT_TRUE(d.Start());
  auto& c = d.client();
  WaitForPool(d, 2);
  // Pool members are not listed.
  EXPECT_TRUE(c.ListSandboxes()->empty());

  std::string a, b, cold;
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(CreateIsWarm(c, {{"env", {{"FOO", "warm-env"}}}, {"metadata", {{"who", "a"}}}, {"timeout", 120}}, &a));
  auto warm_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(warm_ms, 1000) << "a warm create should not start a container";
  EXPECT_TRUE(CreateIsWarm(c, Json::object(), &b));
  // Non-default limits cannot be given to a started instance: a cold create.
  EXPECT_FALSE(CreateIsWarm(c, {{"limits", {{"memory_bytes", 64 << 20}}}}, &cold));

  // The claimed sandbox took on the request.
  auto sb = c.GetSandbox(a);
  ASSERT_TRUE(sb);
  EXPECT_EQ((*sb)["state"], "running");
  EXPECT_EQ((*sb)["metadata"]["who"], "a");
  EXPECT_EQ((*sb)["timeout"], 120);
  EXPECT_TRUE((*sb)["expires_at"].is_string());
  auto r = c.Run(a, Json{{"cmd", "echo $FOO"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->out, "warm-env\n");
  EXPECT_EQ(c.ListSandboxes({{"who", "a"}})->size(), 1u);
  EXPECT_EQ(c.ListSandboxes()->size(), 3u);

  // The pool refills, and survives a daemon crash.
  WaitForPool(d, 3 + 2);
  d.Kill();
  ASSERT_TRUE(d.Start());
  std::string after;
  EXPECT_TRUE(CreateIsWarm(d.client(), Json::object(), &after));
  auto ra = d.client().Run(after, std::vector<std::string>{"echo", "ok"});
  ASSERT_TRUE(ra);
  EXPECT_EQ(ra->out, "ok\n");
  EXPECT_EQ(d.client().ListSandboxes()->size(), 4u);
}

// The space-agent (the sandbox's PID 1) of sandbox `id`, by its cgroup.
std::string AgentPidOf(const std::string& id) {
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string pid = e.path().filename();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream comm(e.path() / "comm"), cg(e.path() / "cgroup");
    std::string name((std::istreambuf_iterator<char>(comm)), {});
    std::string groups((std::istreambuf_iterator<char>(cg)), {});
    if (name == "space-agent\n" && groups.find(id) != std::string::npos) return pid;
  }
  return "";
}

// A new root's files have nothing in the page cache; spaced reads the shell ahead as the
// instance starts, so the first command does not wait for the disk (a claimed warm
// sandbox's first `echo` was ~1 ms slower than its second).
TEST(PoolTest, ClaimedSandboxFindsItsShellInThePageCache) {
  SPACE_REQUIRE_SANDBOXES();
  Daemon d({"--warm-pool", "base=1"});
  ASSERT_TRUE(d.Start());
  WaitForPool(d, 1);
  std::string id;
  ASSERT_TRUE(CreateIsWarm(d.client(), Json::object(), &id));
  const std::string pid = AgentPidOf(id);
  ASSERT_FALSE(pid.empty());
  // The sandbox's /bin/sh as the sandbox resolves it (a symlink inside its root).
  sys::UniqueFd root(::open(("/proc/" + pid + "/root").c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(root);
  open_how how{};
  how.flags = O_RDONLY | O_CLOEXEC;
  how.resolve = RESOLVE_IN_ROOT;
  sys::UniqueFd sh(static_cast<int>(::syscall(SYS_openat2, root.get(), "bin/sh", &how, sizeof how)));
  ASSERT_TRUE(sh) << std::strerror(errno);
  struct stat st;
  ASSERT_EQ(::fstat(sh.get(), &st), 0);
  ASSERT_GT(st.st_size, 0);
  void* map = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_SHARED, sh.get(), 0);
  ASSERT_NE(map, MAP_FAILED);
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> resident((static_cast<size_t>(st.st_size) + page - 1) / page);
  const int mc = ::mincore(map, static_cast<size_t>(st.st_size), resident.data());
  ::munmap(map, static_cast<size_t>(st.st_size));
  ASSERT_EQ(mc, 0) << std::strerror(errno);
  size_t in = 0;
  for (unsigned char r : resident) in += r & 1;
  EXPECT_GE(in * 2, resident.size()) << in << " of " << resident.size() << " pages of /bin/sh cached";
  auto r = d.client().Run(id, std::vector<std::string>{"echo", "ok"});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->out, "ok\n");
}

}  // namespace
}  // namespace space::testing
