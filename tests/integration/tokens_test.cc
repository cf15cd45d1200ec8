// Access control against a real spaced: operator keys, sandbox tokens and attach tokens on
// every route (docs/security.md, "Tokens and access"), revocation, rotation, the listen rule.
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <thread>

#include "tests/integration/harness.h"

namespace space::testing {
namespace {

using namespace std::chrono_literals;

// One route, with placeholders SB (the sandbox), CID (a command of it), OP (an operation of
// it), SNAP (a snapshot of it). `scopes` are the token scopes that grant it (empty:
// operators only). `mutating` routes are not run for real here (see the lifecycle test).
struct Route {
  std::string method, path, body;
  std::vector<std::string> scopes;
  bool mutating = false;
};

const std::vector<std::string> kAllScopes = {
    "sandbox:read", "sandbox:lifecycle", "commands:exec", "commands:read",
    "commands:write", "files:read", "files:write", "snapshots"};

std::vector<Route> Routes() {
  return {
      // Global routes: operators only.
      {"POST", "/v1/sandboxes", "{}", {}, true},
      {"GET", "/v1/sandboxes", "", {}},
      {"POST", "/v1/sandboxes/SB/fork", "{\"count\":1}", {}, true},
      {"GET", "/v1/snapshots", "", {}},
      {"GET", "/v1/operations", "", {}},
      {"GET", "/v1/templates", "", {}},
      {"POST", "/v1/templates", "{}", {}},  // 400 for operators: no build happens
      {"GET", "/v1/templates/builds/OP/log", "", {}},
      {"GET", "/v1/keys", "", {}},
      {"POST", "/v1/keys", "{\"name\":\"\"}", {}},  // 400 for operators
      {"DELETE", "/v1/keys/no-such-key", "", {}},
      // The sandbox.
      {"GET", "/v1/sandboxes/SB", "", {"sandbox:read"}},
      {"DELETE", "/v1/sandboxes/SB", "", {"sandbox:lifecycle"}, true},
      {"POST", "/v1/sandboxes/SB/pause", "", {"sandbox:lifecycle"}, true},
      {"POST", "/v1/sandboxes/SB/resume", "", {"sandbox:lifecycle"}},  // 409: not paused
      {"POST", "/v1/sandboxes/SB/suspend", "", {"sandbox:lifecycle"}, true},
      {"POST", "/v1/sandboxes/SB/wake", "", {"sandbox:lifecycle"}},    // 409: not suspended
      {"POST", "/v1/sandboxes/SB/timeout", "{\"timeout\":3600}", {"sandbox:lifecycle"}},
      {"GET", "/v1/operations/OP", "", {"sandbox:read", "sandbox:lifecycle", "snapshots"}},
      {"POST", "/v1/sandboxes/SB/snapshots", "", {"snapshots"}},
      {"GET", "/v1/sandboxes/SB/snapshots", "", {"snapshots"}},
      {"GET", "/v1/snapshots/SNAP", "", {"snapshots"}},
      {"DELETE", "/v1/snapshots/SNAP", "", {"snapshots"}, true},
      {"POST", "/v1/sandboxes/SB/tokens", "{}", kAllScopes},
      // Commands.
      {"POST", "/v1/sandboxes/SB/commands", "{\"argv\":[\"true\"]}", {"commands:exec"}},
      {"GET", "/v1/sandboxes/SB/commands", "", {"commands:read"}},
      {"GET", "/v1/sandboxes/SB/commands/CID", "", {"commands:read"}},
      {"GET", "/v1/sandboxes/SB/commands/CID/output", "", {"commands:read"}},
      {"POST", "/v1/sandboxes/SB/commands/CID/stdin", "x", {"commands:write"}},
      {"POST", "/v1/sandboxes/SB/commands/CID/signal", "{\"signal\":\"CONT\"}", {"commands:write"}},
      // Files.
      {"GET", "/v1/sandboxes/SB/files?path=/etc/passwd", "", {"files:read"}},
      {"GET", "/v1/sandboxes/SB/files:list?path=/", "", {"files:read"}},
      {"GET", "/v1/sandboxes/SB/files:stat?path=/", "", {"files:read"}},
      {"PUT", "/v1/sandboxes/SB/files?path=/tmp/t", "data", {"files:write"}},
      {"DELETE", "/v1/sandboxes/SB/files?path=/tmp/none", "", {"files:write"}},
      {"POST", "/v1/sandboxes/SB/files:mkdir?path=/tmp/d", "", {"files:write"}},
      {"POST", "/v1/sandboxes/SB/files:rename", "{\"from\":\"/tmp/t\",\"to\":\"/tmp/t\"}",
       {"files:write"}},
  };
}

std::string Replace(std::string s, const std::string& from, const std::string& to) {
  for (size_t pos = s.find(from); pos != std::string::npos; pos = s.find(from, pos + to.size()))
    s.replace(pos, from.size(), to);
  return s;
}

// Replaces the last character of the signature with another.
std::string Tamper(std::string token) {
  token.back() = token.back() == 'A' ? 'B' : 'A';
  return token;
}

class TokensTest : public SharedDaemonTest<TokensTest> {
 protected:
  struct Box {
    std::string id, token, create_op, command, command_attach, other_command, snapshot;
  };

  static void SetUpTestSuite() {
    SharedDaemonTest<TokensTest>::SetUpTestSuite();
    if (!daemon_ || daemon_->url().empty()) return;
    a_ = new Box(MakeBox());
    b_ = new Box(MakeBox());
    // An expired token of A: the shortest lifetime, then wait it out.
    auto t = daemon_->client().MintToken(a_->id, Json{{"ttl_s", 1}});
    if (t) expired_ = (*t)["token"];
    std::this_thread::sleep_for(2100ms);
  }
  static void TearDownTestSuite() {
    delete a_;
    delete b_;
    a_ = b_ = nullptr;
    SharedDaemonTest<TokensTest>::TearDownTestSuite();
  }
  void SetUp() override {
    SharedDaemonTest<TokensTest>::SetUp();
    ASSERT_TRUE(a_ && b_ && !a_->command.empty() && !b_->command.empty()) << daemon_->Log();
  }

  // A sandbox with its token, a long-running `cat` (stdin open) and its attach token, a
  // finished command, and a snapshot.
  static Box MakeBox() {
    client::Client& c = daemon_->client();
    Box box;
    auto created = c.CreateSandbox(Json::object(), 60s);
    if (!created) {
      ADD_FAILURE() << created.error().message;
      return box;
    }
    box.id = (*created)["sandbox"]["id"];
    box.token = created->value("token", "");
    box.create_op = (*created)["operation"]["id"];
    EXPECT_TRUE(StartsWith(box.token, "st1.")) << created->dump();
    auto cat = c.StartCommand(box.id, {{"argv", {"cat"}}, {"stdin", true}});
    auto echo = c.StartCommand(box.id, {{"argv", {"echo", "other"}}});
    if (!cat || !echo) {
      ADD_FAILURE() << "start commands";
      return box;
    }
    box.command = (*cat)["id"];
    box.command_attach = cat->value("attach_token", "");
    box.other_command = (*echo)["id"];
    EXPECT_TRUE(StartsWith(box.command_attach, "st1.")) << cat->dump();
    auto snap = c.SnapshotAndWait(box.id);
    EXPECT_TRUE(snap) << (snap ? "" : snap.error().message);
    if (snap) box.snapshot = *snap;
    return box;
  }

  static std::string Path(const Route& r, const Box& box) {
    std::string p = Replace(r.path, "SB", box.id);
    p = Replace(p, "/CID", "/" + box.command);
    p = Replace(p, "/OP", "/" + box.create_op);
    return Replace(p, "/SNAP", "/" + box.snapshot);
  }

  // The HTTP status of `route` on `box` with `credential`.
  int Code(const Route& r, const Box& box, const std::string& credential) {
    client::Client cl(daemon_->url(), credential);
    auto resp = cl.Request(r.method, Path(r, box), r.body,
                           r.body.empty() || r.body[0] != '{' ? "" : "application/json");
    EXPECT_TRUE(resp) << (resp ? "" : resp.error().message);
    return resp ? resp->status : 0;
  }

  // A token of `box` with `scopes`.
  std::string Token(const Box& box, const std::vector<std::string>& scopes,
                    const std::string& command = "") {
    Json body = {{"scopes", scopes}};
    if (!command.empty()) body["command_id"] = command;
    auto t = c().MintToken(box.id, body);
    EXPECT_TRUE(t) << (t ? "" : t.error().message);
    return t ? (*t)["token"].get<std::string>() : "";
  }

  static inline Box* a_ = nullptr;
  static inline Box* b_ = nullptr;
  static inline std::string expired_;
};

TEST_F(TokensTest, OperatorKeyPassesEveryRoute) {
  for (const Route& r : Routes()) {
    if (r.mutating) continue;
    int st = Code(r, *a_, daemon_->api_key());
    EXPECT_NE(st, 401) << r.method << " " << r.path;
    EXPECT_NE(st, 403) << r.method << " " << r.path;
  }
}

TEST_F(TokensTest, OwnSandboxTokenPassesItsRoutesAndNoGlobalOne) {
  for (const Route& r : Routes()) {
    if (r.mutating && !r.scopes.empty()) continue;  // run for real in the lifecycle test
    int st = Code(r, *a_, a_->token);
    if (r.scopes.empty()) {
      EXPECT_EQ(st, 403) << r.method << " " << r.path;
    } else {
      EXPECT_NE(st, 401) << r.method << " " << r.path;
      EXPECT_NE(st, 403) << r.method << " " << r.path;
    }
  }
}

TEST_F(TokensTest, AnotherSandboxsTokenIsForbiddenEverywhere) {
  for (const Route& r : Routes()) {
    EXPECT_EQ(Code(r, *a_, b_->token), 403) << r.method << " " << r.path;
  }
}

TEST_F(TokensTest, ExpiredTamperedAndMalformedTokensAreUnauthenticated) {
  ASSERT_FALSE(expired_.empty());
  for (const Route& r : Routes()) {
    EXPECT_EQ(Code(r, *a_, expired_), 401) << r.method << " " << r.path;
    EXPECT_EQ(Code(r, *a_, Tamper(a_->token)), 401) << r.method << " " << r.path;
  }
  Route get = {"GET", "/v1/sandboxes/SB", "", {}};
  for (std::string bad : {std::string("st1.x.y.z"), std::string("st1."), a_->token + "x",
                          std::string("sk-not-a-key"), std::string("")}) {
    EXPECT_EQ(Code(get, *a_, bad), 401) << "[" << bad << "]";
  }
  // B's claims under A's signature, and the reverse: neither verifies.
  auto claims = [](const std::string& t) { return t.substr(0, t.rfind('.')); };
  auto signature = [](const std::string& t) { return t.substr(t.rfind('.')); };
  EXPECT_EQ(Code(get, *b_, claims(b_->token) + signature(a_->token)), 401);
  EXPECT_EQ(Code(get, *a_, claims(a_->token) + signature(b_->token)), 401);
  EXPECT_EQ(Code(get, *a_, claims(a_->token) + signature(a_->token)), 200);
}

TEST_F(TokensTest, InsufficientScopeIsForbidden) {
  for (const Route& r : Routes()) {
    if (r.scopes.empty() || r.scopes.size() == kAllScopes.size()) continue;
    std::vector<std::string> others;
    for (const auto& s : kAllScopes) {
      if (std::find(r.scopes.begin(), r.scopes.end(), s) == r.scopes.end()) others.push_back(s);
    }
    EXPECT_EQ(Code(r, *a_, Token(*a_, others)), 403) << r.method << " " << r.path;
    // And the scope alone is enough (mutating routes are run in the lifecycle test).
    if (!r.mutating) {
      int st = Code(r, *a_, Token(*a_, {r.scopes[0]}));
      EXPECT_NE(st, 403) << r.method << " " << r.path;
      EXPECT_NE(st, 401) << r.method << " " << r.path;
    }
  }
}

TEST_F(TokensTest, AttachTokenReachesOnlyItsCommand) {
  client::Client attach(daemon_->url(), a_->command_attach);
  auto who = attach.WhoAmI();
  ASSERT_TRUE(who) << who.error().message;
  EXPECT_EQ((*who)["command_id"], a_->command);
  EXPECT_EQ((*who)["scopes"], Json({"commands:read", "commands:write"}));
  // Its own command: stdin in, output out, status, signals.
  ASSERT_TRUE(attach.SendStdin(a_->id, a_->command, "through the attach token\n"));
  // (Earlier tests wrote to this cat too: read on until our line is there.)
  std::string out;
  uint64_t offset = 0;
  auto deadline = std::chrono::steady_clock::now() + 20s;
  while (out.find("attach token") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline) {
    auto chunk = attach.ReadOutput(a_->id, a_->command, "stdout", offset, 2s);
    ASSERT_TRUE(chunk) << chunk.error().message;
    out += chunk->bytes;
    offset = chunk->next_offset;
  }
  EXPECT_NE(out.find("through the attach token"), std::string::npos) << out;
  EXPECT_TRUE(attach.GetCommand(a_->id, a_->command));
  EXPECT_TRUE(attach.Signal(a_->id, a_->command, "CONT"));
  // Nothing else: not another command, not starting one, not the sandbox or its files.
  for (const Route& r : Routes()) {
    std::string path = Path(r, *a_);
    bool own_command = path.find("/commands/" + a_->command) != std::string::npos;
    bool tokens = r.path == "/v1/sandboxes/SB/tokens";
    int st = Code(r, *a_, a_->command_attach);
    if (own_command || tokens) {
      EXPECT_NE(st, 403) << r.method << " " << r.path;
    } else {
      EXPECT_EQ(st, 403) << r.method << " " << r.path;
    }
  }
  Box other = *a_;
  other.command = a_->other_command;
  for (const Route& r : Routes()) {
    if (r.path.find("CID") == std::string::npos) continue;
    EXPECT_EQ(Code(r, other, a_->command_attach), 403) << r.method << " " << r.path;
  }
  // It can hand out a read-only copy of itself, nothing broader or for another command.
  auto ro = attach.MintToken(a_->id, {{"scopes", {"commands:read"}}});
  ASSERT_TRUE(ro) << ro.error().message;
  EXPECT_EQ((*ro)["command_id"], a_->command);
  client::Client viewer(daemon_->url(), (*ro)["token"]);
  EXPECT_TRUE(viewer.GetCommand(a_->id, a_->command));
  EXPECT_EQ(viewer.SendStdin(a_->id, a_->command, "x").error().code, Errc::kPermissionDenied);
  EXPECT_EQ(attach.MintToken(a_->id, {{"scopes", {"files:read"}}}).error().code,
            Errc::kPermissionDenied);
  EXPECT_EQ(attach.MintToken(a_->id, {{"command_id", a_->other_command}}).error().code,
            Errc::kPermissionDenied);
}

TEST_F(TokensTest, MintedTokensAreNeverBroaderOrLongerThanTheCaller) {
  client::Client reader(daemon_->url(), Token(*a_, {"files:read"}));
  EXPECT_EQ(reader.MintToken(a_->id, {{"scopes", {"files:read", "files:write"}}}).error().code,
            Errc::kPermissionDenied);
  EXPECT_EQ(reader.MintToken(b_->id, {{"scopes", {"files:read"}}}).error().code,
            Errc::kPermissionDenied);
  auto narrow = reader.MintToken(a_->id, {{"ttl_s", 100000000}});
  ASSERT_TRUE(narrow) << narrow.error().message;
  auto mine = reader.WhoAmI();
  ASSERT_TRUE(mine);
  EXPECT_EQ((*narrow)["scopes"], Json({"files:read"}));
  EXPECT_LE((*narrow)["expires_at"].get<std::string>(), (*mine)["expires_at"].get<std::string>());
  // Bad requests, even from the operator.
  EXPECT_EQ(c().MintToken(a_->id, {{"scopes", {"root"}}}).error().code, Errc::kInvalidArgument);
  EXPECT_EQ(c().MintToken(a_->id, {{"scopes", Json::array()}}).error().code,
            Errc::kInvalidArgument);
  EXPECT_EQ(c().MintToken(a_->id, {{"command_id", a_->command}, {"scopes", {"files:read"}}})
                .error()
                .code,
            Errc::kInvalidArgument);
  EXPECT_EQ(c().MintToken(a_->id, {{"ttl_s", -5}}).error().code, Errc::kInvalidArgument);
  EXPECT_EQ(c().MintToken("sb-aaaaaaaaaaaaaaaa").error().code, Errc::kNotFound);
}

TEST_F(TokensTest, OperationsOfOtherSandboxesAreHidden) {
  client::Client tok(daemon_->url(), a_->token);
  EXPECT_TRUE(tok.GetOperation(a_->create_op));
  EXPECT_EQ(tok.GetOperation(b_->create_op).error().code, Errc::kPermissionDenied);
  EXPECT_EQ(tok.GetOperation("op-aaaaaaaaaaaaaaaa").error().code, Errc::kPermissionDenied);
  EXPECT_EQ(tok.ListSandboxes().error().code, Errc::kPermissionDenied);
  EXPECT_EQ(tok.GetSnapshot(b_->snapshot).error().code, Errc::kPermissionDenied);
}

// The mutating routes, run for real by a sandbox token on its own sandbox; after the
// delete, the token (and one minted from it) is dead.
TEST_F(TokensTest, LifecycleWithTheSandboxTokenThenRevokedByDelete) {
  Box box = MakeBox();
  ASSERT_FALSE(box.token.empty());
  client::Client tok(daemon_->url(), box.token);
  auto child = tok.MintToken(box.id, {{"scopes", {"sandbox:read"}}});
  ASSERT_TRUE(child);
  ASSERT_TRUE(tok.TransitionAndWait(box.id, client::Transition::kPause)) << daemon_->Log();
  ASSERT_TRUE(tok.TransitionAndWait(box.id, client::Transition::kResume));
  ASSERT_TRUE(tok.TransitionAndWait(box.id, client::Transition::kSuspend));
  ASSERT_TRUE(tok.TransitionAndWait(box.id, client::Transition::kWake));
  ASSERT_TRUE(tok.DeleteSnapshot(box.snapshot));
  ASSERT_TRUE(tok.DeleteSandboxAndWait(box.id, 60s));
  for (const std::string& dead : {box.token, (*child)["token"].get<std::string>(),
                                  box.command_attach}) {
    client::Client d(daemon_->url(), dead);
    auto r = d.GetSandbox(box.id);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, Errc::kUnauthenticated);
    EXPECT_EQ(d.GetCommand(box.id, box.command).error().code, Errc::kUnauthenticated);
  }
}

TEST_F(TokensTest, OperatorKeysCreateListRevoke) {
  auto k = c().CreateKey("ci");
  ASSERT_TRUE(k) << k.error().message;
  std::string key = (*k)["key"];
  EXPECT_TRUE(StartsWith(key, "sk-"));
  client::Client ci(daemon_->url(), key);
  auto who = ci.WhoAmI();
  ASSERT_TRUE(who) << who.error().message;
  EXPECT_EQ((*who)["kind"], "operator");
  EXPECT_EQ((*who)["key_name"], "ci");
  EXPECT_TRUE(ci.ListSandboxes());
  EXPECT_EQ(c().CreateKey("ci").error().code, Errc::kConflict);
  EXPECT_EQ(c().CreateKey("bad name").error().code, Errc::kInvalidArgument);
  auto list = c().ListKeys();
  ASSERT_TRUE(list);
  std::vector<std::string> names;
  for (const auto& e : *list) {
    names.push_back(e["name"]);
    EXPECT_FALSE(e.contains("key")) << e.dump();
  }
  EXPECT_EQ(names, (std::vector<std::string>{"default", "ci"}));
  // Only hashes are stored: the key is in neither the database nor its WAL.
  for (const char* f : {"/space.db", "/space.db-wal"}) {
    auto bytes = sys::ReadFile(daemon_->data_dir() + f);
    if (bytes) {
      EXPECT_EQ(bytes->find(key.substr(3)), std::string::npos) << f;
    }
  }
  // Tokens cannot manage keys; revoked keys stop working at once.
  client::Client tok(daemon_->url(), a_->token);
  EXPECT_EQ(tok.ListKeys().error().code, Errc::kPermissionDenied);
  EXPECT_EQ(tok.DeleteKey("ci").error().code, Errc::kPermissionDenied);
  ASSERT_TRUE(ci.DeleteKey("ci"));
  EXPECT_EQ(ci.ListSandboxes().error().code, Errc::kUnauthenticated);
  EXPECT_EQ(c().DeleteKey("ci").error().code, Errc::kNotFound);
  // The credential files are private.
  for (const char* f : {"/api-key", "/token-keys"}) {
    struct stat st;
    ASSERT_EQ(::stat((daemon_->data_dir() + f).c_str(), &st), 0) << f;
    EXPECT_EQ(st.st_mode & 0777, 0600u) << f;
  }
}

TEST_F(TokensTest, KeysCli) {
  auto space = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = {BinDir() + "/space"};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<std::string> env = {"PATH=/usr/bin:/bin", "SPACE_URL=" + daemon_->url(),
                                    "SPACE_API_KEY=" + daemon_->api_key()};
    auto r = sys::Run({.argv = argv, .env = env}, 60000);
    EXPECT_TRUE(r);
    return r ? *r : sys::RunResult{};
  };
  auto created = space({"keys", "create", "cli-key"});
  ASSERT_EQ(created.exit_code, 0) << created.err;
  std::string key = Daemon::Trim(created.out);
  EXPECT_TRUE(StartsWith(key, "sk-")) << created.out;
  client::Client k(daemon_->url(), key);
  EXPECT_TRUE(k.ListSandboxes());
  auto ls = space({"keys", "ls", "--json"});
  ASSERT_EQ(ls.exit_code, 0) << ls.err;
  EXPECT_NE(ls.out.find("\"cli-key\""), std::string::npos) << ls.out;
  EXPECT_EQ(ls.out.find(key), std::string::npos);
  auto table = space({"keys", "ls"});
  EXPECT_NE(table.out.find("cli-key"), std::string::npos) << table.out;
  auto tok = space({"token", a_->id, "--scope", "files:read", "--ttl", "60"});
  ASSERT_EQ(tok.exit_code, 0) << tok.err;
  client::Client t(daemon_->url(), Daemon::Trim(tok.out));
  EXPECT_TRUE(t.Stat(a_->id, "/"));
  EXPECT_EQ(t.ListCommands(a_->id).error().code, Errc::kPermissionDenied);
  auto rm = space({"keys", "rm", "cli-key"});
  ASSERT_EQ(rm.exit_code, 0) << rm.err;
  EXPECT_EQ(k.ListSandboxes().error().code, Errc::kUnauthenticated);
  EXPECT_NE(space({"keys", "rm", "cli-key"}).exit_code, 0);

  // --e2b: a key in E2B's shape (what E2B's SDKs check client-side), an operator key on
  // SPACE's routes like any other, revoked the same way.
  auto e2b = space({"keys", "create", "--e2b", "e2b-key"});
  ASSERT_EQ(e2b.exit_code, 0) << e2b.err;
  std::string ekey = Daemon::Trim(e2b.out);
  EXPECT_TRUE(StartsWith(ekey, "e2b_")) << e2b.out;
  EXPECT_EQ(ekey.size(), 4u + 48u);
  EXPECT_EQ(ekey.find_first_not_of("0123456789abcdef", 4), std::string::npos) << ekey;
  client::Client ek(daemon_->url(), ekey);
  EXPECT_TRUE(ek.ListSandboxes());
  ASSERT_EQ(space({"keys", "rm", "e2b-key"}).exit_code, 0);
  EXPECT_EQ(ek.ListSandboxes().error().code, Errc::kUnauthenticated);
  // A format that does not exist is refused, not ignored.
  auto bad = c().Call("POST", "/v1/keys", Json{{"name", "odd"}, {"format", "aws"}});
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, Errc::kInvalidArgument);
}

// Tokens survive a restart; after a rotation old tokens still verify and new ones use the
// new key; dropping the old key kills the old tokens only.
TEST(TokenKeysTest, RotationAcrossRestarts) {
  SPACE_REQUIRE_SANDBOXES();
  Daemon d;
  ASSERT_TRUE(d.Start());
  auto created = d.client().CreateSandbox(Json::object(), 60s);
  ASSERT_TRUE(created) << created.error().message;
  std::string id = (*created)["sandbox"]["id"], old_token = (*created)["token"];
  std::string old_kid = old_token.substr(4, old_token.find('.', 4) - 4);
  d.Stop();
  d.SetExtraArgs({"--rotate-token-key"});
  ASSERT_TRUE(d.Start());
  client::Client old_client(d.url(), old_token);
  EXPECT_TRUE(old_client.GetSandbox(id)) << d.Log();
  auto fresh = d.client().MintToken(id);
  ASSERT_TRUE(fresh);
  std::string new_token = (*fresh)["token"];
  EXPECT_NE(new_token.substr(4, old_kid.size() + 1), old_kid + ".");
  d.Stop();
  d.SetExtraArgs({"--drop-token-key", old_kid});
  ASSERT_TRUE(d.Start());
  client::Client old_again(d.url(), old_token);
  EXPECT_EQ(old_again.GetSandbox(id).error().code, Errc::kUnauthenticated);
  client::Client new_client(d.url(), new_token);
  EXPECT_TRUE(new_client.GetSandbox(id));
  d.Cleanup();
}

// Without authentication spaced serves only loopback; it refuses before touching anything.
TEST(ListenPolicyTest, NoAuthOnANonLoopbackAddressIsRefused) {
  auto dir = sys::TempDir::Create("/tmp", "space-it-");
  ASSERT_TRUE(dir);
  auto r = sys::Run({.argv = {BinDir() + "/spaced", "--listen", "0.0.0.0:0", "--no-auth",
                              "--data-dir", dir->path() + "/data"}},
                    30000);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_NE(r->exit_code, 0);
  EXPECT_NE(r->err.find("refusing to serve 0.0.0.0 without authentication"), std::string::npos)
      << r->err;
  EXPECT_FALSE(sys::Exists(dir->path() + "/data"));
}

}  // namespace
}  // namespace space::testing
