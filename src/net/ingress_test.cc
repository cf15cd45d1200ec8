// net/ingress: Host parsing, and a socket made inside another network namespace really
// lives there (it reaches a listener on that namespace's 127.0.0.1, not the host's).
#include "net/ingress.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <cstring>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

namespace space::net {
namespace {

TEST(IngressTest, ParsePort) {
  EXPECT_EQ(*ParsePort("1"), 1);
  EXPECT_EQ(*ParsePort("8080"), 8080);
  EXPECT_EQ(*ParsePort("65535"), 65535);
  for (const char* bad : {"", "0", "65536", "99999", "abc", "-1", "80a", "123456", " 80", "+80"}) {
    auto p = ParsePort(bad);
    ASSERT_FALSE(p) << bad;
    EXPECT_EQ(p.error().code, Errc::kInvalidArgument);
    EXPECT_NE(p.error().message.find("1..65535"), std::string::npos);
  }
}

TEST(IngressTest, ParsePortHost) {
  auto h = ParsePortHost("8080-sb-abc.localhost:7070", "localhost");
  ASSERT_TRUE(h && *h);
  EXPECT_EQ((*h)->port, 8080);
  EXPECT_EQ((*h)->sandbox_id, "sb-abc");
  h = ParsePortHost("3000-SB-ABC.Example.TEST.", "example.test");  // case, trailing dot
  ASSERT_TRUE(h && *h);
  EXPECT_EQ((*h)->port, 3000);
  EXPECT_EQ((*h)->sandbox_id, "sb-abc");
  h = ParsePortHost("80-sb-x.localhost", "localhost");  // no :port
  ASSERT_TRUE(h && *h);
  // Not for a sandbox: the API.
  for (const char* api : {"localhost:7070", "127.0.0.1:7070", "localhost", "[::1]:7070",
                          "evil-localhost:7070", "8080-sb-x.localhost.evil.test", ""}) {
    auto r = ParsePortHost(api, "localhost");
    ASSERT_TRUE(r) << api;
    EXPECT_FALSE(*r) << api;
  }
  // Under the domain but malformed: a clear error.
  for (const char* bad : {"0-sb-x.localhost", "65536-sb-x.localhost", "abc-sb-x.localhost",
                          "sb-x.localhost", "8080-.localhost", "8080.localhost",
                          "a.8080-sb-x.localhost"}) {
    auto r = ParsePortHost(bad, "localhost");
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().code, Errc::kInvalidArgument) << bad;
  }
  EXPECT_EQ(PortHostName(8080, "sb-x", "localhost", 7070), "8080-sb-x.localhost:7070");
  EXPECT_EQ(PortHostName(8080, "sb-x", "sbx.example.test", 80), "8080-sb-x.sbx.example.test");
  // https: 443 is the default port, 80 is not.
  EXPECT_EQ(PortHostName(8080, "sb-x", "sbx.example.test", 443, 443), "8080-sb-x.sbx.example.test");
  EXPECT_EQ(PortHostName(8080, "sb-x", "sbx.example.test", 80, 443), "8080-sb-x.sbx.example.test:80");
}

TEST(IngressTest, StripQueryParam) {
  std::string v;
  EXPECT_EQ(StripQueryParam("/a/b?space_traffic_token=tt1.x.y%2Ez&q=1", kTrafficQueryParam, &v), "/a/b?q=1");
  EXPECT_EQ(v, "tt1.x.y.z");
  v.clear();
  EXPECT_EQ(StripQueryParam("/?x=%20&space_traffic_token=t&y", kTrafficQueryParam, &v), "/?x=%20&y");
  EXPECT_EQ(v, "t");
  v.clear();
  EXPECT_EQ(StripQueryParam("/p?space_traffic_token=t", kTrafficQueryParam, &v), "/p");
  EXPECT_EQ(StripQueryParam("/p", kTrafficQueryParam, &v), "/p");
  EXPECT_EQ(StripQueryParam("/p?a=1", kTrafficQueryParam, &v), "/p?a=1");
  // Never a redirect to another host.
  EXPECT_EQ(StripQueryParam("//evil.test/x?space_traffic_token=t", kTrafficQueryParam, &v), "/evil.test/x");
  EXPECT_EQ(StripQueryParam("http://evil.test/x?a=b", kTrafficQueryParam, &v), "/x?a=b");
  EXPECT_EQ(StripQueryParam("http://evil.test", kTrafficQueryParam, &v), "/");
  EXPECT_EQ(StripQueryParam("", kTrafficQueryParam, &v), "/");
  EXPECT_EQ(StripQueryParam("*", kTrafficQueryParam, &v), "/*");
}

TEST(IngressTest, StripCookie) {
  std::string v;
  EXPECT_EQ(StripCookie("a=1; space_traffic=tt1.x; b=2", kTrafficCookie, &v), "a=1; b=2");
  EXPECT_EQ(v, "tt1.x");
  v.clear();
  EXPECT_EQ(StripCookie("space_traffic=\"q\"", kTrafficCookie, &v), "");
  EXPECT_EQ(v, "q");
  v.clear();
  EXPECT_EQ(StripCookie("space_traffic_other=1;x=2", kTrafficCookie, &v), "space_traffic_other=1; x=2");
  EXPECT_EQ(v, "");
}

TEST(IngressTest, OwnNamespaceIsRefused) {
  auto ns = OpenNetNamespace("/proc/self/ns/net");
  ASSERT_FALSE(ns);
  EXPECT_EQ(ns.error().code, Errc::kPermissionDenied);
  EXPECT_FALSE(OpenNetNamespace("/nonexistent/ns/net"));
}

// A child in a fresh network namespace listens on its 127.0.0.1; a socket made in that
// namespace connects to it, and one made in ours does not.
TEST(IngressTest, SocketLivesInTheOtherNamespace) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (unshare CLONE_NEWNET)";
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (::unshare(CLONE_NEWNET) != 0) _exit(1);
    // A new namespace's lo is down: bring it up.
    int s = ::socket(AF_INET, SOCK_DGRAM, 0);
    ifreq ifr{};
    std::strcpy(ifr.ifr_name, "lo");
    ::ioctl(s, SIOCGIFFLAGS, &ifr);
    ifr.ifr_flags |= IFF_UP;
    if (::ioctl(s, SIOCSIFFLAGS, &ifr) != 0) _exit(3);
    int l = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(47321);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(l, 4) != 0) _exit(2);
    (void)!::write(ready[1], "x", 1);
    int c = ::accept(l, nullptr, nullptr);
    (void)!::write(c, "hi", 2);
    ::sleep(1);
    _exit(0);
  }
  ::close(ready[1]);
  char b;
  ASSERT_EQ(::read(ready[0], &b, 1), 1);
  ::close(ready[0]);

  auto ns = OpenNetNamespace("/proc/" + std::to_string(child) + "/ns/net");
  ASSERT_TRUE(ns) << ns.error().message;
  EXPECT_TRUE(SameNamespace(ns->get(), "/proc/" + std::to_string(child) + "/ns/net"));
  EXPECT_FALSE(SameNamespace(ns->get(), "/proc/self/ns/net"));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(47321);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  auto connect = [&](int fd) {
    int r = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    if (r != 0 && errno != EINPROGRESS) return false;
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, 5000) != 1) return false;
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    return err == 0;
  };
  // Ours: nothing listens on the host's 127.0.0.1:47321 (the listener is in the child's ns).
  int host = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  EXPECT_FALSE(connect(host));
  ::close(host);
  auto inside = SocketInNamespace(ns->get(), AF_INET);
  ASSERT_TRUE(inside) << inside.error().message;
  ASSERT_TRUE(connect(inside->get()));
  pollfd p{inside->get(), POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 5000), 1);
  char buf[4] = {};
  EXPECT_EQ(::read(inside->get(), buf, sizeof buf), 2);
  EXPECT_STREQ(buf, "hi");
  int st;
  ::waitpid(child, &st, 0);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

}  // namespace
}  // namespace space::net
