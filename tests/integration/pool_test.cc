// Warm pools: creates claim started sandboxes, which take on the request's env, labels and
// timeout; pools refill in the background, stay hidden, and survive a daemon restart.
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

}  // namespace
}  // namespace space::testing
