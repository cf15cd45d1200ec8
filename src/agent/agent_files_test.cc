// The agent's file operations (owners, extended attributes, every op), confinement to its
// root, and forwarding to loopback services (fixture: agent_test_fixture.h).
#include "agent/agent_test_fixture.h"

namespace space::agent::testing {
namespace {

TEST_F(AgentTest, WritesAndMkdirsAsAUserAndNamesOwners) {
  // The sandbox's own account files (inside the root, not the host's).
  ASSERT_EQ(::mkdir((root_ + "/etc").c_str(), 0755), 0);
  ASSERT_TRUE(sys::WriteFileAtomic(root_ + "/etc/passwd",
                                   "root:x:0:0:root:/root:/bin/sh\nuser:x:1234:2345::/home/user:/bin/sh\n"));
  ASSERT_TRUE(sys::WriteFileAtomic(root_ + "/etc/group", "root:x:0:\nusers:x:2345:\n"));
  StartAgent();
  auto c = Connect();
  ASSERT_TRUE(c);
  auto call = [&](Json req, std::string_view body = {}) { return Call(*c, req, body); };
  auto owner = [&](const std::string& p) {
    struct stat st {};
    EXPECT_EQ(::lstat((root_ + p).c_str(), &st), 0) << p;
    return std::make_pair(st.st_uid, st.st_gid);
  };
  using Ids = std::pair<uid_t, gid_t>;

  auto w = call({{"op", "write"}, {"path", "/home/user/d/f.txt"}, {"create_parents", true}, {"user", "user"}},
                "mine");
  ASSERT_EQ(w.json["ok"], true) << w.json.dump();
  EXPECT_EQ(owner("/home/user/d/f.txt"), Ids(1234, 2345));
  EXPECT_EQ(owner("/home/user/d"), Ids(1234, 2345));
  EXPECT_EQ(owner("/home"), Ids(1234, 2345));  // made for this call too
  // A later piece leaves the owner; a write from offset 0 by root takes the file back.
  ASSERT_EQ(::chown((root_ + "/home/user/d/f.txt").c_str(), 0, 0), 0);
  EXPECT_EQ(call({{"op", "write"}, {"path", "/home/user/d/f.txt"}, {"offset", 4}, {"user", "user"}}, "!")
                .json["ok"], true);
  EXPECT_EQ(owner("/home/user/d/f.txt"), Ids(0, 0));
  EXPECT_EQ(call({{"op", "write"}, {"path", "/home/user/d/f.txt"}, {"truncate", true}, {"user", 1234}}, "x")
                .json["ok"], true);
  EXPECT_EQ(owner("/home/user/d/f.txt"), Ids(1234, 2345));
  // Without a user nothing changes hands (existing dirs stay as they are).
  EXPECT_EQ(call({{"op", "write"}, {"path", "/home/user/d/root.txt"}}, "r").json["ok"], true);
  EXPECT_EQ(owner("/home/user/d/root.txt"), Ids(0, 0));

  EXPECT_EQ(call({{"op", "mkdir"}, {"path", "/home/user/m/n"}, {"parents", true}, {"user", "user"}}).json["ok"], true);
  EXPECT_EQ(owner("/home/user/m"), Ids(1234, 2345));
  EXPECT_EQ(owner("/home/user/m/n"), Ids(1234, 2345));
  EXPECT_EQ(call({{"op", "mkdir"}, {"path", "/home/user/m/solo"}, {"user", "user"}}).json["ok"], true);
  EXPECT_EQ(owner("/home/user/m/solo"), Ids(1234, 2345));

  // Entries name their owners from the sandbox's files; unknown ids have no names.
  auto st = call({{"op", "stat"}, {"path", "/home/user/d/f.txt"}});
  EXPECT_EQ(st.json["entry"]["user"], "user") << st.json.dump();
  EXPECT_EQ(st.json["entry"]["group"], "users");
  ASSERT_EQ(::chown((root_ + "/home/user/d/root.txt").c_str(), 4242, 4242), 0);
  auto ls = call({{"op", "list"}, {"path", "/home/user/d"}});
  ASSERT_EQ(ls.json["entries"].size(), 2u) << ls.json.dump();
  for (const Json& e : ls.json["entries"]) {
    if (e["name"] == "root.txt") {
      EXPECT_FALSE(e.contains("user")) << e.dump();
      EXPECT_EQ(e["uid"], 4242);
    } else {
      EXPECT_EQ(e["user"], "user") << e.dump();
    }
  }
  EXPECT_EQ(call({{"op", "stat"}, {"path", "/"}}).json["entry"]["user"], "root");

  // Bad users: unknown names, wrong types; nothing is written.
  EXPECT_EQ(ErrorCode(call({{"op", "write"}, {"path", "/x1"}, {"user", "nobody-here"}}, "x").json), "not_found");
  EXPECT_EQ(ErrorCode(call({{"op", "write"}, {"path", "/x2"}, {"user", true}}, "x").json), "invalid_argument");
  EXPECT_EQ(ErrorCode(call({{"op", "mkdir"}, {"path", "/x3"}, {"user", -5}}).json), "invalid_argument");
  EXPECT_NE(::access((root_ + "/x1").c_str(), F_OK), 0);
  EXPECT_NE(::access((root_ + "/x2").c_str(), F_OK), 0);
  EXPECT_NE(::access((root_ + "/x3").c_str(), F_OK), 0);
}

TEST_F(AgentTest, WritesSetExtendedAttributesAndEntriesShowThem) {
  StartAgent();
  auto c = Connect();
  ASSERT_TRUE(c);
  auto call = [&](Json req, std::string_view body = {}) { return Call(*c, req, body); };
  auto xattr = [&](const std::string& p, const char* name) {
    char buf[256];
    ssize_t n = ::lgetxattr((root_ + p).c_str(), name, buf, sizeof buf);
    return n < 0 ? std::string("<none>") : std::string(buf, static_cast<size_t>(n));
  };
  const Json attrs = {{"user.e2b.author", "mish"}, {"user.e2b.purpose", "upload"}};
  auto w = call({{"op", "write"}, {"path", "/m.txt"}, {"xattr_prefix", "user.e2b."}, {"xattrs", attrs}}, "hi");
  ASSERT_EQ(w.json["ok"], true) << w.json.dump();
  EXPECT_EQ(xattr("/m.txt", "user.e2b.author"), "mish");
  // An attribute of another prefix is left alone by a rewrite; those under it are replaced.
  ASSERT_EQ(::setxattr((root_ + "/m.txt").c_str(), "user.other", "keep", 4, 0), 0);
  auto st = call({{"op", "stat"}, {"path", "/m.txt"}, {"xattr_prefix", "user.e2b."}});
  EXPECT_EQ(st.json["entry"]["xattrs"], attrs) << st.json.dump();
  EXPECT_FALSE(call({{"op", "stat"}, {"path", "/m.txt"}}).json["entry"].contains("xattrs"));
  ASSERT_EQ(call({{"op", "mkdir"}, {"path", "/d"}}).json["ok"], true);
  ASSERT_EQ(call({{"op", "rename"}, {"from", "/m.txt"}, {"to", "/d/m.txt"}}).json["ok"], true);
  auto ls = call({{"op", "list"}, {"path", "/d"}, {"xattr_prefix", "user.e2b."}});
  ASSERT_EQ(ls.json["entries"].size(), 1u) << ls.json.dump();
  EXPECT_EQ(ls.json["entries"][0]["xattrs"], attrs);
  // A later piece (offset > 0) keeps them; a new write from 0 with none clears its prefix.
  EXPECT_EQ(call({{"op", "write"}, {"path", "/d/m.txt"}, {"offset", 2}, {"xattr_prefix", "user.e2b."}}, "!")
                .json["ok"], true);
  EXPECT_EQ(xattr("/d/m.txt", "user.e2b.author"), "mish");
  EXPECT_EQ(call({{"op", "write"}, {"path", "/d/m.txt"}, {"truncate", true}, {"xattr_prefix", "user.e2b."}}, "x")
                .json["ok"], true);
  EXPECT_EQ(xattr("/d/m.txt", "user.e2b.author"), "<none>");
  EXPECT_EQ(xattr("/d/m.txt", "user.other"), "keep");
  EXPECT_FALSE(call({{"op", "stat"}, {"path", "/d/m.txt"}, {"xattr_prefix", "user.e2b."}})
                   .json["entry"].contains("xattrs"));
  // Values that are not text are not shown.
  ASSERT_EQ(::setxattr((root_ + "/d/m.txt").c_str(), "user.e2b.bin", "\x01\x02", 2, 0), 0);
  EXPECT_FALSE(call({{"op", "stat"}, {"path", "/d/m.txt"}, {"xattr_prefix", "user.e2b."}})
                   .json["entry"].contains("xattrs"));

  // Only the user namespace, inside the prefix, bounded; a refused write writes nothing.
  for (const Json& bad : {Json{{"trusted.x", "v"}}, Json{{"security.capability", "v"}},
                          Json{{"user.", "v"}}, Json{{"user.e2b.k", 5}}, Json{{"user.nope", "v"}},
                          Json{{"user.e2b." + std::string(300, 'k'), "v"}},
                          Json{{"user.e2b.k", std::string(5000, 'v')}}, Json("x")}) {
    auto r = call({{"op", "write"}, {"path", "/bad.txt"}, {"xattr_prefix", "user.e2b."}, {"xattrs", bad}}, "x");
    EXPECT_EQ(ErrorCode(r.json), "invalid_argument") << bad.dump();
  }
  EXPECT_EQ(ErrorCode(call({{"op", "stat"}, {"path", "/d"}, {"xattr_prefix", "trusted."}}).json), "invalid_argument");
  EXPECT_EQ(ErrorCode(call({{"op", "list"}, {"path", "/d"}, {"xattr_prefix", 7}}).json), "invalid_argument");
  EXPECT_NE(::access((root_ + "/bad.txt").c_str(), F_OK), 0);

  // A symlink's entry says where it leads, resolved inside the root, and to what.
  ASSERT_EQ(::symlink("m.txt", (root_ + "/d/link").c_str()), 0);
  ASSERT_EQ(::symlink("/d", (root_ + "/dirlink").c_str()), 0);
  ASSERT_EQ(::symlink("/nowhere", (root_ + "/dangling").c_str()), 0);
  auto l = call({{"op", "stat"}, {"path", "/d/link"}}).json["entry"];
  EXPECT_EQ(l["type"], "symlink") << l.dump();
  EXPECT_EQ(l["link_target"], "m.txt");
  EXPECT_EQ(l["target_path"], "/d/m.txt");
  EXPECT_EQ(l["target_type"], "file");
  l = call({{"op", "stat"}, {"path", "/dirlink"}}).json["entry"];
  EXPECT_EQ(l["target_path"], "/d") << l.dump();
  EXPECT_EQ(l["target_type"], "dir");
  l = call({{"op", "stat"}, {"path", "/dangling"}}).json["entry"];
  EXPECT_FALSE(l.contains("target_path")) << l.dump();
}

TEST_F(AgentTest, FileOpsRoundTrip) {
  StartAgent();
  auto c = Connect();
  ASSERT_TRUE(c);
  auto call = [&](Json req, std::string_view body = {}) { return Call(*c, req, body); };

  auto w = call({{"op", "write"}, {"path", "/a/b/c.txt"}, {"create_parents", true}, {"mode", 0600}},
                "hello world");
  ASSERT_EQ(w.json["ok"], true) << w.json.dump();
  EXPECT_EQ(w.json["size"], 11);
  EXPECT_EQ(ReadText(root_ + "/a/b/c.txt"), "hello world");
  struct stat st;
  ASSERT_EQ(::stat((root_ + "/a/b/c.txt").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  auto rd = call({{"op", "read"}, {"path", "/a/b/c.txt"}, {"offset", 6}, {"length", 3}});
  EXPECT_EQ(rd.body, "wor");
  EXPECT_EQ(rd.json["size"], 11);
  EXPECT_EQ(rd.json["eof"], false);
  rd = call({{"op", "read"}, {"path", "/a/b/c.txt"}, {"offset", 6}});
  EXPECT_EQ(rd.body, "world");
  EXPECT_EQ(rd.json["eof"], true);

  // Overwrite in place, then truncate.
  EXPECT_EQ(call({{"op", "write"}, {"path", "/a/b/c.txt"}, {"offset", 6}}, "WORLD!").json["size"],
            12);
  EXPECT_EQ(ReadText(root_ + "/a/b/c.txt"), "hello WORLD!");
  EXPECT_EQ(call({{"op", "write"}, {"path", "/a/b/c.txt"}, {"truncate", true}}, "x").json["size"],
            1);
  EXPECT_EQ(ReadText(root_ + "/a/b/c.txt"), "x");

  // A file larger than one chunk, written and read in pieces.
  std::string big(3 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7 + i / 4096);
  ASSERT_EQ(call({{"op", "write"}, {"path", "/big"}}, std::string_view(big).substr(0, 2 << 20))
                .json["ok"],
            true);
  ASSERT_EQ(call({{"op", "write"}, {"path", "/big"}, {"offset", 2 << 20}},
                 std::string_view(big).substr(2 << 20))
                .json["ok"],
            true);
  rd = call({{"op", "read"}, {"path", "/big"}, {"length", 100 << 20}});  // clamped to 2 MiB
  EXPECT_EQ(rd.body.size(), kMaxFileChunk);
  EXPECT_EQ(rd.json["eof"], false);
  auto rd2 = call({{"op", "read"}, {"path", "/big"}, {"offset", rd.body.size()}});
  EXPECT_EQ(rd2.json["eof"], true);
  EXPECT_TRUE(rd.body + rd2.body == big);

  auto s = call({{"op", "stat"}, {"path", "/a/b/c.txt"}});
  ASSERT_EQ(s.json["ok"], true) << s.json.dump();
  EXPECT_EQ(s.json["entry"]["type"], "file");
  EXPECT_EQ(s.json["entry"]["size"], 1);
  EXPECT_EQ(s.json["entry"]["mode"], 0600);
  EXPECT_EQ(s.json["entry"]["path"], "/a/b/c.txt");
  EXPECT_EQ(s.json["entry"]["name"], "c.txt");
  EXPECT_GT(s.json["entry"]["mtime_ms"].get<int64_t>(), 0);
  EXPECT_EQ(call({{"op", "stat"}, {"path", "/"}}).json["entry"]["type"], "dir");

  // mkdir: -p is idempotent, plain mkdir of an existing dir is a conflict.
  EXPECT_EQ(call({{"op", "mkdir"}, {"path", "/d/e/f"}, {"parents", true}}).json["ok"], true);
  EXPECT_EQ(call({{"op", "mkdir"}, {"path", "/d/e/f"}, {"parents", true}}).json["ok"], true);
  EXPECT_EQ(ErrorCode(call({{"op", "mkdir"}, {"path", "/d/e"}}).json), "conflict");
  EXPECT_EQ(ErrorCode(call({{"op", "mkdir"}, {"path", "/x/y"}}).json), "not_found");
  EXPECT_EQ(call({{"op", "mkdir"}, {"path", "/d/g"}, {"mode", 0700}}).json["ok"], true);
  ASSERT_EQ(::stat((root_ + "/d/g").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(::symlink("a/b", (root_ + "/lnk").c_str()), 0);

  auto names = [](const Json& entries) {
    std::vector<std::string> v;
    for (const auto& e : entries) v.push_back(e["path"].get<std::string>());
    return v;
  };
  auto l = call({{"op", "list"}, {"path", "/"}});
  ASSERT_EQ(l.json["ok"], true) << l.json.dump();
  EXPECT_EQ(names(l.json["entries"]), (std::vector<std::string>{"/a", "/big", "/d", "/lnk"}));
  EXPECT_EQ(l.json["entries"][3]["type"], "symlink");
  EXPECT_EQ(l.json["entries"][3]["link_target"], "a/b");
  l = call({{"op", "list"}, {"path", "/d"}, {"depth", 2}});
  EXPECT_EQ(names(l.json["entries"]), (std::vector<std::string>{"/d/e", "/d/e/f", "/d/g"}));
  l = call({{"op", "list"}, {"path", "/"}, {"depth", 16}});
  EXPECT_EQ(l.json["entries"].size(), 9u) << l.json.dump();  // the symlink is not followed
  EXPECT_EQ(ErrorCode(call({{"op", "list"}, {"path", "/"}, {"depth", 17}}).json),
            "invalid_argument");
  EXPECT_EQ(ErrorCode(call({{"op", "list"}, {"path", "/big"}}).json), "invalid_argument");

  // rename, remove.
  EXPECT_EQ(call({{"op", "rename"}, {"from", "/a/b/c.txt"}, {"to", "/d/moved.txt"}}).json["ok"],
            true);
  EXPECT_EQ(ReadText(root_ + "/d/moved.txt"), "x");
  EXPECT_EQ(ErrorCode(call({{"op", "stat"}, {"path", "/a/b/c.txt"}}).json), "not_found");
  EXPECT_EQ(ErrorCode(call({{"op", "remove"}, {"path", "/d"}}).json), "conflict");  // not empty
  EXPECT_EQ(call({{"op", "remove"}, {"path", "/lnk"}}).json["ok"], true);           // the link only
  EXPECT_TRUE(sys::Exists(root_ + "/a/b"));
  EXPECT_EQ(call({{"op", "remove"}, {"path", "/d"}, {"recursive", true}}).json["ok"], true);
  EXPECT_FALSE(sys::Exists(root_ + "/d"));
  EXPECT_EQ(call({{"op", "remove"}, {"path", "/big"}}).json["ok"], true);
  EXPECT_EQ(ErrorCode(call({{"op", "remove"}, {"path", "/big"}}).json), "not_found");
  EXPECT_EQ(ErrorCode(call({{"op", "remove"}, {"path", "/"}, {"recursive", true}}).json),
            "invalid_argument");
  EXPECT_EQ(ErrorCode(call({{"op", "remove"}, {"path", "/a/.."}, {"recursive", true}}).json),
            "invalid_argument");
  EXPECT_TRUE(sys::Exists(root_ + "/a"));
  EXPECT_EQ(ErrorCode(call({{"op", "read"}, {"path", "relative"}}).json), "invalid_argument");
  EXPECT_EQ(ErrorCode(call({{"op", "read"}, {"path", "/a"}}).json), "invalid_argument");
  EXPECT_EQ(ErrorCode(call({{"op", "read"}, {"path", 5}}).json), "invalid_argument");
  EXPECT_EQ(ErrorCode(call({{"op", "write"}, {"path", "/f"}, {"offset", -1}}).json),
            "invalid_argument");

  // A name that is not UTF-8 is listed (replaced characters), not a crash.
  ASSERT_TRUE(sys::WriteFileAtomic(root_ + "/a/bad\xff\xfe", "x"));
  l = call({{"op", "list"}, {"path", "/a"}});
  ASSERT_EQ(l.json["ok"], true) << l.json.dump();
  EXPECT_EQ(l.json["entries"].size(), 2u);

  // A FIFO planted in the sandbox must not hang the agent.
  ASSERT_EQ(::mkfifo((root_ + "/fifo").c_str(), 0644), 0);
  EXPECT_EQ(ErrorCode(call({{"op", "read"}, {"path", "/fifo"}}).json), "invalid_argument");
  EXPECT_NE(ErrorCode(call({{"op", "write"}, {"path", "/fifo"}}, "x").json), "ok");
  EXPECT_EQ(call({{"op", "stat"}, {"path", "/fifo"}}).json["entry"]["type"], "other");
}

TEST_F(AgentTest, PathsCannotEscapeTheRoot) {
  StartAgent();
  auto c = Connect();
  ASSERT_TRUE(c);
  ASSERT_TRUE(sys::MkdirAll(root_ + "/etc"));
  ASSERT_TRUE(sys::WriteFileAtomic(root_ + "/etc/passwd", "fake-passwd\n"));
  ASSERT_TRUE(sys::MkdirAll(root_ + "/sub"));
  ASSERT_EQ(::symlink("/etc/passwd", (root_ + "/abs-link").c_str()), 0);
  ASSERT_EQ(::symlink("../../../../../../../etc/passwd", (root_ + "/sub/rel-link").c_str()), 0);
  ASSERT_EQ(::symlink("/", (root_ + "/rootlink").c_str()), 0);
  ASSERT_EQ(::symlink(tmp_.path().c_str(), (root_ + "/hostdir").c_str()), 0);

  for (std::string p : {"/../../etc/passwd", "/abs-link", "/sub/rel-link", "/rootlink/etc/passwd",
                        "/sub/../../../etc/passwd", "/rootlink/../etc/passwd"}) {
    auto r = Call(*c, {{"op", "read"}, {"path", p}});
    EXPECT_EQ(r.body, "fake-passwd\n") << p << " " << r.json.dump();
  }
  // An absolute host path behind a symlink resolves inside the root, where it is missing.
  auto r = Call(*c, {{"op", "list"}, {"path", "/hostdir"}});
  EXPECT_EQ(ErrorCode(r.json), "not_found") << r.json.dump();
  // Writes through links stay inside too: once the same path exists inside the root,
  // both land there and nothing appears on the host.
  std::string outside = tmp_.path() + "/escaped";
  ASSERT_EQ(::symlink(outside.c_str(), (root_ + "/wlink").c_str()), 0);
  r = Call(*c, {{"op", "write"}, {"path", "/wlink"}}, "x");
  EXPECT_EQ(ErrorCode(r.json), "not_found") << r.json.dump();
  EXPECT_FALSE(sys::Exists(outside));
  ASSERT_EQ(Call(*c, {{"op", "mkdir"}, {"path", tmp_.path()}, {"parents", true}}).json["ok"], true);
  r = Call(*c, {{"op", "write"}, {"path", "/hostdir/escaped"}}, "x");
  EXPECT_EQ(r.json["ok"], true) << r.json.dump();
  r = Call(*c, {{"op", "write"}, {"path", "/wlink"}, {"offset", 1}}, "y");
  EXPECT_EQ(r.json["ok"], true) << r.json.dump();
  EXPECT_FALSE(sys::Exists(outside));
  EXPECT_EQ(ReadText(root_ + outside), "xy");
  // mkdir -p through a link to "/" creates inside the root.
  EXPECT_EQ(
      Call(*c, {{"op", "mkdir"}, {"path", "/rootlink/made/here"}, {"parents", true}}).json["ok"],
      true);
  EXPECT_TRUE(sys::Exists(root_ + "/made/here"));
  // stat shows the link itself.
  r = Call(*c, {{"op", "stat"}, {"path", "/abs-link"}});
  EXPECT_EQ(r.json["entry"]["type"], "symlink");
  EXPECT_EQ(r.json["entry"]["link_target"], "/etc/passwd");
}

namespace {
// A TCP listener on 127.0.0.1 (port chosen by the kernel); -1 on failure.
int ListenLoopback(int* port) {
  int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (s < 0 || ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) < 0 || ::listen(s, 8) < 0 ||
      ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) < 0)
    return -1;
  *port = ntohs(a.sin_port);
  return s;
}

int ConnectLoopbackPort(int port) {
  int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct timeval tv = {10, 0};  // a broken relay fails the test rather than hanging it
  ::setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) < 0) {
    ::close(s);
    return -1;
  }
  return s;
}

std::string ReadToEnd(int fd) {
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) return out;
    out.append(buf, static_cast<size_t>(n));
  }
}
}  // namespace

// op forward (agent/forward.h): a relay on the given address joins connections to a
// service on loopback; one relay per port, half-closes passed on, large bodies both ways,
// a clear error when nothing listens, and no relay left once the agent stops.
TEST_F(AgentTest, ForwardRelaysToALoopbackService) {
  int svc_port = 0;
  sys::UniqueFd svc(ListenLoopback(&svc_port));
  ASSERT_GE(svc.get(), 0);
  // The service: for each connection (the agent's probe for a listener is one too),
  // everything read up to the client's half-close, back with a prefix.
  std::thread server([&] {
    for (;;) {
      int c = ::accept(svc.get(), nullptr, nullptr);
      if (c < 0) return;
      std::string got = ReadToEnd(c);
      (void)sys::WriteAll(c, "echo:" + got);
      ::close(c);
    }
  });
  StartAgent();
  auto c = Connect();
  ASSERT_TRUE(c);
  auto r = Call(*c, {{"op", "forward"}, {"port", svc_port}, {"address", "127.0.0.1"}});
  ASSERT_EQ(ErrorCode(r.json), "ok") << r.json.dump();
  const int relay = static_cast<int>(JsonIntOr(r.json, "port", 0));
  ASSERT_GT(relay, 0);
  EXPECT_NE(relay, svc_port);
  const std::string big(3 << 20, 'q');  // larger than any buffer on the way
  for (const std::string& body : {std::string("abc"), big, std::string()}) {
    sys::UniqueFd s(ConnectLoopbackPort(relay));
    ASSERT_GE(s.get(), 0);
    std::thread writer([&] {
      (void)sys::WriteAll(s.get(), body);
      ::shutdown(s.get(), SHUT_WR);
    });
    std::string back = ReadToEnd(s.get());
    writer.join();
    EXPECT_EQ(back.size(), body.size() + 5);
    EXPECT_TRUE(back == "echo:" + body) << back.substr(0, 40);
  }
  // Asked again: the same relay.
  r = Call(*c, {{"op", "forward"}, {"port", svc_port}, {"address", "127.0.0.1"}});
  EXPECT_EQ(JsonIntOr(r.json, "port", 0), relay) << r.json.dump();
  ::shutdown(svc.get(), SHUT_RDWR);  // ends the server's accept
  server.join();
  // Nothing listening, a bad port, a bad address: errors, and the agent goes on.
  svc.Reset();
  r = Call(*c, {{"op", "forward"}, {"port", svc_port}, {"address", "127.0.0.1"}});
  EXPECT_EQ(ErrorCode(r.json), "not_found") << r.json.dump();
  r = Call(*c, {{"op", "forward"}, {"port", 70000}, {"address", "127.0.0.1"}});
  EXPECT_EQ(ErrorCode(r.json), "invalid_argument") << r.json.dump();
  int other_port = 0;
  sys::UniqueFd other(ListenLoopback(&other_port));
  ASSERT_GE(other.get(), 0);
  r = Call(*c, {{"op", "forward"}, {"port", other_port}, {"address", "not-an-address"}});
  EXPECT_EQ(ErrorCode(r.json), "invalid_argument") << r.json.dump();
  EXPECT_EQ(Call(*c, {{"op", "ping"}}).json["ok"], true);
  // The agent stops: so does its relay.
  ::kill(agent_.pid(), SIGTERM);
  auto st = agent_.Wait();
  ASSERT_TRUE(st);
  agent_.Release();
  EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << *st;
  int left = -1;
  for (int i = 0; i < 50; ++i) {
    left = ConnectLoopbackPort(relay);
    if (left < 0) break;
    ::close(left);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_LT(left, 0) << "the relay outlived the agent";
}

}  // namespace
}  // namespace space::agent::testing
