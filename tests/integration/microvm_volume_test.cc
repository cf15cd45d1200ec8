// Named volumes in microVMs (docs/volumes.md, "microvm"): one volume mounted at once by a
// VM (virtiofs through virtiofsd, TCG here), an oci sandbox and the host's file API, with
// writes seen both ways, owners as in oci sandboxes, read-only enforced by the guest's and
// the host's kernels, no setuid or device files on the host, the operations that would
// save the VM's memory refused with a clear error, and nothing left behind (QEMU,
// virtiofsd, sockets, mounts). One VM boot: every boot costs seconds under TCG.
#include <sys/stat.h>

#include "common/json.h"

#include "tests/integration/harness.h"

namespace space::testing {
namespace {

using namespace std::chrono_literals;

class MicrovmVolumeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!CanRunVms(&why)) GTEST_SKIP() << why;
    daemon_ = std::make_unique<Daemon>();
    ASSERT_TRUE(daemon_->Start());
  }
  client::Client& c() { return daemon_->client(); }
  client::Client::RunOutput Sh(const std::string& id, const std::string& cmd) {
    auto r = c().Run(id, Json{{"cmd", cmd}});
    EXPECT_TRUE(r) << (r ? "" : r.error().message);
    return r ? *r : client::Client::RunOutput{};
  }
  std::unique_ptr<Daemon> daemon_;
};

TEST_F(MicrovmVolumeTest, SharedWithOciAndTheHostReadOnlyOwnersRefusalsAndCleanup) {
  auto rts = ApiRequest(c(), "GET", "/v1/runtimes");
  bool volumes = false;
  for (const auto& r : rts.json["runtimes"]) {
    if (r.value("name", "") != "microvm") continue;
    volumes = r["capabilities"].value("volumes", false);
    EXPECT_EQ(r["capabilities"].value("snapshot_with_volumes", true), false) << r.dump();
  }
  ASSERT_TRUE(volumes) << rts.body;
  for (const char* name : {"shared", "models"}) {
    auto made = ApiRequest(c(), "POST", "/v1/volumes", Json{{"name", name}, {"size_bytes", 16 << 20}}.dump());
    ASSERT_EQ(made.status, 201) << made.body;
  }
  auto seed = c().Request("PUT", "/v1/volumes/models/files?path=/weights.bin", "w1", "application/octet-stream");
  ASSERT_TRUE(seed && seed->status < 300) << (seed ? seed->body : seed.error().message);

  // Bad paths are refused for microvm as for oci, before any VM boots.
  for (const std::string p : {"relative", "/", "/proc/x", "/.space", "/a/../b", "/etc/resolv.conf"}) {
    Json body = {{"runtime", "microvm"}, {"volumes", Json::array({{{"name", "shared"}, {"path", p}}})}};
    auto r = ApiRequest(c(), "POST", "/v1/sandboxes", body.dump());
    EXPECT_EQ(r.status, 400) << p << ": " << r.body;
  }
  // What would need the VM's memory saved later is refused at create.
  Json vols = Json::array({{{"name", "shared"}, {"path", "/data"}},
                           {{"name", "models"}, {"path", "/models"}, {"read_only", true}}});
  Json suspending = {{"runtime", "microvm"}, {"volumes", vols}, {"timeout", 60}, {"on_timeout", "suspend"}};
  auto later = ApiRequest(c(), "POST", "/v1/sandboxes", suspending.dump());
  EXPECT_EQ(later.status, 400) << later.body;
  EXPECT_NE(later.body.find("cannot save a VM's memory"), std::string::npos) << later.body;

  const int64_t t0 = MonotonicNanos();
  std::string vm = CreateSandbox(c(), {{"runtime", "microvm"}, {"limits", {{"memory_bytes", 256 << 20}}},
                                       {"volumes", vols}});
  ASSERT_FALSE(vm.empty()) << daemon_->Log();
  std::printf("microVM with two volumes created (cold boot) in %.0f ms\n", (MonotonicNanos() - t0) / 1e6);
  std::string oci = CreateSandbox(c(), {{"runtime", "oci"},
                                        {"volumes", Json::array({{{"name", "shared"}, {"path", "/mnt/s"}}})}});
  ASSERT_FALSE(oci.empty());

  // VM -> oci and the host: root's file and a chown to 1000 look the same on both sides.
  auto w = Sh(vm, "echo from-vm > /data/vm.txt && mkdir /data/d && echo x > /data/d/u.txt && "
                  "chown 1000:1000 /data/d/u.txt && stat -c '%u:%g %a' /data/vm.txt /data/d/u.txt /data");
  EXPECT_EQ(w.exit_code, 0) << w.err;
  EXPECT_EQ(w.out, "0:0 644\n1000:1000 644\n0:0 777\n");
  auto r = Sh(oci, "cat /mnt/s/vm.txt && stat -c '%u:%g' /mnt/s/vm.txt /mnt/s/d/u.txt && "
                   "echo from-oci > /mnt/s/oci.txt");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "from-vm\n0:0\n1000:1000\n");
  // oci -> VM.
  auto back = Sh(vm, "cat /data/oci.txt && stat -c '%u:%g' /data/oci.txt");
  EXPECT_EQ(back.out, "from-oci\n0:0\n") << back.err;
  // The host's file API sees the same owners, and its writes reach the VM.
  auto st = ApiRequest(c(), "GET", "/v1/volumes/shared/files:stat?path=/d/u.txt");
  EXPECT_EQ(st.json.value("uid", -1), 1000) << st.body;
  auto put = c().Request("PUT", "/v1/volumes/shared/files?path=/api.txt", "from-api", "application/octet-stream");
  ASSERT_TRUE(put && put->status < 300);
  EXPECT_EQ(Sh(vm, "cat /data/api.txt; stat -c %u /data/api.txt").out, "from-api0\n");
  // On the host: the oci sandboxes' uids, never host root; no setuid, setgid or device
  // files, no ids outside the map.
  auto vol = ApiRequest(c(), "GET", "/v1/volumes/shared");
  const std::string mnt = daemon_->data_dir() + "/volumes/" + vol.json.value("id", "") + "/mnt";
  // spaced's map (storage::kDefaultUidShift): guest 0 = host 1000000, guest 1000 = 1001000,
  // the owners root and user get in an oci sandbox.
  const uid_t shift = 1000000;
  struct stat hs {};
  ASSERT_EQ(::stat((mnt + "/vm.txt").c_str(), &hs), 0);
  EXPECT_EQ(hs.st_uid, shift);
  EXPECT_EQ(hs.st_gid, shift);
  ASSERT_EQ(::stat((mnt + "/d/u.txt").c_str(), &hs), 0);
  EXPECT_EQ(hs.st_uid, shift + 1000);
  EXPECT_EQ(hs.st_gid, shift + 1000);
  ASSERT_EQ(::stat((mnt + "/oci.txt").c_str(), &hs), 0);
  EXPECT_EQ(hs.st_uid, shift);  // the oci sandbox's root: the same host uid
  auto bad = Sh(vm, "touch /data/s; chmod 4755 /data/s; echo suid=$?; chmod 2755 /data/s; echo sgid=$?; "
                    "mknod /data/null c 1 3; echo mknod=$?; chown 70000 /data/s; echo chown=$?; "
                    "stat -c %a /data/s");
  EXPECT_EQ(bad.out, "suid=1\nsgid=1\nmknod=1\nchown=1\n644\n") << bad.err;
  EXPECT_FALSE(sys::Exists(mnt + "/null"));
  ASSERT_EQ(::stat((mnt + "/s").c_str(), &hs), 0);
  EXPECT_EQ(hs.st_mode & (S_ISUID | S_ISGID), 0u);
  EXPECT_EQ(hs.st_uid, shift);

  // Read-only: EROFS in the guest's kernel, for root, and still after its root remounts.
  // The remount must succeed (the guest's root may), so the write after it is refused by
  // the host's read-only bind, as is one through the device's own mount, which was never
  // read-only in the guest.
  const std::string erofs = " 2>&1 | grep -c 'Read-only file system'; ";
  auto ro = Sh(vm, "cat /models/weights.bin; echo; touch /models/n" + erofs +
                       "mount -o remount,rw /models; echo remount=$?; "
                       "grep ' /models ' /proc/mounts | cut -d' ' -f4 | cut -d, -f1; "
                       "touch /models/n" + erofs + "touch /.space/volumes/1/n" + erofs + "ls /models");
  EXPECT_EQ(ro.out, "w1\n1\nremount=0\nrw\n1\n1\nweights.bin\n") << ro.err;
  const std::string models = ApiRequest(c(), "GET", "/v1/volumes/models").json.value("id", "");
  EXPECT_FALSE(sys::Exists(daemon_->data_dir() + "/volumes/" + models + "/mnt/n"));

  // Operations that would save the VM's memory: refused at once, the VM untouched.
  for (const auto& [path, body] : std::vector<std::pair<std::string, Json>>{
           {"/snapshots", nullptr}, {"/fork", {{"count", 1}}}, {"/suspend", nullptr},
           {"/timeout", {{"timeout", 600}, {"on_timeout", "suspend"}}}}) {
    auto refused = ApiRequest(c(), "POST", "/v1/sandboxes/" + vm + path, body.is_null() ? "" : body.dump());
    EXPECT_EQ(refused.status, 409) << path << ": " << refused.body;
    EXPECT_NE(refused.body.find("mounts volumes (shared, models)"), std::string::npos) << refused.body;
    EXPECT_NE(refused.body.find("cannot save a VM's memory while it shares volumes"), std::string::npos)
        << refused.body;
  }
  EXPECT_EQ(ApiRequest(c(), "GET", "/v1/snapshots").json["snapshots"].size(), 0u);
  EXPECT_EQ(ApiRequest(c(), "GET", "/v1/sandboxes/" + vm).json.value("state", ""), "running");
  // Pause and resume keep it in memory; writes made meanwhile are seen after.
  EXPECT_EQ(ApiRequest(c(), "POST", "/v1/sandboxes/" + vm + "/pause?wait=30s").status, 200);
  put = c().Request("PUT", "/v1/volumes/shared/files?path=/while-paused.txt", "p", "application/octet-stream");
  ASSERT_TRUE(put && put->status < 300);
  EXPECT_EQ(ApiRequest(c(), "POST", "/v1/sandboxes/" + vm + "/resume?wait=30s").status, 200);
  EXPECT_EQ(Sh(vm, "cat /data/while-paused.txt /data/vm.txt").out, "pfrom-vm\n");

  // Deleting the VM ends its QEMU and virtiofsd and leaves no socket or mount; the volume
  // and what the VM wrote stay.
  const std::string vm_dir = daemon_->data_dir() + "/runtime/microvm/vms/" + vm;
  // Its virtiofsd (the launcher and the sandboxed server), and its QEMU beside them.
  const auto virtiofsd = HostProcessesWith(vm_dir + "/share");
  EXPECT_FALSE(virtiofsd.empty());
  EXPECT_GT(HostProcessesWith(vm_dir).size(), virtiofsd.size());
  ASSERT_TRUE(c().DeleteSandboxAndWait(vm, 60s));
  EXPECT_TRUE(HostProcessesWith(vm_dir).empty());
  EXPECT_FALSE(sys::Exists(vm_dir));
  for (const auto& m : sys::MountsUnder(daemon_->data_dir()))
    EXPECT_EQ(m.find("/runtime/microvm/"), std::string::npos) << m;
  auto kept = c().Request("GET", "/v1/volumes/shared/files?path=/vm.txt");
  ASSERT_TRUE(kept);
  EXPECT_EQ(kept->body, "from-vm\n");
  ASSERT_TRUE(c().DeleteSandboxAndWait(oci, 60s));
  EXPECT_EQ(ApiRequest(c(), "DELETE", "/v1/volumes/shared").status, 200);
  EXPECT_EQ(ApiRequest(c(), "DELETE", "/v1/volumes/models").status, 200);
}

}  // namespace
}  // namespace space::testing
