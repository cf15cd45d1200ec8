// Integration tests of the oci runtime against the real crun (and runc), real cgroups and
// real namespaces. PID 1 of each container is oci_test_init (a static stand-in for
// space-agent built beside this test), which answers facts and runs shell commands over
// the agent socket. Needs root, crun and busybox-static; skips with the reason otherwise.
#include "runtime/oci/oci_test_fixture.h"

namespace space::runtime {
namespace {

using namespace oci_testing;
using sys::CgroupLayout;

TEST_F(OciTest, AgentRunsAsIsolatedPid1) {
  InstanceSpec s = Spec("iso");
  auto st = Start(s);
  ASSERT_TRUE(st) << st.error().message;
  auto facts = Ask(rt_->AgentSocketPath("iso"), "facts");
  ASSERT_TRUE(facts) << facts.error().message;
  EXPECT_EQ(*facts, "pid=1 uid=0 gid=0 hostname=box-iso ifaces=lo\n");

  pid_t host_pid = InitHostPid("iso");
  ASSERT_GT(host_pid, 0);
  EXPECT_TRUE(StartsWith(StatusField(host_pid, "Uid"), "1000000\t"))
      << StatusField(host_pid, "Uid");
  EXPECT_TRUE(StartsWith(StatusField(host_pid, "Gid"), "1000000\t"));
  // Not in the test's (the daemon's) session or process group.
  EXPECT_NE(::getsid(host_pid), ::getsid(0));
  EXPECT_NE(::getpgid(host_pid), ::getpgid(0));

  auto inside =
      Ask(rt_->AgentSocketPath("iso"),
          "sh grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status; echo $SPACE_TEST;"
          " ls /.space/bin; ls -d /.space/run/agent.sock; echo $PATH");
  ASSERT_TRUE(inside);
  // Docker's default set (a80425fb) without CAP_NET_RAW (bit 13).
  EXPECT_NE(inside->find("CapEff:\t00000000a80405fb"), std::string::npos) << *inside;
  EXPECT_NE(inside->find("NoNewPrivs:\t1"), std::string::npos) << *inside;
  EXPECT_NE(inside->find("Seccomp:\t2"), std::string::npos) << *inside;
  EXPECT_NE(inside->find("\n1\nspace-agent\n/.space/run/agent.sock\n/usr/local/sbin:"),
            std::string::npos)
      << *inside;

  // The seccomp filter answers EPERM where root-in-userns would otherwise be allowed.
  auto unshare = Ask(rt_->AgentSocketPath("iso"), "sh unshare -U true; echo rc=$?");
  ASSERT_TRUE(unshare);
  EXPECT_NE(unshare->find("rc=1"), std::string::npos) << *unshare;
  auto mount = Ask(rt_->AgentSocketPath("iso"), "sh mount -t tmpfs none /tmp; echo rc=$?");
  ASSERT_TRUE(mount);
  EXPECT_NE(mount->find("rc=1"), std::string::npos) << *mount;

  if (layout_ == CgroupLayout::kHybrid) {
    // crun runs in the helper namespace, which never sees a sandbox's mounts: its start
    // got them in a namespace of its own (mount_ns.h), so the helper's table stays small.
    sys::SpawnOptions so;
    so.argv = {"nsenter", "--mount=" + opts_.state_dir + "/ns/mnt", "cat", "/proc/self/mountinfo"};
    auto mi = sys::RunChecked(so);
    ASSERT_TRUE(mi) << mi.error().message;
    EXPECT_EQ(mi->out.find(opts_.state_dir + "/bundles/iso/rootfs "), std::string::npos) << mi->out;
    EXPECT_EQ(mi->out.find(opts_.state_dir + "/run/iso "), std::string::npos) << mi->out;
    EXPECT_EQ(mi->out.find("/sys/fs/cgroup/unified"), std::string::npos) << mi->out;
  }

  // Its own cgroups, read-only, at the usual paths: the limits read as set.
  if (layout_ != CgroupLayout::kV2) {
    auto cg = Ask(rt_->AgentSocketPath("iso"),
                  "sh cat /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/pids/pids.max; "
                  "ls /sys/fs/cgroup; echo 1 > /sys/fs/cgroup/pids/notify_on_release; echo rc=$?");
    ASSERT_TRUE(cg);
    EXPECT_NE(cg->find(std::to_string(128ll << 20) + "\n64\n"), std::string::npos) << *cg;
    EXPECT_NE(cg->find("memory"), std::string::npos) << *cg;
    EXPECT_NE(cg->find("freezer"), std::string::npos) << *cg;
    EXPECT_EQ(cg->find("unified"), std::string::npos) << *cg;
    EXPECT_NE(cg->find("rc=1"), std::string::npos) << *cg;  // read-only
  }

  // The writable run dir cannot fill the host's disk: 4 MiB, and with crun the room of
  // the sandbox's /dev too (a quarter of the 128 MiB limit), which lives on it.
  auto fill = Ask(rt_->AgentSocketPath("iso"),
                  "sh dd if=/dev/zero of=/.space/run/big bs=1M count=40; echo rc=$?");
  ASSERT_TRUE(fill);
  EXPECT_NE(fill->find("rc=1"), std::string::npos) << *fill;
  struct stat big;
  ASSERT_EQ(::stat((opts_.state_dir + "/run/iso/big").c_str(), &big), 0);
  EXPECT_LE(big.st_size, (4 << 20) + (32 << 20));
  ASSERT_EQ(::unlink((opts_.state_dir + "/run/iso/big").c_str()), 0);

  // Its /dev: the usual nodes (binds of the host's), symlinks, writable by its root (the
  // agent makes /dev/shm there; this test's init does not).
  auto dev = Ask(rt_->AgentSocketPath("iso"),
                 "sh echo x > /dev/null && head -c 4 /dev/zero | wc -c && head -c 8 /dev/urandom | wc -c"
                 " && readlink /dev/ptmx && readlink /dev/fd && touch /dev/probe && echo dev-ok;"
                 " echo x 2>/dev/null >/dev/full; echo full=$?; ls /dev");
  ASSERT_TRUE(dev);
  EXPECT_NE(dev->find("4\n8\npts/ptmx\n/proc/self/fd\ndev-ok\nfull=1\n"), std::string::npos) << *dev;
  for (const char* n : {"null", "zero", "full", "tty", "random", "urandom", "pts", "mqueue", "probe", "stdin"})
    EXPECT_NE(dev->find(std::string("\n") + n + "\n"), std::string::npos) << n << ": " << *dev;

  // The rootfs itself got nothing but the /.space mount point.
  EXPECT_TRUE(sys::Exists(rootfs_ + "/.space"));
  EXPECT_FALSE(sys::Exists(rootfs_ + "/.space/bin"));

  // Superblocks of its own cost every memory cgroup on the host a shrinker slot and a
  // list_lru: the sandbox mounts no tmpfs of its own; /.space and (with crun) /dev are its
  // run tmpfs, masked directories bind one empty directory, and on cgroup v1
  // /sys/fs/cgroup binds a host skeleton and the sandbox's own cgroups (crun would make a
  // tmpfs for it).
  auto mi = Ask(rt_->AgentSocketPath("iso"),
                "sh cat /proc/self/mountinfo; echo acpi:; ls -A /proc/acpi; echo end");
  ASSERT_TRUE(mi);
  // The runtime's bundles live on a tmpfs of the host's shared by all sandboxes.
  struct stat bst;
  ASSERT_EQ(::stat((opts_.state_dir + "/bundles").c_str(), &bst), 0);
  const std::string bundles_dev =
      std::to_string(major(bst.st_dev)) + ":" + std::to_string(minor(bst.st_dev));
  std::map<std::string, std::string> tmpfs;  // mount point -> device (the superblock)
  std::set<std::string> devs;
  std::istringstream lines(*mi);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    std::string id, parent, dev, root, mount_point;
    fields >> id >> parent >> dev >> root >> mount_point;
    auto dash = line.find(" - ");
    if (dash == std::string::npos || line.compare(dash + 3, 6, "tmpfs ") != 0) continue;
    if (dev == bundles_dev) continue;  // one tmpfs for every sandbox's bundle (boot_id's bind)
    tmpfs[mount_point] = dev;
    devs.insert(dev);
  }
  // The run tmpfs (at /.space and /.space/run, and at /dev with crun).
  EXPECT_EQ(devs.size(), 1u) << *mi;
  EXPECT_FALSE(tmpfs["/.space"].empty()) << *mi;
  EXPECT_EQ(tmpfs["/.space"], tmpfs["/.space/run"]) << *mi;
  EXPECT_EQ(tmpfs["/.space"], tmpfs["/dev"]) << *mi;
  EXPECT_EQ(tmpfs.count("/dev/shm"), 0u) << *mi;
  if (sys::Exists("/proc/acpi")) {
    EXPECT_NE(mi->find(" /proc/acpi ro,"), std::string::npos) << *mi;
    EXPECT_NE(mi->find("\nacpi:\nend\n"), std::string::npos) << *mi;  // empty
  }

  auto state = rt_->Inspect("iso");
  ASSERT_TRUE(state);
  EXPECT_EQ(*state, InstanceState::kRunning);
  auto list = rt_->List();
  ASSERT_TRUE(list);
  EXPECT_EQ(*list, std::vector<std::string>{"iso"});
}

// Each start is a boot of its own: a boot id that is not the host's, unchanged while the
// sandbox runs, read-only inside, and new at the next start (E2B's tests read it to tell a
// pause that restarts processes from one that keeps them).
TEST_F(OciTest, EachStartHasABootIdOfItsOwn) {
  auto host = sys::ReadFile("/proc/sys/kernel/random/boot_id");
  ASSERT_TRUE(host);
  auto read = [&]() -> std::string {
    auto r = Ask(rt_->AgentSocketPath("boot"), "sh cat /proc/sys/kernel/random/boot_id");
    return r ? *r : "error: " + r.error().message;
  };
  ASSERT_TRUE(Start(Spec("boot")));
  std::string first = read();
  ASSERT_EQ(first.size(), 36 + 1 + std::string("exit=0\n").size()) << first;
  EXPECT_EQ(first.substr(37), "exit=0\n") << first;
  EXPECT_EQ(first[14], '4') << first;
  EXPECT_NE(first.substr(0, 37), *host);
  EXPECT_EQ(read(), first);
  auto write = Ask(rt_->AgentSocketPath("boot"),
                   "sh echo 00000000-0000-4000-8000-000000000000 > /proc/sys/kernel/random/boot_id");
  ASSERT_TRUE(write);
  EXPECT_EQ(write->find("exit=0"), std::string::npos) << *write;
  EXPECT_EQ(read(), first);
  ASSERT_TRUE(rt_->Destroy("boot"));
  ASSERT_TRUE(Start(Spec("boot")));
  std::string second = read();
  EXPECT_EQ(second.size(), first.size()) << second;
  EXPECT_NE(second, first);
}

TEST_F(OciTest, LimitsAreConfiguredAndPidsEnforced) {
  InstanceSpec s = Spec("lim");
  s.limits.pids = 32;
  s.limits.memory_bytes = 64ll << 20;
  s.limits.cpus = 0.5;
  s.limits.nofile = 1234;
  ASSERT_TRUE(Start(s));
  const std::string sock = rt_->AgentSocketPath("lim");
  ASSERT_TRUE(ConnectWithRetry(sock));

  if (layout_ == CgroupLayout::kV2) {
    std::string dir = CgroupDir("memory", "lim");
    EXPECT_EQ(ReadTrim(dir + "/memory.max"), std::to_string(64ll << 20));
    EXPECT_EQ(ReadTrim(dir + "/pids.max"), "32");
    EXPECT_EQ(ReadTrim(dir + "/cpu.max"), "50000 100000");
  } else {
    EXPECT_EQ(ReadTrim(CgroupDir("memory", "lim") + "/memory.limit_in_bytes"),
              std::to_string(64ll << 20));
    if (sys::Exists(CgroupDir("memory", "lim") + "/memory.memsw.limit_in_bytes")) {
      EXPECT_EQ(ReadTrim(CgroupDir("memory", "lim") + "/memory.memsw.limit_in_bytes"),
                std::to_string(64ll << 20));
    }
    EXPECT_EQ(ReadTrim(CgroupDir("pids", "lim") + "/pids.max"), "32");
    EXPECT_EQ(ReadTrim(CgroupDir("cpu", "lim") + "/cpu.cfs_quota_us"), "50000");
    EXPECT_EQ(ReadTrim(CgroupDir("cpu", "lim") + "/cpu.cfs_period_us"), "100000");
  }
  auto nofile = Ask(sock, "sh ulimit -n");
  ASSERT_TRUE(nofile);
  EXPECT_EQ(*nofile, "1234\nexit=0\n");

  // Try to start 100 sleepers: the pids limit stops the fork bomb at 32 tasks.
  auto bomb = Ask(sock,
                  "sh n=0; for i in $(seq 100); do sleep 30 >/dev/null 2>&1 & n=$((n+1)); done;"
                  " echo started");
  ASSERT_TRUE(bomb);
  std::string pids_dir = CgroupDir("pids", "lim");
  int64_t current = std::stoll(ReadTrim(pids_dir + "/pids.current"));
  EXPECT_LE(current, 32);
  EXPECT_GE(current, 20);  // it did get close to the limit
  std::string events = ReadTrim(pids_dir + "/pids.events");
  EXPECT_NE(events.find("max "), std::string::npos);
  EXPECT_EQ(events.find("max 0"), std::string::npos) << "no fork was refused: " << events;
}

TEST_F(OciTest, PauseFreezesAndResumeThaws) {
  ASSERT_TRUE(Start(Spec("pz")));
  const std::string sock = rt_->AgentSocketPath("pz");
  ASSERT_TRUE(ConnectWithRetry(sock));
  ASSERT_TRUE(rt_->Pause("pz"));
  auto st = rt_->Inspect("pz");
  ASSERT_TRUE(st);
  EXPECT_EQ(*st, InstanceState::kPaused);
  if (layout_ == CgroupLayout::kV2) {
    EXPECT_NE(ReadTrim(CgroupDir("freezer", "pz") + "/cgroup.events").find("frozen 1"),
              std::string::npos);
  } else {
    EXPECT_EQ(ReadTrim(CgroupDir("freezer", "pz") + "/freezer.state"), "FROZEN");
  }
  // Frozen: the agent does not answer (the connection queues in the backlog).
  {
    auto fd = ConnectOnce(sock);
    ASSERT_TRUE(fd);
    ASSERT_TRUE(sys::WriteAll(fd->get(), "facts\n"));
    pollfd p{fd->get(), POLLIN, 0};
    EXPECT_EQ(::poll(&p, 1, 100), 0) << "a frozen agent answered";
  }
  EXPECT_TRUE(rt_->Pause("pz"));  // idempotent
  ASSERT_TRUE(rt_->Resume("pz"));
  st = rt_->Inspect("pz");
  ASSERT_TRUE(st);
  EXPECT_EQ(*st, InstanceState::kRunning);
  auto facts = Ask(sock, "facts");
  ASSERT_TRUE(facts);
  EXPECT_TRUE(StartsWith(*facts, "pid=1 "));
  EXPECT_TRUE(rt_->Resume("pz"));  // idempotent

  auto missing = rt_->Pause("nope");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, Errc::kNotFound);
}

TEST_F(OciTest, DestroyKillsDaemonsAndLeavesNothing) {
  ASSERT_TRUE(Start(Spec("dd")));
  const std::string sock = rt_->AgentSocketPath("dd");
  // A double-forked daemon in its own session, reparented to the container's init.
  auto r = Ask(sock, "sh (setsid sleep 1000 >/dev/null 2>&1 &); echo ok");
  ASSERT_TRUE(r);
  // "ok" may come before the backgrounded shell has exec'd sleep: look for a while.
  std::vector<pid_t> pids;
  bool saw_daemon = false;
  for (int i = 0; i < 100 && !saw_daemon; ++i) {
    if (i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    pids = CgroupPids("dd");
    for (pid_t p : pids) {
      std::ifstream cmd("/proc/" + std::to_string(p) + "/cmdline");
      std::string c((std::istreambuf_iterator<char>(cmd)), {});
      saw_daemon = saw_daemon || c.find("1000") != std::string::npos;
    }
  }
  ASSERT_GE(pids.size(), 2u);
  EXPECT_TRUE(saw_daemon);

  auto d = rt_->Destroy("dd");
  ASSERT_TRUE(d) << d.error().message;
  for (pid_t p : pids) EXPECT_FALSE(ProcessAlive(p)) << "pid " << p << " survived";
  ExpectNoTraces(rt_.get(), opts_, "dd");
  EXPECT_TRUE(sys::Exists(rootfs_ + "/bin/busybox")) << "the rootfs must survive";
  auto again = rt_->Destroy("dd");
  EXPECT_TRUE(again) << again.error().message;
  EXPECT_TRUE(rt_->Destroy("never-existed"));
}

TEST_F(OciTest, DestroyWhilePaused) {
  ASSERT_TRUE(Start(Spec("dp")));
  ASSERT_TRUE(ConnectWithRetry(rt_->AgentSocketPath("dp")));
  std::vector<pid_t> pids = CgroupPids("dp");
  ASSERT_TRUE(rt_->Pause("dp"));
  auto d = rt_->Destroy("dp");
  ASSERT_TRUE(d) << d.error().message;
  for (pid_t p : pids) EXPECT_FALSE(ProcessAlive(p)) << "pid " << p << " survived";
  ExpectNoTraces(rt_.get(), opts_, "dp");
}

TEST_F(OciTest, DestroyWithoutRuntimeStateKillsThroughTheCgroup) {
  ASSERT_TRUE(Start(Spec("lost")));
  const std::string sock = rt_->AgentSocketPath("lost");
  ASSERT_TRUE(Ask(sock, "sh (setsid sleep 1000 >/dev/null 2>&1 &); echo ok"));
  std::vector<pid_t> pids = CgroupPids("lost");
  ASSERT_GE(pids.size(), 2u);
  // The runtime's bookkeeping is gone (as after a crash of crun itself): the instance is
  // still listed, reported stopped, and Destroy falls back to the cgroup.
  ASSERT_TRUE(sys::RemoveAll(opts_.state_dir + "/crun/lost"));
  auto st = rt_->Inspect("lost");
  ASSERT_TRUE(st);
  EXPECT_EQ(*st, InstanceState::kStopped);
  auto list = rt_->List();
  ASSERT_TRUE(list);
  EXPECT_EQ(*list, std::vector<std::string>{"lost"});
  auto d = rt_->Destroy("lost");
  ASSERT_TRUE(d) << d.error().message;
  for (pid_t p : pids) EXPECT_FALSE(ProcessAlive(p)) << "pid " << p << " survived";
  ExpectNoTraces(rt_.get(), opts_, "lost");
}

TEST_F(OciTest, ConcurrentStartsAndDestroys) {
  constexpr int kN = 4;
  std::vector<std::thread> threads;
  std::vector<std::string> errors(kN);
  for (int i = 0; i < kN; ++i) started_.push_back({rt_.get(), "c" + std::to_string(i)});
  for (int i = 0; i < kN; ++i) {
    threads.emplace_back([&, i] {
      std::string id = "c" + std::to_string(i);
      auto st = rt_->Start(Spec(id));
      if (!st) {
        errors[i] = st.error().message;
        return;
      }
      auto f = Ask(rt_->AgentSocketPath(id), "facts");
      if (!f || !StartsWith(*f, "pid=1 ")) {
        errors[i] = "no agent";
        return;
      }
      auto d = rt_->Destroy(id);
      if (!d) errors[i] = d.error().message;
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kN; ++i) {
    EXPECT_EQ(errors[i], "") << "c" << i;
    ExpectNoTraces(rt_.get(), opts_, "c" + std::to_string(i));
  }
}

TEST_F(OciTest, AgentDeathIsStoppedAndDestroyable) {
  ASSERT_TRUE(Start(Spec("crash")));
  ASSERT_TRUE(ConnectWithRetry(rt_->AgentSocketPath("crash")));
  pid_t init = InitHostPid("crash");
  ASSERT_GT(init, 0);
  ASSERT_EQ(::kill(init, SIGKILL), 0);
  InstanceState state = InstanceState::kRunning;
  for (int i = 0; i < 200 && state == InstanceState::kRunning; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    auto st = rt_->Inspect("crash");
    ASSERT_TRUE(st) << st.error().message;
    state = *st;
  }
  EXPECT_EQ(state, InstanceState::kStopped);
  EXPECT_FALSE(rt_->Pause("crash"));
  auto d = rt_->Destroy("crash");
  ASSERT_TRUE(d) << d.error().message;
  ExpectNoTraces(rt_.get(), opts_, "crash");
}

TEST_F(OciTest, ContainerOutlivesTheDaemon) {
  // A stand-in daemon in its own process group starts the container, then its whole
  // process group is SIGKILLed (as a supervisor would). The container must not notice.
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  started_.push_back({rt_.get(), "orphan"});
  pid_t daemon = ::fork();
  ASSERT_GE(daemon, 0);
  if (daemon == 0) {
    ::close(p[0]);
    ::setpgid(0, 0);
    auto rt = CreateOciRuntime(opts_);
    bool ok = rt && (*rt)->Start(Spec("orphan"));
    (void)!::write(p[1], ok ? "y" : "n", 1);
    for (;;) ::pause();
  }
  ::close(p[1]);
  char c = 0;
  ASSERT_EQ(::read(p[0], &c, 1), 1);
  ::close(p[0]);
  ::kill(-daemon, SIGKILL);
  int status;
  ASSERT_EQ(::waitpid(daemon, &status, 0), daemon);
  ASSERT_EQ(c, 'y') << "start in the stand-in daemon failed";
  auto facts = Ask(rt_->AgentSocketPath("orphan"), "facts");
  ASSERT_TRUE(facts) << facts.error().message;
  EXPECT_TRUE(StartsWith(*facts, "pid=1 "));
  auto st = rt_->Inspect("orphan");
  ASSERT_TRUE(st);
  EXPECT_EQ(*st, InstanceState::kRunning);
}

TEST_F(OciTest, SameIdTwiceIsAConflict) {
  ASSERT_TRUE(Start(Spec("twice")));
  auto second = rt_->Start(Spec("twice"));  // not registered: it must not own anything
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().code, Errc::kConflict);
  // The first one is untouched.
  auto facts = Ask(rt_->AgentSocketPath("twice"), "facts");
  ASSERT_TRUE(facts) << facts.error().message;
  auto st = rt_->Inspect("twice");
  ASSERT_TRUE(st);
  EXPECT_EQ(*st, InstanceState::kRunning);
}

TEST_F(OciTest, FailedStartCleansUpAndExplains) {
  // /.space as a file: the runtime cannot mount the agent's tmpfs on it.
  std::string bad = tmp_.path() + "/badroot";
  ASSERT_TRUE(MakeRootfs(bad, kShift));
  ASSERT_TRUE(sys::WriteFileAtomic(bad + "/.space", "not a dir"));
  InstanceSpec s = Spec("bad");
  s.rootfs = bad;
  auto st = Start(s);
  ASSERT_FALSE(st);
  std::printf("[ info ] failed start says: %s\n", st.error().message.c_str());
  EXPECT_NE(st.error().message.find("crun run"), std::string::npos) << st.error().message;
  EXPECT_GT(st.error().message.size(), std::string("oci: start bad: crun run: exit 1").size())
      << "no runtime output in: " << st.error().message;
  ExpectNoTraces(rt_.get(), opts_, "bad");

  InstanceSpec nofs = Spec("nofs");
  nofs.rootfs = tmp_.path() + "/does-not-exist";
  auto st2 = rt_->Start(nofs);
  ASSERT_FALSE(st2);
  ExpectNoTraces(rt_.get(), opts_, "nofs");
  InstanceSpec badid = Spec("../x");
  EXPECT_EQ(rt_->Start(badid).error().code, Errc::kInvalidArgument);
}

TEST_F(OciTest, RejectsWhatCannotWork) {
  // A state dir the sandbox's root (an unprivileged host uid) cannot traverse.
  OciOptions o = opts_;
  ASSERT_TRUE(sys::MkdirAll(tmp_.path() + "/closed", 0700));
  o.state_dir = tmp_.path() + "/closed/state";
  auto rt = CreateOciRuntime(o);
  ASSERT_FALSE(rt);
  EXPECT_EQ(rt.error().code, Errc::kInvalidArgument);
  EXPECT_NE(rt.error().message.find("/closed "), std::string::npos) << rt.error().message;
  o.user_namespace = false;  // without a user namespace the runtime's root resolves paths
  auto rt2 = CreateOciRuntime(o);
  EXPECT_TRUE(rt2) << rt2.error().message;

  o = opts_;
  o.runtime_binary = "no-such-runtime";
  EXPECT_FALSE(CreateOciRuntime(o));
  o = opts_;
  o.agent_binary = tmp_.path() + "/missing-agent";
  EXPECT_FALSE(CreateOciRuntime(o));

  InstanceSpec s = Spec("inv");
  s.env = {"NOEQUALS"};
  EXPECT_EQ(rt_->Start(s).error().code, Errc::kInvalidArgument);
  s = Spec("inv");
  s.limits.pids = -1;
  EXPECT_EQ(rt_->Start(s).error().code, Errc::kInvalidArgument);
  s = Spec("inv");
  s.network = true;  // not implemented: refused rather than silently isolated
  EXPECT_EQ(rt_->Start(s).error().code, Errc::kInvalidArgument);
  ExpectNoTraces(rt_.get(), opts_, "inv");
}

TEST_F(OciTest, WithoutUserNamespace) {
  OciOptions o = opts_;
  o.state_dir = tmp_.path() + "/state-nouser";
  o.user_namespace = false;
  auto rt = CreateOciRuntime(o);
  ASSERT_TRUE(rt) << rt.error().message;
  Runtime* r = rt->get();
  others_.push_back(std::move(*rt));
  std::string root = tmp_.path() + "/root0";
  ASSERT_TRUE(MakeRootfs(root, 0));
  InstanceSpec s = Spec("nouser");
  s.rootfs = root;
  ASSERT_TRUE(StartOn(r, s));
  auto facts = Ask(r->AgentSocketPath("nouser"), "facts");
  ASSERT_TRUE(facts) << facts.error().message;
  EXPECT_TRUE(StartsWith(*facts, "pid=1 uid=0 ")) << *facts;
  pid_t host_pid = InitHostPid("nouser");
  ASSERT_GT(host_pid, 0);
  EXPECT_TRUE(StartsWith(StatusField(host_pid, "Uid"), "0\t"));
  ASSERT_TRUE(r->Destroy("nouser"));
  ExpectNoTraces(r, o, "nouser");
}

TEST_F(OciTest, RuncAlternative) {
  if (!InPath("runc")) GTEST_SKIP() << "runc is not installed";
  OciOptions o = opts_;
  o.runtime_binary = "runc";
  // A state dir belongs to one runtime binary.
  auto same_dir = CreateOciRuntime(o);
  ASSERT_FALSE(same_dir);
  EXPECT_EQ(same_dir.error().code, Errc::kInvalidArgument);
  o.state_dir = tmp_.path() + "/state-runc";
  auto rt = CreateOciRuntime(o);
  ASSERT_TRUE(rt) << rt.error().message;
  Runtime* r = rt->get();
  others_.push_back(std::move(*rt));
  auto started = StartOn(r, Spec("rc"));
  ASSERT_TRUE(started) << started.error().message;
  auto facts = Ask(r->AgentSocketPath("rc"), "facts");
  ASSERT_TRUE(facts) << facts.error().message;
  EXPECT_EQ(*facts, "pid=1 uid=0 gid=0 hostname=box-rc ifaces=lo\n");
  auto st = r->Inspect("rc");
  ASSERT_TRUE(st);
  EXPECT_EQ(*st, InstanceState::kRunning);
  ASSERT_TRUE(r->Pause("rc"));
  st = r->Inspect("rc");
  ASSERT_TRUE(st);
  EXPECT_EQ(*st, InstanceState::kPaused);
  ASSERT_TRUE(r->Resume("rc"));
  auto sh = Ask(r->AgentSocketPath("rc"), "sh (setsid sleep 1000 >/dev/null 2>&1 &); echo ok");
  ASSERT_TRUE(sh);
  std::vector<pid_t> pids = CgroupPids("rc");
  int64_t t0 = MonotonicNanos();
  auto d = r->Destroy("rc");
  int64_t t1 = MonotonicNanos();
  ASSERT_TRUE(d) << d.error().message;
  std::printf("[ runc ] destroy %.1f ms\n", static_cast<double>(t1 - t0) / 1e6);
  for (pid_t p : pids) EXPECT_FALSE(ProcessAlive(p));
  ExpectNoTraces(r, o, "rc");
}

// Start -> agent socket connectable, pause/resume and destroy, over 20 runs.
TEST_F(OciTest, Timings) {
  constexpr int kRuns = 20;
  std::vector<int64_t> start_us, connect_us, pause_us, resume_us, destroy_us;
  for (int i = 0; i < kRuns; ++i) {
    std::string id = "t" + std::to_string(i);
    int64_t t0 = MonotonicNanos();
    auto st = Start(Spec(id));
    ASSERT_TRUE(st) << st.error().message;
    int64_t t1 = MonotonicNanos();
    auto fd = ConnectWithRetry(rt_->AgentSocketPath(id));
    ASSERT_TRUE(fd) << fd.error().message;
    int64_t t2 = MonotonicNanos();
    ASSERT_TRUE(rt_->Pause(id));
    int64_t t3 = MonotonicNanos();
    ASSERT_TRUE(rt_->Resume(id));
    int64_t t4 = MonotonicNanos();
    fd->Reset();
    ASSERT_TRUE(rt_->Destroy(id));
    int64_t t5 = MonotonicNanos();
    start_us.push_back((t1 - t0) / 1000);
    connect_us.push_back((t2 - t0) / 1000);
    pause_us.push_back((t3 - t2) / 1000);
    resume_us.push_back((t4 - t3) / 1000);
    destroy_us.push_back((t5 - t4) / 1000);
  }
  auto show = [](const char* what, const std::vector<int64_t>& v) {
    std::printf("[ oci/%s ] %-28s p50 %7.2f ms  p90 %7.2f ms  max %7.2f ms\n", "crun", what,
                Percentile(v, 0.5) / 1e3, Percentile(v, 0.9) / 1e3, Percentile(v, 1.0) / 1e3);
  };
  show("Start returns", start_us);
  show("Start -> socket connectable", connect_us);
  show("Pause", pause_us);
  show("Resume", resume_us);
  show("Destroy", destroy_us);
}

}  // namespace
}  // namespace space::runtime
