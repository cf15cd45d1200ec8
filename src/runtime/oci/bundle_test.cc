// Unit tests of config.json generation (no root needed). The behaviour of the config
// under a real crun is covered by oci_test.cc.
#include "runtime/oci/bundle.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace space::runtime::oci {
namespace {

BundleParams Params() {
  BundleParams p;
  p.root_path = "/state/bundles/sb-1/rootfs";
  p.agent_binary = "/usr/lib/space/space-agent";
  p.run_dir = "/state/run/sb-1";
  p.cgroups_path = "/space/sb-1";
  return p;
}

InstanceSpec Spec() {
  InstanceSpec s;
  s.id = "sb-1";
  s.rootfs = "/pool/sb-1";
  s.env = {"FOO=bar"};
  s.limits.memory_bytes = 256ll << 20;
  s.limits.pids = 64;
  s.limits.cpus = 1.5;
  s.limits.nofile = 2048;
  return s;
}

const Json* FindMount(const Json& cfg, const std::string& dest) {
  for (const auto& m : cfg["mounts"]) {
    if (m["destination"] == dest) return &m;
  }
  return nullptr;
}

// The position of the mount at `dest` in the config's list (mounts are made in order);
// a missing one fails the test.
size_t MountIndex(const Json& cfg, const std::string& dest) {
  const Json& mounts = cfg["mounts"];
  for (size_t i = 0; i < mounts.size(); ++i) {
    if (mounts[i]["destination"] == dest) return i;
  }
  ADD_FAILURE() << "no mount at " << dest;
  return std::string::npos;
}

bool HasNamespace(const Json& cfg, const std::string& type) {
  for (const auto& n : cfg["linux"]["namespaces"]) {
    if (n["type"] == type) return true;
  }
  return false;
}

TEST(BundleTest, ProcessRunsTheAgentWithEnvAndPath) {
  Json cfg = BuildOciConfig(Spec(), Params());
  EXPECT_EQ(cfg["process"]["args"],
            Json({"/.space/bin/space-agent", "--listen", "/.space/run/agent.sock"}));
  auto env = cfg["process"]["env"].get<std::vector<std::string>>();
  EXPECT_NE(std::find(env.begin(), env.end(), "FOO=bar"), env.end());
  EXPECT_NE(std::find(env.begin(), env.end(), kDefaultPath), env.end());
  EXPECT_EQ(cfg["process"]["cwd"], "/");
  EXPECT_EQ(cfg["process"]["terminal"], false);
  EXPECT_EQ(cfg["hostname"], "sb-1");  // defaults to the id
  EXPECT_EQ(cfg["root"]["path"], "/state/bundles/sb-1/rootfs");
  EXPECT_EQ(cfg["root"]["readonly"], false);
}

TEST(BundleTest, KeepsAGivenPath) {
  InstanceSpec s = Spec();
  s.env = {"PATH=/opt/bin"};
  s.hostname = "box";
  Json cfg = BuildOciConfig(s, Params());
  EXPECT_EQ(cfg["process"]["env"], Json({"PATH=/opt/bin"}));
  EXPECT_EQ(cfg["hostname"], "box");
}

// A template with LABEL space.allow-setuid: no no_new_privs (sudo works), and nothing else
// loosened — the same capabilities and seccomp filter.
TEST(BundleTest, AllowSetuidLiftsOnlyNoNewPrivileges) {
  InstanceSpec s = Spec();
  s.allow_setuid = true;
  Json loose = BuildOciConfig(s, Params());
  Json strict = BuildOciConfig(Spec(), Params());
  EXPECT_EQ(loose["process"]["noNewPrivileges"], false);
  loose["process"]["noNewPrivileges"] = true;
  EXPECT_EQ(loose, strict);
}

TEST(BundleTest, Hardening) {
  Json cfg = BuildOciConfig(Spec(), Params());
  EXPECT_EQ(cfg["process"]["noNewPrivileges"], true);
  auto caps = cfg["process"]["capabilities"]["bounding"].get<std::vector<std::string>>();
  EXPECT_EQ(std::count(caps.begin(), caps.end(), "CAP_SYS_ADMIN"), 0);
  EXPECT_EQ(cfg["process"]["capabilities"]["effective"],
            cfg["process"]["capabilities"]["bounding"]);
  EXPECT_TRUE(cfg["process"]["capabilities"]["ambient"].empty());
  auto masked = cfg["linux"]["maskedPaths"].get<std::vector<std::string>>();
  EXPECT_NE(std::find(masked.begin(), masked.end(), "/proc/kcore"), masked.end());
  auto ro = cfg["linux"]["readonlyPaths"].get<std::vector<std::string>>();
  EXPECT_NE(std::find(ro.begin(), ro.end(), "/proc/sys"), ro.end());

  EXPECT_EQ(caps.size(), 13u);
  EXPECT_EQ(std::count(caps.begin(), caps.end(), "CAP_NET_RAW"), 0);
}

// The names of the unconditional rules with `action` (and errnoRet, if given).
std::vector<std::string> Unconditional(const Json& sc, const std::string& action, int err = -1) {
  std::vector<std::string> out;
  for (const auto& r : sc["syscalls"]) {
    if (r["action"] != action || r.contains("args")) continue;
    if (err >= 0 && r.value("errnoRet", -1) != err) continue;
    for (const auto& n : r["names"]) out.push_back(n);
  }
  return out;
}

bool Has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

TEST(BundleTest, SeccompIsAnAllowListWithEpermForHostReachingCalls) {
  Json cfg = BuildOciConfig(Spec(), Params());
  const Json& sc = cfg["linux"]["seccomp"];
  EXPECT_EQ(sc["defaultAction"], "SCMP_ACT_ERRNO");
  EXPECT_EQ(sc["defaultErrnoRet"], 38);  // ENOSYS: libc falls back
  auto allowed = Unconditional(sc, "SCMP_ACT_ALLOW");
  auto eperm = Unconditional(sc, "SCMP_ACT_ERRNO", 1);
  for (const char* s : {"kexec_load", "init_module", "finit_module", "bpf", "mount", "umount2",
                        "pivot_root", "unshare", "setns", "keyctl", "add_key", "perf_event_open",
                        "reboot", "swapon", "open_by_handle_at", "name_to_handle_at",
                        "userfaultfd", "io_uring_setup", "fsopen", "sethostname",
                        "settimeofday", "clock_settime", "fanotify_init", "pidfd_getfd",
                        "kcmp", "syslog"}) {
    EXPECT_TRUE(Has(eperm, s)) << s;
    EXPECT_FALSE(Has(allowed, s)) << s;
  }
  for (const char* s : {"read", "write", "execve", "fork", "ptrace", "openat"})
    EXPECT_TRUE(Has(allowed, s)) << s;
  // clone, socket and personality are allowed only by argument.
  for (const char* s : {"clone", "clone3", "socket", "personality", "ioctl"}) {
    EXPECT_FALSE(Has(allowed, s)) << s;
  }
  bool clone_rule = false, clone3_enosys = false, vsock_refused = false, subvol_refused = false;
  for (const auto& r : sc["syscalls"]) {
    if (r["names"] == Json({"clone"}) && r["action"] == "SCMP_ACT_ALLOW") {
      clone_rule = r["args"][0]["op"] == "SCMP_CMP_MASKED_EQ" &&
                   r["args"][0]["value"] == 0x7E020000 && !r["args"][0].contains("valueTwo");
    }
    if (r["names"] == Json({"clone3"})) clone3_enosys = r["errnoRet"] == 38;
    if (r["names"] == Json({"socket"}) && r["action"] == "SCMP_ACT_ERRNO")
      vsock_refused = r["args"][0]["value"] == 40;
    if (r["names"] == Json({"ioctl"}) && r["action"] == "SCMP_ACT_ERRNO")
      subvol_refused = r["args"][0]["value"] == 0xffffff00 && r["args"][0]["valueTwo"] == 0x50009400;
  }
  EXPECT_TRUE(clone_rule);
  EXPECT_TRUE(clone3_enosys);
  EXPECT_TRUE(vsock_refused);
  EXPECT_TRUE(subvol_refused);
}

// Evaluates the profile's ioctl rules the way the kernel filter does (an allow rule with a
// matching argument wins; otherwise the refusal or the default).
TEST(BundleTest, SeccompIoctlRefusesOnlyBtrfsVolumeCommands) {
  Json sc = SeccompProfile();
  auto allowed = [&](uint64_t cmd) {
    for (const auto& r : sc["syscalls"]) {
      if (r["names"] != Json({"ioctl"}) || r["action"] != "SCMP_ACT_ALLOW") continue;
      const Json& a = r["args"][0];
      EXPECT_EQ(a["index"], 1);
      EXPECT_EQ(a["op"], "SCMP_CMP_MASKED_EQ");
      if ((cmd & a["value"].get<uint64_t>()) == a["valueTwo"].get<uint64_t>()) return true;
    }
    return false;
  };
  EXPECT_TRUE(allowed(0x5401));              // TCGETS
  EXPECT_TRUE(allowed(0x40049409));          // FICLONE
  EXPECT_TRUE(allowed(0xc0189436));          // FIDEDUPERANGE
  EXPECT_TRUE(allowed(0x541b));              // FIONREAD
  EXPECT_TRUE(allowed(0x50009500));
  EXPECT_FALSE(allowed(0x5000940e));         // BTRFS_IOC_SUBVOL_CREATE
  EXPECT_FALSE(allowed(0x50009418));         // BTRFS_IOC_SUBVOL_CREATE_V2
  EXPECT_FALSE(allowed(0x50009401));         // BTRFS_IOC_SNAP_CREATE
  EXPECT_FALSE(allowed(0x50009417));         // BTRFS_IOC_SNAP_CREATE_V2
  EXPECT_FALSE(allowed(0xffffffff5000940eull));  // junk in the ignored upper half
}

// With crun's precompiled filter the config carries it as an annotation and no JSON
// profile (crun applies a filter when either is there; OciTest checks Seccomp: 2 inside).
TEST(BundleTest, PrecompiledSeccompFilterReplacesTheProfile) {
  BundleParams p = Params();
  p.seccomp_bpf_b64 = "AAAA";
  Json cfg = BuildOciConfig(Spec(), p);
  EXPECT_FALSE(cfg["linux"].contains("seccomp"));
  EXPECT_EQ(cfg["annotations"]["run.oci.seccomp_bpf_data"], "AAAA");
  Json plain = BuildOciConfig(Spec(), Params());
  EXPECT_EQ(plain["linux"]["seccomp"], SeccompProfile());
  EXPECT_FALSE(plain.contains("annotations"));
}

TEST(BundleTest, NamespacesAndUserMapping) {
  Json cfg = BuildOciConfig(Spec(), Params());
  for (const char* ns : {"pid", "ipc", "uts", "mount", "network", "cgroup", "user"})
    EXPECT_TRUE(HasNamespace(cfg, ns)) << ns;
  Json map = Json::array({{{"containerID", 0}, {"hostID", 1000000}, {"size", 65536}}});
  EXPECT_EQ(cfg["linux"]["uidMappings"], map);
  EXPECT_EQ(cfg["linux"]["gidMappings"], map);

  BundleParams p = Params();
  p.user_namespace = false;
  Json no_user = BuildOciConfig(Spec(), p);
  EXPECT_FALSE(HasNamespace(no_user, "user"));
  EXPECT_FALSE(no_user["linux"].contains("uidMappings"));
}

TEST(BundleTest, Limits) {
  Json cfg = BuildOciConfig(Spec(), Params());
  const Json& r = cfg["linux"]["resources"];
  EXPECT_EQ(r["memory"]["limit"], 256ll << 20);
  EXPECT_EQ(r["memory"]["swap"], 256ll << 20);
  EXPECT_EQ(r["pids"]["limit"], 64);
  EXPECT_EQ(r["cpu"]["quota"], 150000);
  EXPECT_FALSE(r["cpu"].contains("period")) << "the kernel's default, 100 ms: not written";
  EXPECT_EQ(cfg["linux"]["cgroupsPath"], "/space/sb-1");
  EXPECT_EQ(cfg["process"]["rlimits"][0]["type"], "RLIMIT_NOFILE");
  EXPECT_EQ(cfg["process"]["rlimits"][0]["hard"], 2048);

  InstanceSpec unlimited = Spec();
  unlimited.limits = Limits{0, 0, 0, 0, 0};
  Json u = BuildOciConfig(unlimited, Params());
  EXPECT_FALSE(u["linux"]["resources"].contains("memory"));
  EXPECT_FALSE(u["linux"]["resources"].contains("pids"));
  EXPECT_FALSE(u["linux"]["resources"].contains("cpu"));
  EXPECT_FALSE(u["process"].contains("rlimits"));

  // /dev/shm is a directory of /dev's tmpfs (the agent makes it).
  auto shm_opts = [](const Json& c) {
    EXPECT_EQ(FindMount(c, "/dev/shm"), nullptr);
    return (*FindMount(c, "/dev"))["options"].get<std::vector<std::string>>();
  };
  auto has = [](const std::vector<std::string>& v, const char* s) {
    return std::find(v.begin(), v.end(), s) != v.end();
  };
  // A quarter of the memory limit, at most 64 MiB: a full /dev/shm cannot OOM the agent.
  EXPECT_TRUE(has(shm_opts(cfg), "size=65536k"));
  InstanceSpec small = Spec();
  small.limits.memory_bytes = 64ll << 20;
  EXPECT_TRUE(has(shm_opts(BuildOciConfig(small, Params())), "size=16384k"));
  EXPECT_TRUE(has(shm_opts(u), "size=65536k"));
  EXPECT_TRUE(has(shm_opts(u), "noexec"));

  BundleParams no_swap = Params();
  no_swap.memory_swap = false;
  EXPECT_FALSE(BuildOciConfig(Spec(), no_swap)["linux"]["resources"]["memory"].contains("swap"));
}

TEST(BundleTest, AgentMountsLiveOnTheRunTmpfs) {
  Json cfg = BuildOciConfig(Spec(), Params());
  const Json* space = FindMount(cfg, "/.space");
  ASSERT_NE(space, nullptr);
  EXPECT_EQ((*space)["type"], "bind");
  EXPECT_EQ((*space)["source"], "/state/run/sb-1");
  auto space_opts = (*space)["options"].get<std::vector<std::string>>();
  for (const char* o : {"nosuid", "nodev", "noexec"})
    EXPECT_NE(std::find(space_opts.begin(), space_opts.end(), o), space_opts.end()) << o;
  const Json* agent = FindMount(cfg, "/.space/bin/space-agent");
  ASSERT_NE(agent, nullptr);
  EXPECT_EQ((*agent)["source"], "/usr/lib/space/space-agent");
  auto opts = (*agent)["options"].get<std::vector<std::string>>();
  EXPECT_NE(std::find(opts.begin(), opts.end(), "ro"), opts.end());
  const Json* run = FindMount(cfg, "/.space/run");
  ASSERT_NE(run, nullptr);
  EXPECT_EQ((*run)["source"], "/state/run/sb-1");
  // Order matters: /.space must be mounted before the binds inside it.
  EXPECT_LT(MountIndex(cfg, "/.space"), MountIndex(cfg, "/.space/bin/space-agent"));
  for (const char* d :
       {"/proc", "/dev", "/dev/pts", "/dev/mqueue", "/sys", "/sys/fs/cgroup"})
    EXPECT_NE(FindMount(cfg, d), nullptr) << d;
  EXPECT_EQ(FindMount(cfg, "/tmp"), nullptr);  // /tmp stays on the rootfs
}

// Every tmpfs a sandbox mounts is a superblock, and each costs every memory cgroup a
// shrinker slot and a list_lru walked when any cgroup goes away: a sandbox mounts only the
// ones it needs. Masked directories are binds of one empty host directory.
TEST(BundleTest, FewSuperblocksPerSandbox) {
  BundleParams p = Params();
  p.empty_dir = "/state/empty";
  p.masked_dirs = {"/proc/acpi", "/sys/firmware"};
  Json cfg = BuildOciConfig(Spec(), p);
  int tmpfs = 0;
  for (const auto& m : cfg["mounts"]) tmpfs += m["type"] == "tmpfs";
  EXPECT_EQ(tmpfs, 1);  // /dev
  auto masked = cfg["linux"]["maskedPaths"].get<std::vector<std::string>>();
  for (const char* d : {"/proc/acpi", "/sys/firmware"}) {
    EXPECT_EQ(std::count(masked.begin(), masked.end(), d), 0) << d;
    const Json* m = FindMount(cfg, d);
    ASSERT_NE(m, nullptr) << d;
    EXPECT_EQ((*m)["source"], "/state/empty");
    auto o = (*m)["options"].get<std::vector<std::string>>();
    EXPECT_NE(std::find(o.begin(), o.end(), "ro"), o.end()) << d;
  }
  // Masked files, and directories this kernel lacks, stay with crun.
  for (const char* f : {"/proc/kcore", "/proc/keys", "/proc/scsi"})
    EXPECT_EQ(std::count(masked.begin(), masked.end(), f), 1) << f;
  // After /proc and /sys, which they cover.
  EXPECT_LT(MountIndex(cfg, "/proc"), MountIndex(cfg, "/proc/acpi"));
  EXPECT_LT(MountIndex(cfg, "/sys"), MountIndex(cfg, "/sys/firmware"));
  // Without an empty directory crun masks them all.
  Json plain = BuildOciConfig(Spec(), Params());
  EXPECT_EQ(FindMount(plain, "/proc/acpi"), nullptr);
  EXPECT_EQ(plain["linux"]["maskedPaths"].size(), MaskedPaths().size());
}


// On cgroup v1 /sys/fs/cgroup is a read-only bind of a host skeleton and each hierarchy a
// read-only bind of the sandbox's cgroup, after /sys: no `cgroup` mount, for which crun
// would make a tmpfs per sandbox.
TEST(BundleTest, CgroupV1ByBindsWithoutATmpfs) {
  BundleParams p = Params();
  p.cgroup_skeleton = "/state/cgroupfs";
  p.cgroup_binds = {{"/sys/fs/cgroup/memory/space/sb-1", "/sys/fs/cgroup/memory"},
                    {"/sys/fs/cgroup/pids/space/sb-1", "/sys/fs/cgroup/pids"}};
  Json cfg = BuildOciConfig(Spec(), p);
  for (const auto& m : cfg["mounts"]) EXPECT_NE(m["type"], "cgroup") << m.dump();
  const size_t i_skel = MountIndex(cfg, "/sys/fs/cgroup");
  EXPECT_LT(MountIndex(cfg, "/sys"), i_skel);
  EXPECT_LT(i_skel, MountIndex(cfg, "/sys/fs/cgroup/memory"));
  EXPECT_LT(i_skel, MountIndex(cfg, "/sys/fs/cgroup/pids"));
  const Json* skel = FindMount(cfg, "/sys/fs/cgroup");
  ASSERT_NE(skel, nullptr);
  EXPECT_EQ((*skel)["source"], "/state/cgroupfs");
  for (const char* d : {"/sys/fs/cgroup", "/sys/fs/cgroup/memory", "/sys/fs/cgroup/pids"}) {
    const Json* m = FindMount(cfg, d);
    ASSERT_NE(m, nullptr) << d;
    EXPECT_EQ((*m)["type"], "bind") << d;
    auto o = (*m)["options"].get<std::vector<std::string>>();
    EXPECT_NE(std::find(o.begin(), o.end(), "ro"), o.end()) << d;
  }
  EXPECT_EQ((*FindMount(cfg, "/sys/fs/cgroup/memory"))["source"], "/sys/fs/cgroup/memory/space/sb-1");
  // Without a skeleton: the `cgroup` mount, as before.
  Json plain = BuildOciConfig(Spec(), Params());
  ASSERT_NE(FindMount(plain, "/sys/fs/cgroup"), nullptr);
  EXPECT_EQ((*FindMount(plain, "/sys/fs/cgroup"))["type"], "cgroup");
}


// With crun /dev is the run tmpfs's dev/ directory, the host's device nodes bound on its
// files: the sandbox mounts no tmpfs of its own.
TEST(BundleTest, DevOnTheRunTmpfs) {
  BundleParams p = Params();
  p.dev_in_run_dir = true;
  Json cfg = BuildOciConfig(Spec(), p);
  for (const auto& m : cfg["mounts"]) EXPECT_NE(m["type"], "tmpfs") << m.dump();
  const Json* dev = FindMount(cfg, "/dev");
  ASSERT_NE(dev, nullptr);
  EXPECT_EQ((*dev)["type"], "bind");
  EXPECT_EQ((*dev)["source"], p.run_dir + "/dev");
  auto o = (*dev)["options"].get<std::vector<std::string>>();
  for (const char* f : {"nosuid", "noexec", "nodev"})
    EXPECT_NE(std::find(o.begin(), o.end(), f), o.end()) << f;
  const size_t i_dev = MountIndex(cfg, "/dev");
  EXPECT_LT(i_dev, MountIndex(cfg, "/dev/pts"));
  for (const auto& n : DevNodes()) {
    EXPECT_LT(i_dev, MountIndex(cfg, "/dev/" + n)) << n;
    const Json* m = FindMount(cfg, "/dev/" + n);
    ASSERT_NE(m, nullptr) << n;
    EXPECT_EQ((*m)["source"], "/dev/" + n);
    EXPECT_EQ((*m)["type"], "bind");
  }
}

// With a shared sysfs, /sys is a read-only bind of it: no sysfs mount per sandbox.
TEST(BundleTest, SharedSysfsIsBoundReadOnly) {
  BundleParams p = Params();
  p.sysfs_source = "/state/sysfs";
  Json cfg = BuildOciConfig(Spec(), p);
  for (const auto& m : cfg["mounts"]) EXPECT_NE(m["type"], "sysfs") << m.dump();
  const Json* m = FindMount(cfg, "/sys");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ((*m)["type"], "bind");
  EXPECT_EQ((*m)["source"], "/state/sysfs");
  auto o = (*m)["options"].get<std::vector<std::string>>();
  for (const char* want : {"ro", "nosuid", "nodev", "noexec"})
    EXPECT_NE(std::find(o.begin(), o.end(), want), o.end()) << want;
  // Without one, the sandbox's own, read-only.
  Json plain = BuildOciConfig(Spec(), Params());
  const Json* own = FindMount(plain, "/sys");
  ASSERT_NE(own, nullptr);
  EXPECT_EQ((*own)["type"], "sysfs");
}

}  // namespace
}  // namespace space::runtime::oci
