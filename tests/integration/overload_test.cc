// Overload: over its configured limits spaced answers 429 with Retry-After at once (no
// timeouts), /healthz is never refused, and work resumes once load falls.
#include "tests/integration/harness.h"

namespace space::testing {
namespace {

using namespace std::chrono_literals;

// `n` clients at once, each with the client's default options (it waits out 429s), each
// creating a sandbox and waiting until it runs (and then deleting it): how many succeeded.
int ConcurrentCreates(const Daemon& d, int n, bool then_delete) {
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&] {
      client::Client c(d.url(), d.api_key());
      auto sb = c.CreateSandboxAndWait(Json::object(), 60s);
      if (sb && (!then_delete || c.DeleteSandboxAndWait((*sb)["id"].get<std::string>(), 60s))) ++ok;
    });
  }
  for (auto& t : threads) t.join();
  return ok.load();
}

TEST(OverloadTest, RequestsBeyondTheInflightLimitGet429WithRetryAfter) {
  SPACE_REQUIRE_SANDBOXES();
  Daemon d({"--max-inflight", "2"});
  ASSERT_TRUE(d.Start());
  client::ClientOptions no_retry;
  no_retry.retry_busy_for = std::chrono::milliseconds{0};  // see the 429s themselves
  client::Client c(d.url(), d.api_key(), no_retry);
  auto sb = c.CreateSandboxAndWait(Json::object(), 30s);
  ASSERT_TRUE(sb) << sb.error().message;
  std::string id = (*sb)["id"];
  // It ends by itself, which answers the long polls below.
  auto started = c.StartCommand(id, {{"argv", {"sleep", "4"}}});
  ASSERT_TRUE(started) << started.error().message;
  std::string cid = (*started)["id"];

  // Two long polls, each on its own connection, hold both slots.
  std::vector<std::unique_ptr<client::Client>> clients;
  struct Joiner {
    std::vector<std::thread> threads;
    ~Joiner() {
      for (auto& t : threads)
        if (t.joinable()) t.join();
    }
  } joiner;
  auto& pollers = joiner.threads;
  for (int i = 0; i < 2; ++i) {
    clients.push_back(std::make_unique<client::Client>(d.url(), d.api_key(), no_retry));
    pollers.emplace_back([&, cl = clients.back().get()] {
      // Our own probes below may hold a slot for an instant: retry until admitted.
      for (int tries = 0; tries < 200; ++tries) {
        auto r = cl->GetCommand(id, cid, 20s);
        if (r || r.error().code != Errc::kResourceExhausted) return;
        std::this_thread::sleep_for(10ms);
      }
    });
  }
  // Until both are in, a third request may still get through; poll until it is refused.
  std::optional<client::HttpResponse> refused;
  auto deadline = std::chrono::steady_clock::now() + 3s;
  while (!refused && std::chrono::steady_clock::now() < deadline) {
    auto t0 = std::chrono::steady_clock::now();
    auto r = c.Request("GET", "/v1/sandboxes/" + id);
    ASSERT_TRUE(r) << r.error().message;
    if (r->status == 429) {
      refused = *r;
      // Refused at once, not after queueing.
      EXPECT_LT(std::chrono::steady_clock::now() - t0, 500ms);
    } else {
      EXPECT_EQ(r->status, 200) << r->body;
      std::this_thread::sleep_for(20ms);
    }
  }
  ASSERT_TRUE(refused) << "no request was refused while two long polls held both slots";
  EXPECT_EQ(refused->Header("Retry-After").value_or(""), "1");
  auto body = ParseJson(refused->body);
  ASSERT_TRUE(body) << refused->body;
  EXPECT_EQ((*body)["error"]["code"], "resource_exhausted");
  // Health checks are never refused.
  EXPECT_TRUE(c.Health());
  for (auto& t : pollers) t.join();
  // Load is gone: requests are served again.
  auto again = c.Request("GET", "/v1/sandboxes/" + id);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 200) << again->body;
}

TEST(OverloadTest, CreatesBeyondTheCreatingLimitGet429) {
  SPACE_REQUIRE_SANDBOXES();
  Daemon d({"--max-creating", "1"});
  ASSERT_TRUE(d.Start());
  client::ClientOptions no_retry;
  no_retry.retry_busy_for = std::chrono::milliseconds{0};
  client::Client c(d.url(), d.api_key(), no_retry);
  // Fire creates without waiting: while the first is in progress, the next are refused.
  std::vector<std::string> accepted;
  int refused = 0;
  for (int i = 0; i < 4; ++i) {
    auto r = c.Request("POST", "/v1/sandboxes", "{}", "application/json");
    ASSERT_TRUE(r) << r.error().message;
    if (r->status == 429) {
      ++refused;
      EXPECT_EQ(r->Header("Retry-After").value_or(""), "1");
      continue;
    }
    ASSERT_EQ(r->status, 202) << r->body;
    accepted.push_back((*ParseJson(r->body))["sandbox"]["id"]);
  }
  EXPECT_GE(refused, 1);
  ASSERT_GE(accepted.size(), 1u);
  // The accepted ones come up; afterwards creates are accepted again.
  for (const auto& id : accepted) {
    std::string state;
    for (auto until = std::chrono::steady_clock::now() + 30s;
         state != "running" && std::chrono::steady_clock::now() < until;
         std::this_thread::sleep_for(50ms)) {
      auto sb = c.GetSandbox(id);
      ASSERT_TRUE(sb) << sb.error().message;
      state = (*sb)["state"];
    }
    EXPECT_EQ(state, "running") << id;
  }
  auto later = c.CreateSandboxAndWait(Json::object(), 30s);
  EXPECT_TRUE(later) << later.error().message;
}

// A client left with its default options waits out 429s by itself (Retry-After).
TEST(OverloadTest, TheClientRetriesRefusedCreates) {
  SPACE_REQUIRE_SANDBOXES();
  Daemon d({"--max-creating", "1"});
  ASSERT_TRUE(d.Start());
  EXPECT_EQ(ConcurrentCreates(d, 3, /*then_delete=*/false), 3);
}

// --job-workers: how many operations are carried out at once. One worker still carries
// out concurrent creates (in turn); a count out of range stops spaced with a clear error.
TEST(OverloadTest, JobWorkersCarryOutOperationsInTurn) {
  SPACE_REQUIRE_SANDBOXES();
  for (const char* bad : {"0", "257", "many"}) {
    auto r = sys::Run({.argv = {BinDir() + "/spaced", "--listen", "127.0.0.1:0", "--data-dir",
                                "/nonexistent/space-job-workers", "--job-workers", bad}},
                      20000);
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_NE(r->exit_code, 0) << bad;
    EXPECT_NE(r->err.find("--job-workers"), std::string::npos) << bad << ": " << r->err;
  }
  Daemon d({"--job-workers", "1"});
  ASSERT_TRUE(d.Start());
  EXPECT_EQ(ConcurrentCreates(d, 3, /*then_delete=*/true), 3);
}

}  // namespace
}  // namespace space::testing
