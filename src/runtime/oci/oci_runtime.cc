// The `oci` Runtime: drives crun (or runc) through its command line. See oci.h.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <optional>
#include <set>

#include <sodium.h>
#include <spdlog/spdlog.h>

#include <sstream>

#include "common/json.h"
#include "runtime/oci/bundle.h"
#include "sys/cgroups.h"
#include "runtime/oci/mount_ns.h"
#include "runtime/oci/netns.h"
#include "runtime/oci/oci.h"
#include "runtime/oci/seccomp_bpf.h"
#include "sys/sys.h"

namespace space::runtime {
namespace {

using sys::CgroupLayout;

constexpr int64_t kRunTimeoutMs = 60000;
constexpr int64_t kCmdTimeoutMs = 30000;
constexpr size_t kConsoleTail = 4096;
constexpr int64_t kRunTmpfsBytes = 4 << 20;

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

class OciRuntime final : public Runtime {
 public:
  static Result<std::unique_ptr<Runtime>> Create(const OciOptions& opts);

  std::string_view Name() const override { return "oci"; }
  Capabilities Caps() const override {
    Capabilities c;
    c.pause = true;
    c.pause_keeps_memory = true;
    c.suspend_keeps_processes = false;
    c.snapshot_kinds = {"filesystem"};
    c.network = true;
    c.volumes = true;
    return c;
  }

  Status Start(const InstanceSpec& spec) override;
  Status Pause(const std::string& id) override { return PauseResume(id, true); }
  Status Resume(const std::string& id) override { return PauseResume(id, false); }
  Status Destroy(const std::string& id) override;
  Result<InstanceState> Inspect(const std::string& id) override;
  Result<std::vector<std::string>> List() override;
  Result<int64_t> OomKills(const std::string& id) override;
  Result<Usage> ResourceUsage(const std::string& id) override;
  std::string AgentSocketPath(const std::string& id) const override {
    return RunDir(id) + "/agent.sock";
  }
  Result<std::string> NetNamespacePath(const std::string& id) override {
    if (!ValidName(id)) return Fail(Errc::kInvalidArgument, "oci: bad instance id '" + id + "'");
    return oci::InitNetNamespace(StateDirOf(id), CgroupRel(id));
  }

 private:
  explicit OciRuntime(OciOptions opts) : opts_(std::move(opts)) {}

  std::string StateDirOf(const std::string& id) const { return runtime_root_ + "/" + id; }
  std::string BundleDir(const std::string& id) const { return bundles_dir_ + "/" + id; }
  std::string RunDir(const std::string& id) const { return run_dir_ + "/" + id; }
  std::string CgroupRel(const std::string& id) const {
    return "/" + opts_.cgroup_parent + "/" + id;
  }

  sys::SpawnOptions RuntimeCmd(std::vector<std::string> args) const {
    sys::SpawnOptions so;
    so.argv = {binary_, "--root", runtime_root_};
    so.argv.insert(so.argv.end(), args.begin(), args.end());
    so.mount_ns_fd = ns_ ? ns_->fd() : -1;
    return so;
  }
  Result<sys::RunResult> RunRuntime(std::vector<std::string> args,
                                    int64_t timeout = kCmdTimeoutMs) const {
    return sys::Run(RuntimeCmd(std::move(args)), timeout);
  }
  std::string CmdError(const std::string& what, const sys::RunResult& r) const {
    std::string how =
        r.signal ? "signal " + std::to_string(r.signal) : "exit " + std::to_string(r.exit_code);
    std::string text = Trim(r.err.empty() ? r.out : r.err);
    return Basename(binary_) + " " + what + ": " + how + (text.empty() ? "" : ": " + text);
  }

  Status StartSteps(const InstanceSpec& spec);
  void WarmCgroupMigration();
  Status PauseResume(const std::string& id, bool pause);
  Status FreezeDirect(const std::string& id, bool freeze);
  void ShieldAgentFromOom(const std::string& id);
  static Status UnmountAll(const std::string& path);

  OciOptions opts_;
  std::string binary_;        // resolved path of crun/runc
  std::string runtime_root_;  // state_dir/<crun|runc>
  std::string bundles_dir_, run_dir_;
  std::vector<sys::Hierarchy> hierarchies_;
  bool memory_swap_ = true;
  std::optional<oci::HelperMountNs> ns_;
  // crun only: the seccomp profile compiled once, base64, for run.oci.seccomp_bpf_data
  // (crun would otherwise compile it on every start); empty = let the runtime compile.
  Json seccomp_profile_;
  std::string seccomp_bpf_b64_;

  // The first cgroup migration after an idle spell waits for an RCU grace period (the
  // kernel's global cgroup_threadgroup_rwsem): 5-20 ms of crun joining the container's
  // first cgroup. A no-op migration of spaced's own process into the cgroup it is already
  // in, started as a create begins, absorbs that wait in parallel with the create's other
  // steps; crun's migrations a few ms later find the semaphore ready.
  std::string own_procs_;  // spaced's own cgroup.procs ("" = not found: no warming)
  std::mutex warm_mu_;
  std::condition_variable warm_cv_;
  bool warm_kick_ = false, warm_stop_ = false;
  std::thread warm_thread_;

 public:
  ~OciRuntime() override {
    {
      std::lock_guard l(warm_mu_);
      warm_stop_ = true;
    }
    warm_cv_.notify_all();
    if (warm_thread_.joinable()) warm_thread_.join();
  }
};

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
  if (Basename(rt->binary_) == "crun") {
    rt->seccomp_profile_ = oci::SeccompProfile();
    auto bpf = oci::CompileSeccompBpf(rt->seccomp_profile_);
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
  if (opts.user_namespace) {
    SPACE_TRY(CheckOtherSearchable(rt->bundles_dir_, "state_dir"));
    SPACE_TRY(CheckOtherSearchable(rt->run_dir_, "state_dir"));
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

  // crun 1.8 refuses hybrid hosts; in the helper namespace the v2 mount is gone and it
  // sees pure v1. runc copes with hybrid by itself.
  if (*layout == CgroupLayout::kHybrid && StartsWith(kind, "crun")) {
    auto ns = oci::HelperMountNs::Ensure(
        {sd + "/ns", {rt->bundles_dir_, rt->run_dir_}, {"/sys/fs/cgroup/unified"}});
    if (!ns) return tl::unexpected(std::move(ns.error()).Wrap("oci"));
    rt->ns_ = std::move(*ns);
  }

  auto ver = rt->RunRuntime({"--version"});
  if (!ver) return tl::unexpected(std::move(ver.error()).Wrap("oci: " + *bin + " --version"));
  if (!ver->ok()) return Fail(Errc::kUnavailable, "oci: " + rt->CmdError("--version", *ver));
  return std::unique_ptr<Runtime>(std::move(rt));
}

Status OciRuntime::Start(const InstanceSpec& spec) {
  const std::string& id = spec.id;
  if (!ValidName(id)) return Fail(Errc::kInvalidArgument, "oci: bad instance id '" + id + "'");
  if (spec.rootfs.empty() || spec.rootfs[0] != '/')
    return Fail(Errc::kInvalidArgument, "oci: rootfs must be an absolute path");
  struct stat st;
  if (::stat(spec.rootfs.c_str(), &st) != 0) return ErrnoFail("oci: rootfs " + spec.rootfs);
  if (!S_ISDIR(st.st_mode))
    return Fail(Errc::kInvalidArgument, "oci: rootfs " + spec.rootfs + " is not a directory");
  if (!ValidHostname(spec.hostname))
    return Fail(Errc::kInvalidArgument, "oci: bad hostname '" + spec.hostname + "'");
  for (const auto& e : spec.env) {
    if (e.find('=') == std::string::npos || e[0] == '=' || e.find('\0') != std::string::npos)
      return Fail(Errc::kInvalidArgument, "oci: bad environment entry '" + e + "'");
  }
  const Limits& l = spec.limits;
  if (l.memory_bytes < 0 || l.pids < 0 || !(l.cpus >= 0 && l.cpus <= 4096) || l.nofile < 0)
    return Fail(Errc::kInvalidArgument, "oci: limits out of range");
  if (spec.network && (spec.netns_path.empty() || spec.netns_path[0] != '/'))
    return Fail(Errc::kInvalidArgument, "oci: a networked sandbox needs its namespace's path");
  if (sys::Exists(StateDirOf(id)))
    return Fail(Errc::kConflict, "oci: instance " + id + " already exists");
  // mkdir is the atomic claim on the id; everything after it is undone on failure.
  if (::mkdir(BundleDir(id).c_str(), 0711) != 0) {
    if (errno == EEXIST) return Fail(Errc::kConflict, "oci: instance " + id + " already exists");
    return ErrnoFail("oci: mkdir " + BundleDir(id));
  }
  auto st_start = StartSteps(spec);
  if (!st_start) {
    (void)Destroy(id);
    return tl::unexpected(std::move(st_start.error()).Wrap("oci: start " + id));
  }
  return Ok();
}

Status OciRuntime::StartSteps(const InstanceSpec& spec) {
  const std::string& id = spec.id;
  WarmCgroupMigration();
  const std::string bundle = BundleDir(id);
  const std::string root = bundle + "/rootfs";
  const std::string run = RunDir(id);

  // The agent's mount point. Created from the host without following symlinks; the
  // sandbox's own files are not touched. Everything else under /.space lives on a tmpfs.
  {
    int rfd = ::open(spec.rootfs.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (rfd < 0) return ErrnoFail("open " + spec.rootfs);
    sys::UniqueFd g(rfd);
    if (::mkdirat(rfd, ".space", 0755) != 0 && errno != EEXIST)
      return ErrnoFail("mkdir " + spec.rootfs + "/.space");
  }

  // root.path is a bind of the rootfs inside the bundle rather than spec.rootfs itself:
  // on hybrid hosts crun runs in the helper mount namespace, which sees none of the
  // host's later mounts; this start hands it the bundle's mounts (below), and storage
  // may mount the rootfs anywhere.
  if (::mkdir(root.c_str(), 0755) != 0) return ErrnoFail("mkdir " + root);
  if (::mount(spec.rootfs.c_str(), root.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0)
    return ErrnoFail("bind " + spec.rootfs + " to " + root);

  // The run dir is a small tmpfs of its own: the sandbox can write to it (the agent's
  // socket) and can reopen console.log through /proc/1/fd, and neither may fill the
  // host's disk. Its pages are charged to the writer's memory cgroup. Root inside the user
  // namespace owns it, so the agent can create its socket.
  SPACE_TRY(UnmountAll(run));
  SPACE_TRY(sys::RemoveAll(run));
  if (::mkdir(run.c_str(), 0700) != 0) return ErrnoFail("mkdir " + run);
  uint32_t owner = opts_.user_namespace ? opts_.uid_shift : 0;
  std::string tmpfs_opts = "size=" + std::to_string(kRunTmpfsBytes) +
                           ",nr_inodes=256,mode=0700,uid=" + std::to_string(owner) +
                           ",gid=" + std::to_string(owner);
  if (::mount("tmpfs", run.c_str(), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
              tmpfs_opts.c_str()) != 0)
    return ErrnoFail("mount tmpfs on " + run);

  oci::BundleParams bp;
  if (spec.network) {
    // net/ made the namespace on the host; crun joins it through a bind inside the bundle
    // (bundles/ is what its helper mount namespace shares with the host).
    const std::string ns_file = bundle + "/netns";
    {
      auto f = sys::Open(ns_file, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0600);
      if (!f) return tl::unexpected(f.error());
    }
    if (::mount(spec.netns_path.c_str(), ns_file.c_str(), nullptr, MS_BIND, nullptr) != 0)
      return ErrnoFail("bind " + spec.netns_path + " to " + ns_file);
    bp.netns_path = ns_file;
    const std::string resolv = bundle + "/resolv.conf";
    auto f = sys::Open(resolv, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0644);
    if (!f) return tl::unexpected(f.error());
    SPACE_TRY_WRAP(sys::WriteAll(f->get(), spec.resolv_conf), "write resolv.conf");
    bp.resolv_conf_path = resolv;
    int n = 0;
    for (const auto& [inside, content] : spec.files) {
      if (inside.empty() || inside[0] != '/' || inside.find("..") != std::string::npos)
        return Fail(Errc::kInvalidArgument, "oci: bad sandbox file path " + inside);
      const std::string host = bundle + "/file-" + std::to_string(n++);
      auto out = sys::Open(host, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0644);
      if (!out) return tl::unexpected(out.error());
      SPACE_TRY_WRAP(sys::WriteAll(out->get(), content), "write " + host);
      bp.file_binds.emplace_back(host, inside);
    }
  }
  // Volumes: each volume's host mount is bound inside the bundle (what crun's helper
  // namespace sees, as for the rootfs), read-only in the kernel when asked, then bound at
  // its path by crun. Destroy unmounts bundle/vol-N.
  for (size_t i = 0; i < spec.volumes.size(); ++i) {
    const auto& v = spec.volumes[i];
    if (v.path.empty() || v.path[0] != '/' || v.path.find("..") != std::string::npos)
      return Fail(Errc::kInvalidArgument, "oci: bad volume path " + v.path);
    const std::string at = bundle + "/vol-" + std::to_string(i);
    if (::mkdir(at.c_str(), 0700) != 0) return ErrnoFail("mkdir " + at);
    if (::mount(v.host_path.c_str(), at.c_str(), nullptr, MS_BIND, nullptr) != 0)
      return ErrnoFail("bind volume " + v.host_path + " to " + at);
    unsigned long ro = v.read_only ? MS_RDONLY : 0;
    if (::mount(nullptr, at.c_str(), nullptr, MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV | ro,
                nullptr) != 0)
      return ErrnoFail("remount volume bind " + at);
    bp.volume_binds.push_back({at, v.path, v.read_only});
  }
  bp.root_path = root;
  bp.agent_binary = opts_.agent_binary;
  bp.run_dir = run;
  bp.cgroups_path = CgroupRel(id);
  bp.user_namespace = opts_.user_namespace;
  bp.uid_shift = opts_.uid_shift;
  bp.uid_count = opts_.uid_count;
  bp.memory_swap = memory_swap_;
  Json cfg = oci::BuildOciConfig(spec, bp);
  if (!seccomp_bpf_b64_.empty() && cfg["linux"]["seccomp"] == seccomp_profile_)
    cfg["annotations"]["run.oci.seccomp_bpf_data"] = seccomp_bpf_b64_;
  std::string config = cfg.dump(1);
  {
    // No fsync: a bundle never outlives a crash usefully (Destroy removes it).
    auto f = sys::Open(bundle + "/config.json", O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0600);
    if (!f) return tl::unexpected(f.error());
    SPACE_TRY_WRAP(sys::WriteAll(f->get(), config), "write config.json");
  }

  // crun's and the container's stdio go to console.log — never to the daemon's own
  // stdio, so the container does not depend on the daemon staying alive.
  const std::string console = run + "/console.log";
  auto log = sys::Open(console, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW, 0600);
  if (!log) return tl::unexpected(log.error());

  sys::SpawnOptions so = RuntimeCmd({"run", "-d", "--bundle", bundle, id});
  so.new_session = true;  // not in the daemon's session or process group
  // In the helper namespace crun sees this sandbox's mounts alone, in a namespace of this
  // start (mount_ns.h): what it reads and copies does not grow with the sandboxes running.
  std::vector<sys::UniqueFd> trees;
  if (ns_) {
    std::vector<std::string> at = {root, run};
    if (!bp.netns_path.empty()) at.push_back(bp.netns_path);
    for (const auto& v : bp.volume_binds) at.push_back(v.host);
    for (const auto& path : at) {
      auto tree = sys::CloneMount(path);
      if (!tree) return tl::unexpected(tree.error());
      so.attach_mounts.emplace_back(tree->get(), path);
      trees.push_back(std::move(*tree));
    }
  }
  so.stdout_fd = log->get();
  so.stderr_fd = log->get();
  auto child = sys::Spawn(so);
  if (!child) return tl::unexpected(child.error());
  log->Reset();
  auto status = WaitWithTimeout(*child, kRunTimeoutMs);
  if (!status) {
    return tl::unexpected(std::move(status.error()).Wrap(Basename(binary_) + " run"));
  }
  if (!WIFEXITED(*status) || WEXITSTATUS(*status) != 0) {
    std::string how = WIFEXITED(*status) ? "exit " + std::to_string(WEXITSTATUS(*status))
                                         : "signal " + std::to_string(WTERMSIG(*status));
    std::string text = ReadTail(console, kConsoleTail);
    return Fail(Errc::kInternal,
                Basename(binary_) + " run: " + how + (text.empty() ? "" : ": " + text));
  }
  ShieldAgentFromOom(id);
  return Ok();
}

void OciRuntime::ShieldAgentFromOom(const std::string& id) {
  // Only the agent (the container's init) is in the cgroup right after the start. -999,
  // not -1000: the agent stays killable if nothing else is, and commands (which the
  // agent resets to 0) can at most tie with it, where the larger process loses.
  const sys::Hierarchy* h = sys::FindHierarchy(hierarchies_, "memory");
  if (!h) return;
  auto procs = sys::ReadFile(h->mount_point + CgroupRel(id) + "/cgroup.procs");
  if (!procs) return;
  std::istringstream lines(*procs);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty()) continue;
    auto fd = sys::Open("/proc/" + line + "/oom_score_adj", O_WRONLY);
    if (!fd || !sys::WriteAll(fd->get(), "-999"))
      spdlog::debug("oci: {}: cannot shield pid {} from the OOM killer", id, line);
  }
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

Result<int64_t> OciRuntime::OomKills(const std::string& id) {
  if (!ValidName(id)) return Fail(Errc::kInvalidArgument, "oci: bad id " + id);
  const sys::Hierarchy* h = sys::FindHierarchy(hierarchies_, "memory");
  if (!h) return Fail(Errc::kUnavailable, "no memory cgroup hierarchy");
  // v1: memory.oom_control has "oom_kill N" (Linux 4.13+); v2: memory.events.
  const std::string file =
      h->mount_point + CgroupRel(id) + (h->v2 ? "/memory.events" : "/memory.oom_control");
  auto text = sys::ReadFile(file);
  if (!text) return tl::unexpected(text.error());
  size_t pos = text->find("oom_kill ");
  if (pos == std::string::npos) return Fail(Errc::kUnavailable, file + " has no oom_kill count");
  return static_cast<int64_t>(std::strtoll(text->c_str() + pos + 9, nullptr, 10));
}

namespace {

// "key value" lines (cpu.stat, memory.stat): the value of `key`, or -1.
int64_t StatValue(const std::string& text, std::string_view key) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    std::string_view line(text.data() + pos, eol - pos);
    if (line.size() > key.size() && line.substr(0, key.size()) == key && line[key.size()] == ' ')
      return std::strtoll(std::string(line.substr(key.size() + 1)).c_str(), nullptr, 10);
    pos = eol + 1;
  }
  return -1;
}

int64_t FileValue(const std::string& path) {
  auto text = sys::ReadFile(path);
  if (!text || text->empty() || !std::isdigit(static_cast<unsigned char>((*text)[0]))) return -1;
  return std::strtoll(text->c_str(), nullptr, 10);
}

}  // namespace

Result<Runtime::Usage> OciRuntime::ResourceUsage(const std::string& id) {
  if (!ValidName(id)) return Fail(Errc::kInvalidArgument, "oci: bad id " + id);
  Usage u;
  // CPU: v1 cpuacct.usage (ns); v2 cpu.stat usage_usec.
  if (const sys::Hierarchy* h = sys::FindHierarchy(hierarchies_, "cpuacct")) {
    const std::string dir = h->mount_point + CgroupRel(id);
    if (!sys::Exists(dir)) return Fail(Errc::kNotFound, "no cgroup " + dir);
    if (h->v2) {
      if (auto t = sys::ReadFile(dir + "/cpu.stat")) {
        int64_t us = StatValue(*t, "usage_usec");
        if (us >= 0) u.cpu_ns = us * 1000;
      }
    } else {
      u.cpu_ns = FileValue(dir + "/cpuacct.usage");
    }
  }
  // Memory, as `docker stats` counts it: usage minus the inactive page cache.
  if (const sys::Hierarchy* h = sys::FindHierarchy(hierarchies_, "memory")) {
    const std::string dir = h->mount_point + CgroupRel(id);
    if (!sys::Exists(dir)) return Fail(Errc::kNotFound, "no cgroup " + dir);
    int64_t usage = FileValue(dir + (h->v2 ? "/memory.current" : "/memory.usage_in_bytes"));
    auto stat = sys::ReadFile(dir + "/memory.stat");
    int64_t inactive = -1, cache = -1;
    if (stat) {
      inactive = StatValue(*stat, h->v2 ? "inactive_file" : "total_inactive_file");
      cache = StatValue(*stat, h->v2 ? "file" : "total_cache");
    }
    if (usage >= 0) u.memory_bytes = std::max<int64_t>(0, usage - std::max<int64_t>(0, inactive));
    u.memory_cache_bytes = cache;
  }
  return u;
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
  if (gone) return Ok();
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

}  // namespace

Result<std::unique_ptr<Runtime>> CreateOciRuntime(const OciOptions& opts) {
  return OciRuntime::Create(opts);
}

}  // namespace space::runtime
