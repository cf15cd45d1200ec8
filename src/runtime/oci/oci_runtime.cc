// The `oci` Runtime: drives crun (or runc) through its command line. See oci.h; the
// class is in oci_internal.h, starts in oci_start.cc, resource figures in oci_usage.cc.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <linux/magic.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <set>
#include <sstream>
#include <thread>

#include <sodium.h>
#include <spdlog/spdlog.h>

#include "runtime/oci/bundle.h"
#include "runtime/oci/oci_internal.h"
#include "runtime/oci/seccomp_bpf.h"

namespace space::runtime::oci_impl {

using sys::CgroupLayout;

// Ids become path components and cgroup names.
bool ValidName(std::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  for (size_t i = 0; i < id.size(); ++i) {
    char c = id[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || (i > 0 && (c == '-' || c == '.'));
    if (!ok) return false;
  }
  return true;
}

bool ValidHostname(std::string_view h) {
  if (h.size() > 64) return false;
  for (char c : h) {
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
          c == '.'))
      return false;
  }
  return true;
}

std::string Basename(const std::string& p) {
  size_t s = p.find_last_of('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}

// Finds an executable by name in PATH (or checks an explicit path).
Result<std::string> FindExecutable(const std::string& name) {
  if (name.find('/') != std::string::npos) {
    if (::access(name.c_str(), X_OK) != 0) return ErrnoFail("runtime binary " + name);
    return name;
  }
  const char* path = ::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string cand = dirs.substr(start, end - start) + "/" + name;
    if (end > start && ::access(cand.c_str(), X_OK) == 0) return cand;
    start = end + 1;
  }
  return Fail(Errc::kUnavailable, "runtime binary " + name + " not found in PATH");
}

// With a user namespace the runtime resolves bind-mount sources as the container's root,
// an unprivileged host uid: `dir` and every directory above it must be searchable by
// "other".
Status CheckOtherSearchable(const std::string& dir, const std::string& what) {
  std::string cur = dir;
  for (;;) {
    struct stat st;
    if (::stat(cur.c_str(), &st) != 0) return ErrnoFail("stat " + cur);
    if (!(st.st_mode & S_IXOTH)) {
      return Fail(Errc::kInvalidArgument,
                  "oci: " + what + ": directory " + cur +
                      " is not searchable by other users (user namespaces need o+x on it)");
    }
    if (cur == "/") return Ok();
    size_t s = cur.find_last_of('/');
    cur = s == 0 ? "/" : cur.substr(0, s);
  }
}

// The runtime's bookkeeping (crun's state, bundles, run dirs' mount points) churns a few
// inodes per start and delete and never needs to outlive a reboot, as the sandboxes do not:
// it goes on a tmpfs, as crun's and runc's default roots under /run do. On a disk file
// system each create paid for inode allocation in directories of recently deleted inodes
// (ext4 without a journal skips those inodes one by one, ~0.3 ms each here). A directory
// that already holds entries (sandboxes of an older spaced still running) stays where it
// is until a start finds it empty. The mount outlives the daemon, like the sandboxes.
Status KeepInMemory(const std::string& dir, mode_t mode) {
  struct statfs fs;
  if (::statfs(dir.c_str(), &fs) != 0) return ErrnoFail("oci: statfs " + dir);
  if (fs.f_type == TMPFS_MAGIC) return Ok();
  if (sys::CountDirEntries(dir) != 0) {
    spdlog::info("oci: {} holds instances of an earlier start; it stays on disk until a start "
                 "finds it empty", dir);
    return Ok();
  }
  char opts[32];
  std::snprintf(opts, sizeof opts, "mode=%04o", static_cast<unsigned>(mode));
  if (::mount("tmpfs", dir.c_str(), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, opts) != 0)
    return ErrnoFail("oci: mount tmpfs on " + dir);
  return Ok();
}

// On cgroup v1 crun gives each new cpuset cgroup its parent's cpus and mems by writing
// them. Filling an empty set is a change the kernel checks against every sibling
// (validate_change) and follows with a rebuild of the scheduler domains over every cpuset:
// both O(sandboxes) per create, 4.5 % of the machine's time creating beside 3,000. With
// clone_children on the parent the kernel copies the sets at mkdir, and crun's writes of
// the same values return at once. Best effort: creates work either way.
void CloneCpusetsFromParent(const std::vector<sys::Hierarchy>& hierarchies,
                            const std::string& parent) {
  const sys::Hierarchy* h = sys::FindHierarchy(hierarchies, "cpuset");
  if (!h || h->v2) return;
  const std::string dir = h->mount_point + "/" + parent;
  bool ok = (::mkdir(dir.c_str(), 0755) == 0 || errno == EEXIST) &&
            sys::InheritCpusetSets(h->mount_point, dir);
  if (ok) {
    auto fd = sys::Open(dir + "/cgroup.clone_children", O_WRONLY);
    ok = fd && sys::WriteAll(fd->get(), "1");
  }
  if (!ok)
    spdlog::debug("oci: cannot set clone_children on {}: creates rebuild the scheduler domains", dir);
}

// The host directory bound read-only at /sys/fs/cgroup in sandboxes on cgroup v1
// (BundleParams::cgroup_skeleton): an empty directory per v1 hierarchy, named after its
// mount point, and a symlink per controller of a hierarchy named otherwise (cpu ->
// cpu,cpuacct), as the host and crun's own tmpfs show them. Returns the mount points.
Result<std::vector<std::string>> MakeCgroupSkeleton(const std::string& dir,
                                                    const std::vector<sys::Hierarchy>& hs) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoFail("mkdir " + dir);
  std::vector<std::string> bound;
  for (const auto& h : hs) {
    if (h.v2) continue;
    const std::string name = Basename(h.mount_point);
    const std::string sub = dir + "/" + name;
    if (::mkdir(sub.c_str(), 0555) != 0 && errno != EEXIST) return ErrnoFail("mkdir " + sub);
    for (const auto& c : h.controllers) {
      if (c == name || c.rfind("name=", 0) == 0) continue;
      if (::symlink(name.c_str(), (dir + "/" + c).c_str()) != 0 && errno != EEXIST)
        return ErrnoFail("symlink " + dir + "/" + c);
    }
    bound.push_back(h.mount_point);
  }
  if (::chmod(dir.c_str(), 0555) != 0) return ErrnoFail("chmod " + dir);
  return bound;
}

// One sysfs for every sandbox, mounted read-only at `at` (once; a later spaced finds it):
// a sandbox's own sysfs mount is a superblock per sandbox (each a shrinker slot in every
// memory cgroup, and a list_lru that every memory cgroup's removal walks), and mounting it
// compares it with every sysfs superblock on the host (kernfs_test_super, 3.7 % of the
// machine's time creating beside 5,000 sandboxes). sysfs differs between network
// namespaces only in its net/ entries: this one is made in a namespace of its own with
// loopback alone, which is what a sandbox without a network sees of itself. Made by the
// host's root in the host's user namespace, nothing in it is writable from a sandbox.
// sysfs holds its namespace only passively (its net/ entries go when the namespace does),
// so the namespace is kept by a bind of it at `at`.netns, as `ip netns` keeps its own.
Status MountSharedSysfs(const std::string& at) {
  struct statfs fs;
  if (::statfs(at.c_str(), &fs) == 0 && fs.f_type == SYSFS_MAGIC) return Ok();
  if (::mkdir(at.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoFail("mkdir " + at);
  const std::string keep = at + ".netns";
  (void)::umount2(keep.c_str(), MNT_DETACH);  // a namespace whose sysfs went (no leak)
  if (auto f = sys::Open(keep, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600); !f)
    return tl::unexpected(f.error());
  // The new network namespace is this thread's alone.
  Status result = Ok();
  std::thread t([&] {
    if (::unshare(CLONE_NEWNET) != 0) {
      result = ErrnoFail("unshare(CLONE_NEWNET)");
      return;
    }
    if (::mount("/proc/thread-self/ns/net", keep.c_str(), nullptr, MS_BIND, nullptr) != 0) {
      result = ErrnoFail("bind the network namespace to " + keep);
      return;
    }
    int fsfd = ::fsopen("sysfs", FSOPEN_CLOEXEC);
    if (fsfd < 0) {
      result = ErrnoFail("fsopen sysfs");
      return;
    }
    sys::UniqueFd fsg(fsfd);
    if (::fsconfig(fsfd, FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) != 0) {
      result = ErrnoFail("fsconfig sysfs");
      return;
    }
    int mfd = ::fsmount(fsfd, FSMOUNT_CLOEXEC,
                        MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC);
    if (mfd < 0) {
      result = ErrnoFail("fsmount sysfs");
      return;
    }
    sys::UniqueFd mg(mfd);
    if (::move_mount(mfd, "", AT_FDCWD, at.c_str(), MOVE_MOUNT_F_EMPTY_PATH) != 0)
      result = ErrnoFail("move_mount sysfs to " + at);
  });
  t.join();
  return result;
}

std::string Dirname(const std::string& p) {
  size_t s = p.find_last_of('/');
  if (s == std::string::npos) return ".";
  return s == 0 ? "/" : p.substr(0, s);
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

// The last bytes of a file the container can write to: opened without following
// symlinks and capped, so a hostile sandbox cannot make us read a host file into an error.
std::string ReadTail(const std::string& path, size_t max) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return "";
  sys::UniqueFd guard(fd);
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return "";
  off_t off = st.st_size > static_cast<off_t>(max) ? st.st_size - static_cast<off_t>(max) : 0;
  std::string out(static_cast<size_t>(st.st_size - off), '\0');
  ssize_t n = ::pread(fd, out.data(), out.size(), off);
  out.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return Trim(out);
}

// Waits for a child with a deadline (pidfd + poll; the daemon has no SIGCHLD handler to
// rely on). On timeout the ChildProcess destructor kills and reaps it.
Result<int> WaitWithTimeout(sys::ChildProcess& child, int64_t timeout_ms) {
  int pfd = static_cast<int>(::syscall(SYS_pidfd_open, child.pid(), 0));
  if (pfd < 0) return child.Wait();  // pre-5.3 kernel: no deadline
  sys::UniqueFd guard(pfd);
  int64_t deadline = MonotonicNanos() + timeout_ms * 1000000;
  for (;;) {
    int64_t left = (deadline - MonotonicNanos()) / 1000000;
    if (left <= 0) return Fail(Errc::kDeadlineExceeded, "timed out");
    pollfd p{pfd, POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(left));
    if (r < 0 && errno != EINTR) return ErrnoFail("poll pidfd");
    if (r > 0) return child.Wait();
  }
}

void OciRuntime::WarmCgroupMigration() {
  if (own_procs_.empty()) return;
  std::lock_guard l(warm_mu_);
  warm_kick_ = true;
  if (!warm_thread_.joinable()) {
    warm_thread_ = std::thread([this] {
      const std::string pid = std::to_string(::getpid());
      std::unique_lock lock(warm_mu_);
      for (;;) {
        warm_cv_.wait(lock, [&] { return warm_kick_ || warm_stop_; });
        if (warm_stop_) return;
        warm_kick_ = false;
        lock.unlock();
        int fd = ::open(own_procs_.c_str(), O_WRONLY | O_CLOEXEC);
        if (fd >= 0) {
          (void)!::write(fd, pid.data(), pid.size());  // best effort: only a speed-up
          ::close(fd);
        }
        lock.lock();
      }
    });
  }
  warm_cv_.notify_one();
}

Result<std::unique_ptr<Runtime>> OciRuntime::Create(const OciOptions& in) {
  OciOptions opts = in;
  while (opts.state_dir.size() > 1 && opts.state_dir.back() == '/') opts.state_dir.pop_back();
  if (opts.state_dir.empty() || opts.state_dir[0] != '/')
    return Fail(Errc::kInvalidArgument, "oci: state_dir must be an absolute path");
  if (!ValidName(opts.cgroup_parent))
    return Fail(Errc::kInvalidArgument, "oci: bad cgroup_parent '" + opts.cgroup_parent + "'");
  if (opts.user_namespace && (opts.uid_shift == 0 || opts.uid_count == 0))
    return Fail(Errc::kInvalidArgument, "oci: user namespace needs uid_shift and uid_count");

  std::unique_ptr<OciRuntime> rt(new OciRuntime(opts));
  auto bin = FindExecutable(opts.runtime_binary);
  if (!bin) return tl::unexpected(bin.error());
  rt->binary_ = *bin;
  if (auto sealed = sys::SealedExecutable::Create(rt->binary_)) {
    rt->sealed_ = std::move(*sealed);
  } else {
    spdlog::warn("oci: runs {} from its path ({}); each call copies it first", rt->binary_,
                 sealed.error().message);
  }
  if (Basename(rt->binary_) == "crun") {
    auto bpf = oci::CompileSeccompBpf(oci::SeccompProfile());
    if (bpf) {
      std::string b64(sodium_base64_encoded_len(bpf->size(), sodium_base64_VARIANT_ORIGINAL), '\0');
      sodium_bin2base64(b64.data(), b64.size(), reinterpret_cast<const unsigned char*>(bpf->data()),
                        bpf->size(), sodium_base64_VARIANT_ORIGINAL);
      b64.resize(std::strlen(b64.c_str()));
      rt->seccomp_bpf_b64_ = std::move(b64);
    } else {
      spdlog::warn("oci: precompiling the seccomp profile failed ({}); crun compiles it per start",
                   bpf.error().message);
    }
  }
  std::string kind = Basename(*bin);

  auto agent = sys::RealPath(opts.agent_binary);
  if (!agent) return tl::unexpected(std::move(agent.error()).Wrap("oci: agent binary"));
  struct stat ast;
  if (::stat(agent->c_str(), &ast) != 0 || !S_ISREG(ast.st_mode))
    return Fail(Errc::kInvalidArgument, "oci: agent binary " + *agent + " is not a file");
  rt->opts_.agent_binary = *agent;
  if (opts.user_namespace) {
    if ((ast.st_mode & (S_IROTH | S_IXOTH)) != (S_IROTH | S_IXOTH))
      return Fail(Errc::kInvalidArgument, "oci: agent binary " + *agent +
                                              " must be readable and executable by others "
                                              "(the sandbox's root is an unprivileged host uid)");
    SPACE_TRY(CheckOtherSearchable(Dirname(*agent), "agent binary " + *agent));
  }

  auto layout = sys::DetectCgroupLayout();
  if (!layout) return tl::unexpected(std::move(layout.error()).Wrap("oci"));
  rt->hierarchies_ = sys::CgroupHierarchies();
  CloneCpusetsFromParent(rt->hierarchies_, opts.cgroup_parent);
  // spaced's own cgroup in one hierarchy (pids on v1, the unified one on v2), for
  // WarmCgroupMigration.
  if (auto self = sys::ReadFile("/proc/self/cgroup")) {
    const sys::Hierarchy* h = sys::FindHierarchy(rt->hierarchies_, "pids");
    std::string_view rest = *self;
    while (!rest.empty()) {
      size_t nl = rest.find('\n');
      std::string_view line = rest.substr(0, nl);
      rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
      size_t a = line.find(':'), b = a == std::string_view::npos ? a : line.find(':', a + 1);
      if (!h || b == std::string_view::npos) continue;
      std::string_view ctrls = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
      bool match = h->v2 ? (ctrls.empty() && line.substr(0, a) == "0")
                         : ("," + std::string(ctrls) + ",").find(",pids,") != std::string::npos;
      if (match && !path.empty() && path.find("..") == std::string_view::npos) {
        std::string procs = h->mount_point + std::string(path == "/" ? "" : path) + "/cgroup.procs";
        if (::access(procs.c_str(), W_OK) == 0) rt->own_procs_ = procs;
      }
    }
  }
  // With cgroup2's favordynmods on (spaced turns it on), a migration waits for no grace
  // period, so there is nothing to start early; the write would only take cgroup_mutex.
  if (sys::CgroupFavorDynmods(rt->hierarchies_)) rt->own_procs_.clear();

  const std::string& sd = rt->opts_.state_dir;
  rt->runtime_root_ = sd + "/" + kind;
  rt->bundles_dir_ = sd + "/bundles";
  rt->run_dir_ = sd + "/run";
  for (const auto& d : {sd, rt->bundles_dir_, rt->run_dir_}) {
    SPACE_TRY_WRAP(sys::MkdirAll(d, 0711), "oci");
    if (::chmod(d.c_str(), 0711) != 0) return ErrnoFail("oci: chmod " + d);
  }
  SPACE_TRY_WRAP(sys::MkdirAll(rt->runtime_root_, 0700), "oci");
  // One state dir belongs to one runtime binary: List() and Destroy() of a runc backend
  // must never see (and kill) a crun backend's instances through shared bundles/.
  const std::string marker = sd + "/runtime";
  if (auto have = sys::ReadFile(marker)) {
    if (Trim(*have) != kind) {
      return Fail(Errc::kInvalidArgument, "oci: state_dir " + sd + " belongs to runtime '" +
                                              Trim(*have) + "', not '" + kind + "'");
    }
  } else {
    SPACE_TRY_WRAP(sys::WriteFileAtomic(marker, kind + "\n", 0600), "oci");
  }
  SPACE_TRY(KeepInMemory(rt->runtime_root_, 0700));
  SPACE_TRY(KeepInMemory(rt->bundles_dir_, 0711));
  SPACE_TRY(KeepInMemory(rt->run_dir_, 0711));
  rt->agent_copies_ = std::make_unique<AgentCopies>(rt->opts_.agent_binary, sd + "/agent",
                                                    std::max<size_t>(1, opts.sandboxes_per_agent_file));
  if (opts.user_namespace) {
    SPACE_TRY(CheckOtherSearchable(rt->bundles_dir_, "state_dir"));
    SPACE_TRY(CheckOtherSearchable(rt->run_dir_, "state_dir"));
  }
  // The source of the masked directories' binds: empty, read-only to everyone, owned by
  // the host's root (nobody inside a sandbox). Which masked paths are directories is the
  // kernel's to say (procfs and sysfs look the same from every sandbox), so it is read once.
  // crun only: runc refuses mounts inside /proc other than a few files of its own choosing.
  if (kind == "crun") {
    const std::string empty = sd + "/empty";
    struct stat est;
    if (::lstat(empty.c_str(), &est) == 0 &&
        (!S_ISDIR(est.st_mode) || sys::CountDirEntries(empty) != 0))
      SPACE_TRY_WRAP(sys::RemoveAll(empty), "oci");
    if ((::mkdir(empty.c_str(), 0555) != 0 && errno != EEXIST) || ::chmod(empty.c_str(), 0555) != 0)
      return ErrnoFail("oci: mkdir " + empty);
    rt->empty_dir_ = empty;
    for (const auto& m : oci::MaskedPaths()) {
      struct stat mst;
      if (::lstat(m.c_str(), &mst) == 0 && S_ISDIR(mst.st_mode)) rt->masked_dirs_.push_back(m);
    }
  }
  if (auto st = MountSharedSysfs(sd + "/sysfs"); st) {
    rt->sysfs_ = sd + "/sysfs";
  } else {
    spdlog::warn("oci: shared sysfs: {}; each sandbox mounts its own", st.error().message);
  }

  // Where crun runs in the helper namespace (hybrid hosts), it makes no cpuset and no blkio
  // cgroup per sandbox: the namespace's /sys/fs/cgroup leaves those hierarchies out, so
  // crun does not join them (sandboxes stay in spaced's; none asks for cpus or I/O limits
  // of its own). On cgroup v1 making a cpuset checks every sibling (cpuset_css_online),
  // and removing one rebuilds the scheduler domains over every cpuset (validate_change,
  // update_domain_attr_tree, dl_rebuild_rd_accounting): 5.6 % of the machine's time
  // creating beside 5,000 sandboxes and 15 % deleting. A removed blkio cgroup lingers
  // while any inode its sandbox dirtied still points at it (cgroup writeback): 2,386 of
  // them were left after a run of 5,000 sandboxes.
  // crun 1.8 refuses hybrid hosts; in the helper namespace the v2 mount is gone and it
  // sees pure v1. runc copes with hybrid by itself.
  const bool helper_ns = *layout == CgroupLayout::kHybrid && StartsWith(kind, "crun");
  std::vector<std::string> hidden;
  if (helper_ns) {
    for (const auto& h : rt->hierarchies_) {
      if (!h.v2 && (h.controllers == std::vector<std::string>{"cpuset"} ||
                    h.controllers == std::vector<std::string>{"blkio"}))
        hidden.push_back(Basename(h.mount_point));
    }
  }
  if (kind == "crun" && *layout != CgroupLayout::kV2) {
    std::vector<sys::Hierarchy> shown;
    for (const auto& h : rt->hierarchies_) {
      if (std::find(hidden.begin(), hidden.end(), Basename(h.mount_point)) == hidden.end())
        shown.push_back(h);
    }
    auto bound = MakeCgroupSkeleton(sd + "/cgroupfs", shown);
    if (bound) {
      rt->cgroup_skeleton_ = sd + "/cgroupfs";
      rt->cgroup_bound_ = std::move(*bound);
    } else {
      spdlog::warn("oci: {}; sandboxes get crun's own /sys/fs/cgroup tmpfs", bound.error().message);
    }
  }

  // memory.swap needs swap accounting: v1 memory.memsw.*, v2 memory.swap.max.
  if (*layout == CgroupLayout::kV2) {
    rt->memory_swap_ = false;
    if (DIR* d = ::opendir("/sys/fs/cgroup")) {
      while (dirent* e = ::readdir(d)) {
        if (e->d_type == DT_DIR && e->d_name[0] != '.' &&
            sys::Exists(std::string("/sys/fs/cgroup/") + e->d_name + "/memory.swap.max")) {
          rt->memory_swap_ = true;
          break;
        }
      }
      ::closedir(d);
    }
  } else {
    const sys::Hierarchy* mem = sys::FindHierarchy(rt->hierarchies_, "memory");
    rt->memory_swap_ = mem && sys::Exists(mem->mount_point + "/memory.memsw.limit_in_bytes");
  }

  // Parked memory cgroups need `memory` in a v1 hierarchy of its own (memcg_pool.h).
  if (const sys::Hierarchy* mem = sys::FindHierarchy(rt->hierarchies_, "memory");
      kind == "crun" && opts.parked_memory_cgroups > 0 && mem && !mem->v2 &&
      mem->controllers == std::vector<std::string>{"memory"}) {
    rt->memcg_pool_ = std::make_unique<MemcgPool>(rt->hierarchies_, *mem, "/" + opts.cgroup_parent,
                                                  opts.parked_memory_cgroups,
                                                  opts.parked_memory_cgroups_idle_ms);
    rt->memcg_pool_->Adopt();
  }

  if (helper_ns) {
    auto ns = oci::HelperMountNs::Ensure(
        {sd + "/ns", {rt->bundles_dir_, rt->run_dir_, rt->runtime_root_}, {"/sys/fs/cgroup/unified"},
         hidden});
    if (!ns) return tl::unexpected(std::move(ns.error()).Wrap("oci"));
    rt->ns_ = std::move(*ns);
  }

  auto ver = rt->RunRuntime({"--version"});
  if (!ver) return tl::unexpected(std::move(ver.error()).Wrap("oci: " + *bin + " --version"));
  if (!ver->ok()) return Fail(Errc::kUnavailable, "oci: " + rt->CmdError("--version", *ver));
  return std::unique_ptr<Runtime>(std::move(rt));
}

Status OciRuntime::PauseResume(const std::string& id, bool pause) {
  const char* verb = pause ? "pause" : "resume";
  if (!ValidName(id)) return Fail(Errc::kInvalidArgument, "oci: bad instance id '" + id + "'");
  if (!sys::Exists(StateDirOf(id)))
    return Fail(Errc::kNotFound, std::string("oci: ") + verb + " " + id + ": no such instance");
  // The freezer is what `crun pause` writes too; doing it here saves two process spawns
  // (~5-10 ms), which matters for snapshots and forks that freeze for an instant.
  if (FreezeDirect(id, pause)) return Ok();
  auto r = RunRuntime({verb, id});
  if (!r) return tl::unexpected(std::move(r.error()).Wrap(std::string("oci: ") + verb));
  if (r->ok()) return Ok();
  // Already in the wanted state is success; a stopped container is a conflict.
  auto state = Inspect(id);
  if (state) {
    InstanceState want = pause ? InstanceState::kPaused : InstanceState::kRunning;
    if (*state == want) return Ok();
    if (*state == InstanceState::kStopped || *state == InstanceState::kMissing) {
      return Fail(Errc::kConflict, std::string("oci: ") + verb + " " + id + ": instance is " +
                                       std::string(InstanceStateName(*state)));
    }
  }
  return Fail(Errc::kInternal, "oci: " + CmdError(std::string(verb) + " " + id, *r));
}


Status OciRuntime::FreezeDirect(const std::string& id, bool freeze) {
  const sys::Hierarchy* h = sys::FindHierarchy(hierarchies_, "freezer");
  if (!h) return Fail(Errc::kUnavailable, "no freezer hierarchy");
  const std::string dir = h->mount_point + CgroupRel(id);
  if (!sys::Exists(dir)) return Fail(Errc::kNotFound, "no cgroup " + dir);
  // An empty cgroup (the instance's init died) is not a running instance: let the runtime
  // binary give its answer (a conflict).
  auto procs = sys::ReadFile(dir + "/cgroup.procs");
  if (!procs || procs->empty()) return Fail(Errc::kConflict, "instance " + id + " has no processes");
  const std::string ctl = dir + (h->v2 ? "/cgroup.freeze" : "/freezer.state");
  const std::string value = h->v2 ? (freeze ? "1" : "0") : (freeze ? "FROZEN" : "THAWED");
  const std::string want = h->v2 ? (freeze ? "frozen 1" : "frozen 0") : value;
  const std::string status = h->v2 ? dir + "/cgroup.events" : ctl;
  {
    auto fd = sys::Open(ctl, O_WRONLY);
    if (!fd) return tl::unexpected(fd.error());
    SPACE_TRY(sys::WriteAll(fd->get(), value));
  }
  // Freezing is asynchronous (v1 passes through FREEZING): wait until it took.
  for (int i = 0; i < 5000; ++i) {
    auto now = sys::ReadFile(status);
    if (!now) return tl::unexpected(now.error());
    if (now->find(want) != std::string::npos) return Ok();
    ::usleep(200);
  }
  return Fail(Errc::kDeadlineExceeded, "freezer of " + id + " did not reach " + want);
}

Status OciRuntime::UnmountAll(const std::string& path) {
  // Stacked mounts (a crash between mount and a retry) are peeled one by one. Lazy: a
  // process that still holds the mount (e.g. a late reader) cannot make Destroy fail.
  for (int i = 0; i < 16; ++i) {
    if (::umount2(path.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW) != 0) {
      if (errno == EINVAL || errno == ENOENT) break;
      return ErrnoFail("umount " + path);
    }
  }
  return Ok();
}

Status OciRuntime::Destroy(const std::string& id) {
  if (!ValidName(id)) return Fail(Errc::kInvalidArgument, "oci: bad instance id '" + id + "'");
  std::vector<std::string> problems;
  const std::string state = StateDirOf(id);
  // The memory cgroup is kept for a later sandbox rather than removed (crun's delete
  // takes it as gone), and settled below once its processes are.
  const std::string parked = memcg_pool_ ? memcg_pool_->Park(id) : "";

  if (sys::Exists(state)) {
    auto r = RunRuntime({"delete", "-f", id});
    if (!r) {
      problems.push_back(r.error().message);
    } else if (!r->ok()) {
      problems.push_back(CmdError("delete -f " + id, *r));
    }
  }
  // Whatever the runtime left (or never got to clean, after a failed start): kill what is
  // still in the cgroup and remove the cgroup directories.
  auto k = sys::KillAndRemoveCgroup(hierarchies_, CgroupRel(id));
  if (!k) problems.push_back(k.error().message);
  if (!parked.empty()) memcg_pool_->Settle(parked);
  if (sys::Exists(state)) {
    // The processes are gone now, so a second delete can succeed; failing that, the
    // runtime's state directory is only bookkeeping and can go.
    (void)RunRuntime({"delete", "-f", id});
    if (sys::Exists(state)) {
      auto rm = sys::RemoveAll(state);
      if (!rm) problems.push_back(rm.error().message);
    }
  }
  std::vector<std::string> mounts = {BundleDir(id) + "/rootfs", BundleDir(id) + "/netns", RunDir(id)};
  if (DIR* d = ::opendir(BundleDir(id).c_str())) {
    while (dirent* e = ::readdir(d)) {
      if (std::string_view(e->d_name).substr(0, 4) == "vol-") mounts.push_back(BundleDir(id) + "/" + e->d_name);
    }
    ::closedir(d);
  }
  for (const auto& m : mounts) {
    auto um = UnmountAll(m);
    if (!um) problems.push_back(um.error().message);
  }
  // RemoveAll never crosses a mount point, so the sandbox's rootfs is safe even if the
  // unmount above failed.
  auto rb = sys::RemoveAll(BundleDir(id));
  if (!rb) problems.push_back(rb.error().message);
  auto rr = sys::RemoveAll(RunDir(id));
  if (!rr) problems.push_back(rr.error().message);

  bool gone = !sys::Exists(state) && !sys::Exists(BundleDir(id)) && !sys::Exists(RunDir(id)) &&
              sys::ExistingCgroupDirs(hierarchies_, CgroupRel(id)).empty();
  if (gone) {
    agent_copies_->Release(id);  // its agent is gone (cgroup empty and removed)
    return Ok();
  }
  std::string msg = "oci: destroy " + id + ":";
  for (const auto& p : problems) msg += " " + p + ";";
  if (problems.empty()) msg += " leftovers remain";
  return Fail(Errc::kInternal, msg);
}

Result<InstanceState> OciRuntime::Inspect(const std::string& id) {
  if (!ValidName(id)) return Fail(Errc::kInvalidArgument, "oci: bad instance id '" + id + "'");
  // A bundle without runtime state is a half-created or half-destroyed instance: it holds
  // host resources, so it is reported (as stopped) until Destroy.
  auto leftover = [&]() {
    return sys::Exists(BundleDir(id)) || sys::Exists(RunDir(id)) ? InstanceState::kStopped
                                                                 : InstanceState::kMissing;
  };
  if (!sys::Exists(StateDirOf(id))) return leftover();
  auto r = RunRuntime({"state", id});
  if (!r) return tl::unexpected(std::move(r.error()).Wrap("oci: state " + id));
  if (!r->ok()) {
    if (!sys::Exists(StateDirOf(id))) return leftover();
    return Fail(Errc::kInternal, "oci: " + CmdError("state " + id, *r));
  }
  auto j = ParseJson(r->out);
  std::string status = j ? JsonStringOr(*j, "status", "") : "";
  if (status == "running") return InstanceState::kRunning;
  if (status == "paused" || status == "pausing") return InstanceState::kPaused;
  // "created" (init waiting for start) never survives a successful `run -d`; it and
  // "stopped" both mean the agent is not serving.
  if (status == "stopped" || status == "created") return InstanceState::kStopped;
  return Fail(Errc::kInternal, "oci: state " + id + ": unexpected output: " + Trim(r->out));
}

Result<std::vector<std::string>> OciRuntime::List() {
  std::set<std::string> ids;
  for (const auto& dir : {runtime_root_, bundles_dir_, run_dir_}) {
    DIR* d = ::opendir(dir.c_str());
    if (!d) {
      if (errno == ENOENT) continue;
      return ErrnoFail("oci: list " + dir);
    }
    while (dirent* e = ::readdir(d)) {
      if (e->d_type != DT_DIR && e->d_type != DT_UNKNOWN) continue;
      if (ValidName(e->d_name)) ids.insert(e->d_name);
    }
    ::closedir(d);
  }
  return std::vector<std::string>(ids.begin(), ids.end());
}

}  // namespace space::runtime::oci_impl

namespace space::runtime {

Result<std::unique_ptr<Runtime>> CreateOciRuntime(const OciOptions& opts) {
  return oci_impl::OciRuntime::Create(opts);
}

std::vector<std::string> OciRootMountPoints() { return {oci::kAgentDir + 1}; }  // "/.space"

}  // namespace space::runtime
