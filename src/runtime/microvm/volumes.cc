// microvm: named volumes (docs/volumes.md) shared with a VM through virtiofs.
//
// Each VM with volumes gets one virtiofsd (QEMU 7.2's, /usr/lib/qemu/virtiofsd), started
// before QEMU and ended with it. The daemon is set up so that the guest acts on the volumes
// as an oci sandbox does:
//   - it runs in a user namespace with the oci sandboxes' map (0..65535 inside = host
//     uid_shift..uid_shift+65535), so a file the guest's root makes belongs to the same
//     host uid as one root makes in an oci sandbox (or the volume file API), a chown to
//     uid 1000 gives host uid_shift+1000, and ids outside the map (host root among them)
//     cannot be given at all (EINVAL); mknod of a device needs CAP_MKNOD in the initial
//     namespace (EPERM);
//   - a seccomp filter refuses any mode with the setuid or setgid bit (EPERM), so the
//     guest cannot leave such files on the host; xattrs are off (no file capabilities);
//   - its source is a small read-only tmpfs in a mount namespace of its own (nothing is
//     mounted on the host), holding one directory per volume, "0", "1", ...: a bind of
//     the volume's loop mount, nosuid, nodev, noexec and, for a read-only volume, ro —
//     so the host's kernel refuses writes even if the guest's root remounts its side;
//   - virtiofsd then sandboxes itself (pivot_root into that tmpfs, new pid and network
//     namespaces, its own seccomp filter); it listens on a socket spaced bound (fs.sock),
//     handed over as fd 3, so the namespace's root needs no access to the VM's dir.
// The guest's agent mounts the device (tag "space-volumes") and binds each directory at
// its path at the first sync (agent/sync.cc).
#include <fcntl.h>
#include <grp.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <stddef.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "runtime/microvm/internal.h"

namespace space::runtime::microvm {

namespace {

// The BPF program of the setuid/setgid filter: for each syscall that takes a file mode,
// EPERM when the mode has S_ISUID or S_ISGID; openat2 (its mode is behind a pointer) is
// ENOSYS, which libc and virtiofsd take as "use openat". Anything else passes to
// virtiofsd's own filter.
std::vector<sock_filter> NoSetidFilter() {
  struct ModeArg {
    long nr;
    int arg;
  };
  const ModeArg calls[] = {{SYS_chmod, 1},  {SYS_fchmod, 1},   {SYS_fchmodat, 2}, {SYS_open, 2},
                           {SYS_openat, 3}, {SYS_creat, 1},    {SYS_mkdir, 1},    {SYS_mkdirat, 2},
                           {SYS_mknod, 1},  {SYS_mknodat, 2},  {452 /* fchmodat2 */, 2}};
  std::vector<sock_filter> f;
  auto stmt = [&](uint16_t code, uint32_t k) { f.push_back(BPF_STMT(code, k)); };
  auto jump = [&](uint16_t code, uint32_t k, uint8_t jt, uint8_t jf) { f.push_back(BPF_JUMP(code, k, jt, jf)); };
  // Another architecture's syscall numbers mean other things: refuse them outright.
  stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch));
  jump(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0);
  stmt(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM);
  stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr));
  // The x32 ABI's numbers (bit 30 set) would not match the ones below.
  jump(BPF_JMP | BPF_JGE | BPF_K, 0x40000000, 0, 1);
  stmt(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM);
  jump(BPF_JMP | BPF_JEQ | BPF_K, 437 /* openat2 */, 0, 1);
  stmt(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS);
  for (const auto& c : calls) {
    // nr == c.nr ? (load the low half of the mode; has setid bits ? EPERM : ALLOW) : next
    jump(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(c.nr), 0, 4);
    stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args) + c.arg * 8);
    jump(BPF_JMP | BPF_JSET | BPF_K, S_ISUID | S_ISGID, 0, 1);
    stmt(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM);
    stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    // Back to the syscall number for the next comparison.
    stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr));
  }
  stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  return f;
}

// Writes a short message to the error pipe and ends the child (async-signal-safe).
[[noreturn]] void ChildFail(int fd, const char* what) {
  int e = errno;
  (void)!::write(fd, what, std::strlen(what));
  (void)!::write(fd, ": ", 2);
  const char* s = ::strerror(e);  // glibc's table: no allocation
  (void)!::write(fd, s, std::strlen(s));
  ::_exit(1);
}

}  // namespace

std::string MicrovmRuntime::VolumesUnavailable() const {
  if (opts_.template_uid_shift == 0)
    return "microVM volumes need spaced's user namespace (owners would not map: spaced runs "
           "without one)";
  if (::access(opts_.virtiofsd.c_str(), X_OK) != 0)
    return "virtiofsd (" + opts_.virtiofsd + ", package qemu-system-common) is not installed";
  return "";
}

Status MicrovmRuntime::StartVirtiofsd(const std::string& id, const VmConfig& cfg) {
  if (std::string why = VolumesUnavailable(); !why.empty()) return Fail(Errc::kUnavailable, why);
  const std::string dir = VmDir(id);
  const std::string share = dir + "/share", sock_path = dir + "/fs.sock";
  if (sock_path.size() >= sizeof(sockaddr_un{}.sun_path))
    return Fail(Errc::kInvalidArgument, "microvm state dir path too long for unix sockets: " + dir);
  SPACE_TRY(sys::MkdirAll(share, 0755));
  for (const auto& v : cfg.volumes) {
    struct stat st;
    if (v.host_path.empty() || v.host_path[0] != '/' || ::stat(v.host_path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      return Fail(Errc::kUnavailable, "volume directory " + v.host_path + " is missing");
  }
  auto log = sys::Open(dir + "/virtiofsd.log", O_WRONLY | O_CREAT | O_APPEND, 0600);
  if (!log) return tl::unexpected(log.error());
  (void)::unlink(sock_path.c_str());
  sys::UniqueFd sock(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!sock) return ErrnoFail("socket");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, sock_path.c_str(), sock_path.size() + 1);
  if (::bind(sock.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return ErrnoFail("bind " + sock_path);
  if (::chmod(sock_path.c_str(), 0600) != 0 || ::listen(sock.get(), 1) != 0) return ErrnoFail("listen " + sock_path);

  // Everything the child needs, made before fork (it may not allocate).
  std::vector<std::string> dirs, sources;
  std::vector<unsigned long> flags;
  for (size_t k = 0; k < cfg.volumes.size(); ++k) {
    dirs.push_back(share + "/" + std::to_string(k));
    sources.push_back(cfg.volumes[k].host_path);
    flags.push_back(MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV | MS_NOEXEC |
                    (cfg.volumes[k].read_only ? MS_RDONLY : 0));
  }
  std::vector<std::string> args = {opts_.virtiofsd, "--fd=3", "-f", "-o", "source=" + share,
                                   "-o", "cache=auto", "-o", "sandbox=namespace",
                                   "-o", "no_xattr", "-o", "log_level=warn"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<sock_filter> filter = NoSetidFilter();
  sock_fprog prog{static_cast<unsigned short>(filter.size()), filter.data()};
  int ready[2], go[2], errp[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) return ErrnoFail("pipe");
  sys::UniqueFd r0(ready[0]), r1(ready[1]);
  if (::pipe2(go, O_CLOEXEC) != 0) return ErrnoFail("pipe");
  sys::UniqueFd g0(go[0]), g1(go[1]);
  if (::pipe2(errp, O_CLOEXEC) != 0) return ErrnoFail("pipe");
  sys::UniqueFd e0(errp[0]), e1(errp[1]);
  const int listen_fd = sock.get(), log_fd = log->get(), err_fd = e1.get();
  const int ready_fd = r1.get(), go_fd = g0.get();
  pid_t pid = ::fork();
  if (pid < 0) return ErrnoFail("fork");
  if (pid == 0) {
    // Child: async-signal-safe calls only (spaced has other threads).
    ::setsid();
    // Safety: the mounts below happen in this child's own mount namespace, made private
    // first, so nothing propagates to the host's.
    if (::unshare(CLONE_NEWNS) != 0) ChildFail(err_fd, "unshare mount namespace");
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) ChildFail(err_fd, "make / private");
    if (::mount("space-volumes", share.c_str(), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755,size=64k") != 0)
      ChildFail(err_fd, "mount the share's tmpfs");
    for (size_t k = 0; k < dirs.size(); ++k) {
      if (::mkdir(dirs[k].c_str(), 0755) != 0) ChildFail(err_fd, "mkdir in the share");
      if (::mount(sources[k].c_str(), dirs[k].c_str(), nullptr, MS_BIND, nullptr) != 0) ChildFail(err_fd, "bind a volume");
      if (::mount(nullptr, dirs[k].c_str(), nullptr, flags[k], nullptr) != 0) ChildFail(err_fd, "remount a volume's bind");
    }
    if (::mount(nullptr, share.c_str(), nullptr, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                "mode=0755,size=64k") != 0)
      ChildFail(err_fd, "make the share read-only");
    // No supplementary groups of spaced's (host gid 0 would still count on the host).
    if (::setgroups(0, nullptr) != 0) ChildFail(err_fd, "setgroups");
    if (::unshare(CLONE_NEWUSER) != 0) ChildFail(err_fd, "unshare user namespace");
    char c = 0;
    if (::write(ready_fd, &c, 1) != 1 || ::read(go_fd, &c, 1) != 1) ::_exit(1);
    if (::setresgid(0, 0, 0) != 0 || ::setresuid(0, 0, 0) != 0) ChildFail(err_fd, "become the namespace's root");
    if (::dup2(listen_fd, 3) != 3 || ::dup2(log_fd, 1) != 1 || ::dup2(log_fd, 2) != 2) ChildFail(err_fd, "dup2");
    ::close(0);
    if (::open("/dev/null", O_RDONLY) != 0) ChildFail(err_fd, "open /dev/null");
    // fd 3 stays open across exec (dup2 clears close-on-exec); the rest are O_CLOEXEC.
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) ChildFail(err_fd, "no_new_privs");
    if (::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) ChildFail(err_fd, "seccomp");
    ::execv(argv[0], argv.data());
    ChildFail(err_fd, "exec virtiofsd");
  }
  r1.Reset();
  g0.Reset();
  e1.Reset();
  // Reaped when it ends while spaced runs; init's child after a restart.
  std::thread([pid] { ::waitpid(pid, nullptr, 0); }).detach();
  char c;
  bool mapped = false;
  if (::read(r0.get(), &c, 1) == 1) {
    const std::string map = "0 " + std::to_string(opts_.template_uid_shift) + " 65536\n";
    mapped = true;
    for (const char* f : {"/uid_map", "/gid_map"}) {
      auto fd = sys::Open("/proc/" + std::to_string(pid) + f, O_WRONLY);
      mapped = mapped && fd && sys::WriteAll(fd->get(), map).has_value();
    }
    if (mapped) mapped = ::write(g1.get(), "g", 1) == 1;
  }
  g1.Reset();
  auto err = sys::ReadAll(e0.get());  // EOF at exec
  if (!mapped || (err && !err->empty())) {
    ::kill(pid, SIGKILL);
    return Fail(Errc::kInternal, "start virtiofsd: " + (err && !err->empty() ? *err : std::string("could not map its ids")));
  }
  SPACE_TRY(sys::WriteFileAtomic(dir + "/virtiofsd.pid", std::to_string(pid), 0644));
  // In the VM's cgroup, beside its QEMU: it outlives spaced as QEMU does, and goes with it.
  if (auto j = sys::JoinCgroup(hierarchies_, CgroupOf(cfg.marker.empty() ? "space-vm-" + id : cfg.marker), pid); !j)
    spdlog::debug("microvm {}: virtiofsd stays in spaced's cgroup: {}", id, j.error().message);
  return Ok();
}

Status MicrovmRuntime::RefuseWithVolumes(const std::string& id, const VmConfig& cfg, const std::string& what) {
  if (cfg.volumes.empty()) return Ok();
  return Fail(Errc::kConflict, "microVM " + id + " mounts volumes and cannot be " + what +
                                   ": QEMU cannot save a VM whose virtiofs device shares them "
                                   "(pause keeps it in memory; docs/volumes.md)");
}

Status MicrovmRuntime::StopVirtiofsd(const std::string& id) {
  const std::string dir = VmDir(id);
  auto s = sys::ReadFile(dir + "/virtiofsd.pid");
  if (!s) return Ok();
  pid_t pid = static_cast<pid_t>(std::atoi(s->c_str()));
  const std::string marker = "source=" + dir + "/share";
  if (!PidAlive(pid, marker)) return Ok();
  // Its process group: virtiofsd forks the sandboxed server (PID 1 of its own pid
  // namespace) and waits for it; both go.
  ::kill(-pid, SIGKILL);
  for (int i = 0; i < 400; ++i) {
    if (!PidAlive(pid, marker)) return Ok();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return Fail(Errc::kInternal, "virtiofsd " + std::to_string(pid) + " of " + id + " did not exit");
}

}  // namespace space::runtime::microvm
