// Named volumes against a real spaced (docs/volumes.md): create/list/delete, mounts shared
// by sandboxes, read-only binds and the quota enforced by the kernel, data that outlives
// its sandboxes and spaced's kill -9, file routes that stay inside the volume, bad input,
// no mount left behind, and the CLI.
#include <set>

#include "tests/integration/harness.h"

namespace space::testing {
namespace {

using namespace std::chrono_literals;

std::string UrlPath(const std::string& p) {
  std::string out;
  for (unsigned char ch : p) {
    if (std::isalnum(ch) || ch == '/' || ch == '-' || ch == '_' || ch == '.') {
      out += static_cast<char>(ch);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", ch);
      out += buf;
    }
  }
  return out;
}

// Mounts under the daemon's data dir whose path holds `part`.
std::vector<std::string> MountsLike(const std::string& data_dir, const std::string& part) {
  std::vector<std::string> out;
  for (const auto& m : sys::MountsUnder(data_dir))
    if (m.find(part) != std::string::npos) out.push_back(m);
  return out;
}

// The binds of volumes into sandbox bundles (bundle/vol-N), not the volumes' own mounts.
std::vector<std::string> BundleVolumeBinds(const std::string& data_dir) {
  std::vector<std::string> out;
  for (const auto& m : MountsLike(data_dir, "/vol-"))
    if (m.find("/volumes/") == std::string::npos) out.push_back(m);
  return out;
}

class VolumeTest : public SharedDaemonTest<VolumeTest> {
 protected:
  std::string NewVolume(const std::string& name, int64_t size = 0) {
    Json body = {{"name", name}};
    if (size) body["size_bytes"] = size;
    auto r = ApiRequest(c(), "POST", "/v1/volumes", body.dump());
    EXPECT_EQ(r.status, 201) << r.body;
    return r.json.value("id", "");
  }
  std::string SandboxWith(const Json& volumes) {
    return CreateSandbox(c(), Json{{"volumes", volumes}});
  }
  client::Client::RunOutput Sh(const std::string& id, const std::string& cmd) {
    auto r = c().Run(id, Json{{"cmd", cmd}});
    EXPECT_TRUE(r) << (r ? "" : r.error().message);
    return r ? *r : client::Client::RunOutput{};
  }
  void DeleteSandbox(const std::string& id) { ASSERT_TRUE(c().DeleteSandboxAndWait(id, 60s)); }
};

TEST_F(VolumeTest, CreateListGetDeleteAndBadInput) {
  const std::string id = NewVolume("crud-vol", 64ll << 20);
  ASSERT_TRUE(IsValidId(id, "vol")) << id;
  auto got = ApiRequest(c(), "GET", "/v1/volumes/crud-vol");
  ASSERT_EQ(got.status, 200) << got.body;
  EXPECT_EQ(got.json["id"], id);
  EXPECT_EQ(got.json["size_bytes"], 64ll << 20);
  EXPECT_EQ(got.json["state"], "ready");
  EXPECT_TRUE(got.json["sandboxes"].empty());
  EXPECT_GT(got.json.value("free_bytes", int64_t{0}), 40ll << 20) << got.body;
  EXPECT_EQ(ApiRequest(c(), "GET", "/v1/volumes/" + id).json["name"], "crud-vol");  // by id too
  auto list = ApiRequest(c(), "GET", "/v1/volumes");
  ASSERT_EQ(list.status, 200);
  bool listed = false;
  for (const auto& v : list.json["volumes"]) listed = listed || v["name"] == "crud-vol";
  EXPECT_TRUE(listed) << list.body;

  // Bad input: 400 with the error shape, nothing created.
  for (const std::string& bad : std::vector<std::string>{R"({"name":""})", R"({"name":"a/b"})", R"({"name":"../x"})",
                                R"({"name":"vol-1"})", R"({"name":"-x"})", R"({"name":7})",
                                R"({"name":"ok","size_bytes":1024})", R"({"name":"ok","size_bytes":-5})",
                                R"({"name":"ok","size":1})", R"({})", R"([1])", "not json",
                                R"({"name":")" + std::string(64, 'a') + R"("})"}) {
    auto r = ApiRequest(c(), "POST", "/v1/volumes", bad);
    EXPECT_EQ(r.status, 400) << bad << " -> " << r.body;
    EXPECT_TRUE(r.json.contains("error")) << r.body;
  }
  EXPECT_EQ(ApiRequest(c(), "GET", "/v1/volumes/ok").status, 404);
  EXPECT_EQ(ApiRequest(c(), "POST", "/v1/volumes", R"({"name":"crud-vol"})").status, 409);
  EXPECT_EQ(ApiRequest(c(), "GET", "/v1/volumes/nope").status, 404);
  EXPECT_EQ(ApiRequest(c(), "DELETE", "/v1/volumes/nope").status, 404);

  auto del = ApiRequest(c(), "DELETE", "/v1/volumes/crud-vol");
  EXPECT_EQ(del.status, 200) << del.body;
  EXPECT_EQ(ApiRequest(c(), "GET", "/v1/volumes/crud-vol").status, 404);
  EXPECT_FALSE(sys::Exists(daemon_->data_dir() + "/volumes/" + id));
  EXPECT_TRUE(MountsLike(daemon_->data_dir(), id).empty());
}

TEST_F(VolumeTest, TwoSandboxesShareAVolumeAndReadOnlyIsEnforced) {
  NewVolume("shared");
  std::string a = SandboxWith(Json::array({{{"name", "shared"}, {"path", "/data"}}}));
  std::string b = SandboxWith(Json::array({{{"name", "shared"}, {"path", "/mnt/shared"}}}));
  std::string ro = SandboxWith(Json::array({{{"name", "shared"}, {"path", "/data"}, {"read_only", true}}}));
  ASSERT_FALSE(a.empty() || b.empty() || ro.empty());
  // The sandbox's view names its mounts.
  auto sb = c().GetSandbox(ro);
  ASSERT_TRUE(sb);
  ASSERT_EQ((*sb)["volumes"].size(), 1u) << sb->dump();
  EXPECT_EQ((*sb)["volumes"][0]["name"], "shared");
  EXPECT_EQ((*sb)["volumes"][0]["read_only"], true);

  auto w = Sh(a, "echo from-a > /data/note && id -u && stat -c %u /data/note && stat -c %a /data");
  EXPECT_EQ(w.exit_code, 0) << w.err;
  // Root inside owns what it writes; the volume's root is open to any user of a template.
  EXPECT_EQ(w.out, "0\n0\n777\n");
  auto r = Sh(b, "cat /mnt/shared/note && echo from-b >> /mnt/shared/note");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "from-a\n");
  auto back = Sh(a, "cat /data/note");
  EXPECT_EQ(back.out, "from-a\nfrom-b\n");
  // Read-only: reads work, every write fails in the kernel (EROFS), even for root.
  auto rr = Sh(ro, "cat /data/note");
  EXPECT_EQ(rr.out, "from-a\nfrom-b\n");
  auto rw = Sh(ro, "echo x > /data/other; echo rc=$?; touch /data/note 2>&1; mount -o remount,rw /data 2>&1; echo x > /data/y 2>&1");
  EXPECT_NE(rw.out.find("rc=1"), std::string::npos) << rw.out << rw.err;
  EXPECT_NE((rw.out + rw.err).find("Read-only file system"), std::string::npos) << rw.out << rw.err;
  EXPECT_EQ(Sh(a, "ls /data").out, "note\n");

  // Mounted: the volume cannot be deleted (409 naming the sandboxes).
  auto busy = ApiRequest(c(), "DELETE", "/v1/volumes/shared");
  EXPECT_EQ(busy.status, 409) << busy.body;
  EXPECT_NE(busy.body.find(a), std::string::npos) << busy.body;
  auto info = ApiRequest(c(), "GET", "/v1/volumes/shared");
  EXPECT_EQ(info.json["sandboxes"].size(), 3u) << info.body;

  // The data outlives the sandboxes.
  DeleteSandbox(a);
  DeleteSandbox(b);
  EXPECT_EQ(ApiRequest(c(), "DELETE", "/v1/volumes/shared").status, 409);  // ro still mounts it
  DeleteSandbox(ro);
  std::string later = SandboxWith(Json::array({{{"name", "shared"}, {"path", "/srv"}}}));
  EXPECT_EQ(Sh(later, "cat /srv/note").out, "from-a\nfrom-b\n");
  DeleteSandbox(later);
  EXPECT_EQ(ApiRequest(c(), "DELETE", "/v1/volumes/shared").status, 200);
}

TEST_F(VolumeTest, QuotaIsEnforcedWithEnospcInside) {
  NewVolume("small", 16ll << 20);
  std::string id = SandboxWith(Json::array({{{"name", "small"}, {"path", "/data"}}}));
  ASSERT_FALSE(id.empty());
  auto r = Sh(id, "dd if=/dev/zero of=/data/big bs=1M count=64 2>&1; echo rc=$?; df -k /data | tail -1");
  EXPECT_NE(r.out.find("No space left on device"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("rc=0"), std::string::npos) << r.out;
  auto size = Sh(id, "stat -c %s /data/big");
  EXPECT_LT(std::stoll(size.out), 16ll << 20) << size.out;
  // The file API meets the same quota (507 naming the volume), and space comes back.
  auto w = ApiRequest(c(), "PUT", "/v1/volumes/small/files?path=/api-big", std::string(1 << 20, 'x'),
               "application/octet-stream");
  EXPECT_EQ(w.status, 507) << w.body;
  EXPECT_NE(w.body.find("volume small is full"), std::string::npos) << w.body;
  Sh(id, "rm -f /data/big /data/api-big");
  auto ok = ApiRequest(c(), "PUT", "/v1/volumes/small/files?path=/fits", std::string(1 << 20, 'y'),
                "application/octet-stream");
  EXPECT_EQ(ok.status, 200) << ok.body;
  DeleteSandbox(id);
  EXPECT_EQ(ApiRequest(c(), "DELETE", "/v1/volumes/small").status, 200);
}

TEST_F(VolumeTest, FileRoutesWorkWithoutASandboxAndStayInside) {
  const std::string vid = NewVolume("files");
  // Write, read, stat, list, mkdir, rename, delete.
  auto put = ApiRequest(c(), "PUT", "/v1/volumes/files/files?path=/dir/a.txt", "hello", "application/octet-stream");
  ASSERT_EQ(put.status, 200) << put.body;
  EXPECT_EQ(put.json["size"], 5);
  auto get = ApiRequest(c(), "GET", "/v1/volumes/files/files?path=/dir/a.txt");
  EXPECT_EQ(get.status, 200);
  EXPECT_EQ(get.body, "hello");
  auto st = ApiRequest(c(), "GET", "/v1/volumes/files/files:stat?path=/dir/a.txt");
  EXPECT_EQ(st.json["type"], "file") << st.body;
  EXPECT_EQ(st.json["uid"], 0) << st.body;  // as the sandboxes see it
  EXPECT_EQ(ApiRequest(c(), "POST", "/v1/volumes/files/files:mkdir?path=/made/deep").status, 200);
  auto mv = ApiRequest(c(), "POST", "/v1/volumes/files/files:rename", R"({"from":"/dir/a.txt","to":"/made/b.txt"})");
  EXPECT_EQ(mv.status, 200) << mv.body;
  auto ls = ApiRequest(c(), "GET", "/v1/volumes/files/files:list?path=/&depth=3");
  ASSERT_EQ(ls.status, 200) << ls.body;
  std::set<std::string> paths;
  for (const auto& e : ls.json["entries"]) paths.insert(e["path"]);
  EXPECT_TRUE(paths.count("/made/b.txt") && paths.count("/made/deep") && paths.count("/dir")) << ls.body;
  EXPECT_FALSE(paths.count("/lost+found")) << ls.body;

  // A sandbox sees what the API wrote, owned by its root, and may change it.
  std::string sb = SandboxWith(Json::array({{{"name", "files"}, {"path", "/v"}}}));
  ASSERT_FALSE(sb.empty());
  auto in = Sh(sb, "cat /v/made/b.txt && stat -c %u /v/made/b.txt && echo more >> /v/made/b.txt");
  EXPECT_EQ(in.exit_code, 0) << in.err;
  EXPECT_EQ(in.out, "hello0\n");
  EXPECT_EQ(ApiRequest(c(), "GET", "/v1/volumes/files/files?path=/made/b.txt").body, "hellomore\n");

  // Escapes. ".." is cleaned inside the volume; symlinks planted by a sandbox resolve
  // inside the volume; nothing reads or writes the host.
  auto up = ApiRequest(c(), "PUT", "/v1/volumes/files/files?path=" + UrlPath("/../../escape"), "x",
                "application/octet-stream");
  EXPECT_EQ(up.status, 200) << up.body;
  EXPECT_FALSE(sys::Exists(daemon_->data_dir() + "/volumes/" + vid + "/escape"));
  EXPECT_FALSE(sys::Exists(daemon_->data_dir() + "/volumes/escape"));
  EXPECT_EQ(Sh(sb, "cat /v/escape").out, "x");
  Sh(sb, "ln -s /etc/passwd /v/passwd; ln -s ../../../../../../etc /v/etc-up; ln -s / /v/root;"
         " ln -s /proc/self/root /v/proc-root");
  for (const std::string& p : std::vector<std::string>{"/passwd", "/etc-up/passwd", "/root/etc/passwd", "/proc-root/etc/passwd",
                              "/../etc/passwd", "/%2E%2E/etc/passwd"}) {
    auto r = ApiRequest(c(), "GET", "/v1/volumes/files/files?path=" + (p.find('%') != std::string::npos ? p : UrlPath(p)));
    EXPECT_NE(r.status, 200) << p << " read: " << r.body.substr(0, 200);
    EXPECT_EQ(r.body.find("root:x:0:0"), std::string::npos) << p;
  }
  const std::string host_probe = "/tmp/space-volume-probe-" + std::to_string(::getpid());
  (void)sys::RemoveAll(host_probe);
  Sh(sb, "ln -s " + host_probe + " /v/out");
  auto through = ApiRequest(c(), "PUT", "/v1/volumes/files/files?path=/out", "pwned", "application/octet-stream");
  EXPECT_FALSE(sys::Exists(host_probe)) << "a write through a symlink reached the host";
  (void)through;
  auto rmroot = ApiRequest(c(), "DELETE", "/v1/volumes/files/files?path=/root&recursive=true");
  EXPECT_EQ(rmroot.status, 200) << rmroot.body;  // removes the link, not what it names
  EXPECT_TRUE(sys::Exists("/etc/passwd"));
  // Bad input.
  EXPECT_EQ(ApiRequest(c(), "GET", "/v1/volumes/files/files?path=relative").status, 400);
  EXPECT_EQ(ApiRequest(c(), "GET", "/v1/volumes/files/files").status, 400);
  EXPECT_EQ(ApiRequest(c(), "GET", "/v1/volumes/files/files?path=/missing").status, 404);
  EXPECT_EQ(ApiRequest(c(), "GET", "/v1/volumes/nope/files?path=/x").status, 404);
  EXPECT_EQ(ApiRequest(c(), "GET", "/v1/volumes/files/files:list?path=/&depth=99").status, 400);
  EXPECT_EQ(ApiRequest(c(), "DELETE", "/v1/volumes/files/files?path=/").status, 400);
  DeleteSandbox(sb);
  EXPECT_EQ(ApiRequest(c(), "DELETE", "/v1/volumes/files").status, 200);
}

TEST_F(VolumeTest, BadMountsAreRefusedAtCreate) {
  NewVolume("mounts");
  auto create = [&](const Json& body) { return ApiRequest(c(), "POST", "/v1/sandboxes?wait=60s", body.dump()); };
  auto one = [](const std::string& name, const std::string& path) {
    return Json{{"volumes", Json::array({{{"name", name}, {"path", path}}})}};
  };
  for (const std::string& p : std::vector<std::string>{"relative", "/", "/proc", "/proc/x", "/sys/fs", "/dev", "/.space",
                              "/a/../b", "/a/", "//a", "/a/./b", "/etc/resolv.conf"}) {
    auto r = create(one("mounts", p));
    EXPECT_EQ(r.status, 400) << p << ": " << r.body;
  }
  EXPECT_EQ(create(one("no-such-volume", "/x")).status, 404);
  EXPECT_EQ(create(Json{{"volumes", "mounts:/x"}}).status, 400);
  EXPECT_EQ(create(Json{{"volumes", Json::array({{{"name", "mounts"}}})}}).status, 400);
  EXPECT_EQ(create(Json{{"volumes", Json::array({{{"name", "mounts"}, {"path", "/x"}, {"read_only", "yes"}}})}}).status, 400);
  EXPECT_EQ(create(Json{{"volumes", Json::array({{{"name", "mounts"}, {"path", "/x"}, {"mode", 1}}})}}).status, 400);
  auto overlap = create(Json{{"volumes", Json::array({{{"name", "mounts"}, {"path", "/x"}},
                                                       {{"name", "mounts"}, {"path", "/x/y"}}})}});
  EXPECT_EQ(overlap.status, 400) << overlap.body;
  // A runtime that cannot bind volumes (a plugin such as gvisor) says so at create; one
  // that can (microvm: microvm_volume_test) checks paths as oci does.
  auto rts = c().ListRuntimes();
  ASSERT_TRUE(rts);
  for (const auto& rt : *rts) {
    if (rt.value("name", "") == "oci" || !rt.value("available", false)) continue;
    Json body = one("mounts", rt["capabilities"].value("volumes", false) ? "/proc/x" : "/x");
    body["runtime"] = rt.value("name", "");
    auto r = create(body);
    EXPECT_EQ(r.status, 400) << rt.dump() << ": " << r.body;
    if (!rt["capabilities"].value("volumes", false)) {
      EXPECT_NE(r.body.find("cannot mount volumes"), std::string::npos) << r.body;
    }
  }
  // Nothing was created by any of them.
  EXPECT_TRUE(ApiRequest(c(), "GET", "/v1/volumes/mounts").json["sandboxes"].empty());
  EXPECT_EQ(ApiRequest(c(), "DELETE", "/v1/volumes/mounts").status, 200);
}

TEST_F(VolumeTest, ForkAndRestoreMountTheSameVolumeWhoseContentIsNotSnapshotted) {
  NewVolume("forked");
  std::string parent = SandboxWith(Json::array({{{"name", "forked"}, {"path", "/data"}}}));
  ASSERT_FALSE(parent.empty());
  Sh(parent, "echo before > /data/f; echo root-before > /root/r");
  auto snap = c().SnapshotAndWait(parent, client::WaitOptions{});
  ASSERT_TRUE(snap) << snap.error().message;
  Sh(parent, "echo after > /data/f");
  auto forks = c().ForkAndWait(parent, 1, client::WaitOptions{});
  ASSERT_TRUE(forks && forks->size() == 1) << (forks ? "" : forks.error().message);
  const std::string child = (*forks)[0].id;
  EXPECT_EQ(Sh(child, "cat /data/f").out, "after\n");
  Sh(child, "echo from-child > /data/c");
  EXPECT_EQ(Sh(parent, "cat /data/c").out, "from-child\n");
  // A restore mounts the volume too, with its current content (not the snapshot's).
  auto restored = c().CreateSandboxAndWait(Json{{"snapshot", *snap}}, 60s);
  ASSERT_TRUE(restored) << restored.error().message;
  const std::string rid = restored->value("id", "");
  EXPECT_EQ(Sh(rid, "cat /data/f /root/r").out, "after\nroot-before\n");
  EXPECT_EQ((*restored)["volumes"].size(), 1u) << restored->dump();
  for (const auto& id : {parent, child, rid}) DeleteSandbox(id);
  ASSERT_TRUE(c().DeleteSnapshot(*snap));
  EXPECT_EQ(ApiRequest(c(), "DELETE", "/v1/volumes/forked").status, 200);
}

TEST_F(VolumeTest, CliCreatesListsMountsAndRemovesVolumes) {
  auto space = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = {BinDir() + "/space"};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = sys::Run({.argv = argv,
                       .env = std::vector<std::string>{"PATH=/usr/bin:/bin", "HOME=/root",
                                                       "SPACE_URL=" + daemon_->url(),
                                                       "SPACE_API_KEY=" + daemon_->api_key()}},
                      120000);
    EXPECT_TRUE(r);
    return r ? *r : sys::RunResult{};
  };
  auto made = space({"volume", "create", "cli-vol", "--size", "32M"});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  EXPECT_EQ(made.out, "cli-vol\n");
  auto ls = space({"volume", "ls"});
  EXPECT_EQ(ls.exit_code, 0);
  EXPECT_NE(ls.out.find("cli-vol"), std::string::npos) << ls.out;
  EXPECT_NE(ls.out.find("32"), std::string::npos) << ls.out;
  auto lsj = space({"--json", "volume", "ls"});
  auto arr = ParseJson(lsj.out);
  ASSERT_TRUE(arr && arr->is_array()) << lsj.out << lsj.err;
  EXPECT_EQ(space({"volume", "create", "bad/name"}).exit_code, 1);
  EXPECT_EQ(space({"volume", "create", "x", "--size", "lots"}).exit_code, 2);
  EXPECT_EQ(space({"create", "--volume", "cli-vol"}).exit_code, 2);
  EXPECT_EQ(space({"create", "--volume", "cli-vol:/x:rx"}).exit_code, 2);

  auto rw = space({"create", "--volume", "cli-vol:/work"});
  ASSERT_EQ(rw.exit_code, 0) << rw.err;
  std::string a = Daemon::Trim(rw.out);
  auto ro = space({"create", "-v", "cli-vol:/ro:ro"});
  ASSERT_EQ(ro.exit_code, 0) << ro.err;
  std::string b = Daemon::Trim(ro.out);
  EXPECT_EQ(space({"exec", a, "--", "sh", "-c", "echo cli > /work/x"}).exit_code, 0);
  auto rd = space({"exec", b, "--", "cat", "/ro/x"});
  EXPECT_EQ(rd.out, "cli\n");
  EXPECT_NE(space({"exec", b, "--", "sh", "-c", "echo no > /ro/y"}).exit_code, 0);
  auto busy = space({"volume", "rm", "cli-vol"});
  EXPECT_EQ(busy.exit_code, 1);
  EXPECT_NE(busy.err.find("mounted"), std::string::npos) << busy.err;
  EXPECT_EQ(space({"rm", a, b}).exit_code, 0);
  auto rm = space({"volume", "rm", "cli-vol"});
  EXPECT_EQ(rm.exit_code, 0) << rm.err;
  EXPECT_EQ(rm.out, "cli-vol\n");
  EXPECT_EQ(space({"volume", "rm", "cli-vol"}).exit_code, 1);
}

// Own daemons: kill -9 and restart, and mount accounting.
TEST(VolumeRecoveryTest, KillNineKeepsMountsAndDataAndNothingLeaksAfterDelete) {
  SPACE_REQUIRE_SANDBOXES();
  Daemon d;
  ASSERT_TRUE(d.Start());
  auto& c = d.client();
  const size_t mounts0 = sys::MountsUnder(d.data_dir()).size();
  auto made = ApiRequest(c, "POST", "/v1/volumes", R"({"name":"durable","size_bytes":33554432})");
  ASSERT_EQ(made.status, 201) << made.body;
  const std::string vid = made.json["id"];
  std::vector<std::string> ids;
  for (int i = 0; i < 6; ++i) {
    std::string id = CreateSandbox(c, Json{{"volumes", Json::array({{{"name", "durable"}, {"path", "/d"}}})}});
    ASSERT_FALSE(id.empty());
    auto r = c.Run(id, Json{{"cmd", "echo " + std::to_string(i) + " > /d/" + std::to_string(i)}});
    ASSERT_TRUE(r && r->exit_code == 0);
    ids.push_back(id);
  }
  EXPECT_EQ(BundleVolumeBinds(d.data_dir()).size(), 6u);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(c.DeleteSandboxAndWait(ids[i], 60s));
  EXPECT_EQ(BundleVolumeBinds(d.data_dir()).size(), 3u);  // the bundles' binds went

  d.Kill();  // SIGKILL: sandboxes keep running with their mounts
  ASSERT_TRUE(d.Start());
  auto& c2 = d.client();
  auto got = ApiRequest(c2, "GET", "/v1/volumes/durable");
  ASSERT_EQ(got.status, 200) << got.body;
  EXPECT_EQ(got.json["sandboxes"].size(), 3u) << got.body;
  for (int i = 3; i < 6; ++i) {
    auto r = c2.Run(ids[i], Json{{"cmd", "cat /d/0 /d/5 && echo again-" + std::to_string(i) + " > /d/again-" + std::to_string(i)}});
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->out, "0\n5\n") << r->err;
  }
  EXPECT_EQ(ApiRequest(c2, "GET", "/v1/volumes/durable/files?path=/again-4").body, "again-4\n");
  EXPECT_EQ(ApiRequest(c2, "DELETE", "/v1/volumes/durable").status, 409);
  for (int i = 3; i < 6; ++i) ASSERT_TRUE(c2.DeleteSandboxAndWait(ids[i], 60s));
  EXPECT_TRUE(BundleVolumeBinds(d.data_dir()).empty());
  // Only the volume's own mount is left, and it goes with the volume.
  EXPECT_EQ(sys::MountsUnder(d.data_dir()).size(), mounts0 + 1);
  EXPECT_EQ(ApiRequest(c2, "DELETE", "/v1/volumes/durable").status, 200);
  EXPECT_EQ(sys::MountsUnder(d.data_dir()).size(), mounts0);
  EXPECT_TRUE(MountsLike(d.data_dir(), vid).empty());
  // A clean restart keeps no record of it either.
  d.Stop();
  ASSERT_TRUE(d.Start());
  EXPECT_EQ(ApiRequest(d.client(), "GET", "/v1/volumes/durable").status, 404);
  EXPECT_EQ(sys::MountsUnder(d.data_dir()).size(), mounts0);
}

TEST(VolumeRecoveryTest, AVolumeSurvivesARestartWithoutSandboxesAndIsMountedAgain) {
  SPACE_REQUIRE_SANDBOXES();
  Daemon d;
  ASSERT_TRUE(d.Start());
  auto made = ApiRequest(d.client(), "POST", "/v1/volumes", R"({"name":"kept"})");
  ASSERT_EQ(made.status, 201) << made.body;
  const std::string vid = made.json["id"];
  ASSERT_EQ(ApiRequest(d.client(), "PUT", "/v1/volumes/kept/files?path=/k", "kept", "application/octet-stream").status, 200);
  d.Kill();
  // What a reboot does to the loop mount: gone. spaced mounts it again.
  ASSERT_EQ(::umount2((d.data_dir() + "/volumes/" + vid + "/mnt").c_str(), MNT_DETACH), 0);
  // An orphan directory (a crash between mkdir and the record) is removed.
  ASSERT_TRUE(sys::MkdirAll(d.data_dir() + "/volumes/vol-orphan/mnt"));
  ASSERT_TRUE(d.Start());
  EXPECT_EQ(ApiRequest(d.client(), "GET", "/v1/volumes/kept/files?path=/k").body, "kept");
  EXPECT_FALSE(sys::Exists(d.data_dir() + "/volumes/vol-orphan"));
  std::string id = CreateSandbox(d.client(), Json{{"volumes", Json::array({{{"name", "kept"}, {"path", "/k"}}})}});
  ASSERT_FALSE(id.empty());
  auto r = d.client().Run(id, Json{{"cmd", "cat /k/k"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->out, "kept");
}

}  // namespace
}  // namespace space::testing
