// Integration tests of the oci runtime's own state against the real crun: a second
// runtime object (a daemon restart) taking over, the helper mount namespace crun runs in
// on hybrid hosts, and the tmpfs that holds the runtime's bookkeeping. See oci_test.cc.
#include <linux/magic.h>
#include <sys/statfs.h>

#include "common/json.h"
#include "runtime/oci/oci_test_fixture.h"

namespace space::runtime {
namespace {

using namespace oci_testing;
using sys::CgroupLayout;

TEST_F(OciTest, SecondRuntimeObjectTakesOver) {
  ASSERT_TRUE(Start(Spec("keep")));
  ASSERT_TRUE(ConnectWithRetry(rt_->AgentSocketPath("keep")));
  // A daemon restart: a fresh runtime object on the same state dir (and helper namespace).
  auto rt2 = CreateOciRuntime(opts_);
  ASSERT_TRUE(rt2) << rt2.error().message;
  Runtime* second = rt2->get();
  others_.push_back(std::move(*rt2));
  auto st = second->Inspect("keep");
  ASSERT_TRUE(st) << st.error().message;
  EXPECT_EQ(*st, InstanceState::kRunning);
  auto list = second->List();
  ASSERT_TRUE(list);
  EXPECT_EQ(*list, std::vector<std::string>{"keep"});
  EXPECT_EQ(second->AgentSocketPath("keep"), rt_->AgentSocketPath("keep"));
  ASSERT_TRUE(second->Pause("keep"));
  ASSERT_TRUE(second->Resume("keep"));
  // New instances through the new object work too (the namespace was re-used).
  ASSERT_TRUE(StartOn(second, Spec("fresh")));
  ASSERT_TRUE(Ask(second->AgentSocketPath("fresh"), "facts"));
  std::vector<pid_t> pids = CgroupPids("keep");
  auto d = second->Destroy("keep");
  ASSERT_TRUE(d) << d.error().message;
  for (pid_t p : pids) EXPECT_FALSE(ProcessAlive(p));
  ExpectNoTraces(rt_.get(), opts_, "keep");
}

// What crun reads (/proc/mounts, in each container's new namespace) and copies (the
// namespace it unshares per container) is the helper namespace's table plus one start's
// mounts: it must not grow with the instances running (issue 17: creates got slower
// with every sandbox, most of it crun in the kernel walking and copying mounts).
TEST_F(OciTest, HelperNamespaceDoesNotGrowWithInstances) {
  if (layout_ != CgroupLayout::kHybrid) GTEST_SKIP() << "no helper namespace on this host";
  auto helper_mounts = [&] {
    sys::SpawnOptions so;
    so.argv = {"nsenter", "--mount=" + opts_.state_dir + "/ns/mnt", "cat", "/proc/self/mountinfo"};
    auto r = sys::RunChecked(so);
    EXPECT_TRUE(r) << r.error().message;
    // Only mounts under this test's state dir: the helper namespace receives the host's
    // mounts (a slave of it), and other tests running at once mount and unmount their own.
    if (!r) return -1L;
    long n = 0;
    std::istringstream lines(r->out);
    for (std::string line; std::getline(lines, line);) n += line.find(opts_.state_dir) != std::string::npos;
    return n;
  };
  const auto before = helper_mounts();
  for (const char* id : {"grow1", "grow2", "grow3"}) {
    ASSERT_TRUE(Start(Spec(id)));
    auto facts = Ask(rt_->AgentSocketPath(id), "facts");
    ASSERT_TRUE(facts) << facts.error().message;
  }
  EXPECT_EQ(helper_mounts(), before);
  // Inside a container: its own few mounts, not one per other instance.
  auto inside = Ask(rt_->AgentSocketPath("grow3"), "sh cat /proc/self/mountinfo");
  ASSERT_TRUE(inside);
  EXPECT_EQ(inside->find("/bundles/grow1"), std::string::npos) << *inside;
  EXPECT_EQ(inside->find("/run/grow2"), std::string::npos) << *inside;
  for (const char* id : {"grow1", "grow2", "grow3"}) {
    ASSERT_TRUE(rt_->Destroy(id));
    ExpectNoTraces(rt_.get(), opts_, id);
  }
}

// A helper namespace of an older spaced (a slave that received every sandbox's mounts)
// is replaced, not re-used.
TEST_F(OciTest, HelperNamespaceOfAnOlderSpacedIsReplaced) {
  if (layout_ != CgroupLayout::kHybrid) GTEST_SKIP() << "no helper namespace on this host";
  const std::string ns = opts_.state_dir + "/ns/mnt";
  auto helper_mountinfo = [&] {
    sys::SpawnOptions so;
    so.argv = {"nsenter", "--mount=" + ns, "cat", "/proc/self/mountinfo"};
    auto r = sys::RunChecked(so);
    EXPECT_TRUE(r) << r.error().message;
    return r ? r->out : std::string();
  };
  // A mount the old namespace holds (as one that received every sandbox's would).
  const std::string mark = opts_.state_dir + "/bundles/oldmark";
  ASSERT_TRUE(sys::MkdirAll(mark, 0700));
  sys::SpawnOptions so;
  so.argv = {"nsenter", "--mount=" + ns, "mount", "-t", "tmpfs", "none", mark};
  ASSERT_TRUE(sys::RunChecked(so));
  ASSERT_NE(helper_mountinfo().find(mark + " "), std::string::npos);
  rt_.reset();
  // Re-used while it is of this version...
  auto again = CreateOciRuntime(opts_);
  ASSERT_TRUE(again) << again.error().message;
  again->reset();
  EXPECT_NE(helper_mountinfo().find(mark + " "), std::string::npos);
  // ...replaced once it is not (no marker: made by an older spaced).
  ASSERT_EQ(::unlink((opts_.state_dir + "/ns/mnt.private").c_str()), 0);
  auto rt = CreateOciRuntime(opts_);
  ASSERT_TRUE(rt) << rt.error().message;
  rt_ = std::move(*rt);
  EXPECT_EQ(helper_mountinfo().find(mark + " "), std::string::npos);
  EXPECT_EQ(::rmdir(mark.c_str()), 0);  // not an instance's bundle
  EXPECT_TRUE(sys::Exists(opts_.state_dir + "/ns/mnt.private"));
  ASSERT_TRUE(Start(Spec("newer")));
  ASSERT_TRUE(Ask(rt_->AgentSocketPath("newer"), "facts"));
}

TEST_F(OciTest, HelperNamespaceIsRecreatedWhenGone) {
  if (layout_ != CgroupLayout::kHybrid) GTEST_SKIP() << "no helper namespace on this host";
  std::string ns = opts_.state_dir + "/ns/mnt";
  ASSERT_TRUE(sys::IsMountPoint(ns));
  rt_.reset();
  // What a reboot leaves: the ns file as a plain file, no bind mounts.
  for (const auto& m : sys::MountsUnder(opts_.state_dir)) ASSERT_EQ(::umount2(m.c_str(), 0), 0);
  auto rt = CreateOciRuntime(opts_);
  ASSERT_TRUE(rt) << rt.error().message;
  rt_ = std::move(*rt);
  EXPECT_TRUE(sys::IsMountPoint(ns));
  ASSERT_TRUE(Start(Spec("reb")));
  auto facts = Ask(rt_->AgentSocketPath("reb"), "facts");
  ASSERT_TRUE(facts) << facts.error().message;
}


bool OnTmpfs(const std::string& dir) {
  struct statfs fs;
  return ::statfs(dir.c_str(), &fs) == 0 && fs.f_type == TMPFS_MAGIC;
}

// The runtime's bookkeeping lives on tmpfs mounts of its own (as crun's default root under
// /run does), kept across daemons: a second runtime object re-uses them, stacks nothing.
TEST_F(OciTest, RuntimeStateIsOnATmpfs) {
  const std::vector<std::string> dirs = {opts_.state_dir + "/crun", opts_.state_dir + "/bundles",
                                         opts_.state_dir + "/run"};
  auto mounts_at = [](const std::string& d) {
    auto mi = sys::ReadFile("/proc/self/mountinfo");
    size_t n = 0;
    for (size_t at = 0; mi && (at = mi->find(" " + d + " ", at)) != std::string::npos; ++at) ++n;
    return n;
  };
  for (const auto& d : dirs) {
    EXPECT_TRUE(OnTmpfs(d)) << d;
    EXPECT_EQ(mounts_at(d), 1u) << d;
  }
  ASSERT_TRUE(Start(Spec("vol")));
  ASSERT_TRUE(Ask(rt_->AgentSocketPath("vol"), "facts"));
  // With crun the filter is precompiled: the config carries it as an annotation, not as a
  // profile of ~20 KB more. Once started, only crun's copy of the config is kept.
  EXPECT_FALSE(sys::Exists(opts_.state_dir + "/bundles/vol/config.json"));
  auto cfg = sys::ReadFile(opts_.state_dir + "/crun/vol/config.json");
  ASSERT_TRUE(cfg);
  auto j = ParseJson(*cfg);
  ASSERT_TRUE(j);
  EXPECT_FALSE((*j)["linux"].contains("seccomp"));
  EXPECT_FALSE((*j)["annotations"].value("run.oci.seccomp_bpf_data", "").empty());
  auto inside = Ask(rt_->AgentSocketPath("vol"), "sh grep Seccomp: /proc/self/status");
  ASSERT_TRUE(inside);
  EXPECT_NE(inside->find("Seccomp:\t2"), std::string::npos) << *inside;

  auto rt2 = CreateOciRuntime(opts_);
  ASSERT_TRUE(rt2) << rt2.error().message;
  Runtime* second = rt2->get();
  others_.push_back(std::move(*rt2));
  for (const auto& d : dirs) EXPECT_EQ(mounts_at(d), 1u) << d;
  auto st = second->Inspect("vol");
  ASSERT_TRUE(st) << st.error().message;
  EXPECT_EQ(*st, InstanceState::kRunning);
  ASSERT_TRUE(second->Destroy("vol"));
  ExpectNoTraces(second, opts_, "vol");
}

// A state dir that holds instances of an earlier start (an older spaced's, on disk) is left
// where it is; once a later start finds it empty it moves to a tmpfs, and the helper mount
// namespace copied before then (which would show crun the directory beneath) is replaced.
TEST_F(OciTest, StateOnDiskMovesToATmpfsOnceEmpty) {
  OciOptions o = opts_;
  o.state_dir = tmp_.path() + "/state2";
  const std::string old_bundle = o.state_dir + "/bundles/from-before";
  ASSERT_TRUE(sys::MkdirAll(old_bundle, 0711));
  ASSERT_EQ(::chmod((o.state_dir).c_str(), 0711), 0);
  {
    auto rt = CreateOciRuntime(o);
    ASSERT_TRUE(rt) << rt.error().message;
    EXPECT_FALSE(OnTmpfs(o.state_dir + "/bundles"));
    EXPECT_TRUE(OnTmpfs(o.state_dir + "/crun"));
    Runtime* r = rt->get();
    others_.push_back(std::move(*rt));
    ASSERT_TRUE(StartOn(r, Spec("disk")));
    ASSERT_TRUE(Ask(r->AgentSocketPath("disk"), "facts"));
    ASSERT_TRUE(r->Destroy("disk"));
  }
  ASSERT_EQ(::rmdir(old_bundle.c_str()), 0);
  auto rt = CreateOciRuntime(o);
  ASSERT_TRUE(rt) << rt.error().message;
  EXPECT_TRUE(OnTmpfs(o.state_dir + "/bundles"));
  Runtime* r = rt->get();
  others_.push_back(std::move(*rt));
  auto started = StartOn(r, Spec("mem"));
  ASSERT_TRUE(started) << started.error().message;
  ASSERT_TRUE(Ask(r->AgentSocketPath("mem"), "facts"));
  ASSERT_TRUE(r->Destroy("mem"));
  ExpectNoTraces(r, o, "mem");
}


// On hybrid hosts crun runs in the helper namespace, whose /sys/fs/cgroup leaves the
// cpuset and blkio hierarchies out: crun makes no cpuset or blkio cgroup per sandbox
// (making and removing cpusets cost O(sandboxes) each, removed blkio cgroups linger), and
// the sandbox sees neither. Elsewhere the sandboxes'
// cpuset parent copies its cpus and mems to each new child at mkdir (clone_children).
TEST_F(OciTest, SandboxesMakeNoCpusetOrBlkioCgroupOnHybridHosts) {
  const sys::Hierarchy* h = sys::FindHierarchy(hier_, "cpuset");
  if (!h || h->v2) GTEST_SKIP() << "no cgroup v1 cpuset hierarchy";
  EXPECT_EQ(ReadTrim(h->mount_point + "/" + opts_.cgroup_parent + "/cgroup.clone_children"), "1");
  ASSERT_TRUE(Start(Spec("cpus")));
  ASSERT_TRUE(Ask(rt_->AgentSocketPath("cpus"), "facts"));
  if (layout_ != CgroupLayout::kHybrid) {
    EXPECT_EQ(ReadTrim(CgroupDir("cpuset", "cpus") + "/cpuset.cpus"),
              ReadTrim(h->mount_point + "/cpuset.cpus"));
    return;
  }
  EXPECT_FALSE(sys::Exists(CgroupDir("cpuset", "cpus")));
  const sys::Hierarchy* blkio = sys::FindHierarchy(hier_, "blkio");
  const bool blkio_alone = blkio && !blkio->v2 && blkio->controllers == std::vector<std::string>{"blkio"};
  if (blkio_alone) EXPECT_FALSE(sys::Exists(CgroupDir("blkio", "cpus")));
  EXPECT_TRUE(sys::Exists(CgroupDir("memory", "cpus") + "/memory.limit_in_bytes"));
  EXPECT_TRUE(sys::Exists(CgroupDir("pids", "cpus") + "/pids.max"));
  auto inside = Ask(rt_->AgentSocketPath("cpus"), "sh ls /sys/fs/cgroup; cat /proc/self/cgroup");
  ASSERT_TRUE(inside);
  EXPECT_EQ(inside->find("\ncpuset\n"), std::string::npos) << *inside;
  if (blkio_alone) EXPECT_EQ(inside->find("\nblkio\n"), std::string::npos) << *inside;
  EXPECT_NE(inside->find("\nmemory\n"), std::string::npos) << *inside;
  // The helper namespace keeps the other hierarchies and the links to them, and a second
  // runtime object (a daemon restart) re-uses it as it is.
  auto rt2 = CreateOciRuntime(opts_);
  ASSERT_TRUE(rt2) << rt2.error().message;
  others_.push_back(std::move(*rt2));
  sys::SpawnOptions so;
  so.argv = {"nsenter", "--mount=" + opts_.state_dir + "/ns/mnt", "sh", "-c",
             "ls /sys/fs/cgroup; grep -c ' /sys/fs/cgroup/' /proc/self/mountinfo"};
  auto ls = sys::RunChecked(so);
  ASSERT_TRUE(ls) << ls.error().message;
  EXPECT_EQ(ls->out.find("cpuset"), std::string::npos) << ls->out;
  if (blkio_alone) EXPECT_EQ(ls->out.find("blkio"), std::string::npos) << ls->out;
  EXPECT_EQ(ls->out.find("unified"), std::string::npos) << ls->out;
  for (const auto& hh : hier_) {
    if (hh.v2 || hh.controllers == std::vector<std::string>{"cpuset"} ||
        hh.controllers == std::vector<std::string>{"blkio"})
      continue;
    const std::string name = hh.mount_point.substr(hh.mount_point.rfind('/') + 1);
    EXPECT_NE(ls->out.find(name + "\n"), std::string::npos) << name << ": " << ls->out;
  }
  // Starts and destroys go on with the re-used namespace.
  ASSERT_TRUE(Start(Spec("cpus2")));
  ASSERT_TRUE(Ask(rt_->AgentSocketPath("cpus2"), "facts"));
  EXPECT_FALSE(sys::Exists(CgroupDir("cpuset", "cpus2")));
  if (blkio_alone) EXPECT_FALSE(sys::Exists(CgroupDir("blkio", "cpus2")));
  ASSERT_TRUE(rt_->Destroy("cpus2"));
  ExpectNoTraces(rt_.get(), opts_, "cpus2");
}

// Each file of the agent binary serves at most sandboxes_per_agent_file running sandboxes
// (agent_copies.h: the kernel's reverse map of a file mapped by thousands of processes
// made every agent's exec wait). Beyond it a start runs an identical copy, a file of its
// own; a destroyed sandbox frees its place on the original.
TEST_F(OciTest, EachAgentFileServesAtMostItsShareOfSandboxes) {
  OciOptions o = opts_;
  o.state_dir = tmp_.path() + "/state-copies";
  o.sandboxes_per_agent_file = 1;
  ASSERT_TRUE(sys::MkdirAll(o.state_dir + "/agent", 0755));
  ASSERT_TRUE(sys::WriteFileAtomic(o.state_dir + "/agent/space-agent.7", "left by an older spaced", 0755));
  auto rt = CreateOciRuntime(o);
  ASSERT_TRUE(rt) << rt.error().message;
  Runtime* r = rt->get();
  others_.push_back(std::move(*rt));
  auto exe = [&](const std::string& id) {
    struct stat st {};
    pid_t p = InitHostPid(id);
    if (p <= 0 || ::stat(("/proc/" + std::to_string(p) + "/exe").c_str(), &st) != 0) return ino_t{0};
    return st.st_ino;
  };
  auto ino = [](const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 ? st.st_ino : ino_t{0};
  };
  ASSERT_TRUE(StartOn(r, Spec("ac1")));
  ASSERT_TRUE(StartOn(r, Spec("ac2")));
  for (const char* id : {"ac1", "ac2"}) {
    auto facts = Ask(r->AgentSocketPath(id), "facts");
    ASSERT_TRUE(facts) << facts.error().message;
    EXPECT_TRUE(StartsWith(*facts, "pid=1 uid=0 ")) << *facts;
  }
  const std::string copy = o.state_dir + "/agent/space-agent.1";
  EXPECT_EQ(exe("ac1"), ino(init_));
  EXPECT_EQ(exe("ac2"), ino(copy));
  EXPECT_NE(ino(copy), ino(init_));
  EXPECT_EQ(sys::ReadFile(copy).value_or(""), sys::ReadFile(init_).value_or("?"));
  struct stat cs {};
  ASSERT_EQ(::stat(copy.c_str(), &cs), 0);
  EXPECT_EQ(cs.st_mode & 07777, 0755u);
  EXPECT_FALSE(sys::Exists(o.state_dir + "/agent/space-agent.7")) << "an older spaced's copy stayed";

  ASSERT_TRUE(r->Destroy("ac1"));
  ASSERT_TRUE(StartOn(r, Spec("ac3")));
  ASSERT_TRUE(Ask(r->AgentSocketPath("ac3"), "facts"));
  EXPECT_EQ(exe("ac3"), ino(init_)) << "the original had room again";
  ASSERT_TRUE(StartOn(r, Spec("ac4")));
  ASSERT_TRUE(Ask(r->AgentSocketPath("ac4"), "facts"));
  EXPECT_EQ(exe("ac4"), ino(o.state_dir + "/agent/space-agent.2"));
}

// Every sandbox's /sys is a read-only bind of one sysfs the runtime mounted once (from a
// network namespace with loopback alone), not a superblock of each sandbox's own.
TEST_F(OciTest, SandboxesShareOneReadOnlySysfs) {
  struct statfs fs;
  ASSERT_EQ(::statfs((opts_.state_dir + "/sysfs").c_str(), &fs), 0);
  EXPECT_EQ(fs.f_type, static_cast<decltype(fs.f_type)>(SYSFS_MAGIC));
  ASSERT_TRUE(Start(Spec("sys1")));
  ASSERT_TRUE(Start(Spec("sys2")));
  std::string devs[2];
  for (int i = 0; i < 2; ++i) {
    const std::string id = i ? "sys2" : "sys1";
    auto out = Ask(rt_->AgentSocketPath(id),
                   "sh stat -c dev=%d /sys; ls /sys/class/net; ls -d /sys/kernel/mm; "
                   "echo 1500 > /sys/class/net/lo/mtu && echo wrote; "
                   "mount -o remount,rw /sys && echo remounted; grep ' /sys ' /proc/mounts");
    ASSERT_TRUE(out) << out.error().message;
    EXPECT_NE(out->find("\nlo\n/sys/kernel/mm\n"), std::string::npos) << *out;
    EXPECT_EQ(out->find("wrote"), std::string::npos) << *out;
    EXPECT_EQ(out->find("remounted"), std::string::npos) << *out;
    EXPECT_NE(out->find(" sysfs ro,"), std::string::npos) << *out;
    devs[i] = out->substr(0, out->find('\n'));
  }
  EXPECT_EQ(devs[0], devs[1]) << "one superblock for both";
  // A second runtime object (a daemon restart) keeps the mount it finds.
  auto rt2 = CreateOciRuntime(opts_);
  ASSERT_TRUE(rt2) << rt2.error().message;
  others_.push_back(std::move(*rt2));
  int n = 0;
  for (const auto& m : sys::MountsUnder(opts_.state_dir)) n += m == opts_.state_dir + "/sysfs";
  EXPECT_EQ(n, 1);
}

}  // namespace
}  // namespace space::runtime
