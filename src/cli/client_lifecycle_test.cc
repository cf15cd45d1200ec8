// Tests of the lifecycle, timeout, snapshot and fork parts of the client (client_lifecycle.cc)
// and of the CLI commands built on them, against the boundary fake of test_http_server.h.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <mutex>

#include "cli/client.h"
#include "cli/test_http_server.h"
#include "sys/sys.h"

namespace space::client {
namespace {

using space::testing::FakeConn;
using space::testing::FakeHttpServer;
using space::testing::FakeRequest;
using space::testing::ResponseText;
using namespace std::chrono_literals;

// A fake spaced: answers keyed by "METHOD /path" (the query is ignored); anything else is a
// 404 in spaced's error shape. Routes may be changed while the server runs.
class Routes {
 public:
  using Answer = std::function<std::string(const FakeRequest&)>;
  void On(const std::string& method_path, Answer answer) {
    std::lock_guard<std::mutex> lock(mu_);
    routes_[method_path] = std::move(answer);
  }
  void On(const std::string& method_path, int status, std::string body) {
    On(method_path, [status, body](const FakeRequest&) { return ResponseText(status, body); });
  }
  // Answers `pending_polls` GETs of the operation with "running", then `final_op`.
  void OnOperation(const std::string& op_id, int pending_polls, std::string final_op) {
    auto polls = std::make_shared<std::atomic<int>>(0);
    On("GET /v1/operations/" + op_id, [=](const FakeRequest&) {
      if (++*polls <= pending_polls) {
        return ResponseText(200, R"({"id":")" + op_id + R"(","state":"running"})");
      }
      return ResponseText(200, final_op);
    });
  }
  space::testing::FakeHandler Handler() {
    return [this](const FakeRequest& req, FakeConn& conn) {
      Answer answer;
      {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = routes_.find(req.method + " " + req.Path());
        if (it != routes_.end()) answer = it->second;
      }
      conn.Write(answer
                     ? answer(req)
                     : ResponseText(404, R"({"error":{"code":"not_found","message":"no route"}})"));
    };
  }

 private:
  std::mutex mu_;
  std::map<std::string, Answer> routes_;
};

std::vector<std::string> Targets(FakeHttpServer& server) {
  std::vector<std::string> out;
  for (const FakeRequest& r : server.requests()) out.push_back(r.method + " " + r.target);
  return out;
}

using Strings = std::vector<std::string>;

// ---------------------------------------------------------------------------------------------
// Lifecycle transitions

TEST(Transition, NamesRoundTrip) {
  for (Transition t :
       {Transition::kPause, Transition::kResume, Transition::kSuspend, Transition::kWake}) {
    EXPECT_EQ(ParseTransition(TransitionName(t)), t);
  }
  EXPECT_EQ(std::string(TransitionName(Transition::kSuspend)), "suspend");
  EXPECT_FALSE(ParseTransition("fork"));
  EXPECT_FALSE(ParseTransition(""));
}

TEST(ClientLifecycle, TransitionFinishedWithinTheWaitUsesTheAnswersSandbox) {
  Routes routes;
  routes.On("POST /v1/sandboxes/sb-1/pause", 200,
            R"({"operation":{"id":"op-1","kind":"pause","state":"succeeded"},
                "sandbox":{"id":"sb-1","state":"paused"}})");
  FakeHttpServer server(routes.Handler());
  Client c(server.url(), "k");
  int pending = 0;
  auto sb = c.TransitionAndWait("sb-1", Transition::kPause,
                                WaitOptions{.on_pending = [&](const Json&) { ++pending; }});
  ASSERT_TRUE(sb) << sb.error().message;
  EXPECT_EQ((*sb)["state"], "paused");
  EXPECT_EQ(pending, 0);
  EXPECT_EQ(Targets(server), Strings{"POST /v1/sandboxes/sb-1/pause?wait=300s"});
  EXPECT_EQ(server.requests()[0].body, "{}");
  EXPECT_EQ(server.requests()[0].Header("content-type"), "application/json");
}

TEST(ClientLifecycle, PendingTransitionIsFollowedAndReportedOnce) {
  Routes routes;
  routes.On("POST /v1/sandboxes/sb-1/suspend", 202,
            R"({"operation":{"id":"op-7","kind":"suspend","state":"pending"},
                "sandbox":{"id":"sb-1","state":"running"}})");
  routes.OnOperation("op-7", 2, R"({"id":"op-7","kind":"suspend","state":"succeeded"})");
  routes.On("GET /v1/sandboxes/sb-1", 200, R"({"id":"sb-1","state":"suspended"})");
  FakeHttpServer server(routes.Handler());
  Client c(server.url(), "k");
  std::vector<Json> reported;
  auto sb = c.TransitionAndWait(
      "sb-1", Transition::kSuspend,
      WaitOptions{.first_wait = 2s, .on_pending = [&](const Json& op) { reported.push_back(op); }});
  ASSERT_TRUE(sb) << sb.error().message;
  // The answer's copy predates the transition: the sandbox is read again afterwards.
  EXPECT_EQ((*sb)["state"], "suspended");
  ASSERT_EQ(reported.size(), 1u);
  EXPECT_EQ(reported[0]["id"], "op-7");
  EXPECT_EQ(reported[0]["kind"], "suspend");
  EXPECT_EQ(Targets(server),
            (Strings{"POST /v1/sandboxes/sb-1/suspend?wait=2s", "GET /v1/operations/op-7?wait=300s",
                     "GET /v1/operations/op-7?wait=300s", "GET /v1/operations/op-7?wait=300s",
                     "GET /v1/sandboxes/sb-1"}));
}

TEST(ClientLifecycle, TransitionErrors) {
  Routes routes;
  routes.On("POST /v1/sandboxes/sb-1/resume", 409,
            R"({"error":{"code":"conflict","message":"sandbox sb-1 is running"}})");
  routes.On("POST /v1/sandboxes/sb-2/wake", 202,
            R"({"operation":{"id":"op-2","kind":"wake","state":"running"}})");
  routes.OnOperation("op-2", 0, R"({"id":"op-2","kind":"wake","state":"failed",
                                    "error":{"code":"unavailable","message":"crun died"}})");
  routes.On("POST /v1/sandboxes/sb-3/pause", 202,
            R"({"operation":{"id":"op-3","kind":"pause","state":"running"}})");
  routes.OnOperation("op-3", 1000000, "");
  routes.On("POST /v1/sandboxes/sb-4/pause", 200, R"({"sandbox":{"id":"sb-4"}})");
  FakeHttpServer server(routes.Handler());
  Client c(server.url(), "k");

  auto conflict = c.TransitionAndWait("sb-1", Transition::kResume);
  ASSERT_FALSE(conflict);
  EXPECT_EQ(conflict.error().code, Errc::kConflict);
  EXPECT_EQ(conflict.error().message, "sandbox sb-1 is running");

  auto failed = c.TransitionAndWait("sb-2", Transition::kWake);
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error().code, Errc::kUnavailable);
  EXPECT_EQ(failed.error().message, "wake op-2 failed: crun died");

  auto slow = c.TransitionAndWait("sb-3", Transition::kPause, WaitOptions{.timeout = 300ms});
  ASSERT_FALSE(slow);
  EXPECT_EQ(slow.error().code, Errc::kDeadlineExceeded);

  auto no_op = c.TransitionAndWait("sb-4", Transition::kPause);
  ASSERT_FALSE(no_op);
  EXPECT_EQ(no_op.error().code, Errc::kInternal);
}

TEST(ClientLifecycle, StartTransitionDoesNotWait) {
  Routes routes;
  routes.On("POST /v1/sandboxes/sb-1/wake", 202,
            R"({"operation":{"id":"op-1","state":"pending"},"sandbox":{"id":"sb-1"}})");
  FakeHttpServer server(routes.Handler());
  Client c(server.url(), "k");
  auto r = c.StartTransition("sb-1", Transition::kWake);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ((*r)["operation"]["id"], "op-1");
  ASSERT_TRUE(c.StartTransition("sb-1", Transition::kWake, 1500ms));
  EXPECT_EQ(Targets(server),
            (Strings{"POST /v1/sandboxes/sb-1/wake", "POST /v1/sandboxes/sb-1/wake?wait=1500ms"}));
}

TEST(ClientLifecycle, SetTimeout) {
  Routes routes;
  routes.On("POST /v1/sandboxes/sb-1/timeout", 200,
            R"({"id":"sb-1","state":"running","timeout":600,"on_timeout":"pause"})");
  FakeHttpServer server(routes.Handler());
  Client c(server.url(), "k");
  auto sb = c.SetTimeout("sb-1", 600, "pause");
  ASSERT_TRUE(sb) << sb.error().message;
  EXPECT_EQ((*sb)["timeout"], 600);
  ASSERT_TRUE(c.SetTimeout("sb-1", 0));
  auto negative = c.SetTimeout("sb-1", -1);
  ASSERT_FALSE(negative);
  EXPECT_EQ(negative.error().code, Errc::kInvalidArgument);
  auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 2u);  // the negative one never left the client
  EXPECT_EQ(*ParseJson(reqs[0].body), (Json{{"timeout", 600}, {"on_timeout", "pause"}}));
  EXPECT_EQ(*ParseJson(reqs[1].body), (Json{{"timeout", 0}}));
}

// ---------------------------------------------------------------------------------------------
// Wait options of the older helpers

TEST(ClientLifecycle, CreateAndDeleteReportPendingOperations) {
  Routes routes;
  routes.On("POST /v1/sandboxes", 202,
            R"({"operation":{"id":"op-c","kind":"create","state":"pending"},
                "sandbox":{"id":"sb-9","state":"creating"}})");
  routes.OnOperation("op-c", 1, R"({"id":"op-c","kind":"create","state":"succeeded"})");
  routes.On("GET /v1/sandboxes/sb-9", 200, R"({"id":"sb-9","state":"running"})");
  routes.On("DELETE /v1/sandboxes/sb-9", 202,
            R"({"operation":{"id":"op-d","kind":"delete","state":"running"}})");
  routes.OnOperation("op-d", 0, R"({"id":"op-d","kind":"delete","state":"succeeded"})");
  FakeHttpServer server(routes.Handler());
  Client c(server.url(), "k");
  std::vector<std::string> reported;
  WaitOptions options{.first_wait = 1s,
                      .on_pending = [&](const Json& op) { reported.push_back(op["kind"]); }};
  auto sb = c.CreateSandboxAndWait(Json{{"snapshot", "snap-1"}}, options);
  ASSERT_TRUE(sb) << sb.error().message;
  EXPECT_EQ((*sb)["id"], "sb-9");
  ASSERT_TRUE(c.DeleteSandboxAndWait("sb-9", options));
  EXPECT_EQ(reported, (Strings{"create", "delete"}));
  auto targets = Targets(server);
  EXPECT_EQ(targets.front(), "POST /v1/sandboxes?wait=1s");
  EXPECT_NE(std::find(targets.begin(), targets.end(), "DELETE /v1/sandboxes/sb-9?wait=1s"),
            targets.end());
}

// ---------------------------------------------------------------------------------------------
// Snapshots

TEST(ClientSnapshots, SnapshotAndWaitTakesTheIdFromTheResult) {
  Routes routes;
  // Finished within the wait: 201 with the SNAPSHOT.
  routes.On("POST /v1/sandboxes/sb-1/snapshots", 201,
            R"({"operation":{"id":"op-1","kind":"snapshot","state":"succeeded",
                             "result":{"snapshot_id":"snap-1"}},
                "snapshot":{"id":"snap-1","sandbox_id":"sb-1","state":"ready"}})");
  // Still running: followed until the result names the snapshot.
  routes.On("POST /v1/sandboxes/sb-2/snapshots", 202,
            R"({"operation":{"id":"op-2","kind":"snapshot","state":"running"}})");
  routes.OnOperation("op-2", 1, R"({"id":"op-2","kind":"snapshot","state":"succeeded",
                                    "result":{"snapshot_id":"snap-2"}})");
  // Succeeded but names nothing.
  routes.On("POST /v1/sandboxes/sb-3/snapshots", 200,
            R"({"operation":{"id":"op-3","state":"succeeded","result":{}}})");
  // Failed.
  routes.On("POST /v1/sandboxes/sb-4/snapshots", 202,
            R"({"operation":{"id":"op-4","kind":"snapshot","state":"pending"}})");
  routes.OnOperation("op-4", 0, R"({"id":"op-4","kind":"snapshot","state":"failed",
                                    "error":{"code":"resource_exhausted","message":"disk full"}})");
  FakeHttpServer server(routes.Handler());
  Client c(server.url(), "k");

  auto s1 = c.SnapshotAndWait("sb-1");
  ASSERT_TRUE(s1) << s1.error().message;
  EXPECT_EQ(*s1, "snap-1");
  int pending = 0;
  auto s2 = c.SnapshotAndWait("sb-2", WaitOptions{.on_pending = [&](const Json&) { ++pending; }});
  ASSERT_TRUE(s2) << s2.error().message;
  EXPECT_EQ(*s2, "snap-2");
  EXPECT_EQ(pending, 1);
  auto s3 = c.SnapshotAndWait("sb-3");
  ASSERT_FALSE(s3);
  EXPECT_EQ(s3.error().code, Errc::kInternal);
  EXPECT_NE(s3.error().message.find("without a snapshot_id"), std::string::npos);
  auto s4 = c.SnapshotAndWait("sb-4");
  ASSERT_FALSE(s4);
  EXPECT_EQ(s4.error().code, Errc::kResourceExhausted);
  EXPECT_EQ(s4.error().message, "snapshot op-4 failed: disk full");

  auto started = c.StartSnapshot("sb-2");
  ASSERT_TRUE(started);
  EXPECT_EQ(Targets(server).back(), "POST /v1/sandboxes/sb-2/snapshots");
}

TEST(ClientSnapshots, ListGetDelete) {
  Routes routes;
  routes.On(
      "GET /v1/snapshots", 200,
      R"({"snapshots":[{"id":"snap-1","sandbox_id":"sb-1"},{"id":"snap-2","sandbox_id":"sb-2"}]})");
  routes.On("GET /v1/sandboxes/sb-2/snapshots", 200,
            R"({"snapshots":[{"id":"snap-2","sandbox_id":"sb-2"}]})");
  routes.On("GET /v1/sandboxes/sb-bad/snapshots", 200, R"({"nothing":1})");
  routes.On("GET /v1/snapshots/snap-2", 200, R"({"id":"snap-2","kind":"filesystem"})");
  routes.On("DELETE /v1/snapshots/snap-2", 200, "{}");
  FakeHttpServer server(routes.Handler());
  Client c(server.url(), "k");
  auto all = c.ListSnapshots();
  ASSERT_TRUE(all) << all.error().message;
  EXPECT_EQ(all->size(), 2u);
  auto one = c.ListSnapshots("sb-2");
  ASSERT_TRUE(one);
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0]["id"], "snap-2");
  EXPECT_FALSE(c.ListSnapshots("sb-bad"));
  auto got = c.GetSnapshot("snap-2");
  ASSERT_TRUE(got);
  EXPECT_EQ((*got)["kind"], "filesystem");
  EXPECT_TRUE(c.DeleteSnapshot("snap-2"));
  auto missing = c.DeleteSnapshot("snap-x");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, Errc::kNotFound);
  EXPECT_EQ(Targets(server),
            (Strings{"GET /v1/snapshots", "GET /v1/sandboxes/sb-2/snapshots",
                     "GET /v1/sandboxes/sb-bad/snapshots", "GET /v1/snapshots/snap-2",
                     "DELETE /v1/snapshots/snap-2", "DELETE /v1/snapshots/snap-x"}));
}

// ---------------------------------------------------------------------------------------------
// Forks

TEST(ClientForks, ForkAndWaitReturnsEachForksOutcome) {
  Routes routes;
  routes.On("POST /v1/sandboxes/sb-1/fork", 202,
            R"({"operation":{"id":"op-f","kind":"fork","state":"running"},
                "sandboxes":[{"id":"sb-a"},{"id":"sb-b"},{"id":"sb-c"}]})");
  routes.OnOperation("op-f", 1, R"({"id":"op-f","kind":"fork","state":"succeeded","result":{
      "sandboxes":[{"id":"sb-a","state":"running","error":null},
                   {"id":"sb-b","state":"error","error":{"code":"internal","message":"no pids"}},
                   {"id":"sb-c","state":"error","error":"disk full"}]}})");
  FakeHttpServer server(routes.Handler());
  Client c(server.url(), "k");
  auto forks = c.ForkAndWait("sb-1", 3);
  ASSERT_TRUE(forks) << forks.error().message;
  ASSERT_EQ(forks->size(), 3u);
  EXPECT_EQ((*forks)[0].id, "sb-a");
  EXPECT_EQ((*forks)[0].state, "running");
  EXPECT_EQ((*forks)[0].error, "");
  EXPECT_EQ((*forks)[1].state, "error");
  EXPECT_EQ((*forks)[1].error, "no pids");
  EXPECT_EQ((*forks)[2].error, "disk full");
  auto req = server.requests().at(0);
  EXPECT_EQ(req.target, "/v1/sandboxes/sb-1/fork?wait=300s");
  EXPECT_EQ(*ParseJson(req.body), (Json{{"count", 3}}));

  auto zero = c.ForkAndWait("sb-1", 0);
  ASSERT_FALSE(zero);
  EXPECT_EQ(zero.error().code, Errc::kInvalidArgument);
  EXPECT_FALSE(c.StartFork("sb-1", -2));
  EXPECT_EQ(server.requests().size(), 3u);  // POST + 2 polls; the bad counts sent nothing
}

TEST(ClientForks, FailedForkOperations) {
  Routes routes;
  // As spaced does when no fork came up: the entries carry the reasons.
  routes.On("POST /v1/sandboxes/sb-1/fork", 200,
            R"({"operation":{"id":"op-f","kind":"fork","state":"failed",
                "error":{"code":"internal","message":"no fork succeeded"},
                "result":{"sandboxes":[{"id":"sb-a","state":"error",
                                        "error":{"code":"internal","message":"no pids"}}]}}})");
  // Failed with nothing failed to show: the operation's error, naming what runs.
  routes.On("POST /v1/sandboxes/sb-2/fork", 200,
            R"({"operation":{"id":"op-g","kind":"fork","state":"failed",
                "error":{"code":"internal","message":"source vanished"},
                "result":{"sandboxes":[{"id":"sb-b","state":"running"}]}}})");
  routes.On("POST /v1/sandboxes/sb-3/fork", 200,
            R"({"operation":{"id":"op-h","kind":"fork","state":"failed",
                "error":{"code":"not_found","message":"gone"}}})");
  routes.On("POST /v1/sandboxes/sb-4/fork", 200,
            R"({"operation":{"id":"op-i","state":"succeeded","result":{}}})");
  FakeHttpServer server(routes.Handler());
  Client c(server.url(), "k");
  auto entries = c.ForkAndWait("sb-1", 1);
  ASSERT_TRUE(entries) << entries.error().message;
  ASSERT_EQ(entries->size(), 1u);
  EXPECT_EQ((*entries)[0].state, "error");
  EXPECT_EQ((*entries)[0].error, "no pids");
  auto named = c.ForkAndWait("sb-2", 1);
  ASSERT_FALSE(named);
  EXPECT_EQ(named.error().message, "fork op-g failed: source vanished (running forks: sb-b)");
  auto plain = c.ForkAndWait("sb-3", 1);
  ASSERT_FALSE(plain);
  EXPECT_EQ(plain.error().code, Errc::kNotFound);
  EXPECT_EQ(plain.error().message, "fork op-h failed: gone");
  auto shapeless = c.ForkAndWait("sb-4", 1);
  ASSERT_FALSE(shapeless);
  EXPECT_EQ(shapeless.error().code, Errc::kInternal);
  auto parsed = ForkedSandboxesOf(Json{{"result", {{"sandboxes", Json::array()}}}});
  ASSERT_TRUE(parsed);
  EXPECT_TRUE(parsed->empty());
}

// ---------------------------------------------------------------------------------------------
// The `space` commands

sys::RunResult RunCli(std::vector<std::string> args) {
  args.insert(args.begin(), SPACE_CLI_PATH);
  auto r = sys::Run({.argv = args}, 20000);
  EXPECT_TRUE(r) << r.error().message;
  return r ? *r : sys::RunResult{};
}

// The last request the server saw for this "METHOD /path" (query ignored).
std::optional<FakeRequest> LastRequest(FakeHttpServer& server, const std::string& method_path) {
  std::optional<FakeRequest> out;
  for (const FakeRequest& r : server.requests()) {
    if (r.method + " " + r.Path() == method_path) out = r;
  }
  return out;
}

TEST(CliLifecycle, TransitionsPrintNothingJsonOrTheOperation) {
  Routes routes;
  for (const char* t : {"pause", "resume", "suspend", "wake"}) {
    routes.On(std::string("POST /v1/sandboxes/sb-1/") + t, [t](const FakeRequest& req) {
      bool waits = req.target.find("?wait=") != std::string::npos;
      return ResponseText(waits ? 200 : 202,
                          Json{{"operation",
                                {{"id", std::string("op-") + t},
                                 {"kind", t},
                                 {"state", waits ? "succeeded" : "pending"}}},
                               {"sandbox", {{"id", "sb-1"}, {"state", std::string(t) + "d"}}}}
                              .dump());
    });
  }
  routes.On("POST /v1/sandboxes/sb-2/resume", 409,
            R"({"error":{"code":"conflict","message":"sandbox sb-2 is running"}})");
  FakeHttpServer server(routes.Handler());
  for (const char* t : {"pause", "resume", "suspend", "wake"}) {
    auto r = RunCli({"--url", server.url(), t, "sb-1"});
    EXPECT_EQ(r.exit_code, 0) << t << r.err;
    EXPECT_EQ(r.out, "") << t;
    EXPECT_EQ(r.err, "") << t;  // stderr is not a terminal: no progress line
    auto req = LastRequest(server, std::string("POST /v1/sandboxes/sb-1/") + t);
    ASSERT_TRUE(req) << t;
    EXPECT_EQ(req->target, std::string("/v1/sandboxes/sb-1/") + t + "?wait=300s");
  }
  auto json = RunCli({"--url", server.url(), "pause", "sb-1", "--json"});
  EXPECT_EQ(json.exit_code, 0) << json.err;
  auto parsed = ParseJson(json.out);
  ASSERT_TRUE(parsed) << json.out;
  EXPECT_EQ((*parsed)["state"], "paused");

  auto async = RunCli({"--url", server.url(), "suspend", "--async", "sb-1"});
  EXPECT_EQ(async.exit_code, 0) << async.err;
  EXPECT_EQ(async.out, "op-suspend\n");
  EXPECT_EQ(LastRequest(server, "POST /v1/sandboxes/sb-1/suspend")->target,
            "/v1/sandboxes/sb-1/suspend");

  auto conflict = RunCli({"--url", server.url(), "resume", "sb-2"});
  EXPECT_EQ(conflict.exit_code, 1);
  EXPECT_EQ(conflict.out, "");
  EXPECT_EQ(conflict.err, "space: resume sb-2: sandbox sb-2 is running\n");

  EXPECT_EQ(RunCli({"--url", server.url(), "pause"}).exit_code, 2);
  EXPECT_EQ(RunCli({"--url", server.url(), "wake", "sb-1", "sb-2"}).exit_code, 2);
  EXPECT_EQ(RunCli({"--url", server.url(), "pause", "sb-1", "--wait-timeout", "-1"}).exit_code, 2);
}

TEST(CliLifecycle, Timeout) {
  Routes routes;
  routes.On("POST /v1/sandboxes/sb-1/timeout", 200,
            R"({"id":"sb-1","state":"running","timeout":300})");
  FakeHttpServer server(routes.Handler());
  auto r = RunCli({"--url", server.url(), "timeout", "sb-1", "5m", "--on-timeout", "suspend"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(*ParseJson(LastRequest(server, "POST /v1/sandboxes/sb-1/timeout")->body),
            (Json{{"timeout", 300}, {"on_timeout", "suspend"}}));
  auto none = RunCli({"--url", server.url(), "timeout", "sb-1", "0", "--json"});
  EXPECT_EQ(none.exit_code, 0) << none.err;
  EXPECT_EQ((*ParseJson(none.out))["id"], "sb-1");
  EXPECT_EQ(*ParseJson(LastRequest(server, "POST /v1/sandboxes/sb-1/timeout")->body),
            (Json{{"timeout", 0}}));
  size_t sent = server.requests().size();

  auto bad_action = RunCli({"--url", server.url(), "timeout", "sb-1", "60", "--on-timeout", "x"});
  EXPECT_EQ(bad_action.exit_code, 2);
  EXPECT_TRUE(StartsWith(bad_action.err, "space: --on-timeout: ")) << bad_action.err;
  auto bad_secs = RunCli({"--url", server.url(), "timeout", "sb-1", "soon"});
  EXPECT_EQ(bad_secs.exit_code, 2);
  EXPECT_TRUE(StartsWith(bad_secs.err, "space: timeout: bad duration")) << bad_secs.err;
  EXPECT_EQ(RunCli({"--url", server.url(), "timeout", "sb-1"}).exit_code, 2);
  EXPECT_EQ(RunCli({"--url", server.url(), "timeout", "sb-1", "-5"}).exit_code, 2);
  EXPECT_EQ(server.requests().size(), sent);  // usage errors send nothing

  auto missing = RunCli({"--url", server.url(), "timeout", "sb-x", "60"});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_EQ(missing.err, "space: timeout sb-x: no route\n");
}

TEST(CliSnapshots, SnapshotPrintsTheIdAlone) {
  Routes routes;
  routes.On("POST /v1/sandboxes/sb-1/snapshots", [](const FakeRequest& req) {
    if (req.target.find("?wait=") == std::string::npos) {
      return ResponseText(202,
                          R"({"operation":{"id":"op-s","kind":"snapshot","state":"pending"}})");
    }
    return ResponseText(202, R"({"operation":{"id":"op-s","kind":"snapshot","state":"running"}})");
  });
  routes.OnOperation("op-s", 1, R"({"id":"op-s","kind":"snapshot","state":"succeeded",
                                    "result":{"snapshot_id":"snap-42"}})");
  routes.On("GET /v1/snapshots/snap-42", 200,
            R"({"id":"snap-42","sandbox_id":"sb-1","kind":"filesystem","state":"ready"})");
  routes.On("POST /v1/sandboxes/sb-2/snapshots", 409,
            R"({"error":{"code":"conflict","message":"sandbox sb-2 is busy"}})");
  FakeHttpServer server(routes.Handler());
  auto r = RunCli({"--url", server.url(), "snapshot", "sb-1"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "snap-42\n");
  EXPECT_EQ(r.err, "");
  auto json = RunCli({"--url", server.url(), "--json", "snapshot", "sb-1"});
  EXPECT_EQ(json.exit_code, 0) << json.err;
  EXPECT_EQ((*ParseJson(json.out))["kind"], "filesystem");
  auto async = RunCli({"--url", server.url(), "snapshot", "sb-1", "--async"});
  EXPECT_EQ(async.exit_code, 0) << async.err;
  EXPECT_EQ(async.out, "op-s\n");
  auto busy = RunCli({"--url", server.url(), "snapshot", "sb-2"});
  EXPECT_EQ(busy.exit_code, 1);
  EXPECT_EQ(busy.out, "");
  EXPECT_EQ(busy.err, "space: snapshot sb-2: sandbox sb-2 is busy\n");
  EXPECT_EQ(RunCli({"--url", server.url(), "snapshot"}).exit_code, 2);
}

TEST(CliSnapshots, ListingsAndRemoval) {
  Routes routes;
  const std::string two = R"({"snapshots":[
      {"id":"snap-1","sandbox_id":"sb-1","kind":"filesystem","state":"ready","size":1536,
       "created_at":"2020-01-01T00:00:00.000Z"},
      {"id":"snap-2","sandbox_id":"sb-2","kind":"full","state":"creating","size":null,
       "created_at":"2020-01-01T00:00:00.000Z"}]})";
  routes.On("GET /v1/snapshots", 200, two);
  routes.On("GET /v1/sandboxes/sb-2/snapshots", 200,
            R"({"snapshots":[{"id":"snap-2","sandbox_id":"sb-2","kind":"full","state":"ready",
                              "size":3221225472,"created_at":"2020-01-01T00:00:00.000Z"}]})");
  routes.On("DELETE /v1/snapshots/snap-1", 200, "{}");
  routes.On("DELETE /v1/snapshots/snap-2", 200, "{}");
  FakeHttpServer server(routes.Handler());

  auto table = RunCli({"--url", server.url(), "snapshots"});
  EXPECT_EQ(table.exit_code, 0) << table.err;
  EXPECT_TRUE(StartsWith(table.out, "ID       SANDBOX   KIND         STATE      SIZE     AGE\n"))
      << table.out;
  EXPECT_NE(table.out.find("\nsnap-1   sb-1      filesystem   ready      1.5KiB   "),
            std::string::npos)
      << table.out;
  EXPECT_NE(table.out.find("\nsnap-2   sb-2      full         creating   -        "),
            std::string::npos)
      << table.out;

  auto json = RunCli({"--url", server.url(), "snapshots", "sb-2", "--json"});
  EXPECT_EQ(json.exit_code, 0) << json.err;
  auto parsed = ParseJson(json.out);
  ASSERT_TRUE(parsed && parsed->is_array()) << json.out;
  ASSERT_EQ(parsed->size(), 1u);
  EXPECT_EQ((*parsed)[0]["size"], 3221225472LL);
  auto one = RunCli({"--url", server.url(), "snapshots", "sb-2"});
  EXPECT_NE(one.out.find("   3GiB   "), std::string::npos) << one.out;

  auto rm = RunCli({"--url", server.url(), "snapshot-rm", "snap-1", "snap-x", "snap-2"});
  EXPECT_EQ(rm.exit_code, 1);
  EXPECT_EQ(rm.out, "snap-1\nsnap-2\n");
  EXPECT_EQ(rm.err, "space: snapshot-rm snap-x: no route\n");
  auto targets = Targets(server);
  EXPECT_EQ(std::count(targets.begin(), targets.end(), "DELETE /v1/snapshots/snap-2"), 1);
  EXPECT_EQ(RunCli({"--url", server.url(), "snapshot-rm"}).exit_code, 2);
}

TEST(CliSnapshots, CreateFromSnapshotWithTimeouts) {
  Routes routes;
  routes.On("POST /v1/sandboxes", 201,
            R"({"operation":{"id":"op-1","state":"succeeded"},
                "sandbox":{"id":"sb-new","state":"running"}})");
  FakeHttpServer server(routes.Handler());
  auto r = RunCli({"--url", server.url(), "create", "--from-snapshot", "snap-1", "--timeout", "1h",
                   "--on-timeout", "pause", "--idle-timeout", "120", "--label", "a=b"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "sb-new\n");
  EXPECT_EQ(*ParseJson(server.requests().at(0).body), (Json{{"snapshot", "snap-1"},
                                                            {"metadata", {{"a", "b"}}},
                                                            {"timeout", 3600},
                                                            {"on_timeout", "pause"},
                                                            {"idle_timeout", 120}}));
  auto no_timeout = RunCli({"--url", server.url(), "create", "--timeout", "0"});
  EXPECT_EQ(no_timeout.exit_code, 0) << no_timeout.err;
  EXPECT_EQ(*ParseJson(server.requests().back().body), (Json{{"timeout", 0}}));
  size_t sent = server.requests().size();

  auto both =
      RunCli({"--url", server.url(), "create", "-t", "base:latest", "--from-snapshot", "snap-1"});
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_TRUE(StartsWith(both.err, "space: create: ")) << both.err;
  auto bad_on = RunCli({"--url", server.url(), "create", "--on-timeout", "explode"});
  EXPECT_EQ(bad_on.exit_code, 2);
  EXPECT_TRUE(StartsWith(bad_on.err, "space: --on-timeout: ")) << bad_on.err;
  auto bad_t = RunCli({"--url", server.url(), "create", "--timeout", "1.5h"});
  EXPECT_EQ(bad_t.exit_code, 2);
  EXPECT_TRUE(StartsWith(bad_t.err, "space: --timeout: ")) << bad_t.err;
  auto bad_idle = RunCli({"--url", server.url(), "create", "--idle-timeout", "-3"});
  EXPECT_EQ(bad_idle.exit_code, 2);
  EXPECT_EQ(server.requests().size(), sent);
}

TEST(CliForks, ForkPrintsRunningIdsAndReportsFailures) {
  Routes routes;
  routes.On("POST /v1/sandboxes/sb-1/fork", [](const FakeRequest& req) {
    auto body = ParseJson(req.body);
    int64_t n = body ? JsonIntOr(*body, "count", 0) : 0;
    Json result = Json::array();
    for (int64_t i = 0; i < n; ++i) {
      result.push_back(
          {{"id", "sb-f" + std::to_string(i)}, {"state", "running"}, {"error", nullptr}});
    }
    bool waits = req.target.find("?wait=") != std::string::npos;
    Json op = {{"id", "op-f"}, {"kind", "fork"}, {"state", waits ? "succeeded" : "pending"}};
    if (waits) op["result"] = {{"sandboxes", result}};
    return ResponseText(waits ? 200 : 202,
                        Json{{"operation", op}, {"sandboxes", Json::array()}}.dump());
  });
  routes.On("POST /v1/sandboxes/sb-2/fork", 202,
            R"({"operation":{"id":"op-g","kind":"fork","state":"running"}})");
  routes.OnOperation("op-g", 1, R"({"id":"op-g","kind":"fork","state":"succeeded","result":{
      "sandboxes":[{"id":"sb-g0","state":"running","error":null},
                   {"id":"sb-g1","state":"error","error":{"code":"internal","message":"no disk"}},
                   {"id":"sb-g2","state":"running","error":null}]}})");
  routes.On("POST /v1/sandboxes/sb-3/fork", 200,
            R"({"operation":{"id":"op-h","kind":"fork","state":"failed",
                "error":{"code":"internal","message":"no fork succeeded"},
                "result":{"sandboxes":[
                  {"id":"sb-h0","state":"error","error":{"code":"internal","message":"a"}},
                  {"id":"sb-h1","state":"error","error":{"code":"internal","message":"b"}}]}}})");
  FakeHttpServer server(routes.Handler());

  auto r = RunCli({"--url", server.url(), "fork", "sb-1", "--count", "3"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "sb-f0\nsb-f1\nsb-f2\n");
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(*ParseJson(LastRequest(server, "POST /v1/sandboxes/sb-1/fork")->body),
            (Json{{"count", 3}}));
  auto one = RunCli({"--url", server.url(), "fork", "sb-1"});
  EXPECT_EQ(one.out, "sb-f0\n");

  auto partial = RunCli({"--url", server.url(), "fork", "sb-2", "-n", "3"});
  EXPECT_EQ(partial.exit_code, 1);
  EXPECT_EQ(partial.out, "sb-g0\nsb-g2\n");
  EXPECT_EQ(partial.err, "space: fork sb-2: sb-g1 failed: no disk\n");
  auto none = RunCli({"--url", server.url(), "fork", "sb-3", "-n", "2"});
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_EQ(none.out, "");
  EXPECT_EQ(none.err, "space: fork sb-3: sb-h0 failed: a\nspace: fork sb-3: sb-h1 failed: b\n");
  auto partial_json = RunCli({"--url", server.url(), "fork", "sb-2", "-n", "3", "--json"});
  EXPECT_EQ(partial_json.exit_code, 1);
  auto parsed = ParseJson(partial_json.out);
  ASSERT_TRUE(parsed && parsed->is_array()) << partial_json.out;
  EXPECT_EQ((*parsed)[1], (Json{{"id", "sb-g1"}, {"state", "error"}, {"error", "no disk"}}));

  auto async = RunCli({"--url", server.url(), "fork", "sb-1", "--count", "2", "--async"});
  EXPECT_EQ(async.exit_code, 0) << async.err;
  EXPECT_EQ(async.out, "op-f\n");
  EXPECT_EQ(LastRequest(server, "POST /v1/sandboxes/sb-1/fork")->target, "/v1/sandboxes/sb-1/fork");

  size_t sent = server.requests().size();
  for (const char* bad : {"0", "33", "-1", "many"}) {
    auto u = RunCli({"--url", server.url(), "fork", "sb-1", "--count", bad});
    EXPECT_EQ(u.exit_code, 2) << bad;
    EXPECT_TRUE(StartsWith(u.err, "space: ")) << u.err;
  }
  EXPECT_EQ(RunCli({"--url", server.url(), "fork"}).exit_code, 2);
  EXPECT_EQ(server.requests().size(), sent);
}

// Progress lines go to stderr only when it is a terminal: run the CLI with its stderr on a
// pseudo-terminal we hold the master side of.
TEST(CliProgress, WaitingLineOnlyOnATerminal) {
  int master = ::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (master < 0) GTEST_SKIP() << "no pseudo-terminals here: " << std::strerror(errno);
  sys::UniqueFd master_fd(master);
  ASSERT_EQ(::grantpt(master), 0);
  ASSERT_EQ(::unlockpt(master), 0);
  const char* slave_name = ::ptsname(master);
  ASSERT_NE(slave_name, nullptr);
  auto slave = sys::Open(slave_name, O_RDWR | O_NOCTTY);
  ASSERT_TRUE(slave) << slave.error().message;

  Routes routes;
  routes.On("POST /v1/sandboxes/sb-1/pause", 202,
            R"({"operation":{"id":"op-p","kind":"pause","state":"running"}})");
  routes.OnOperation("op-p", 1, R"({"id":"op-p","kind":"pause","state":"succeeded"})");
  routes.On("GET /v1/sandboxes/sb-1", 200, R"({"id":"sb-1","state":"paused"})");
  FakeHttpServer server(routes.Handler());

  int out_pipe[2];
  ASSERT_EQ(::pipe2(out_pipe, O_CLOEXEC), 0);
  sys::UniqueFd out_rd(out_pipe[0]), out_wr(out_pipe[1]);
  auto child = sys::Spawn({.argv = {SPACE_CLI_PATH, "--url", server.url(), "pause", "sb-1"},
                           .stdout_fd = out_wr.get(),
                           .stderr_fd = slave->get()});
  ASSERT_TRUE(child) << child.error().message;
  out_wr.Reset();
  slave->Reset();
  auto status = child->Wait();
  ASSERT_TRUE(status);
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << *status;
  std::string out, tty;
  char buf[4096];
  for (ssize_t n; (n = ::read(out_rd.get(), buf, sizeof buf)) > 0;) out.append(buf, n);
  // After the child is gone the master reads what it wrote, then EIO.
  for (ssize_t n; (n = ::read(master, buf, sizeof buf)) > 0;) tty.append(buf, n);
  EXPECT_EQ(out, "");
  EXPECT_NE(tty.find("waiting for op-p (pause)..."), std::string::npos) << tty;
  // On a terminal the first request waits briefly, so the line comes early.
  EXPECT_EQ(LastRequest(server, "POST /v1/sandboxes/sb-1/pause")->target,
            "/v1/sandboxes/sb-1/pause?wait=1s");

  // The same over a pipe: silence.
  auto piped = RunCli({"--url", server.url(), "pause", "sb-1"});
  EXPECT_EQ(piped.exit_code, 0) << piped.err;
  EXPECT_EQ(piped.err, "");
  EXPECT_EQ(piped.out, "");
}

}  // namespace
}  // namespace space::client
