// The `oci` Runtime's starts: the sandbox's run dir, its bundle (config.json, network,
// volumes) and `crun run -d` in the helper mount namespace. See oci_internal.h.
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
#include <cstring>
#include <set>
#include <sstream>

#include <sodium.h>
#include <spdlog/spdlog.h>

#include "runtime/oci/bundle.h"
#include "runtime/oci/oci_internal.h"
#include "runtime/oci/seccomp_bpf.h"

namespace space::runtime::oci_impl {

using sys::CgroupLayout;

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
  // (A spare root from storage has it already: OciRootMountPoints.)
  {
    int rfd = ::open(spec.rootfs.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (rfd < 0) return ErrnoFail("open " + spec.rootfs);
    sys::UniqueFd g(rfd);
    const char* mount_point = oci::kAgentDir + 1;  // relative to the root
    if (::mkdirat(rfd, mount_point, 0755) != 0 && errno != EEXIST)
      return ErrnoFail("mkdir " + spec.rootfs + oci::kAgentDir);
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
  // With crun it also holds the sandbox's /dev (BundleParams::dev_in_run_dir): room for
  // /dev/shm, and inodes for what programs keep there (its inodes are charged to the
  // sandbox's memory cgroup like its pages).
  SPACE_TRY(UnmountAll(run));
  SPACE_TRY(sys::RemoveAll(run));
  if (::mkdir(run.c_str(), 0700) != 0) return ErrnoFail("mkdir " + run);
  const bool dev_in_run = Basename(binary_) == "crun";
  uint32_t owner = opts_.user_namespace ? opts_.uid_shift : 0;
  std::string tmpfs_opts =
      dev_in_run ? "size=" + std::to_string(kRunTmpfsBytes + oci::DevTmpfsBytes(spec.limits)) +
                       ",nr_inodes=65536"
                 : "size=" + std::to_string(kRunTmpfsBytes) + ",nr_inodes=256";
  tmpfs_opts += ",mode=0700,uid=" + std::to_string(owner) + ",gid=" + std::to_string(owner);
  if (::mount("tmpfs", run.c_str(), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
              tmpfs_opts.c_str()) != 0)
    return ErrnoFail("mount tmpfs on " + run);
  if (dev_in_run) SPACE_TRY(MakeDevDir(run + "/dev", owner));

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
  // Each start is a boot: the sandbox's processes read a boot id of this start at
  // /proc/sys/kernel/random/boot_id (as a VM's kernel makes one per boot) instead of the
  // host's, so a suspend and wake reads as the restart it is and no two sandboxes share one.
  // crun only: runc refuses any mount on /proc beyond a fixed list of files.
  if (Basename(binary_) == "crun") {
    const std::string host = bundle + "/boot_id";
    auto f = sys::Open(host, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0644);
    if (!f) return tl::unexpected(f.error());
    SPACE_TRY_WRAP(sys::WriteAll(f->get(), NewUuidV4() + "\n"), "write " + host);
    bp.file_binds.emplace_back(host, "/proc/sys/kernel/random/boot_id");
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
  // The sandbox's cgroups are bound inside (BundleParams::cgroup_skeleton). crun makes
  // them before it mounts: it joins them before it unshares the cgroup namespace, and
  // mounts after that. Making them here instead waited for the RCU grace period that
  // WarmCgroupMigration starts, in the start's own path.
  if (!cgroup_skeleton_.empty()) {
    bp.cgroup_skeleton = cgroup_skeleton_;
    for (const auto& mp : cgroup_bound_)
      bp.cgroup_binds.emplace_back(mp + CgroupRel(id), "/sys/fs/cgroup/" + Basename(mp));
  }
  bp.dev_in_run_dir = dev_in_run;
  bp.root_path = root;
  bp.agent_binary = agent_copies_->Acquire(id);
  bp.run_dir = run;
  bp.empty_dir = empty_dir_;
  bp.masked_dirs = masked_dirs_;
  bp.sysfs_source = sysfs_;
  bp.cgroups_path = CgroupRel(id);
  bp.user_namespace = opts_.user_namespace;
  bp.uid_shift = opts_.uid_shift;
  bp.uid_count = opts_.uid_count;
  bp.memory_swap = memory_swap_;
  // config.json, and crun's copy of it in its state, ~17 KB instead of ~37 KB with it.
  bp.seccomp_bpf_b64 = seccomp_bpf_b64_;
  std::string config = oci::BuildOciConfig(spec, bp).dump();
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

  // The sandbox's session keyring is a new anonymous one (keyctl is refused inside
  // anyway, by the seccomp filter), not one the runtime looks up by the container's name.
  sys::SpawnOptions so = RuntimeCmd({"run", "-d", "--no-new-keyring", "--bundle", bundle, id});
  so.new_session = true;  // not in the daemon's session or process group
  so.new_session_keyring = true;
  // In the helper namespace crun sees this sandbox's mounts alone, in a namespace of this
  // start (mount_ns.h): what it reads and copies does not grow with the sandboxes running.
  std::vector<sys::UniqueFd> trees;
  if (ns_) {
    std::vector<std::string> at = {root, run};
    if (!bp.netns_path.empty()) at.push_back(bp.netns_path);
    if (!sysfs_.empty()) at.push_back(sysfs_);
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
  // A parked memory cgroup becomes this sandbox's; crun makes the other cgroups.
  if (memcg_pool_) (void)memcg_pool_->Claim(id);
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
  // crun (and runc) keep their own copy in their state; this one would only take tmpfs
  // pages for the sandbox's lifetime.
  (void)::unlink((bundle + "/config.json").c_str());
  ShieldAgentFromOom(id);
  return Ok();
}

// The sandbox's /dev as crun would make it in a tmpfs of its own: the files the host's
// device nodes are bound on, the mount points of /dev/pts and /dev/mqueue, and the usual
// symlinks; owned by the sandbox's root, who may add to it (/dev/shm, made by the agent).
Status OciRuntime::MakeDevDir(const std::string& dev, uint32_t owner) {
  auto own = [&](const std::string& path) -> Status {
    if (::lchown(path.c_str(), owner, owner) != 0) return ErrnoFail("chown " + path);
    return Ok();
  };
  if (::mkdir(dev.c_str(), 0755) != 0) return ErrnoFail("mkdir " + dev);
  SPACE_TRY(own(dev));
  for (const auto& name : oci::DevNodes()) {
    const std::string f = dev + "/" + name;
    auto fd = sys::Open(f, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0666);
    if (!fd) return tl::unexpected(fd.error());
    SPACE_TRY(own(f));
  }
  for (const char* d : {"pts", "mqueue"}) {
    const std::string path = dev + "/" + d;
    if (::mkdir(path.c_str(), 0755) != 0) return ErrnoFail("mkdir " + path);
    SPACE_TRY(own(path));
  }
  static constexpr std::pair<const char*, const char*> kLinks[] = {
      {"fd", "/proc/self/fd"},        {"stdin", "/proc/self/fd/0"}, {"stdout", "/proc/self/fd/1"},
      {"stderr", "/proc/self/fd/2"},  {"ptmx", "pts/ptmx"}};
  for (const auto& [name, target] : kLinks) {
    const std::string path = dev + "/" + name;
    if (::symlink(target, path.c_str()) != 0) return ErrnoFail("symlink " + path);
    SPACE_TRY(own(path));
  }
  return Ok();
}

namespace {
// -999, not -1000: the agent stays killable if nothing else is, and commands (which the
// agent resets to 0) can at most tie with it, where the larger process loses.
void ShieldPid(const std::string& id, const std::string& pid) {
  auto fd = sys::Open("/proc/" + pid + "/oom_score_adj", O_WRONLY);
  if (!fd || !sys::WriteAll(fd->get(), "-999"))
    spdlog::debug("oci: {}: cannot shield pid {} from the OOM killer", id, pid);
}
}  // namespace

void OciRuntime::Adopted(const std::string& id) {
  // Only the agent: commands run beside it now, and the agent sets theirs itself.
  if (auto pid = oci::InitPid(StateDirOf(id), CgroupRel(id))) ShieldPid(id, std::to_string(*pid));
}

void OciRuntime::ShieldAgentFromOom(const std::string& id) {
  // Only the agent (the container's init) is in the cgroup right after the start.
  const sys::Hierarchy* h = sys::FindHierarchy(hierarchies_, "memory");
  if (!h) return;
  auto procs = sys::ReadFile(h->mount_point + CgroupRel(id) + "/cgroup.procs");
  if (!procs) return;
  std::istringstream lines(*procs);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty()) ShieldPid(id, line);
  }
}
}  // namespace space::runtime::oci_impl
