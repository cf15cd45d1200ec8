// Ports as URLs (docs/ports.md) against a real spaced and real sandboxes: busybox httpd bound
// to the sandbox's own 127.0.0.1, shell servers under busybox nc (an echo of the request, a
// chunked stream, a raw tunnel after 101), all reached through spaced's port with
// Host {port}-{id}.localhost. Requests are raw HTTP/1.1 over loopback, so every byte that
// spaced sends back is checked as it is.
#include "auth/auth.h"
#include "tests/integration/ports_fixture.h"

namespace space::testing {
namespace {

using namespace std::chrono_literals;

class PortsTest : public SharedDaemonTest<PortsTest> {
 protected:
  static void SetUpTestSuite() {
    SharedDaemonTest<PortsTest>::SetUpTestSuite();
    if (!daemon_) return;
    std::string url = daemon_->url();
    port_ = std::atoi(url.substr(url.rfind(':') + 1).c_str());
    private_ = StartSandbox(Json::object());
    public_ = StartSandbox(Json{{"network", {{"public_traffic", true}}}});
  }

  static std::string StartSandbox(const Json& body) { return StartPortServers(daemon_->client(), body); }

  // One request (the head as given, CRLF-terminated lines) on a fresh connection, read
  // until spaced closes it.
  static Response Request(const std::string& head_lines, const std::string& body = "") {
    int fd = Dial(port_);
    if (fd < 0) return {};
    std::string req = head_lines + "Connection: close\r\n";
    if (!body.empty()) req += "Content-Length: " + std::to_string(body.size()) + "\r\n";
    req += "\r\n" + body;
    (void)sys::WriteAll(fd, req);
    std::string raw;
    for (auto deadline = std::chrono::steady_clock::now() + 20s; std::chrono::steady_clock::now() < deadline;) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 1000) != 1) continue;
      char buf[65536];
      ssize_t n = ::read(fd, buf, sizeof buf);
      if (n <= 0) break;
      raw.append(buf, static_cast<size_t>(n));
    }
    ::close(fd);
    return Parse(raw);
  }

  static std::string HostOf(int port, const std::string& id) {
    return std::to_string(port) + "-" + id + ".localhost:" + std::to_string(port_);
  }
  static Response Get(const std::string& host, const std::string& extra = "",
                      const std::string& target = "/") {
    return Request("GET " + target + " HTTP/1.1\r\nHost: " + host + "\r\n" + extra);
  }
  // A signed URL's token for `port` of `id`.
  std::string UrlToken(const std::string& id, int port, int64_t ttl = 0) {
    auto u = c().PortUrl(id, std::to_string(port), ttl);
    EXPECT_TRUE(u) << (u ? "" : u.error().message);
    return u ? JsonStringOr(*u, "token", "") : "";
  }

  static inline int port_ = 0;
  static inline std::string private_, public_;
};

TEST_F(PortsTest, NoCredentialIs401AndWrongOnesAre403) {
  Response r = Get(HostOf(8080, private_));
  EXPECT_EQ(r.status, 401) << r.head;
  EXPECT_NE(r.body.find("needs a traffic credential"), std::string::npos) << r.body;
  EXPECT_EQ(r.body.find("hello from the sandbox"), std::string::npos);

  // Garbage, the operator API key, a sandbox API token, a token for another port, another
  // sandbox's token: all refused, none reaches the service.
  std::string other_port = UrlToken(private_, 9999);
  std::string other_sb = UrlToken(public_, 8080);
  auto api_token = c().MintToken(private_);
  ASSERT_TRUE(api_token);
  for (const std::string& bad : {std::string("tt1.nope.nope.nope"), daemon_->api_key(),
                                 JsonStringOr(*api_token, "token", ""), other_port, other_sb}) {
    Response w = Get(HostOf(8080, private_), "Space-Traffic-Token: " + bad + "\r\n");
    EXPECT_EQ(w.status, 403) << bad << "\n" << w.head;
    EXPECT_EQ(w.body.find("hello from the sandbox"), std::string::npos);
    // Nor as a cookie (a sandbox page cannot turn spaced's key into traffic access).
    Response k = Get(HostOf(8080, private_), "Cookie: space_traffic=" + bad + "\r\n");
    EXPECT_EQ(k.status, 403) << bad;
  }
  // Nor as the API's own Bearer header: traffic auth is not API auth.
  Response b = Get(HostOf(8080, private_), "Authorization: Bearer " + daemon_->api_key() + "\r\n");
  EXPECT_EQ(b.status, 401) << b.head;
}

TEST_F(PortsTest, TokenHeaderReachesAServiceBoundToTheSandboxLoopback) {
  // httpd listens on the sandbox's 127.0.0.1 only.
  std::string tok = UrlToken(private_, 8080);
  Response r = Get(HostOf(8080, private_), "Space-Traffic-Token: " + tok + "\r\n");
  EXPECT_EQ(r.status, 200) << r.head << r.body;
  EXPECT_EQ(r.body, "hello from the sandbox\n");
  // E2B's header name works too; HEAD gets the head only.
  Response e = Request("HEAD / HTTP/1.1\r\nHost: " + HostOf(8080, private_) +
                       "\r\ne2b-traffic-access-token: " + tok + "\r\n");
  EXPECT_EQ(e.status, 200) << e.head;
  EXPECT_EQ(e.body, "");
}

TEST_F(PortsTest, CredentialsAreStrippedBeforeForwarding) {
  std::string tok = UrlToken(private_, 8081);
  Response r = Get(HostOf(8081, private_),
                   "Space-Traffic-Token: " + tok + "\r\nCookie: theirs=1; space_traffic=" + tok +
                       "; also=2\r\nX-Custom: kept\r\n",
                   "/path?a=1&space_traffic_token=" + tok + "&b=2");
  ASSERT_EQ(r.status, 200) << r.head;
  const std::string& seen = r.body;  // the request head as the service got it
  EXPECT_NE(seen.find("GET /path?a=1&b=2 HTTP/1.1"), std::string::npos) << seen;
  EXPECT_EQ(seen.find(tok), std::string::npos) << seen;
  EXPECT_EQ(seen.find("space_traffic"), std::string::npos) << seen;
  EXPECT_NE(seen.find("Cookie: theirs=1; also=2"), std::string::npos) << seen;
  EXPECT_NE(seen.find("X-Custom: kept"), std::string::npos) << seen;
  EXPECT_NE(seen.find("X-Forwarded-For: 127.0.0.1"), std::string::npos) << seen;
  EXPECT_NE(seen.find("Host: " + HostOf(8081, private_)), std::string::npos) << seen;
}

TEST_F(PortsTest, SignedUrlSetsACookieAndTheBareUrlIsRefused) {
  auto u = c().PortUrl(private_, "8080", 600);
  ASSERT_TRUE(u) << u.error().message;
  std::string url = JsonStringOr(*u, "url", "");
  ASSERT_EQ(url.rfind("http://" + HostOf(8080, private_) + "/?space_traffic_token=", 0), 0u) << url;
  std::string target = url.substr(url.find('/', 7));
  std::string bare = target.substr(0, target.find('?'));

  // A browser navigation: 302 to the URL without its query, and the cookie.
  Response nav = Get(HostOf(8080, private_), "Accept: text/html\r\nSec-Fetch-Mode: navigate\r\n", target);
  EXPECT_EQ(nav.status, 302) << nav.head;
  EXPECT_EQ(nav.Header("Location"), "/");
  std::string cookie = nav.Header("Set-Cookie");
  EXPECT_EQ(cookie.rfind("space_traffic=tt1.", 0), 0u) << cookie;
  for (const char* attr : {"Path=/", "HttpOnly", "SameSite=Lax", "Max-Age="})
    EXPECT_NE(cookie.find(attr), std::string::npos) << attr << " in " << cookie;
  EXPECT_EQ(cookie.find("Domain="), std::string::npos) << "host-only: " << cookie;
  std::string pair = cookie.substr(0, cookie.find(';'));

  // The cookie alone opens the page.
  Response withc = Get(HostOf(8080, private_), "Cookie: " + pair + "\r\n", bare);
  EXPECT_EQ(withc.status, 200) << withc.head;
  EXPECT_EQ(withc.body, "hello from the sandbox\n");
  // The same URL without its query, and without the cookie: refused.
  Response none = Get(HostOf(8080, private_), "", bare);
  EXPECT_EQ(none.status, 401) << none.head;
  // curl and other non-browser clients get the page at once from the signed URL.
  Response curl = Get(HostOf(8080, private_), "Accept: */*\r\n", target);
  EXPECT_EQ(curl.status, 200) << curl.head;
  EXPECT_EQ(curl.body, "hello from the sandbox\n");
  EXPECT_EQ(curl.Header("Set-Cookie").rfind("space_traffic=", 0), 0u);
  // A tampered URL is refused.
  Response bad = Get(HostOf(8080, private_), "", target.substr(0, target.size() - 4) + "AAAA");
  EXPECT_EQ(bad.status, 403) << bad.head;
}

TEST_F(PortsTest, ExpiredSignedUrlIsRefused) {
  std::string tok = UrlToken(private_, 8080, 1);
  ASSERT_FALSE(tok.empty());
  std::this_thread::sleep_for(2100ms);
  Response r = Get(HostOf(8080, private_), "", "/?space_traffic_token=" + tok);
  EXPECT_EQ(r.status, 403) << r.head;
  EXPECT_NE(r.body.find("expired"), std::string::npos) << r.body;
  Response k = Get(HostOf(8080, private_), "Cookie: space_traffic=" + tok + "\r\n");
  EXPECT_EQ(k.status, 403);
  // The stale cookie is cleared.
  EXPECT_NE(k.Header("Set-Cookie").find("Max-Age=0"), std::string::npos) << k.head;
}

TEST_F(PortsTest, PublicTrafficNeedsNoCredential) {
  Response r = Get(HostOf(8080, public_));
  EXPECT_EQ(r.status, 200) << r.head;
  EXPECT_EQ(r.body, "hello from the sandbox\n");
  auto sb = c().GetSandbox(public_);
  ASSERT_TRUE(sb);
  EXPECT_EQ((*sb)["network"].value("public_traffic", false), true) << sb->dump();
  // Its signed URL carries no credential.
  auto u = c().PortUrl(public_, "8080");
  ASSERT_TRUE(u);
  EXPECT_EQ(JsonStringOr(*u, "url", ""), "http://" + HostOf(8080, public_) + "/");
}

TEST_F(PortsTest, NoListenerIs502WithAPlainExplanation) {
  Response r = Get(HostOf(9, public_));
  EXPECT_EQ(r.status, 502) << r.head;
  EXPECT_NE(r.Header("Content-Type").find("text/plain"), std::string::npos);
  EXPECT_NE(r.body.find("nothing is listening on port 9 in sandbox " + public_), std::string::npos)
      << r.body;
}

TEST_F(PortsTest, BadHostsAndPortsAreClearErrors) {
  for (const std::string& host : {"0-" + public_ + ".localhost", "65536-" + public_ + ".localhost",
                                  "abc-" + public_ + ".localhost", public_ + ".localhost",
                                  "x.8080-" + public_ + ".localhost"}) {
    Response r = Get(host);
    EXPECT_EQ(r.status, 400) << host << "\n" << r.head;
    EXPECT_FALSE(r.body.empty());
  }
  Response unknown = Get("8080-sb-doesnotexist12345.localhost");
  EXPECT_EQ(unknown.status, 404) << unknown.head;
  EXPECT_NE(unknown.body.find("no sandbox sb-doesnotexist12345"), std::string::npos);
  for (const char* port : {"0", "65536", "abc", "-1"}) {
    auto u = c().PortUrl(public_, port);
    ASSERT_FALSE(u) << port;
    EXPECT_EQ(u.error().code, Errc::kInvalidArgument) << port;
    EXPECT_NE(u.error().message.find("1..65535"), std::string::npos) << u.error().message;
  }
  auto gone = c().PortUrl("sb-doesnotexist12345", "8080");
  ASSERT_FALSE(gone);
  EXPECT_EQ(gone.error().code, Errc::kNotFound);
  // spaced is still fine.
  EXPECT_TRUE(c().Health());
}

TEST_F(PortsTest, SpacedsOwnApiIsNeverReachable) {
  // Port 7070 and spaced's real port, inside the sandbox, are the sandbox's (nothing there):
  // the API key opens nothing, and /healthz and /v1 paths go to the sandbox too.
  for (int port : {7070, port_}) {
    for (const char* path : {"/v1/sandboxes", "/healthz", "/v2/sandboxes"}) {
      Response r = Get(HostOf(port, public_),
                       "Authorization: Bearer " + daemon_->api_key() + "\r\nX-API-KEY: " +
                           daemon_->api_key() + "\r\n",
                       path);
      EXPECT_EQ(r.status, 502) << port << path << "\n" << r.head << r.body;
      EXPECT_EQ(r.body.find(private_), std::string::npos);
      EXPECT_EQ(r.body.find("\"ok\""), std::string::npos);
    }
  }
}

TEST_F(PortsTest, PausedSandboxIsAClearConflict) {
  ASSERT_TRUE(c().TransitionAndWait(public_, client::Transition::kPause));
  Response r = Get(HostOf(8080, public_));
  EXPECT_EQ(r.status, 409) << r.head;
  EXPECT_NE(r.body.find("paused"), std::string::npos) << r.body;
  ASSERT_TRUE(c().TransitionAndWait(public_, client::Transition::kResume));
  Response again = Get(HostOf(8080, public_));
  EXPECT_EQ(again.status, 200) << again.head;
}

// auto_resume: traffic resumes a paused sandbox (its timeout re-armed), several requests at
// once share one resume, an unauthorised request wakes nothing, a suspended one stays asleep.
TEST_F(PortsTest, AutoResumeOnTraffic) {
  std::string id = StartSandbox(Json{{"auto_resume", true}, {"timeout", 600}, {"on_timeout", "pause"}});
  ASSERT_FALSE(id.empty());
  auto sb = c().GetSandbox(id);
  ASSERT_TRUE(sb);
  EXPECT_EQ(sb->value("auto_resume", false), true) << sb->dump();
  std::string token = UrlToken(id, 8080);
  ASSERT_FALSE(token.empty());
  const std::string cred = "e2b-traffic-access-token: " + token + "\r\n";
  ASSERT_TRUE(c().TransitionAndWait(id, client::Transition::kPause));
  // Without a credential: refused, and the sandbox sleeps on.
  EXPECT_EQ(Get(HostOf(8080, id)).status, 401);
  EXPECT_EQ(c().GetSandbox(id)->value("state", ""), "paused");
  // Three requests at once: one resume, three answers.
  std::vector<std::thread> ts;
  std::vector<Response> rs(3);
  for (int i = 0; i < 3; ++i) ts.emplace_back([&, i] { rs[i] = Get(HostOf(8080, id), cred); });
  for (auto& t : ts) t.join();
  for (const Response& r : rs) {
    EXPECT_EQ(r.status, 200) << r.head;
    EXPECT_EQ(r.body, "hello from the sandbox\n");
  }
  sb = c().GetSandbox(id);
  ASSERT_TRUE(sb);
  EXPECT_EQ(sb->value("state", ""), "running");
  EXPECT_FALSE((*sb)["expires_at"].is_null()) << sb->dump();
  auto ops = c().Call("GET", "/v1/operations?limit=50");
  ASSERT_TRUE(ops);
  int resumes = 0;
  for (const Json& op : (*ops)["operations"])
    resumes += op.value("kind", "") == "resume" && op.value("target", "") == id;
  EXPECT_EQ(resumes, 1) << ops->dump();
  // Suspended: no longer in memory, so not woken by traffic.
  ASSERT_TRUE(c().TransitionAndWait(id, client::Transition::kSuspend));
  Response asleep = Get(HostOf(8080, id), cred);
  EXPECT_EQ(asleep.status, 409) << asleep.head;
  EXPECT_EQ(c().GetSandbox(id)->value("state", ""), "suspended");
  // Without auto_resume (the shared public sandbox) a paused one stays a conflict: above.
  auto bad = c().Call("POST", "/v1/sandboxes", Json{{"auto_resume", "yes"}});
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("auto_resume must be true or false"), std::string::npos);
  EXPECT_TRUE(c().DeleteSandboxAndWait(id, 30s));
}

TEST_F(PortsTest, ChunkedResponseStreamsInPieces) {
  int fd = Dial(port_);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(sys::WriteAll(fd, "GET / HTTP/1.1\r\nHost: " + HostOf(8082, public_) +
                                    "\r\nConnection: close\r\n\r\n"));
  auto start = std::chrono::steady_clock::now();
  std::string got;
  while (got.find("piece1") == std::string::npos && std::chrono::steady_clock::now() - start < 10s)
    got += ReadSome(fd, 200);
  auto first = std::chrono::steady_clock::now() - start;
  ASSERT_NE(got.find("piece1"), std::string::npos) << got;
  // piece1 came before the service wrote piece3 (two seconds later).
  EXPECT_LT(first, 1500ms);
  EXPECT_EQ(got.find("piece3"), std::string::npos) << got;
  EXPECT_NE(got.find("Transfer-Encoding: chunked"), std::string::npos) << got;
  while (got.find("0\r\n\r\n") == std::string::npos && std::chrono::steady_clock::now() - start < 10s)
    got += ReadSome(fd, 200);
  EXPECT_NE(got.find("piece3"), std::string::npos) << got;
  EXPECT_GE(std::chrono::steady_clock::now() - start, 1800ms);
  ::close(fd);

  // A body without length (a CGI): relayed as it comes, ended by closing.
  Response slow = Get(HostOf(8080, public_), "", "/cgi-bin/slow");
  EXPECT_EQ(slow.status, 200) << slow.head;
  EXPECT_EQ(slow.body, "one\ntwo\nthree\n");
}

TEST_F(PortsTest, UpgradeBecomesATunnel) {
  std::string tok = UrlToken(private_, 8083);
  int fd = Dial(port_);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(sys::WriteAll(fd, "GET /ws HTTP/1.1\r\nHost: " + HostOf(8083, private_) +
                                    "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                                    "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                                    "Space-Traffic-Token: " + tok + "\r\n\r\n"));
  std::string got;
  for (int i = 0; i < 50 && got.find("\r\n\r\n") == std::string::npos; ++i) got += ReadSome(fd, 200);
  ASSERT_EQ(got.rfind("HTTP/1.1 101", 0), 0u) << got;
  EXPECT_NE(got.find("Upgrade: websocket"), std::string::npos) << got;
  got = got.substr(got.find("\r\n\r\n") + 4);
  // Bytes both ways, several round trips, binary included.
  for (std::string msg : {std::string("ping-1\n"), std::string("\x81\x05hello", 7), std::string(100000, 'x')}) {
    ASSERT_TRUE(sys::WriteAll(fd, msg));
    for (int i = 0; i < 100 && got.size() < msg.size(); ++i) got += ReadSome(fd, 100);
    EXPECT_EQ(got, msg);
    got.clear();
  }
  ::close(fd);
}

TEST_F(PortsTest, ApiPathFormNeedsApiCredentialsAndStripsThem) {
  const std::string path = "/v1/sandboxes/" + private_ + "/ports/8081/deeper/x?q=1";
  Response none = Get("127.0.0.1:" + std::to_string(port_), "", path);
  EXPECT_EQ(none.status, 401) << none.head;
  // A traffic token is no API credential.
  Response traffic = Get("127.0.0.1:" + std::to_string(port_),
                         "Authorization: Bearer " + UrlToken(private_, 8081) + "\r\n", path);
  EXPECT_EQ(traffic.status, 401) << traffic.head;
  Response ok = Get("127.0.0.1:" + std::to_string(port_),
                    "Authorization: Bearer " + daemon_->api_key() + "\r\n", path);
  ASSERT_EQ(ok.status, 200) << ok.head << ok.body;
  EXPECT_NE(ok.body.find("GET /deeper/x?q=1 HTTP/1.1"), std::string::npos) << ok.body;
  EXPECT_EQ(ok.body.find(daemon_->api_key()), std::string::npos) << ok.body;
  EXPECT_EQ(ok.body.find("Authorization"), std::string::npos) << ok.body;
  EXPECT_EQ(ok.Header("Content-Security-Policy"), "sandbox");
  // A sandbox token with the ports scope may; one without it may not.
  auto scoped = c().MintToken(private_, Json{{"scopes", {"ports"}}});
  ASSERT_TRUE(scoped) << scoped.error().message;
  Response t = Get("127.0.0.1:" + std::to_string(port_),
                   "Authorization: Bearer " + JsonStringOr(*scoped, "token", "") + "\r\n", path);
  EXPECT_EQ(t.status, 200) << t.head;
  auto unscoped = c().MintToken(private_, Json{{"scopes", {"files:read"}}});
  ASSERT_TRUE(unscoped);
  Response u = Get("127.0.0.1:" + std::to_string(port_),
                   "Authorization: Bearer " + JsonStringOr(*unscoped, "token", "") + "\r\n", path);
  EXPECT_EQ(u.status, 403) << u.head;
  Response bad = Get("127.0.0.1:" + std::to_string(port_),
                     "Authorization: Bearer " + daemon_->api_key() + "\r\n",
                     "/v1/sandboxes/" + private_ + "/ports/0/");
  EXPECT_EQ(bad.status, 400) << bad.head;
}

TEST_F(PortsTest, E2bTrafficTokenAndDomain) {
  const std::string api = "127.0.0.1:" + std::to_string(port_);
  auto create = [&](const std::string& body) {
    return Request("POST /v2/sandboxes HTTP/1.1\r\nHost: " + api + "\r\nX-API-KEY: " +
                       daemon_->api_key() + "\r\nContent-Type: application/json\r\n",
                   body);
  };
  Response secured = create(R"({"templateID":"base:latest","network":{"allowPublicTraffic":false}})");
  ASSERT_EQ(secured.status, 201) << secured.head << secured.body;
  auto j = ParseJson(secured.body);
  ASSERT_TRUE(j);
  std::string id = JsonStringOr(*j, "sandboxID", "");
  std::string traffic = JsonStringOr(*j, "trafficAccessToken", "");
  EXPECT_EQ(JsonStringOr(*j, "domain", ""), "localhost:" + std::to_string(port_));
  ASSERT_TRUE(auth::LooksLikeTrafficToken(traffic)) << secured.body;
  // getHost(port) = "{port}-{id}.{domain}"; a service started there answers with the token.
  ASSERT_TRUE(c().StartCommand(id, Json{{"argv", {"busybox", "httpd", "-f", "-p", "3000", "-h", "/etc"}}}));
  std::string host = "3000-" + id + "." + JsonStringOr(*j, "domain", "");
  Response r;
  for (int i = 0; i < 50; ++i) {
    r = Get(host, "e2b-traffic-access-token: " + traffic + "\r\n", "/hostname");
    if (r.status == 200) break;
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_EQ(r.status, 200) << r.head << r.body;
  EXPECT_EQ(Get(host, "", "/hostname").status, 401);
  // E2B's default: public, no token.
  Response open = create(R"({"templateID":"base:latest"})");
  ASSERT_EQ(open.status, 201) << open.body;
  auto oj = ParseJson(open.body);
  ASSERT_TRUE(oj);
  EXPECT_TRUE((*oj)["trafficAccessToken"].is_null()) << open.body;
  (void)c().DeleteSandboxAndWait(id, 30s);
  (void)c().DeleteSandboxAndWait(JsonStringOr(*oj, "sandboxID", ""), 30s);
}

TEST_F(PortsTest, CliUrlAndPublicTraffic) {
  auto run = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = {BinDir() + "/space"};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<std::string> env = {"PATH=/usr/bin:/bin", "HOME=/root",
                                    "SPACE_URL=" + daemon_->url(),
                                    "SPACE_API_KEY=" + daemon_->api_key()};
    auto r = sys::Run({.argv = argv, .env = env}, 60000);
    EXPECT_TRUE(r);
    return r ? *r : sys::RunResult{};
  };
  auto u = run({"url", private_, "8080", "--ttl", "120"});
  ASSERT_EQ(u.exit_code, 0) << u.err;
  std::string url = Daemon::Trim(u.out);
  ASSERT_EQ(url.rfind("http://8080-" + private_ + ".localhost:", 0), 0u) << url;
  Response r = Get(HostOf(8080, private_), "", url.substr(url.find('/', 7)));
  EXPECT_EQ(r.status, 200) << r.head;
  // curl itself resolves *.localhost to loopback: the printed URL works as it is.
  if (sys::Exists("/usr/bin/curl")) {
    auto curl = sys::Run({.argv = {"/usr/bin/curl", "-sS", "--max-time", "10", url}}, 20000);
    ASSERT_TRUE(curl);
    EXPECT_EQ(curl->out, "hello from the sandbox\n") << curl->err;
  }
  auto bad = run({"url", private_, "70000"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("1..65535"), std::string::npos) << bad.err;
  auto created = run({"create", "--public-traffic"});
  ASSERT_EQ(created.exit_code, 0) << created.err;
  std::string id = Daemon::Trim(created.out);
  auto sb = c().GetSandbox(id);
  ASSERT_TRUE(sb);
  EXPECT_EQ((*sb)["network"].value("public_traffic", false), true) << sb->dump();
  (void)c().DeleteSandboxAndWait(id, 30s);
}


TEST_F(PortsTest, KeepAliveConnectionIsAuthorisedPerRequest) {
  std::string tok = UrlToken(private_, 8080);
  int fd = Dial(port_);
  ASSERT_GE(fd, 0);
  auto exchange = [&](const std::string& extra) {
    EXPECT_TRUE(sys::WriteAll(fd, "GET / HTTP/1.1\r\nHost: " + HostOf(8080, private_) + "\r\n" + extra + "\r\n"));
    std::string got;
    for (int i = 0; i < 100; ++i) {
      got += ReadSome(fd, 100);
      size_t end = got.find("\r\n\r\n");
      if (end == std::string::npos) continue;
      Response r = Parse(got);
      size_t len = std::strtoull(r.Header("Content-Length").c_str(), nullptr, 10);
      if (r.body.size() >= len) return r;
    }
    return Parse(got);
  };
  Response first = exchange("Space-Traffic-Token: " + tok + "\r\n");
  EXPECT_EQ(first.status, 200) << first.head;
  EXPECT_EQ(first.body, "hello from the sandbox\n");
  EXPECT_EQ(first.Header("Connection"), "") << "kept alive: " << first.head;
  // Same connection, no credential this time: refused, not carried over.
  Response second = exchange("");
  EXPECT_EQ(second.status, 401) << second.head;
  ::close(fd);
}

}  // namespace
}  // namespace space::testing
