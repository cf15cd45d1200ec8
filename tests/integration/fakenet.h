// The fake internet of the networking tests (docs/networking.md): a network namespace the
// test makes, holding TEST-NET addresses (203.0.113.0/24 behind 198.51.100.0/24), dnsmasq as
// the upstream resolver, and HTTP, TLS, banner and UDP servers (fakenet_server.py, run with
// /usr/bin/python3) that log every connection, so "blocked" means that no byte reached the
// server. Everything it makes is removed by its destructor, failure or not.
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "net/net.h"
#include "sys/sys.h"
#include "tests/integration/harness.h"

namespace space::testing {

using namespace std::chrono_literals;

inline std::string Sh(const std::string& cmd, int* code = nullptr) {
  sys::SpawnOptions so;
  so.argv = {"/bin/sh", "-c", cmd};
  auto r = sys::Run(so, 60000);
  if (!r) {
    if (code) *code = -1;
    return r.error().message;
  }
  if (code) *code = r->exit_code;
  return r->out + r->err;
}

// A service bound to the sandbox's own loopback answers through the sandbox's port URL
// `base` (…/ports/), again and again, with bodies larger than any relay buffer. For
// microVM and gVisor sandboxes, whose loopback the host cannot enter, this goes through
// the agent's relay (docs/ports.md).
inline void ExpectLoopbackServiceByUrl(client::Client& c, const std::string& id,
                                       const std::string& base, const std::string& auth) {
  auto lo = c.StartCommand(id, {{"cmd", "mkdir -p /tmp/lo && echo hello-from-loopback > /tmp/lo/index.html && "
                                        "head -c 300000 /dev/zero | tr '\\0' x > /tmp/lo/big && "
                                        "exec httpd -f -p 127.0.0.1:8081 -h /tmp/lo"}});
  ASSERT_TRUE(lo) << lo.error().message;
  std::string out;
  for (int i = 0; i < 50; ++i) {
    out = Sh("curl -sS --max-time 5" + auth + base + "8081/index.html 2>&1");
    if (out.find("hello-from-loopback") != std::string::npos) break;
    std::this_thread::sleep_for(200ms);
  }
  EXPECT_EQ(out, "hello-from-loopback\n");
  for (int i = 0; i < 3; ++i) {
    out = Sh("curl -sS --max-time 20" + auth + base + "8081/big 2>&1 | wc -c");
    EXPECT_EQ(out, "300000\n") << i;
  }
}

inline bool Have(const char* tool) { return Sh(std::string("command -v ") + tool + " >/dev/null 2>&1 && echo y") == "y\n"; }

// The fake internet. Everything it makes is removed by the destructor, failure or not.
class FakeNet {
 public:
  // Test binaries of several builds on one host would share the fake internet's addresses
  // and route: one at a time, by a lock held for the FakeNet's life.
  explicit FakeNet(const std::string& dir) : dir_(dir) {
    lock_fd_ = ::open("/run/lock/space-fakenet.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lock_fd_ >= 0) (void)::flock(lock_fd_, LOCK_EX);
    unsigned r = static_cast<unsigned>(::getpid()) & 0xffff;
    char buf[16];
    std::snprintf(buf, sizeof buf, "%04x", r);
    ns_ = std::string("fakenet-") + buf;
    host_if_ = std::string("fkh") + buf;
  }
  ~FakeNet() {
    servers_.reset();
    dnsmasq_.reset();
    Sh(RouteScript() + " del 198.51.100.2; ip link del " + host_if_ +
       " 2>/dev/null; ip netns del " + ns_ + " 2>/dev/null");
    if (lock_fd_ >= 0) ::close(lock_fd_);
  }

  static std::string RouteScript() {
    return std::string("sh ") + SPACE_SOURCE_DIR + "/tests/integration/fakenet_route.sh";
  }

  bool Start(std::string* why) {
    int code = 0;
    std::string out = Sh(
        "set -e; ip netns add " + ns_ + "; ip link add " + host_if_ + " type veth peer name eth0 netns " + ns_ +
            "; ip addr add 198.51.100.1/24 dev " + host_if_ + "; ip link set " + host_if_ + " up" +
            "; ip -n " + ns_ + " link set lo up; ip -n " + ns_ + " link set eth0 up" +
            "; ip -n " + ns_ + " addr add 198.51.100.2/24 dev eth0; ip -n " + ns_ +
            " addr add 198.51.100.53/24 dev eth0" + "; ip -n " + ns_ + " addr add 203.0.113.10/32 dev lo" +
            "; ip -n " + ns_ + " addr add 203.0.113.66/32 dev lo" + "; ip -n " + ns_ +
            " route add default via 198.51.100.1" + "; " + RouteScript() + " add 198.51.100.2",
        &code);
    if (code != 0) {
      *why = "fake internet: " + out;
      return false;
    }
    // A test root CA and a server certificate for the fake hosts.
    out = Sh("set -e; cd " + dir_ +
                 "; openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 "
                 "-subj /CN=fakenet-root -keyout ca.key -out ca.pem 2>/dev/null"
                 "; openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=api.example.test "
                 "-keyout srv.key -out srv.csr 2>/dev/null"
                 "; printf 'subjectAltName=DNS:api.example.test,DNS:evil.example.test,DNS:other.example.test\\n' > ext"
                 "; openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 "
                 "-extfile ext -out srv.pem 2>/dev/null",
             &code);
    if (code != 0) {
      *why = "certificates: " + out;
      return false;
    }
    std::string log = dir_ + "/dnsmasq.log";
    auto dm = sys::Spawn({.argv = {"ip", "netns", "exec", ns_, "dnsmasq", "--keep-in-foreground",
                                   "-C", "/dev/null", "--no-resolv", "--no-hosts", "--user=root",
                                   "--pid-file=", "--bind-interfaces",
                                   "--listen-address=198.51.100.53", "--port=53",
                                   "--address=/api.example.test/203.0.113.10",
                                   "--address=/evil.example.test/203.0.113.66",
                                   "--address=/other.example.test/203.0.113.66",
                                   "--address=/rebind.example.test/10.0.0.5", "--log-queries",
                                   "--log-facility=" + log},
                          .die_with_parent = true});
    if (!dm) {
      *why = "dnsmasq: " + dm.error().message;
      return false;
    }
    dnsmasq_ = std::make_unique<sys::ChildProcess>(std::move(*dm));
    std::string ready = dir_ + "/servers.ready";
    std::string slog = dir_ + "/servers.log";
    std::string cert = dir_ + "/srv.pem:" + dir_ + "/srv.key";
    auto srv = sys::Spawn(
        {.argv = {"ip", "netns", "exec", ns_, "/usr/bin/python3", std::string(SPACE_SOURCE_DIR) + "/tests/integration/fakenet_server.py",
                  "--log", slog, "--ready", ready, "--http", "203.0.113.10:80", "--http", "203.0.113.66:80",
                  "--https", "203.0.113.10:443:" + cert, "--https", "203.0.113.66:443:" + cert,
                  "--banner", "203.0.113.10:2222", "--udp", "203.0.113.10:7", "--udp", "203.0.113.66:7"},
         .die_with_parent = true});
    if (!srv) {
      *why = "servers: " + srv.error().message;
      return false;
    }
    servers_ = std::make_unique<sys::ChildProcess>(std::move(*srv));
    for (int i = 0; i < 200 && !(sys::Exists(ready) && sys::Exists(log)); ++i) std::this_thread::sleep_for(25ms);
    if (!sys::Exists(ready)) {
      *why = "servers did not start";
      return false;
    }
    return true;
  }

  std::string ServerLog() const {
    auto l = sys::ReadFile(dir_ + "/servers.log");
    return l ? *l : "";
  }
  std::string DnsLog() const {
    auto l = sys::ReadFile(dir_ + "/dnsmasq.log");
    return l ? *l : "";
  }
  // How many log lines name `listen` ("203.0.113.66:80") with the given kind.
  int Count(const std::string& listen, const std::string& kind = "connect") const {
    std::istringstream in(ServerLog());
    std::string line;
    int n = 0;
    while (std::getline(in, line)) {
      if (line.find("\"listen\": \"" + listen + "\"") != std::string::npos &&
          line.find("\"kind\": \"" + kind + "\"") != std::string::npos)
        ++n;
    }
    return n;
  }
  std::string ca() const { return dir_ + "/ca.pem"; }

 private:
  std::string dir_, ns_, host_if_;
  int lock_fd_ = -1;
  std::unique_ptr<sys::ChildProcess> dnsmasq_, servers_;
};

// Starts a networking suite: the fake internet in a new temp dir, then a daemon using it as
// its internet (`--dns-upstream` its dnsmasq, `--egress-ca-file` its CA) with `extra`
// arguments. "" on success, else what failed.
inline std::string StartNetworkSuite(std::vector<std::string> extra, Daemon*& daemon, FakeNet*& net,
                                     sys::TempDir*& tmp) {
  auto t = sys::TempDir::Create("/tmp", "space-fakenet-");
  if (!t) return t.error().message;
  tmp = new sys::TempDir(std::move(*t));
  net = new FakeNet(tmp->path());
  std::string why;
  if (!net->Start(&why)) return why;
  std::vector<std::string> args = {"--dns-upstream", "198.51.100.53", "--egress-ca-file", net->ca()};
  args.insert(args.end(), extra.begin(), extra.end());
  daemon = new Daemon(args);
  return daemon->Start() ? "" : "spaced did not start";
}

// Ends a networking suite: its daemon, then whatever of its network namespaces and table it
// left (a test's failure shows it), then the fake internet and its directory.
inline void StopNetworkSuite(Daemon*& daemon, FakeNet*& net, sys::TempDir*& tmp) {
  if (daemon) {
    auto real = sys::RealPath(daemon->data_dir());
    std::string tag = net::TagForDataDir(real ? *real : daemon->data_dir());
    delete daemon;
    daemon = nullptr;
    Sh("for n in $(ip netns list | awk '{print $1}' | grep '^space-" + tag + "-'); do ip netns del $n; done; "
       "nft delete table inet space_" + tag + " 2>/dev/null");
  }
  delete net;
  net = nullptr;
  delete tmp;
  tmp = nullptr;
}

}  // namespace space::testing
