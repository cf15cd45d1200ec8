// The web console's server side against a real spaced over loopback: login (form and JSON),
// the session cookie and its CSRF token on /v1, logout and revoked keys, GET /v1/events,
// and the terminal WebSocket (subprotocol, credentials, output from an offset after a drop,
// resize, hang-up). Raw HTTP and WebSocket with Beast, as a browser would speak them.
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>

#include "tests/integration/harness.h"

namespace space::testing {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

struct Reply {
  int status = 0;
  std::string body;
  std::vector<std::string> cookies;  // Set-Cookie values
  std::string location;
};

class ConsoleApiTest : public SharedDaemonTest<ConsoleApiTest> {
 protected:
  uint16_t Port() { return static_cast<uint16_t>(std::stoi(daemon_->url().substr(daemon_->url().rfind(':') + 1))); }
  std::string Host() { return "127.0.0.1:" + std::to_string(Port()); }

  Reply Send(const std::string& method, const std::string& target, const std::string& body = "",
             std::vector<std::pair<std::string, std::string>> headers = {}) {
    asio::io_context ioc;
    beast::tcp_stream s(ioc);
    s.expires_after(std::chrono::seconds(60));
    s.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), Port()));
    http::request<http::string_body> req{http::string_to_verb(method), target, 11};
    req.set(http::field::host, Host());
    for (auto& [k, v] : headers) req.set(k, v);
    req.body() = body;
    req.prepare_payload();
    http::write(s, req);
    beast::flat_buffer buf;
    http::response<http::string_body> res;
    http::read(s, buf, res);
    Reply r;
    r.status = res.result_int();
    r.body = res.body();
    for (auto it = res.find(http::field::set_cookie); it != res.end() && it->name() == http::field::set_cookie; ++it)
      r.cookies.emplace_back(it->value());
    if (auto it = res.find(http::field::location); it != res.end()) r.location = std::string(it->value());
    return r;
  }

  // Logs in with `key`; returns {cookie header value, csrf}.
  std::pair<std::string, std::string> Login(const std::string& key) {
    Reply r = Send("POST", "/ui/login", "api-key=" + key,
                   {{"Content-Type", "application/x-www-form-urlencoded"}, {"Origin", "http://" + Host()}});
    EXPECT_EQ(r.status, 303) << r.body;
    EXPECT_EQ(r.location, "/ui/");
    EXPECT_EQ(r.cookies.size(), 2u);
    std::string session, csrf;
    for (const auto& c : r.cookies) {
      std::string pair = c.substr(0, c.find(';'));
      if (pair.rfind("space_session=", 0) == 0) {
        session = pair;
        EXPECT_NE(c.find("HttpOnly"), std::string::npos) << c;
        EXPECT_NE(c.find("SameSite=Strict"), std::string::npos) << c;
        EXPECT_NE(c.find("Path=/"), std::string::npos) << c;
      }
      if (pair.rfind("space_csrf=", 0) == 0) {
        csrf = pair.substr(pair.find('=') + 1);
        EXPECT_EQ(c.find("HttpOnly"), std::string::npos) << c;
        EXPECT_NE(c.find("SameSite=Strict"), std::string::npos) << c;
      }
    }
    EXPECT_EQ(session.size(), std::string("space_session=").size() + 64) << session;
    EXPECT_EQ(csrf.size(), 64u);
    return {session, csrf};
  }
};

TEST_F(ConsoleApiTest, LoginRefusesWrongKeysAndForeignOrigins) {
  Reply r = Send("POST", "/ui/login", "api-key=sk-wrong", {{"Content-Type", "application/x-www-form-urlencoded"}});
  EXPECT_EQ(r.status, 303);
  EXPECT_EQ(r.location, "/ui/login?error=invalid-key");
  EXPECT_TRUE(r.cookies.empty());
  r = Send("POST", "/ui/login", R"({"api-key":"sk-wrong"})", {{"Content-Type", "application/json"}, {"Accept", "application/json"}});
  EXPECT_EQ(r.status, 401) << r.body;
  EXPECT_TRUE(r.cookies.empty());
  // The same JSON with the right key logs in (its Content-Type read before its body).
  r = Send("POST", "/ui/login", R"({"api-key":")" + daemon_->api_key() + R"("})",
           {{"Content-Type", "application/json"}, {"Accept", "application/json"}});
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.cookies.size(), 2u);
  EXPECT_NE(r.body.find("\"csrf\""), std::string::npos) << r.body;
  r = Send("POST", "/ui/login", "", {{"Content-Type", "application/x-www-form-urlencoded"}});
  EXPECT_EQ(r.status, 303);
  EXPECT_TRUE(r.cookies.empty());
  // A form posted from another site never logs anyone in (login CSRF).
  r = Send("POST", "/ui/login", "api-key=" + daemon_->api_key(),
           {{"Content-Type", "application/x-www-form-urlencoded"}, {"Origin", "http://evil.example"}});
  EXPECT_EQ(r.status, 403) << r.body;
  EXPECT_TRUE(r.cookies.empty());
  // A forged cookie is no session.
  r = Send("GET", "/v1/sandboxes", "", {{"Cookie", "space_session=" + std::string(64, 'a')}});
  EXPECT_EQ(r.status, 401) << r.body;
  r = Send("GET", "/ui/session");
  EXPECT_EQ(r.status, 401);
}

TEST_F(ConsoleApiTest, SessionCookieNeedsCsrfForChangesAndEndsOnLogout) {
  auto [cookie, csrf] = Login(daemon_->api_key());
  Reply r = Send("GET", "/ui/session", "", {{"Cookie", cookie}});
  ASSERT_EQ(r.status, 200) << r.body;
  auto s = ParseJson(r.body);
  ASSERT_TRUE(s);
  EXPECT_EQ((*s)["csrf"], csrf);
  EXPECT_EQ(r.body.find(daemon_->api_key()), std::string::npos) << "the key went back to the page";
  EXPECT_EQ(Send("GET", "/v1/sandboxes", "", {{"Cookie", cookie}}).status, 200);
  EXPECT_EQ(Send("GET", "/v1/whoami", "", {{"Cookie", cookie}}).status, 200);
  // Changes: no token, a wrong one, then the right one.
  const std::string body = R"({"name":"console-csrf"})";
  r = Send("POST", "/v1/keys", body, {{"Cookie", cookie}, {"Content-Type", "application/json"}});
  EXPECT_EQ(r.status, 403) << r.body;
  r = Send("POST", "/v1/keys", body, {{"Cookie", cookie}, {"Content-Type", "application/json"}, {"X-CSRF-Token", std::string(64, '0')}});
  EXPECT_EQ(r.status, 403) << r.body;
  r = Send("POST", "/v1/keys", body, {{"Cookie", cookie}, {"Content-Type", "application/json"}, {"X-CSRF-Token", csrf}});
  ASSERT_EQ(r.status, 201) << r.body;
  auto created = ParseJson(r.body);
  ASSERT_TRUE(created);
  const std::string other_key = (*created)["key"];

  // A session of a key that is then revoked ends with it.
  auto [cookie2, csrf2] = Login(other_key);
  EXPECT_EQ(Send("GET", "/v1/sandboxes", "", {{"Cookie", cookie2}}).status, 200);
  r = Send("DELETE", "/v1/keys/console-csrf", "", {{"Cookie", cookie}, {"X-CSRF-Token", csrf}});
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Send("GET", "/v1/sandboxes", "", {{"Cookie", cookie2}}).status, 401);

  // Logout needs the token too, then the cookie is worth nothing.
  r = Send("POST", "/ui/logout", "", {{"Cookie", cookie}});
  EXPECT_EQ(r.status, 403) << r.body;
  r = Send("POST", "/ui/logout", "csrf=" + csrf, {{"Cookie", cookie}, {"Content-Type", "application/x-www-form-urlencoded"}});
  EXPECT_EQ(r.status, 303) << r.body;
  EXPECT_EQ(r.location, "/ui/login");
  ASSERT_EQ(r.cookies.size(), 2u);
  EXPECT_NE(r.cookies[0].find("Max-Age=0"), std::string::npos);
  EXPECT_EQ(Send("GET", "/v1/sandboxes", "", {{"Cookie", cookie}}).status, 401);
}

TEST_F(ConsoleApiTest, PagesAreServedWithTheirHeaders) {
  Reply r = Send("GET", "/ui/");
  if (r.status == 404) GTEST_SKIP() << "console not built: " << r.body;
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("<html"), std::string::npos);
  // App routes get the app; missing files are 404; nothing escapes the console's files.
  EXPECT_EQ(Send("GET", "/ui/sandboxes/sb-x/terminal").body, r.body);
  EXPECT_EQ(Send("GET", "/ui/assets/app.js").status, 200);
  EXPECT_EQ(Send("GET", "/ui/assets/nope.js").status, 404);
  EXPECT_EQ(Send("GET", "/ui/../openapi.json").status, 404);
  EXPECT_EQ(Send("GET", "/ui/assets/%2e%2e/%2e%2e/index.html").status, 404);
  EXPECT_EQ(Send("DELETE", "/ui/").status, 405);
}

// Reads an SSE stream until `want` has been seen (or 60 s).
class EventStream {
 public:
  EventStream(uint16_t port, const std::string& auth) : s_(ioc_) {
    s_.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
    http::request<http::empty_body> req{http::verb::get, "/v1/events", 11};
    req.set(http::field::host, "127.0.0.1");
    req.set(http::field::authorization, "Bearer " + auth);
    req.set(http::field::accept, "text/event-stream");
    http::write(s_, req);
    parser_.body_limit(std::numeric_limits<uint64_t>::max());
    s_.expires_after(std::chrono::seconds(30));
    http::read_header(s_, buf_, parser_);
    status = parser_.get().result_int();
    type = std::string(parser_.get()[http::field::content_type]);
  }
  bool WaitFor(const std::string& want) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (seen_.find(want) == std::string::npos) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      char chunk[8192];
      parser_.get().body().data = chunk;
      parser_.get().body().size = sizeof chunk;
      s_.expires_after(std::chrono::seconds(30));
      beast::error_code ec;
      http::read_some(s_, buf_, parser_, ec);
      if (ec == http::error::need_buffer) ec = {};
      if (ec) return false;
      seen_.append(chunk, sizeof chunk - parser_.get().body().size);
    }
    return true;
  }
  const std::string& seen() const { return seen_; }
  int status = 0;
  std::string type;

 private:
  asio::io_context ioc_;
  beast::tcp_stream s_;
  beast::flat_buffer buf_;
  http::response_parser<http::buffer_body> parser_;
  std::string seen_;
};

TEST_F(ConsoleApiTest, EventsTellCreationStatesOperationsAndDeletion) {
  EventStream ev(Port(), daemon_->api_key());
  ASSERT_EQ(ev.status, 200);
  EXPECT_EQ(ev.type, "text/event-stream");
  ASSERT_TRUE(ev.WaitFor("event: snapshot\n")) << ev.seen();
  auto created = c().CreateSandbox({{"template", "base"}, {"metadata", {{"suite", "console-events"}}}});
  ASSERT_TRUE(created) << created.error().message;
  const std::string id = (*created)["sandbox"]["id"];
  const std::string op = (*created)["operation"]["id"];
  EXPECT_TRUE(ev.WaitFor("\"id\":\"" + id + "\"")) << ev.seen();
  EXPECT_TRUE(ev.WaitFor("event: sandbox.created\n")) << ev.seen();
  EXPECT_TRUE(ev.WaitFor("\"to\":\"running\"")) << ev.seen();
  EXPECT_TRUE(ev.WaitFor("\"id\":\"" + op + "\"")) << ev.seen();
  auto del = c().DeleteSandbox(id, std::chrono::seconds(60));
  ASSERT_TRUE(del) << del.error().message;
  EXPECT_TRUE(ev.WaitFor("event: sandbox.deleted\ndata: {\"id\":\"" + id + "\"")) << ev.seen();
  // Only operators: a sandbox token is refused; ?duration= ends the stream by itself.
  Reply r = Send("GET", "/v1/events?duration=300ms", "", {{"Authorization", "Bearer " + daemon_->api_key()}});
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("event: snapshot"), std::string::npos) << r.body;
  EXPECT_EQ(Send("GET", "/v1/events?duration=x", "", {{"Authorization", "Bearer " + daemon_->api_key()}}).status, 400);
  EXPECT_EQ(Send("GET", "/v1/events?duration=1s").status, 401);
}

class Terminal {
 public:
  // protocols: the Sec-WebSocket-Protocol offer; `ok` says whether the handshake succeeded.
  Terminal(uint16_t port, const std::string& target, const std::string& protocols,
           std::vector<std::pair<std::string, std::string>> headers = {})
      : ws_(ioc_) {
    beast::get_lowest_layer(ws_).connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
    beast::get_lowest_layer(ws_).expires_never();
    ws_.set_option(websocket::stream_base::timeout::suggested(beast::role_type::client));
    ws_.set_option(websocket::stream_base::decorator([protocols, headers](websocket::request_type& req) {
      req.set(http::field::sec_websocket_protocol, protocols);
      for (auto& [k, v] : headers) req.set(k, v);
    }));
    websocket::response_type res;
    beast::error_code ec;
    ws_.handshake(res, "127.0.0.1:" + std::to_string(port), target, ec);
    ok = !ec;
    if (ok) subprotocol = std::string(res[http::field::sec_websocket_protocol]);
  }
  // Reads frames until the terminal output holds `want`; control frames go to `controls`.
  bool ReadUntil(const std::string& want) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (output.find(want) == std::string::npos) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      if (!ReadOne()) return false;
    }
    return true;
  }
  bool ReadControl(const std::string& type, Json* out) {
    for (int i = 0; i < 1000; ++i) {
      for (auto& c : controls) {
        if (c["type"] == type) {
          *out = c;
          return true;
        }
      }
      if (!ReadOne()) return false;
    }
    return false;
  }
  void SendBytes(const std::string& b) {
    ws_.binary(true);
    ws_.write(asio::buffer(b));
  }
  void SendControl(const Json& j) {
    ws_.text(true);
    ws_.write(asio::buffer(j.dump()));
  }
  void Drop() { beast::get_lowest_layer(ws_).socket().close(); }
  bool ok = false;
  std::string subprotocol, output;
  std::vector<Json> controls;

 private:
  bool ReadOne() {
    beast::flat_buffer b;
    beast::error_code ec;
    ws_.read(b, ec);
    if (ec) return false;
    std::string data = beast::buffers_to_string(b.data());
    if (ws_.got_text()) {
      auto j = ParseJson(data);
      if (j) controls.push_back(*j);
    } else {
      output += data;
    }
    return true;
  }
  asio::io_context ioc_;
  websocket::stream<beast::tcp_stream> ws_;
};

TEST_F(ConsoleApiTest, TerminalWebSocket) {
  auto sb = c().CreateSandboxAndWait({{"template", "base"}, {"metadata", {{"suite", "console-terminal"}}}});
  ASSERT_TRUE(sb) << sb.error().message;
  const std::string id = (*sb)["id"];
  auto cmd = c().StartCommand(id, {{"cmd", "exec /bin/sh"}, {"pty", {{"cols", 80}, {"rows", 24}}}});
  ASSERT_TRUE(cmd) << cmd.error().message;
  const std::string cid = (*cmd)["id"];
  const std::string path = "/v1/sandboxes/" + id + "/commands/" + cid + "/terminal";
  const std::string auth = "space-terminal.v1, space-auth." + daemon_->api_key();

  // Refusals: no upgrade, no subprotocol, no or a wrong credential, a bad offset.
  EXPECT_EQ(Send("GET", path, "", {{"Authorization", "Bearer " + daemon_->api_key()}}).status, 426);
  // (A refused handshake, as raw HTTP: its status is what a browser would see.)
  auto upgrade = [&](const std::string& target, const std::string& protocols,
                     std::vector<std::pair<std::string, std::string>> extra = {}) {
    extra.insert(extra.end(), {{"Connection", "Upgrade"}, {"Upgrade", "websocket"}, {"Sec-WebSocket-Version", "13"},
                               {"Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="}, {"Sec-WebSocket-Protocol", protocols}});
    return Send("GET", target, "", extra).status;
  };
  EXPECT_EQ(upgrade(path, "space-auth." + daemon_->api_key()), 400);
  EXPECT_EQ(upgrade(path, "space-terminal.v1"), 401);
  EXPECT_EQ(upgrade(path, "space-terminal.v1, space-auth.sk-wrong"), 401);
  EXPECT_EQ(upgrade(path + "?offset=999999", auth), 400);
  EXPECT_FALSE(Terminal(Port(), path, "space-terminal.v1").ok);

  uint64_t got = 0;
  {
    Terminal t(Port(), path, auth);
    ASSERT_TRUE(t.ok);
    EXPECT_EQ(t.subprotocol, "space-terminal.v1");
    Json ready;
    ASSERT_TRUE(t.ReadControl("ready", &ready));
    EXPECT_EQ(ready["offset"], 0);
    EXPECT_EQ(ready["pty"]["cols"], 80);
    t.SendBytes("echo first-$((40+2))\n");
    ASSERT_TRUE(t.ReadUntil("first-42")) << t.output;
    got = t.output.size();
    t.Drop();  // as a network failure would: the shell goes on
  }
  {
    // Back from where it was: nothing shown twice, and the same shell.
    Terminal t(Port(), path + "?offset=" + std::to_string(got), auth);
    ASSERT_TRUE(t.ok);
    Json ready;
    ASSERT_TRUE(t.ReadControl("ready", &ready));
    EXPECT_EQ(ready["offset"], got);
    t.SendBytes("echo second-$((1+1))\n");
    ASSERT_TRUE(t.ReadUntil("second-2")) << t.output;
    EXPECT_EQ(t.output.find("first-42"), std::string::npos) << t.output;
    t.SendControl({{"v", 1}, {"type", "resize"}, {"cols", 101}, {"rows", 37}});
    t.SendControl({{"v", 1}, {"type", "keepalive"}});
    t.SendBytes("stty size\n");
    ASSERT_TRUE(t.ReadUntil("37 101")) << t.output;
    t.SendControl({{"v", 1}, {"type", "resize"}, {"cols", 0}, {"rows", 37}});
    Json err;
    ASSERT_TRUE(t.ReadControl("error", &err));
    t.Drop();
  }
  {
    // From 0, everything the terminal ever printed; then "close" hangs the shell up.
    Terminal t(Port(), path, auth);
    ASSERT_TRUE(t.ok);
    ASSERT_TRUE(t.ReadUntil("second-2")) << t.output;
    EXPECT_NE(t.output.find("first-42"), std::string::npos);
    t.SendControl({{"v", 1}, {"type", "close"}});
    Json exit;
    ASSERT_TRUE(t.ReadControl("exit", &exit)) << t.output;
    EXPECT_EQ(exit["state"], "exited");
  }
  auto info = c().GetCommand(id, cid);
  ASSERT_TRUE(info);
  EXPECT_EQ((*info)["state"], "exited");

  // The console's session works for the socket too, from its own origin only.
  Reply login = Send("POST", "/ui/login", "api-key=" + daemon_->api_key(), {{"Content-Type", "application/x-www-form-urlencoded"}});
  std::string cookie;
  for (const auto& ck : login.cookies) {
    if (ck.rfind("space_session=", 0) == 0) cookie = ck.substr(0, ck.find(';'));
  }
  ASSERT_FALSE(cookie.empty());
  auto cmd2 = c().StartCommand(id, {{"cmd", "echo via-cookie; sleep 1"}, {"pty", {{"cols", 80}, {"rows", 24}}}});
  ASSERT_TRUE(cmd2);
  const std::string path2 = "/v1/sandboxes/" + id + "/commands/" + std::string((*cmd2)["id"]) + "/terminal";
  EXPECT_EQ(upgrade(path2, "space-terminal.v1", {{"Cookie", cookie}, {"Origin", "http://evil.example"}}), 403);
  EXPECT_EQ(upgrade(path2, "space-terminal.v1", {{"Cookie", cookie}}), 403);  // no Origin at all
  Terminal t(Port(), path2, "space-terminal.v1", {{"Cookie", cookie}, {"Origin", "http://" + Host()}});
  ASSERT_TRUE(t.ok);
  ASSERT_TRUE(t.ReadUntil("via-cookie"));
  Json exit;
  ASSERT_TRUE(t.ReadControl("exit", &exit));
  EXPECT_EQ(exit["exit_code"], 0);
  (void)c().DeleteSandbox(id, std::chrono::seconds(60));
}

}  // namespace
}  // namespace space::testing
