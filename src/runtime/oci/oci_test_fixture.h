// Shared by the oci runtime's integration tests (oci_test.cc: isolation, limits,
// lifecycle; oci_state_test.cc: the runtime's state across daemons, its helper mount
// namespace and its tmpfs): helpers and the OciTest fixture. Test-only.
#pragma once

#include "runtime/oci/oci.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "sys/cgroups.h"
#include "sys/sys.h"

namespace space::runtime::oci_testing {

using sys::CgroupLayout;

inline bool InPath(const std::string& name) {
  for (const char* d :
       {"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}) {
    if (::access((std::string(d) + "/" + name).c_str(), X_OK) == 0) return true;
  }
  return false;
}

// Connects to the agent socket without following a symlink planted by the sandbox (the
// run dir is writable from inside): open O_PATH|O_NOFOLLOW, check it is a socket, and
// connect through /proc/self/fd.
inline Result<sys::UniqueFd> ConnectOnce(const std::string& path) {
  int pfd = ::open(path.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
  if (pfd < 0) return ErrnoFail("open " + path);
  sys::UniqueFd p(pfd);
  struct stat st;
  if (::fstat(pfd, &st) != 0 || !S_ISSOCK(st.st_mode))
    return Fail(Errc::kPermissionDenied, path + " is not a socket");
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoFail("socket");
  sys::UniqueFd s(fd);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "/proc/self/fd/%d", pfd);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    return ErrnoFail("connect " + path);
  return s;
}

inline Result<sys::UniqueFd> ConnectWithRetry(const std::string& path, int64_t timeout_ms = 5000) {
  int64_t deadline = MonotonicNanos() + timeout_ms * 1000000;
  for (;;) {
    auto fd = ConnectOnce(path);
    if (fd || MonotonicNanos() > deadline) return fd;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

// One request line, the whole answer back.
inline Result<std::string> Ask(const std::string& path, const std::string& line) {
  auto fd = ConnectWithRetry(path);
  if (!fd) return tl::unexpected(fd.error());
  SPACE_TRY(sys::WriteAll(fd->get(), line + "\n"));
  return sys::ReadAll(fd->get());
}

inline std::string ReadTrim(const std::string& path) {
  auto s = sys::ReadFile(path);
  if (!s) return "<" + s.error().message + ">";
  std::string v = *s;
  while (!v.empty() && (v.back() == '\n' || v.back() == ' ')) v.pop_back();
  return v;
}

inline std::string StatusField(pid_t pid, const std::string& key) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (StartsWith(line, key + ":")) {
      std::string v = line.substr(key.size() + 1);
      v.erase(0, v.find_first_not_of(" \t"));
      return v;
    }
  }
  return "";
}

inline bool ProcessAlive(pid_t pid) {
  // A zombie is dead for our purposes; it only waits for its parent (host init) to reap.
  std::string state = StatusField(pid, "State");
  return !state.empty() && state[0] != 'Z';
}

inline Status LchownTree(const std::string& path, uid_t uid) {
  if (::lchown(path.c_str(), uid, uid) != 0) return ErrnoFail("lchown " + path);
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return ErrnoFail("lstat " + path);
  if (!S_ISDIR(st.st_mode)) return Ok();
  DIR* d = ::opendir(path.c_str());
  if (!d) return ErrnoFail("opendir " + path);
  Status r = Ok();
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n == "." || n == "..") continue;
    auto s = LchownTree(path + "/" + n, uid);
    if (!s && r) r = s;
  }
  ::closedir(d);
  return r;
}

// A minimal root: busybox and a few applet links, /etc/passwd, empty mount points.
inline Status MakeRootfs(const std::string& dir, uid_t owner) {
  for (const char* d : {"", "/bin", "/etc", "/proc", "/dev", "/sys", "/tmp", "/root"})
    SPACE_TRY(sys::MkdirAll(dir + d, 0755));
  if (::chmod((dir + "/tmp").c_str(), 01777) != 0) return ErrnoFail("chmod tmp");
  auto bb = sys::ReadFile("/bin/busybox");
  if (!bb) return tl::unexpected(bb.error());
  {
    auto f = sys::Open(dir + "/bin/busybox", O_WRONLY | O_CREAT | O_TRUNC, 0755);
    if (!f) return tl::unexpected(f.error());
    SPACE_TRY(sys::WriteAll(f->get(), *bb));
  }
  for (const char* a : {"sh", "echo", "cat", "ls", "sleep", "id", "seq", "setsid", "ps", "grep",
                        "hostname", "mount", "unshare", "true", "kill", "dd"}) {
    if (::symlink("busybox", (dir + "/bin/" + a).c_str()) != 0) return ErrnoFail("symlink");
  }
  {
    auto f = sys::Open(dir + "/etc/passwd", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (!f) return tl::unexpected(f.error());
    SPACE_TRY(sys::WriteAll(f->get(), "root:x:0:0:root:/root:/bin/sh\n"));
  }
  {
    auto f = sys::Open(dir + "/etc/group", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (!f) return tl::unexpected(f.error());
    SPACE_TRY(sys::WriteAll(f->get(), "root:x:0:\n"));
  }
  return owner ? LchownTree(dir, owner) : Ok();
}

inline int64_t Percentile(std::vector<int64_t> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

// The memory cgroups parked in `parent` (memcg_pool.h): names starting ".park-".
inline std::vector<std::string> ParkedMemoryCgroups(const std::string& parent) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(parent.c_str())) {
    while (dirent* e = ::readdir(d)) {
      if (e->d_type == DT_DIR && StartsWith(e->d_name, ".park-")) out.emplace_back(e->d_name);
    }
    ::closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

class OciTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (crun, cgroups, mounts)";
    if (!InPath("crun")) GTEST_SKIP() << "crun is not installed (apt-get install crun)";
    if (::access("/bin/busybox", X_OK) != 0)
      GTEST_SKIP() << "/bin/busybox missing (apt-get install busybox-static)";
    init_ = sys::SelfExeDir() + "/oci_test_init";
    ASSERT_EQ(::access(init_.c_str(), X_OK), 0) << init_ << " was not built";

    auto t = sys::TempDir::Create("/tmp", "space-oci-");
    ASSERT_TRUE(t) << t.error().message;
    tmp_ = std::move(*t);
    // The sandbox's root (an unprivileged host uid) must be able to traverse to its binds.
    ASSERT_EQ(::chmod(tmp_.path().c_str(), 0711), 0);
    rootfs_ = tmp_.path() + "/root";
    auto mk = MakeRootfs(rootfs_, kShift);
    ASSERT_TRUE(mk) << mk.error().message;

    opts_.state_dir = tmp_.path() + "/state";
    opts_.agent_binary = init_;
    // A parent of our own, so the tests never touch a real daemon's cgroups.
    opts_.cgroup_parent = "space-test-" + std::to_string(::getpid());
    auto rt = CreateOciRuntime(opts_);
    ASSERT_TRUE(rt) << rt.error().message;
    rt_ = std::move(*rt);
    auto layout = sys::DetectCgroupLayout();
    ASSERT_TRUE(layout);
    layout_ = *layout;
    hier_ = sys::CgroupHierarchies();
  }

  void TearDown() override {
    for (const auto& [rt, id] : started_) {
      auto d = rt->Destroy(id);
      EXPECT_TRUE(d) << "cleanup " << id << ": " << d.error().message;
    }
    started_.clear();
    others_.clear();
    rt_.reset();
    // Our cgroup parent, in every hierarchy, with the memory cgroups parked in it.
    for (const auto& h : hier_) {
      const std::string parent = h.mount_point + "/" + opts_.cgroup_parent;
      for (const auto& name : ParkedMemoryCgroups(parent)) ::rmdir((parent + "/" + name).c_str());
      ::rmdir(parent.c_str());
    }
    // The helper namespace's bind mounts (the namespace dies with the last one).
    if (!tmp_.path().empty()) {
      for (const auto& m : sys::MountsUnder(tmp_.path())) ::umount2(m.c_str(), MNT_DETACH);
    }
  }

  InstanceSpec Spec(const std::string& id) {
    InstanceSpec s;
    s.id = id;
    s.rootfs = rootfs_;
    s.hostname = "box-" + id;
    s.env = {"SPACE_TEST=1"};
    s.limits.memory_bytes = 128ll << 20;
    s.limits.pids = 64;
    s.limits.cpus = 0.5;
    return s;
  }

  // Starts and registers for cleanup (even when the test fails afterwards).
  Status StartOn(Runtime* rt, const InstanceSpec& s) {
    started_.push_back({rt, s.id});
    return rt->Start(s);
  }
  Status Start(const InstanceSpec& s) { return StartOn(rt_.get(), s); }

  std::string CgroupDir(const std::string& controller, const std::string& id) {
    const sys::Hierarchy* h = sys::FindHierarchy(hier_, controller);
    if (!h) return "";
    return h->mount_point + "/" + opts_.cgroup_parent + "/" + id;
  }

  std::vector<pid_t> CgroupPids(const std::string& id) {
    std::vector<pid_t> out;
    std::ifstream in(CgroupDir("pids", id) + "/cgroup.procs");
    pid_t p;
    while (in >> p) out.push_back(p);
    return out;
  }

  // The host pid of the container's PID 1 (NSpid "<host> 1").
  pid_t InitHostPid(const std::string& id) {
    for (pid_t p : CgroupPids(id)) {
      std::string ns = StatusField(p, "NSpid");
      if (ns.size() >= 2 && ns.substr(ns.size() - 2) == "\t1") return p;
    }
    return -1;
  }

  // Everything a destroyed instance could leave behind.
  void ExpectNoTraces(Runtime* rt, const OciOptions& o, const std::string& id) {
    std::string kind = o.runtime_binary;
    EXPECT_FALSE(sys::Exists(o.state_dir + "/" + kind + "/" + id)) << "runtime state left";
    EXPECT_FALSE(sys::Exists(o.state_dir + "/bundles/" + id)) << "bundle left";
    EXPECT_FALSE(sys::Exists(o.state_dir + "/run/" + id)) << "run dir left";
    EXPECT_TRUE(sys::ExistingCgroupDirs(hier_, "/" + o.cgroup_parent + "/" + id).empty())
        << "cgroup dirs left";
    EXPECT_TRUE(sys::MountsUnder(o.state_dir + "/bundles/" + id).empty()) << "mount left";
    EXPECT_TRUE(sys::MountsUnder(o.state_dir + "/run/" + id).empty()) << "mount left";
    auto st = rt->Inspect(id);
    ASSERT_TRUE(st) << st.error().message;
    EXPECT_EQ(*st, InstanceState::kMissing);
    auto list = rt->List();
    ASSERT_TRUE(list);
    EXPECT_EQ(std::count(list->begin(), list->end(), id), 0);
    if (sys::Exists(o.state_dir + "/ns/mnt")) {
      // Nothing of it in the helper namespace either.
      sys::SpawnOptions so;
      so.argv = {"nsenter", "--mount=" + o.state_dir + "/ns/mnt", "cat", "/proc/self/mountinfo"};
      auto r = sys::RunChecked(so);
      ASSERT_TRUE(r) << r.error().message;
      EXPECT_EQ(r->out.find(o.state_dir + "/bundles/" + id + "/"), std::string::npos) << r->out;
      EXPECT_EQ(r->out.find(o.state_dir + "/run/" + id + " "), std::string::npos) << r->out;
    }
  }

  static constexpr uid_t kShift = 1000000;
  std::string init_, rootfs_;
  sys::TempDir tmp_;
  OciOptions opts_;
  std::unique_ptr<Runtime> rt_;
  std::vector<std::unique_ptr<Runtime>> others_;  // destroyed after started_ is cleaned
  std::vector<std::pair<Runtime*, std::string>> started_;
  CgroupLayout layout_ = CgroupLayout::kV1;
  std::vector<sys::Hierarchy> hier_;
};

}  // namespace space::runtime::oci_testing
