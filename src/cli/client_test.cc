// Tests of the client's wire handling against a boundary fake (test_http_server.h), of the
// mux decoder, of FromEnvironment, and of the CLI's exit statuses. End-to-end tests against
// a real spaced live in tests/.
#include "cli/client.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <atomic>
#include <random>

#include "cli/test_http_server.h"
#include "sys/sys.h"

namespace space::client {
namespace {

using space::testing::ChunkText;
using space::testing::FakeConn;
using space::testing::FakeHttpServer;
using space::testing::FakeRequest;
using space::testing::ResponseText;
using namespace std::chrono_literals;

std::string MuxRecord(MuxKind kind, std::string_view payload) {
  std::string out;
  out += static_cast<char>(kind);
  uint32_t n = static_cast<uint32_t>(payload.size());
  for (int i = 0; i < 4; ++i) out += static_cast<char>((n >> (8 * i)) & 0xff);
  out += payload;
  return out;
}

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

// Writes `body` as a chunked 200 answer, cut into pieces of random sizes (1..max_piece),
// each its own chunk and its own send(), so the client sees arbitrary splits.
void WriteChunked(FakeConn& conn, std::string_view body, uint32_t seed, size_t max_piece,
                  bool terminate = true, std::string_view head = "HTTP/1.1 200 OK\r\n") {
  conn.Write(std::string(head) +
             "Content-Type: application/vnd.space.mux\r\n"
             "Transfer-Encoding: chunked\r\n\r\n");
  std::mt19937 rng(seed);
  size_t i = 0;
  int n = 0;
  while (i < body.size()) {
    size_t take = std::min<size_t>(body.size() - i, 1 + rng() % max_piece);
    conn.Write(ChunkText(body.substr(i, take)));
    i += take;
    // Now and then give the client time to read, so pieces really arrive separately.
    if (++n % 16 == 0) std::this_thread::sleep_for(200us);
  }
  if (terminate) conn.Write("0\r\n\r\n");
}

// ---------------------------------------------------------------------------------------------
// MuxParser

struct Collected {
  std::string out, err, exit;
  int exits = 0;
};

MuxCallback Collect(Collected& c) {
  return [&c](MuxKind kind, std::string_view bytes) {
    if (kind == MuxKind::kStdout) c.out.append(bytes);
    if (kind == MuxKind::kStderr) c.err.append(bytes);
    if (kind == MuxKind::kExit) {
      c.exit.assign(bytes);
      ++c.exits;
    }
    return true;
  };
}

TEST(MuxParser, EverySplitPointGivesTheSameRecords) {
  std::string exit_json = R"({"id":"cmd-1","state":"exited","exit_code":0})";
  std::string stream = MuxRecord(MuxKind::kStdout, "hello ") + MuxRecord(MuxKind::kStderr, "oops") +
                       MuxRecord(MuxKind::kStdout, "") + MuxRecord(MuxKind::kStdout, "world") +
                       MuxRecord(MuxKind::kExit, exit_json);
  for (size_t a = 0; a <= stream.size(); ++a) {
    for (size_t b = a; b <= stream.size(); b += 3) {
      MuxParser p;
      Collected c;
      ASSERT_TRUE(*p.Feed(std::string_view(stream).substr(0, a), Collect(c)));
      ASSERT_TRUE(*p.Feed(std::string_view(stream).substr(a, b - a), Collect(c)));
      ASSERT_TRUE(*p.Feed(std::string_view(stream).substr(b), Collect(c)));
      EXPECT_EQ(c.out, "hello world") << a << "," << b;
      EXPECT_EQ(c.err, "oops");
      EXPECT_EQ(c.exit, exit_json);
      EXPECT_EQ(c.exits, 1);
      EXPECT_TRUE(p.saw_exit());
      EXPECT_FALSE(p.mid_record());
      EXPECT_EQ(p.stdout_bytes(), 11u);
      EXPECT_EQ(p.stderr_bytes(), 4u);
    }
  }
}

TEST(MuxParser, ByteAtATimeLargeRecordIsPassedOnIncrementally) {
  std::string big = RandomBytes(70000, 1);
  std::string stream = MuxRecord(MuxKind::kStdout, big) + MuxRecord(MuxKind::kExit, "{}");
  MuxParser p;
  Collected c;
  size_t callbacks = 0;
  for (char ch : stream) {
    ASSERT_TRUE(*p.Feed(std::string_view(&ch, 1), [&](MuxKind k, std::string_view b) {
      ++callbacks;
      return Collect(c)(k, b);
    }));
  }
  EXPECT_EQ(c.out, big);
  EXPECT_EQ(c.exit, "{}");
  // Not buffered per record: one callback per payload byte fed.
  EXPECT_EQ(callbacks, big.size() + 1);
}

TEST(MuxParser, TruncatedStreamIsMidRecord) {
  std::string stream = MuxRecord(MuxKind::kStdout, "abcdef");
  MuxParser p;
  Collected c;
  ASSERT_TRUE(*p.Feed(std::string_view(stream).substr(0, 3), Collect(c)));
  EXPECT_TRUE(p.mid_record());  // inside the header
  ASSERT_TRUE(*p.Feed(std::string_view(stream).substr(3, 5), Collect(c)));
  EXPECT_TRUE(p.mid_record());  // inside the payload
  EXPECT_EQ(c.out, "abc");
  EXPECT_FALSE(p.saw_exit());
}

TEST(MuxParser, RejectsBadStreams) {
  Collected c;
  {
    MuxParser p;
    auto r = p.Feed(std::string("\x07\x01\x00\x00\x00x", 6), Collect(c));
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, Errc::kInvalidArgument);
  }
  {
    MuxParser p;
    auto r =
        p.Feed(MuxRecord(MuxKind::kExit, "{}") + MuxRecord(MuxKind::kStdout, "late"), Collect(c));
    ASSERT_FALSE(r);
  }
  {
    MuxParser p;
    std::string header("\x03\xff\xff\xff\x7f", 5);  // a 2 GiB exit record
    ASSERT_FALSE(p.Feed(header, Collect(c)));
  }
}

TEST(MuxParser, CallbackCanStop) {
  MuxParser p;
  int calls = 0;
  auto r = p.Feed(MuxRecord(MuxKind::kStdout, "a") + MuxRecord(MuxKind::kStdout, "b"),
                  [&](MuxKind, std::string_view) { return ++calls < 1; });
  ASSERT_TRUE(r);
  EXPECT_FALSE(*r);
  EXPECT_EQ(calls, 1);
}

// ---------------------------------------------------------------------------------------------
// Requests, answers, errors

TEST(Client, SendsKeyJsonBodyAndParsesAnswer) {
  FakeHttpServer server([](const FakeRequest& req, FakeConn& conn) {
    conn.Write(ResponseText(
        202,
        R"({"operation":{"id":"op-1","state":"pending"},
            "sandbox":{"id":"sb-1","state":"creating"}})"));
  });
  Client c(server.url() + "/", "  secret-key\n");
  EXPECT_EQ(c.url(), server.url());
  EXPECT_EQ(c.api_key(), "secret-key");
  Json body = {{"template", "base:latest"}, {"limits", {{"memory_bytes", 1 << 29}}}};
  auto r = c.CreateSandbox(body, 30s);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ((*r)["sandbox"]["id"], "sb-1");
  auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].method, "POST");
  EXPECT_EQ(reqs[0].target, "/v1/sandboxes?wait=30s");
  EXPECT_EQ(reqs[0].Header("authorization"), "Bearer secret-key");
  EXPECT_EQ(reqs[0].Header("content-type"), "application/json");
  EXPECT_EQ(reqs[0].Header("expect"), "");
  EXPECT_EQ(*ParseJson(reqs[0].body), body);
}

TEST(Client, RetriesA429AfterItsRetryAfter) {
  std::atomic<int> calls{0};
  FakeHttpServer server([&](const FakeRequest&, FakeConn& conn) {
    if (calls++ == 0) {
      conn.Write(ResponseText(429, R"({"error":{"code":"resource_exhausted","message":"busy"}})",
                              {"Retry-After: 1"}));
      return;
    }
    conn.Write(ResponseText(200, R"({"sandboxes":[]})"));
  });
  Client c(server.url(), "k");
  auto t0 = std::chrono::steady_clock::now();
  auto r = c.ListSandboxes();
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(calls.load(), 2);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(900));

  calls = 0;
  ClientOptions once;
  once.retry_busy_for = std::chrono::milliseconds{0};
  Client impatient(server.url(), "k", once);
  auto busy = impatient.ListSandboxes();
  ASSERT_FALSE(busy);
  EXPECT_EQ(busy.error().code, Errc::kResourceExhausted);
  EXPECT_EQ(calls.load(), 1);
}

TEST(Client, NoKeyNoAuthorizationHeader) {
  FakeHttpServer server(
      [](const FakeRequest&, FakeConn& conn) { conn.Write(ResponseText(200, R"({"ok":true})")); });
  Client c(server.url(), "");
  ASSERT_TRUE(c.Health());
  EXPECT_EQ(server.requests().at(0).Header("authorization"), "");
  EXPECT_EQ(server.requests().at(0).target, "/healthz");
}

TEST(Client, ErrorBodiesMapToErrc) {
  struct Case {
    int status;
    std::string body;
    Errc code;
    std::string message_part;
  };
  std::vector<Case> cases = {
      {404, R"({"error":{"code":"not_found","message":"no sandbox sb-x","details":{}}})",
       Errc::kNotFound, "no sandbox sb-x"},
      {409, R"({"error":{"code":"conflict","message":"sandbox is paused"}})", Errc::kConflict,
       "sandbox is paused"},
      {413, R"({"error":{"code":"too_large","message":"file too large"}})", Errc::kTooLarge,
       "file too large"},
      {401, R"({"error":{"code":"unauthenticated","message":"bad key"}})", Errc::kUnauthenticated,
       "bad key"},
      {429, R"({"error":{"code":"resource_exhausted","message":"too many"}})",
       Errc::kResourceExhausted, "too many"},
      {500, R"({"error":{"code":"no_such_code","message":"weird"}})", Errc::kInternal, "weird"},
      // Not our error shape: the status decides.
      {503, "upstream down", Errc::kUnavailable, "HTTP 503: upstream down"},
      {404, "", Errc::kNotFound, "HTTP 404"},
      {405, R"({"error":{"code":"invalid_argument","message":"method not allowed"}})",
       Errc::kInvalidArgument, "method not allowed"},
  };
  for (const Case& k : cases) {
    FakeHttpServer server(
        [&](const FakeRequest&, FakeConn& conn) { conn.Write(ResponseText(k.status, k.body)); });
    // The 429 is mapped, not retried (RetriesA429AfterItsRetryAfter covers the retry): with
    // the default the case waited 30 s twice.
    ClientOptions no_retry;
    no_retry.retry_busy_for = std::chrono::milliseconds{0};
    Client c(server.url(), "k", no_retry);
    auto r = c.GetSandbox("sb-x");
    ASSERT_FALSE(r) << k.body;
    EXPECT_EQ(r.error().code, k.code) << k.body;
    EXPECT_NE(r.error().message.find(k.message_part), std::string::npos) << r.error().message;
    // The raw Request does not turn statuses into errors.
    auto raw = c.Request("GET", "/v1/sandboxes/sb-x");
    ASSERT_TRUE(raw);
    EXPECT_EQ(raw->status, k.status);
    EXPECT_EQ(raw->body, k.body);
  }
}

TEST(Client, ConnectionRefusedIsUnavailable) {
  // A port that was just free: nothing listens there.
  int port;
  {
    FakeHttpServer s([](const FakeRequest&, FakeConn&) {});
    port = s.port();
  }
  std::string url = "http://127.0.0.1:" + std::to_string(port);
  Client c(url, "k");
  auto r = c.ListSandboxes();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::kUnavailable);
  EXPECT_TRUE(StartsWith(r.error().message, "cannot reach spaced at " + url + ": "))
      << r.error().message;
}

TEST(Client, InvalidJsonAnswerIsAnError) {
  FakeHttpServer server(
      [](const FakeRequest&, FakeConn& conn) { conn.Write(ResponseText(200, "{not json")); });
  Client c(server.url(), "k");
  auto r = c.GetSandbox("sb-1");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::kInternal);
}

TEST(Client, ListsUnwrapAndBuildQueries) {
  FakeHttpServer server([](const FakeRequest& req, FakeConn& conn) {
    if (req.Path() == "/v1/sandboxes") {
      conn.Write(ResponseText(200, R"({"sandboxes":[{"id":"sb-1","state":"running"}]})"));
    } else if (req.Path() == "/v1/operations") {
      conn.Write(ResponseText(200, R"({"operations":[]})"));
    } else if (req.Path() == "/v1/templates") {
      conn.Write(ResponseText(200, R"({"templates":[{"name":"base","tag":"latest"}]})"));
    } else if (req.Path() == "/v1/sandboxes/sb-1/files:list") {
      conn.Write(ResponseText(200, R"({"entries":[{"name":"a","type":"file"}]})"));
    } else if (req.Path() == "/v1/sandboxes/sb-1/commands") {
      conn.Write(ResponseText(200, R"({"wrong":[]})"));
    } else {
      conn.Write(ResponseText(404, R"({"error":{"code":"not_found","message":"no route"}})"));
    }
  });
  Client c(server.url(), "k");
  auto sbs = c.ListSandboxes({{"team", "a"}, {"note", "x y&z"}}, "running");
  ASSERT_TRUE(sbs) << sbs.error().message;
  ASSERT_TRUE(sbs->is_array());
  EXPECT_EQ((*sbs)[0]["id"], "sb-1");
  auto ops = c.ListOperations("failed", 5);
  ASSERT_TRUE(ops);
  EXPECT_TRUE(ops->is_array());
  auto tpl = c.ListTemplates();
  ASSERT_TRUE(tpl);
  EXPECT_EQ(tpl->size(), 1u);
  auto files = c.ListFiles("sb-1", "/work dir", 2);
  ASSERT_TRUE(files);
  EXPECT_EQ((*files)[0]["name"], "a");
  auto cmds = c.ListCommands("sb-1");  // an answer without the array
  ASSERT_FALSE(cmds);
  EXPECT_EQ(cmds.error().code, Errc::kInternal);

  auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 5u);
  EXPECT_EQ(reqs[0].target, "/v1/sandboxes?label=team=a&label=note=x%20y%26z&state=running");
  EXPECT_EQ(reqs[1].target, "/v1/operations?state=failed&limit=5");
  EXPECT_EQ(reqs[3].target, "/v1/sandboxes/sb-1/files:list?path=/work%20dir&depth=2");
}

TEST(Client, SmallCallsUseTheRightRoutes) {
  FakeHttpServer server(
      [](const FakeRequest& req, FakeConn& conn) { conn.Write(ResponseText(200, "{}")); });
  Client c(server.url(), "k");
  ASSERT_TRUE(c.SendStdin("sb-1", "cmd-1", "line\n"));
  ASSERT_TRUE(c.SendStdin("sb-1", "cmd-1", "", true));
  ASSERT_TRUE(c.Signal("sb-1", "cmd-1", "TERM"));
  ASSERT_TRUE(c.Signal("sb-1", "cmd-1", "9"));
  ASSERT_TRUE(c.Mkdir("sb-1", "/a/b"));
  ASSERT_TRUE(c.Remove("sb-1", "/a", true));
  ASSERT_TRUE(c.Rename("sb-1", "/x", "/y"));
  ASSERT_TRUE(c.Stat("sb-1", "/x"));
  ASSERT_TRUE(c.GetCommand("sb-1", "cmd-1", 1500ms));
  ASSERT_TRUE(c.DeleteSandbox("sb-1", 2min));
  ASSERT_TRUE(c.WriteFile("sb-1", "/f", "data", 0600));
  auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 11u);
  EXPECT_EQ(reqs[0].method + " " + reqs[0].target, "POST /v1/sandboxes/sb-1/commands/cmd-1/stdin");
  EXPECT_EQ(reqs[0].body, "line\n");
  EXPECT_EQ(reqs[1].target, "/v1/sandboxes/sb-1/commands/cmd-1/stdin?eof=1");
  EXPECT_EQ(reqs[1].body, "");
  EXPECT_EQ(reqs[1].Header("content-length"), "0");
  EXPECT_EQ(*ParseJson(reqs[2].body), (Json{{"signal", "TERM"}}));
  EXPECT_EQ(*ParseJson(reqs[3].body), (Json{{"signal", 9}}));
  EXPECT_EQ(reqs[4].Header("content-type"), "");  // not curl's form default
  EXPECT_EQ(reqs[4].Header("content-length"), "0");
  EXPECT_EQ(reqs[4].method + " " + reqs[4].target, "POST /v1/sandboxes/sb-1/files:mkdir?path=/a/b");
  EXPECT_EQ(reqs[5].method + " " + reqs[5].target,
            "DELETE /v1/sandboxes/sb-1/files?path=/a&recursive=1");
  EXPECT_EQ(*ParseJson(reqs[6].body), (Json{{"from", "/x"}, {"to", "/y"}}));
  EXPECT_EQ(reqs[7].target, "/v1/sandboxes/sb-1/files:stat?path=/x");
  EXPECT_EQ(reqs[8].target, "/v1/sandboxes/sb-1/commands/cmd-1?wait=1500ms");
  EXPECT_EQ(reqs[9].method + " " + reqs[9].target, "DELETE /v1/sandboxes/sb-1?wait=120s");
  EXPECT_EQ(reqs[10].method + " " + reqs[10].target,
            "PUT /v1/sandboxes/sb-1/files?path=/f&mode=0600");
  EXPECT_EQ(reqs[10].body, "data");
}

TEST(Client, ReusesConnections) {
  FakeHttpServer server(
      [](const FakeRequest&, FakeConn& conn) { conn.Write(ResponseText(200, R"({"ok":true})")); });
  Client c(server.url(), "k");
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(c.Health());
  EXPECT_EQ(server.connections(), 1);
}

TEST(Client, ReadOutputParsesHeaders) {
  FakeHttpServer server([](const FakeRequest& req, FakeConn& conn) {
    conn.Write(ResponseText(
        200, "hello world",
        {"Space-Next-Offset: 111", "Space-Command-State: exited", "Space-Exit-Code: 3"},
        "application/octet-stream"));
  });
  Client c(server.url(), "k");
  auto r = c.ReadOutput("sb-1", "cmd-1", "stderr", 100, 10s, 4096);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->bytes, "hello world");
  EXPECT_EQ(r->next_offset, 111u);
  EXPECT_EQ(r->state, "exited");
  ASSERT_TRUE(r->exit_code);
  EXPECT_EQ(*r->exit_code, 3);
  EXPECT_EQ(
      server.requests().at(0).target,
      "/v1/sandboxes/sb-1/commands/cmd-1/output?stream=stderr&offset=100&limit=4096&wait=10s");
}

// ---------------------------------------------------------------------------------------------
// The mux stream over HTTP

TEST(Client, StreamMuxAcrossArbitraryChunkSplits) {
  std::string out = RandomBytes(300000, 7), err = RandomBytes(5000, 8);
  std::string exit_json = R"({"id":"cmd-1","state":"exited","exit_code":7,"signal":null})";
  std::string stream;
  for (size_t i = 0, j = 0; i < out.size() || j < err.size();) {
    size_t n = std::min<size_t>(out.size() - i, 9000);
    if (n) stream += MuxRecord(MuxKind::kStdout, std::string_view(out).substr(i, n));
    i += n;
    size_t m = std::min<size_t>(err.size() - j, 333);
    if (m) stream += MuxRecord(MuxKind::kStderr, std::string_view(err).substr(j, m));
    j += m;
  }
  stream += MuxRecord(MuxKind::kExit, exit_json);
  for (uint32_t seed : {1u, 2u, 3u}) {
    FakeHttpServer server([&](const FakeRequest& req, FakeConn& conn) {
      WriteChunked(conn, stream, seed, seed == 1 ? 7 : 20000);
    });
    Client c(server.url(), "k");
    MuxOffsets offsets;
    Collected got;
    auto r = c.StreamMux("sb-1", "cmd-1", offsets, Collect(got));
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ((*r)["exit_code"], 7);
    EXPECT_EQ(Client::ExitCodeOf(*r), 7);
    EXPECT_TRUE(got.out == out) << "stdout differs, seed " << seed;
    EXPECT_TRUE(got.err == err);
    EXPECT_EQ(got.exit, exit_json);
    EXPECT_EQ(offsets.stdout_offset, out.size());
    EXPECT_EQ(offsets.stderr_offset, err.size());
    auto req = server.requests().at(0);
    EXPECT_EQ(
        req.target,
        "/v1/sandboxes/sb-1/commands/cmd-1/output?format=mux&stdout_offset=0&stderr_offset=0");
  }
}

TEST(Client, FollowOutputResumesFromOffsetsAfterADrop) {
  std::string exit_json = R"({"id":"cmd-1","state":"exited","exit_code":0})";
  FakeHttpServer server([&](const FakeRequest& req, FakeConn& conn) {
    if (req.target.find("stdout_offset=0&stderr_offset=0") != std::string::npos) {
      // "abc" and "de", then half of a 4-byte stdout record, then the connection dies.
      std::string part = MuxRecord(MuxKind::kStdout, "abc") + MuxRecord(MuxKind::kStderr, "de") +
                         MuxRecord(MuxKind::kStdout, "fghi").substr(0, 7);
      WriteChunked(conn, part, 1, 3, /*terminate=*/false);
      conn.Close();
      return;
    }
    std::string rest = MuxRecord(MuxKind::kStdout, "hi") + MuxRecord(MuxKind::kStderr, "!") +
                       MuxRecord(MuxKind::kExit, exit_json);
    WriteChunked(conn, rest, 2, 4);
  });
  Client c(server.url(), "k");
  MuxOffsets offsets;
  Collected got;
  auto r = c.FollowOutput("sb-1", "cmd-1", offsets, Collect(got));
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(got.out, "abcfghi");
  EXPECT_EQ(got.err, "de!");
  EXPECT_EQ((*r)["state"], "exited");
  auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_NE(reqs[1].target.find("stdout_offset=5&stderr_offset=2"), std::string::npos)
      << reqs[1].target;
}

TEST(Client, StreamMuxEndingWithoutExitIsUnavailable) {
  FakeHttpServer server([&](const FakeRequest& req, FakeConn& conn) {
    // A clean end without the exit record; later requests resume past "partial".
    bool first = req.target.find("stdout_offset=0&") != std::string::npos;
    WriteChunked(conn, first ? MuxRecord(MuxKind::kStdout, "partial") : "", 1, 3);
  });
  Client c(server.url(), "k");
  MuxOffsets offsets;
  Collected got;
  auto r = c.StreamMux("sb-1", "cmd-1", offsets, Collect(got));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::kUnavailable);
  EXPECT_EQ(offsets.stdout_offset, 7u);
  // FollowOutput keeps trying while nothing arrives, then gives up.
  auto f = c.FollowOutput("sb-1", "cmd-1", offsets, Collect(got), 300ms);
  ASSERT_FALSE(f);
  EXPECT_EQ(f.error().code, Errc::kUnavailable);
}

TEST(Client, StreamMuxStoppedByCallbackAndHttpErrors) {
  FakeHttpServer server([&](const FakeRequest& req, FakeConn& conn) {
    if (req.target.find("cmd-missing") != std::string::npos) {
      conn.Write(ResponseText(404, R"({"error":{"code":"not_found","message":"no command"}})"));
      return;
    }
    WriteChunked(conn, MuxRecord(MuxKind::kStdout, "one") + MuxRecord(MuxKind::kStdout, "two"), 1,
                 100, /*terminate=*/false);
    std::this_thread::sleep_for(100ms);  // the stream stays open: the callback must end it
    conn.Close();
  });
  Client c(server.url(), "k");
  MuxOffsets offsets;
  auto r = c.StreamMux("sb-1", "cmd-1", offsets, [](MuxKind, std::string_view) { return false; });
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(r->is_null());
  auto e = c.FollowOutput("sb-1", "cmd-missing", offsets,
                          [](MuxKind, std::string_view) { return true; });
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().code, Errc::kNotFound);
  EXPECT_EQ(e.error().message, "no command");
}

TEST(Client, RunCollectsOutputAndExitCode) {
  // One request: POST ?stream=mux answers with the command id and its output stream.
  FakeHttpServer server([&](const FakeRequest& req, FakeConn& conn) {
    WriteChunked(conn,
                 MuxRecord(MuxKind::kStdout, "out") + MuxRecord(MuxKind::kStderr, "err") +
                     MuxRecord(MuxKind::kExit, R"({"state":"exited","exit_code":null,"signal":9})"),
                 5, 2, true, "HTTP/1.1 201 Created\r\nSpace-Command-Id: cmd-9\r\n");
  });
  Client c(server.url(), "k");
  auto r = c.Run("sb-1", std::vector<std::string>{"sleep", "100"});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->out, "out");
  EXPECT_EQ(r->err, "err");
  EXPECT_EQ(r->exit_code, 137);
  auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs.at(0).method, "POST");
  EXPECT_EQ(reqs.at(0).target, "/v1/sandboxes/sb-1/commands?stream=mux");
  EXPECT_EQ(*ParseJson(reqs.at(0).body), (Json{{"argv", {"sleep", "100"}}}));
}

TEST(Client, RunResumesADroppedStreamByCommandId) {
  FakeHttpServer server([&](const FakeRequest& req, FakeConn& conn) {
    if (req.method == "POST") {
      // The stream breaks after the first record (no terminating chunk, then hang-up).
      WriteChunked(conn, MuxRecord(MuxKind::kStdout, "one"), 1, 3, false,
                   "HTTP/1.1 201 Created\r\nSpace-Command-Id: cmd-7\r\n");
      conn.Close();
      return;
    }
    WriteChunked(conn, MuxRecord(MuxKind::kStdout, "two") +
                           MuxRecord(MuxKind::kExit, R"({"state":"exited","exit_code":0})"), 2, 4);
  });
  Client c(server.url(), "k");
  auto r = c.Run("sb-1", std::vector<std::string>{"x"});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->out, "onetwo");
  EXPECT_EQ(r->exit_code, 0);
  auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_NE(reqs.at(1).target.find("/commands/cmd-7/output?format=mux&stdout_offset=3"),
            std::string::npos) << reqs.at(1).target;
}

TEST(Client, ExitCodeOf) {
  EXPECT_EQ(Client::ExitCodeOf(Json{{"state", "exited"}, {"exit_code", 0}}), 0);
  EXPECT_EQ(Client::ExitCodeOf(Json{{"state", "exited"}, {"exit_code", 42}}), 42);
  EXPECT_EQ(Client::ExitCodeOf(Json{{"state", "exited"}, {"exit_code", nullptr}, {"signal", 15}}),
            143);
  EXPECT_EQ(Client::ExitCodeOf(Json{{"state", "exited"}, {"signal", 9}, {"timed_out", true}}), 124);
  EXPECT_EQ(Client::ExitCodeOf(Json{{"state", "failed"}, {"reason", "no such file"}}), 127);
  EXPECT_EQ(Client::ExitCodeOf(Json{{"state", "lost"}}), 255);
}

// ---------------------------------------------------------------------------------------------
// Operations

TEST(Client, CreateSandboxAndWaitFollowsTheOperation) {
  std::atomic<int> polls{0};
  FakeHttpServer server([&](const FakeRequest& req, FakeConn& conn) {
    if (req.method == "POST") {
      conn.Write(ResponseText(202, R"({"operation":{"id":"op-1","state":"running"},
                                       "sandbox":{"id":"sb-7","state":"creating"}})"));
    } else if (req.Path() == "/v1/operations/op-1") {
      bool done = ++polls >= 2;
      conn.Write(ResponseText(200, done ? R"({"id":"op-1","state":"succeeded","target":"sb-7"})"
                                        : R"({"id":"op-1","state":"running","target":"sb-7"})"));
    } else if (req.Path() == "/v1/sandboxes/sb-7") {
      conn.Write(ResponseText(200, R"({"id":"sb-7","state":"running"})"));
    }
  });
  Client c(server.url(), "k");
  auto sb = c.CreateSandboxAndWait(Json{{"template", "base:latest"}});
  ASSERT_TRUE(sb) << sb.error().message;
  EXPECT_EQ((*sb)["id"], "sb-7");
  EXPECT_EQ((*sb)["state"], "running");
  auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 4u);
  EXPECT_EQ(reqs[0].target, "/v1/sandboxes?wait=300s");
  EXPECT_EQ(reqs[1].target, "/v1/operations/op-1?wait=300s");
}

TEST(Client, FailedOperationsAreErrors) {
  FakeHttpServer server([&](const FakeRequest& req, FakeConn& conn) {
    if (req.method == "POST") {
      conn.Write(ResponseText(202, R"({"operation":{"id":"op-1","state":"pending"},
                                       "sandbox":{"id":"sb-7","state":"creating"}})"));
    } else if (req.method == "DELETE") {
      conn.Write(ResponseText(200, R"({"operation":{"id":"op-2","kind":"delete","state":"failed",
               "error":{"code":"conflict","message":"busy"}}})"));
    } else {
      conn.Write(ResponseText(200, R"({"id":"op-1","kind":"create","state":"failed",
               "error":{"code":"resource_exhausted","message":"no memory"}})"));
    }
  });
  Client c(server.url(), "k");
  auto sb = c.CreateSandboxAndWait(Json::object());
  ASSERT_FALSE(sb);
  EXPECT_EQ(sb.error().code, Errc::kResourceExhausted);
  EXPECT_EQ(sb.error().message, "create op-1 failed: no memory");
  auto del = c.DeleteSandboxAndWait("sb-7");
  ASSERT_FALSE(del);
  EXPECT_EQ(del.error().code, Errc::kConflict);
  // WaitOperation hands failed operations back as values.
  auto op = c.WaitOperation("op-1", 5s);
  ASSERT_TRUE(op);
  EXPECT_EQ((*op)["state"], "failed");
}

TEST(Client, WaitOperationTimesOut) {
  FakeHttpServer server([&](const FakeRequest&, FakeConn& conn) {
    conn.Write(ResponseText(200, R"({"id":"op-1","state":"running"})"));
  });
  Client c(server.url(), "k");
  auto op = c.WaitOperation("op-1", 200ms);
  ASSERT_FALSE(op);
  EXPECT_EQ(op.error().code, Errc::kDeadlineExceeded);
  // The server-side wait never exceeds what is left.
  for (const FakeRequest& r : server.requests()) {
    auto wait = r.target.substr(r.target.find("wait=") + 5);
    EXPECT_LE(ParseDurationMillis(wait), 200) << r.target;
  }
}

// ---------------------------------------------------------------------------------------------
// Files

TEST(Client, WriteFileFromStreamsAFile) {
  auto dir = sys::TempDir::Create();
  ASSERT_TRUE(dir);
  std::string data = RandomBytes(9 << 20, 3);
  std::string path = dir->path() + "/big.bin";
  ASSERT_TRUE(sys::WriteFileAtomic(path, data));
  FakeHttpServer server([&](const FakeRequest& req, FakeConn& conn) {
    conn.Write(ResponseText(200, Json{{"path", "/big.bin"}, {"size", req.body.size()}}.dump()));
  });
  Client c(server.url(), "k");
  auto r = c.WriteFileFrom("sb-1", "/big.bin", path, 0640);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ((*r)["size"], data.size());
  auto req = server.requests().at(0);
  EXPECT_EQ(req.method, "PUT");
  EXPECT_EQ(req.target, "/v1/sandboxes/sb-1/files?path=/big.bin&mode=0640");
  EXPECT_EQ(req.Header("content-length"), std::to_string(data.size()));
  EXPECT_EQ(req.Header("expect"), "");
  EXPECT_TRUE(req.body == data);

  auto missing = c.WriteFileFrom("sb-1", "/x", dir->path() + "/nope");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, Errc::kNotFound);
  auto is_dir = c.WriteFileFrom("sb-1", "/x", dir->path());
  ASSERT_FALSE(is_dir);
  EXPECT_EQ(is_dir.error().code, Errc::kInvalidArgument);
}

TEST(Client, WriteFileFromPipeIsChunked) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  sys::UniqueFd rd(p[0]), wr(p[1]);
  std::string data = RandomBytes(200000, 4);
  std::thread writer([&] {
    (void)sys::WriteAll(wr.get(), data);
    wr.Reset();
  });
  FakeHttpServer server([&](const FakeRequest& req, FakeConn& conn) {
    conn.Write(ResponseText(200, Json{{"size", req.body.size()}}.dump()));
  });
  Client c(server.url(), "k");
  auto r = c.WriteFileFromFd("sb-1", "/p", rd.get(), -1);
  writer.join();
  ASSERT_TRUE(r) << r.error().message;
  auto req = server.requests().at(0);
  EXPECT_EQ(req.Header("transfer-encoding"), "chunked");
  EXPECT_TRUE(req.body == data);
}

TEST(Client, ReadFileToStreamsIntoAHostFileAndKeepsItOnErrors) {
  auto dir = sys::TempDir::Create();
  ASSERT_TRUE(dir);
  std::string data = RandomBytes(3 << 20, 5);
  FakeHttpServer server([&](const FakeRequest& req, FakeConn& conn) {
    if (req.target.find("missing") != std::string::npos) {
      conn.Write(ResponseText(404, R"({"error":{"code":"not_found","message":"no such file"}})"));
      return;
    }
    if (req.target.find("empty") != std::string::npos) {
      conn.Write(ResponseText(200, "", {"Space-File-Size: 0"}, "application/octet-stream"));
      return;
    }
    conn.Write(ResponseText(200, data, {}, "application/octet-stream"));
  });
  Client c(server.url(), "k");
  std::string host = dir->path() + "/out.bin";
  auto r = c.ReadFileTo("sb-1", "/data.bin", host, 0600);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(*r, data.size());
  EXPECT_TRUE(*sys::ReadFile(host) == data);

  auto missing = c.ReadFileTo("sb-1", "/missing", host);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, Errc::kNotFound);
  EXPECT_TRUE(*sys::ReadFile(host) == data);  // untouched

  std::string empty = dir->path() + "/empty";
  ASSERT_TRUE(c.ReadFileTo("sb-1", "/empty", empty));
  EXPECT_EQ(*sys::ReadFile(empty), "");

  auto in_memory = c.ReadFile("sb-1", "/data.bin");
  ASSERT_TRUE(in_memory);
  EXPECT_TRUE(*in_memory == data);
}

// ---------------------------------------------------------------------------------------------
// FromEnvironment

class EnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : {"SPACE_URL", "SPACE_API_KEY", "SPACE_DATA_DIR"}) {
      if (const char* v = std::getenv(name)) saved_[name] = v;
      ::unsetenv(name);
    }
    auto d = sys::TempDir::Create();
    ASSERT_TRUE(d);
    dir_ = std::move(*d);
  }
  void TearDown() override {
    for (const char* name : {"SPACE_URL", "SPACE_API_KEY", "SPACE_DATA_DIR"}) {
      auto it = saved_.find(name);
      if (it == saved_.end()) {
        ::unsetenv(name);
      } else {
        ::setenv(name, it->second.c_str(), 1);
      }
    }
  }
  std::map<std::string, std::string> saved_;
  sys::TempDir dir_;
};

TEST_F(EnvTest, Precedence) {
  // Nothing anywhere: defaults.
  auto c = Client::FromEnvironment(dir_.path());
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->url(), "http://127.0.0.1:7070");
  EXPECT_EQ(c->api_key(), "");

  // Files in the data dir.
  ASSERT_TRUE(sys::WriteFileAtomic(dir_.path() + "/url", "http://127.0.0.1:9999\n"));
  ASSERT_TRUE(sys::WriteFileAtomic(dir_.path() + "/api-key", "file-key\n", 0600));
  c = Client::FromEnvironment(dir_.path());
  ASSERT_TRUE(c);
  EXPECT_EQ(c->url(), "http://127.0.0.1:9999");
  EXPECT_EQ(c->api_key(), "file-key");

  // SPACE_DATA_DIR is used when there is no override; the override beats it.
  ::setenv("SPACE_DATA_DIR", dir_.path().c_str(), 1);
  c = Client::FromEnvironment();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->api_key(), "file-key");
  EXPECT_EQ(Client::ResolveDataDir(""), dir_.path());
  EXPECT_EQ(Client::ResolveDataDir("/elsewhere"), "/elsewhere");
  c = Client::FromEnvironment(dir_.path() + "/nonexistent");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->api_key(), "");
  ::unsetenv("SPACE_DATA_DIR");
  EXPECT_EQ(Client::ResolveDataDir(""), "./.space-data");

  // The environment beats the files.
  ::setenv("SPACE_URL", "127.0.0.1:8080", 1);
  ::setenv("SPACE_API_KEY", "env-key", 1);
  c = Client::FromEnvironment(dir_.path());
  ASSERT_TRUE(c);
  EXPECT_EQ(c->url(), "http://127.0.0.1:8080");
  EXPECT_EQ(c->api_key(), "env-key");
}

TEST_F(EnvTest, UnreadableKeyFileIsAnError) {
  ASSERT_EQ(::mkdir((dir_.path() + "/api-key").c_str(), 0700), 0);  // EISDIR on read
  auto c = Client::FromEnvironment(dir_.path());
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("api-key"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// The `space` executable: exit statuses and output shapes

sys::RunResult RunCli(std::vector<std::string> args) {
  args.insert(args.begin(), SPACE_CLI_PATH);
  auto r = sys::Run({.argv = args}, 20000);
  EXPECT_TRUE(r) << r.error().message;
  return r ? *r : sys::RunResult{};
}

TEST(Cli, UsageErrorsExit2) {
  EXPECT_EQ(RunCli({}).exit_code, 2);
  EXPECT_EQ(RunCli({"frobnicate"}).exit_code, 2);
  EXPECT_EQ(RunCli({"exec"}).exit_code, 2);
  auto both_host = RunCli({"--url", "http://127.0.0.1:1", "cp", "a", "b"});
  EXPECT_EQ(both_host.exit_code, 2);
  EXPECT_TRUE(StartsWith(both_host.err, "space: cp: ")) << both_host.err;
  auto bad_size = RunCli({"--url", "http://127.0.0.1:1", "create", "--memory", "lots"});
  EXPECT_EQ(bad_size.exit_code, 2);
  EXPECT_TRUE(StartsWith(bad_size.err, "space: --memory: ")) << bad_size.err;
  EXPECT_EQ(RunCli({"--help"}).exit_code, 0);
}

TEST(Cli, UnreachableServerExit1) {
  int port;
  {
    FakeHttpServer s([](const FakeRequest&, FakeConn&) {});
    port = s.port();
  }
  std::string url = "http://127.0.0.1:" + std::to_string(port);
  auto r = RunCli({"--url", url, "ls"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(StartsWith(r.err, "space: cannot reach spaced at " + url)) << r.err;
  EXPECT_EQ(r.out, "");
}

TEST(Cli, ExecStreamsAndExitsWithTheCommandsStatus) {
  std::string exit_json;
  FakeHttpServer server([&](const FakeRequest& req, FakeConn& conn) {
    if (req.method == "POST") {
      conn.Write(ResponseText(201, R"({"id":"cmd-1","command":{"id":"cmd-1"}})"));
      return;
    }
    WriteChunked(conn,
                 MuxRecord(MuxKind::kStdout, "out\n") + MuxRecord(MuxKind::kStderr, "err\n") +
                     MuxRecord(MuxKind::kStdout, "more\n") + MuxRecord(MuxKind::kExit, exit_json),
                 9, 3);
  });
  struct Case {
    std::string exit_json;
    int code;
  } cases[] = {{R"({"state":"exited","exit_code":3})", 3},
               {R"({"state":"exited","exit_code":null,"signal":9})", 137},
               {R"({"state":"exited","exit_code":null,"signal":9,"timed_out":true})", 124},
               {R"({"state":"exited","exit_code":0})", 0}};
  for (const Case& k : cases) {
    exit_json = k.exit_json;
    auto r = RunCli({"--url", server.url(), "--api-key", "k", "exec", "--env", "A=1", "--cwd",
                     "/tmp", "sb-1", "--", "sh", "-c", "echo $A; exit 3"});
    EXPECT_EQ(r.exit_code, k.code) << k.exit_json << r.err;
    EXPECT_EQ(r.out, "out\nmore\n");
    EXPECT_EQ(r.err, "err\n");
  }
  auto reqs = server.requests();
  ASSERT_GE(reqs.size(), 2u);
  EXPECT_EQ(reqs[0].target, "/v1/sandboxes/sb-1/commands");
  EXPECT_EQ(*ParseJson(reqs[0].body), (Json{{"argv", {"sh", "-c", "echo $A; exit 3"}},
                                            {"env", {{"A", "1"}}},
                                            {"cwd", "/tmp"},
                                            {"stdin", false}}));

  // --shell sends one command line.
  exit_json = cases[3].exit_json;
  auto r = RunCli({"--url", server.url(), "exec", "--shell", "sb-1", "--", "echo hi | wc -c"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  auto all = server.requests();
  auto post = std::find_if(all.rbegin(), all.rend(),
                           [](const FakeRequest& q) { return q.method == "POST"; });
  ASSERT_NE(post, all.rend());
  EXPECT_EQ(*ParseJson(post->body), (Json{{"cmd", "echo hi | wc -c"}, {"stdin", false}}));
}

TEST(Cli, ListingsAndCreate) {
  FakeHttpServer server([&](const FakeRequest& req, FakeConn& conn) {
    if (req.method == "POST" && req.Path() == "/v1/sandboxes") {
      conn.Write(ResponseText(201, R"({"operation":{"id":"op-1","state":"succeeded"},
                                       "sandbox":{"id":"sb-new","state":"running"}})"));
    } else if (req.Path() == "/v1/sandboxes") {
      conn.Write(ResponseText(200, R"({"sandboxes":[{"id":"sb-1","state":"running",
          "template":"base:latest","runtime":"oci","metadata":{"team":"a"},
          "created_at":"2020-01-01T00:00:00.000Z"}]})"));
    } else {
      conn.Write(ResponseText(404, R"({"error":{"code":"not_found","message":"nope"}})"));
    }
  });
  auto created = RunCli({"--url", server.url(), "create", "--template", "base:latest", "--memory",
                         "512M", "--cpus", "1.5", "--label", "team=a", "--network"});
  EXPECT_EQ(created.exit_code, 0) << created.err;
  EXPECT_EQ(created.out, "sb-new\n");
  EXPECT_EQ(*ParseJson(server.requests().at(0).body),
            (Json{{"template", "base:latest"},
                  {"limits", {{"memory_bytes", 512 << 20}, {"cpus", 1.5}}},
                  {"metadata", {{"team", "a"}}},
                  {"network", {{"mode", "internet"}}}}));
  // The network flags become the API's policy object.
  auto net = RunCli({"--url", server.url(), "create", "--net", "internet", "--allow-out", "pypi",
                     "--allow-out", "203.0.113.0/24", "--deny-out", "198.51.100.0/24", "--secret",
                     "TOKEN=s3cr=t@api.example.test,*.example.org", "--public-traffic"});
  EXPECT_EQ(net.exit_code, 0) << net.err;
  EXPECT_EQ((*ParseJson(server.requests().at(1).body))["network"],
            (Json{{"mode", "internet"},
                  {"allow_out", {"pypi", "203.0.113.0/24"}},
                  {"deny_out", {"198.51.100.0/24"}},
                  {"public_traffic", true},
                  {"secrets", {{{"name", "TOKEN"}, {"value", "s3cr=t"},
                                {"hosts", {"api.example.test", "*.example.org"}}}}}}));
  auto bad = RunCli({"--url", server.url(), "create", "--secret", "TOKEN=x"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("NAME=VALUE@HOST"), std::string::npos) << bad.err;
  bad = RunCli({"--url", server.url(), "create", "--net", "wifi"});
  EXPECT_EQ(bad.exit_code, 2);

  auto json = RunCli({"--url", server.url(), "ls", "--json", "--label", "team=a"});
  EXPECT_EQ(json.exit_code, 0) << json.err;
  auto parsed = ParseJson(json.out);
  ASSERT_TRUE(parsed) << json.out;
  ASSERT_TRUE(parsed->is_array());
  EXPECT_EQ((*parsed)[0]["id"], "sb-1");
  EXPECT_EQ(server.requests().back().target, "/v1/sandboxes?label=team=a");

  auto table = RunCli({"--url", server.url(), "ls"});
  EXPECT_EQ(table.exit_code, 0);
  // The age column is as wide as "2525d" (2020 to now).
  EXPECT_TRUE(StartsWith(table.out, "ID     STATE     TEMPLATE      RUNTIME   AGE")) << table.out;
  EXPECT_NE(table.out.find("\nsb-1   running   base:latest   oci       "), std::string::npos)
      << table.out;
  EXPECT_TRUE(table.out.ends_with("   team=a\n")) << table.out;

  auto missing = RunCli({"--url", server.url(), "get", "sb-x"});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_EQ(missing.err, "space: nope\n");
}

}  // namespace
}  // namespace space::client
