// Real etcd members for the cluster tests: n members on free loopback ports, data in a
// temporary directory, SIGKILLed at the end (or by Kill). EtcdTest starts them and opens a
// Store on them.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cluster/store.h"
#include "sys/sys.h"

namespace space::cluster::testing {

using namespace std::chrono_literals;

// n distinct free loopback ports. All n sockets are held open until every port is known: picked
// one at a time, the kernel may hand the same port out twice.
inline std::vector<int> FreePorts(int n) {
  std::vector<sys::UniqueFd> held;
  std::vector<int> ports;
  for (int i = 0; i < n; ++i) {
    sys::UniqueFd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in a = {};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    int port = -1;
    if (::bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
        ::getsockname(s.get(), reinterpret_cast<sockaddr*>(&a), &len) == 0)
      port = ntohs(a.sin_port);
    ports.push_back(port);
    held.push_back(std::move(s));
  }
  return ports;
}

// n etcd members on loopback, one cluster.
class EtcdCluster {
 public:
  bool Start(int n, std::string* why) {
    auto t = sys::TempDir::Create("/tmp", "space-etcd-");
    if (!t) return *why = t.error().message, false;
    tmp_ = std::move(*t);
    std::string initial;
    const std::vector<int> ports = FreePorts(2 * n);
    for (int i = 0; i < n; ++i) {
      clients_.push_back(ports[2 * i]);
      peers_.push_back(ports[2 * i + 1]);
      initial += (i ? "," : "") + Name(i) + "=http://127.0.0.1:" + std::to_string(peers_[i]);
    }
    for (int i = 0; i < n; ++i) {
      const std::string c = "http://127.0.0.1:" + std::to_string(clients_[i]);
      const std::string p = "http://127.0.0.1:" + std::to_string(peers_[i]);
      auto log = sys::UniqueFd(::open((tmp_.path() + "/" + Name(i) + ".log").c_str(),
                                      O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
      auto child = sys::Spawn({.argv = {"etcd", "--name", Name(i), "--data-dir", tmp_.path() + "/" + Name(i),
                                        "--listen-client-urls", c, "--advertise-client-urls", c,
                                        "--listen-peer-urls", p, "--initial-advertise-peer-urls", p,
                                        "--initial-cluster", initial, "--initial-cluster-state", "new",
                                        "--heartbeat-interval", "50", "--election-timeout", "500",
                                        "--logger", "zap", "--log-outputs", "stderr"},
                               .die_with_parent = true,
                               .stdout_fd = log.get(),
                               .stderr_fd = log.get()});
      if (!child) return *why = "etcd: " + child.error().message, false;
      members_.push_back(std::make_unique<sys::ChildProcess>(std::move(*child)));
    }
    // Up when a write through the first member succeeds.
    auto s = OpenEtcd({.endpoints = Endpoints(), .request_timeout_ms = 1000});
    if (!s) return *why = s.error().message, false;
    for (int i = 0; i < 200; ++i) {
      if ((*s)->Put("/probe", "up")) return true;
      std::this_thread::sleep_for(50ms);
    }
    return *why = "etcd did not come up in 10 s", false;
  }
  std::vector<std::string> Endpoints() const {
    std::vector<std::string> e;
    for (int p : clients_) e.push_back("127.0.0.1:" + std::to_string(p));
    return e;
  }
  void Kill(int i) { members_[i].reset(); }

 private:
  static std::string Name(int i) { return "m" + std::to_string(i); }
  sys::TempDir tmp_;
  std::vector<int> clients_, peers_;
  std::vector<std::unique_ptr<sys::ChildProcess>> members_;
};

// Polls `pred` until it holds or `t` has passed; its last answer.
inline bool Eventually(const std::function<bool()>& pred, std::chrono::milliseconds t = 10s) {
  auto end = std::chrono::steady_clock::now() + t;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return pred();
}

// Each test starts its own members; st() is a Store on them.
class EtcdTest : public ::testing::Test {
 protected:
  void Start(int members, int64_t timeout_ms = 5000) {
    if (!sys::Exists("/usr/bin/etcd")) GTEST_SKIP() << "needs etcd (etcd-server; make deps)";
    std::string why;
    ASSERT_TRUE(etcd_.Start(members, &why)) << why;
    auto s = OpenEtcd({.endpoints = etcd_.Endpoints(), .request_timeout_ms = timeout_ms});
    ASSERT_TRUE(s) << s.error().message;
    store_ = std::move(*s);
  }
  Store& st() { return *store_; }
  EtcdCluster etcd_;
  std::unique_ptr<Store> store_;
};

}  // namespace space::cluster::testing
