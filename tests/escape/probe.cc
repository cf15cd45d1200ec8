// space-escape-probe: a static binary run inside a sandbox that really attempts one escape
// per subcommand and reports, on stdout, one line
//
//   CASE <name> BLOCKED|ESCAPED|ERROR <detail>
//
// BLOCKED: every attempt of the case failed the way isolation should make it fail (or
// stayed inside the sandbox). ESCAPED: an attempt reached outside, or a limit did not
// hold. ERROR: the probe itself could not run the case (a bug of the probe or the test).
// Parameters are key=value arguments after the case name (see Params). Used by
// tests/integration/escape_test.cc; docs/security.md lists the cases.
//
// Attempts that would harm the host if they worked are written to be harmless even then:
// a writable /proc/sys or /sys file is written back with its own content, the sysrq
// trigger gets 'h' (help), the clock is set to its current value, reboot asks for
// CAD_OFF.
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/btrfs.h>
#include <linux/io_uring.h>
#include <linux/perf_event.h>
#include <linux/reboot.h>
#include <linux/userfaultfd.h>
#include <linux/vm_sockets.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/fanotify.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/time.h>
#include <sys/timex.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace {

// ---- results ----

struct Outcome {
  bool escaped = false;
  bool error = false;
  std::string detail;
};

// Collects the attempts of one case: any attempt that got through makes the case ESCAPED.
class Attempts {
 public:
  // An attempt that should have failed; `ok` says whether it did the forbidden thing.
  void Check(const std::string& what, bool got_through, const std::string& how = "") {
    if (got_through) {
      escaped_ = true;
      Add(what + ": GOT THROUGH" + (how.empty() ? "" : " (" + how + ")"));
    } else {
      Add(what + ": " + (how.empty() ? "refused" : how));
    }
  }
  // A syscall-style attempt: `rc` < 0 with errno means refused.
  void Syscall(const std::string& what, long rc) {
    if (rc < 0) {
      Add(what + ": " + ErrnoName(errno));
    } else {
      escaped_ = true;
      Add(what + ": SUCCEEDED (" + std::to_string(rc) + ")");
    }
  }
  void Note(const std::string& s) { Add(s); }
  void Error(const std::string& s) {
    error_ = true;
    Add("error: " + s);
  }
  Outcome Done() const { return Outcome{escaped_, error_ && !escaped_, detail_}; }

  static std::string ErrnoName(int e) {
    switch (e) {
      case EPERM: return "EPERM";
      case EACCES: return "EACCES";
      case ENOENT: return "ENOENT";
      case ENOSYS: return "ENOSYS";
      case EROFS: return "EROFS";
      case EINVAL: return "EINVAL";
      case ESRCH: return "ESRCH";
      case EXDEV: return "EXDEV";
      case ECONNREFUSED: return "ECONNREFUSED";
      case ENETUNREACH: return "ENETUNREACH";
      case EAFNOSUPPORT: return "EAFNOSUPPORT";
      case EAGAIN: return "EAGAIN";
      case EMFILE: return "EMFILE";
      case ENOSPC: return "ENOSPC";
      case EDQUOT: return "EDQUOT";
      case EBADF: return "EBADF";
      case ENODEV: return "ENODEV";
      case EOPNOTSUPP: return "EOPNOTSUPP";
      case ETIMEDOUT: return "ETIMEDOUT";
      case EHOSTUNREACH: return "EHOSTUNREACH";
      case ENOTDIR: return "ENOTDIR";
      case EBUSY: return "EBUSY";
      case ENOMEM: return "ENOMEM";
      default: return "errno " + std::to_string(e);
    }
  }

 private:
  void Add(const std::string& s) { detail_ += (detail_.empty() ? "" : "; ") + s; }
  bool escaped_ = false, error_ = false;
  std::string detail_;
};

// ---- parameters ----

std::map<std::string, std::string> g_params;

std::string Param(const std::string& key, const std::string& def = "") {
  auto it = g_params.find(key);
  return it == g_params.end() ? def : it->second;
}
long ParamInt(const std::string& key, long def) {
  std::string v = Param(key);
  return v.empty() ? def : std::strtol(v.c_str(), nullptr, 10);
}
std::vector<std::string> ParamList(const std::string& key) {
  std::vector<std::string> out;
  std::string v = Param(key);
  size_t start = 0;
  while (start < v.size()) {
    size_t end = v.find(',', start);
    if (end == std::string::npos) end = v.size();
    if (end > start) out.push_back(v.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// ---- helpers ----

// Reads up to `max` bytes of an fd.
std::string ReadFd(int fd, size_t max = 1 << 16) {
  std::string out;
  char buf[4096];
  while (out.size() < max) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// Opens `path` (relative to `dirfd`) and says whether it holds `token` (the host's secret).
// Returns false when it cannot be opened.
bool HoldsToken(int dirfd, const std::string& path, const std::string& token) {
  if (token.empty()) return false;
  int fd = ::openat(dirfd, path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return false;
  std::string data = ReadFd(fd);
  ::close(fd);
  return data.find(token) != std::string::npos;
}

std::vector<int> Pids() {
  std::vector<int> pids;
  DIR* d = ::opendir("/proc");
  if (!d) return pids;
  while (dirent* e = ::readdir(d)) {
    int pid = std::atoi(e->d_name);
    if (pid > 0) pids.push_back(pid);
  }
  ::closedir(d);
  return pids;
}

std::string Cmdline(int pid) {
  std::string path = "/proc/" + std::to_string(pid) + "/cmdline";
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string s = ReadFd(fd, 4096);
  ::close(fd);
  for (char& c : s) {
    if (c == '\0') c = ' ';
  }
  return s;
}

std::string Strip(const std::string& p) {
  size_t i = 0;
  while (i < p.size() && p[i] == '/') ++i;
  return p.substr(i);
}

std::string Ups(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += "../";
  return s;
}

// Host secrets the test planted: marker=<host path> holding token=<secret>, and the other
// sandbox's root (other_root=<host path>) holding other_token in tmp/secret.
struct Secret {
  std::string path, token;
};
std::vector<Secret> Secrets() {
  std::vector<Secret> s;
  if (!Param("marker").empty()) s.push_back({Param("marker"), Param("token")});
  if (!Param("other_root").empty())
    s.push_back({Param("other_root") + "/tmp/secret", Param("other_token")});
  return s;
}

// Tries every secret relative to `dirfd` (absolute paths stripped to relative ones, so a
// directory fd that is really the host's / would find them).
void TrySecretsAt(Attempts& a, int dirfd, const std::string& via) {
  for (const auto& s : Secrets()) {
    bool got = HoldsToken(dirfd, Strip(s.path), s.token) ||
               HoldsToken(dirfd, Ups(40) + Strip(s.path), s.token);
    if (got) a.Check(via + " -> " + s.path, true);
  }
}

bool CanWriteOpen(const std::string& path, int* err) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    *err = errno;
    return false;
  }
  ::close(fd);
  return true;
}

long Sys(long n, long a = 0, long b = 0, long c = 0, long d = 0, long e = 0, long f = 0) {
  return ::syscall(n, a, b, c, d, e, f);
}

// ---- cases: host and other sandboxes' files ----

Outcome Proc1Root() {
  Attempts a;
  for (const auto& s : Secrets()) {
    std::string p = "/proc/1/root" + s.path;
    a.Check("open " + p, HoldsToken(AT_FDCWD, p, s.token));
    std::string q = "/proc/1/root/" + Ups(40) + Strip(s.path);
    a.Check("open /proc/1/root/../..", HoldsToken(AT_FDCWD, q, s.token));
  }
  return a.Done();
}

Outcome ProcCwdRoot() {
  Attempts a;
  int tried = 0;
  for (int pid : Pids()) {
    for (const char* link : {"cwd", "root"}) {
      std::string p = "/proc/" + std::to_string(pid) + "/" + link;
      int fd = ::open(p.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
      if (fd < 0) continue;
      ++tried;
      TrySecretsAt(a, fd, p);
      ::close(fd);
    }
  }
  a.Note("tried " + std::to_string(tried) + " cwd/root links of visible processes");
  return a.Done();
}

Outcome ProcFdWalk() {
  Attempts a;
  int tried = 0;
  for (int pid : Pids()) {
    std::string dir = "/proc/" + std::to_string(pid) + "/fd";
    DIR* d = ::opendir(dir.c_str());
    if (!d) continue;
    while (dirent* e = ::readdir(d)) {
      if (e->d_name[0] == '.') continue;
      std::string p = dir + "/" + e->d_name;
      int fd = ::open(p.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (fd < 0) continue;
      ++tried;
      TrySecretsAt(a, fd, p);
      ::close(fd);
    }
    ::closedir(d);
  }
  a.Note("walked up from " + std::to_string(tried) + " directory fds");
  return a.Done();
}

Outcome DotDot() {
  Attempts a;
  if (::chdir("/") != 0) a.Error("chdir /");
  for (int i = 0; i < 64; ++i) (void)::chdir("..");
  TrySecretsAt(a, AT_FDCWD, "cwd after 64 chdir(..)");
  for (const auto& s : Secrets()) a.Check("open " + s.path, HoldsToken(AT_FDCWD, s.path, s.token));
  return a.Done();
}

Outcome ChrootBreakout() {
  Attempts a;
  ::mkdir("/tmp/escape-chroot", 0755);
  int keep = ::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (::chroot("/tmp/escape-chroot") != 0) {
    a.Note(std::string("chroot: ") + Attempts::ErrnoName(errno));
  } else {
    // The classic: an fd outside the new root, fchdir to it, climb, chroot(".").
    if (::fchdir(keep) != 0) a.Error("fchdir");
    for (int i = 0; i < 64; ++i) (void)::chdir("..");
    if (::chroot(".") != 0) a.Note(std::string("chroot .: ") + Attempts::ErrnoName(errno));
    TrySecretsAt(a, AT_FDCWD, "after chroot breakout");
    for (const auto& s : Secrets())
      a.Check("open " + s.path, HoldsToken(AT_FDCWD, s.path, s.token));
    a.Note("broke out of the inner chroot into the sandbox root only");
  }
  ::close(keep);
  return a.Done();
}

Outcome Symlink() {
  Attempts a;
  const std::vector<Secret> secrets = Secrets();
  for (size_t i = 0; i < secrets.size(); ++i) {
    const Secret& s = secrets[i];
    std::string link = "/tmp/escape-link" + std::to_string(i);
    ::unlink(link.c_str());
    if (::symlink(s.path.c_str(), link.c_str()) != 0) {
      a.Error("symlink: " + Attempts::ErrnoName(errno));
      continue;
    }
    a.Check("open symlink -> " + s.path, HoldsToken(AT_FDCWD, link, s.token));
    std::string rel = "/tmp/escape-rel" + std::to_string(i);
    ::unlink(rel.c_str());
    (void)::symlink((Ups(40) + Strip(s.path)).c_str(), rel.c_str());
    a.Check("open symlink -> ../../" + Strip(s.path), HoldsToken(AT_FDCWD, rel, s.token));
  }
  // Left in place: the test then asks spaced (files API) to read /tmp/escape-link0.
  return a.Done();
}

Outcome Hardlink() {
  Attempts a;
  for (const auto& s : Secrets()) {
    ::unlink("/tmp/escape-hl");
    a.Syscall("link " + s.path, ::link(s.path.c_str(), "/tmp/escape-hl"));
  }
  // The agent binary is a host file bound into the sandbox: a hard link to it would be a
  // host inode in the sandbox's writable tree.
  ::unlink("/tmp/escape-agent-hl");
  a.Syscall("link /.space/bin/space-agent", ::link("/.space/bin/space-agent", "/tmp/escape-agent-hl"));
  int fd = ::open("/.space/bin/space-agent", O_PATH | O_CLOEXEC);
  if (fd >= 0) {
    std::string from = "/proc/self/fd/" + std::to_string(fd);
    ::unlink("/tmp/escape-agent-hl2");
    a.Syscall("linkat(AT_SYMLINK_FOLLOW) of an O_PATH fd on the agent binary",
              ::linkat(AT_FDCWD, from.c_str(), AT_FDCWD, "/tmp/escape-agent-hl2", AT_SYMLINK_FOLLOW));
    ::close(fd);
  }
  return a.Done();
}

Outcome AgentBinaryWrite() {
  Attempts a;
  const char* p = "/.space/bin/space-agent";
  a.Syscall("open O_WRONLY", ::open(p, O_WRONLY | O_CLOEXEC));
  a.Syscall("chmod", ::chmod(p, 04777));
  a.Syscall("truncate", ::truncate(p, 0));
  a.Syscall("rename over it", ::rename("/tmp", p));
  a.Syscall("remount the bind read-write",
            ::mount(nullptr, p, nullptr, MS_REMOUNT | MS_BIND, nullptr));
  return a.Done();
}

Outcome OpenByHandle() {
  Attempts a;
  // name_to_handle_at on our own root, then the "shocker" attack: guess the handle of the
  // filesystem's root inode (ext4: 2; btrfs: 256 in subvolume 5) and open it.
  struct {
    file_handle fh;
    unsigned char bytes[128];
  } h{};
  h.fh.handle_bytes = 128;
  int mount_id = 0;
  a.Syscall("name_to_handle_at /", ::name_to_handle_at(AT_FDCWD, "/", &h.fh, &mount_id, 0));
  int root = ::open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  struct Guess {
    int type;
    std::vector<uint32_t> words;
    const char* what;
  };
  const Guess guesses[] = {
      {1, {2, 0}, "FILEID_INO32_GEN ino 2 (ext4 root)"},
      {0x4d, {256, 0, 5, 0, 0}, "FILEID_BTRFS_WITHOUT_PARENT ino 256 subvol 5"},
  };
  for (const auto& g : guesses) {
    struct {
      file_handle fh;
      uint32_t w[16];
    } c{};
    c.fh.handle_type = g.type;
    c.fh.handle_bytes = static_cast<unsigned>(g.words.size() * 4);
    for (size_t i = 0; i < g.words.size(); ++i) c.w[i] = g.words[i];
    long rc = ::open_by_handle_at(root, &c.fh, O_RDONLY | O_DIRECTORY);
    a.Syscall(std::string("open_by_handle_at ") + g.what, rc);
    if (rc >= 0) ::close(static_cast<int>(rc));
  }
  ::close(root);
  return a.Done();
}

Outcome OtherSandboxFiles() {
  Attempts a;
  std::string root = Param("other_root"), token = Param("other_token");
  if (root.empty()) {
    a.Error("no other_root");
    return a.Done();
  }
  std::string id = root.substr(root.find_last_of('/') + 1);
  std::vector<std::string> guesses = {
      root + "/tmp/secret",
      "/proc/1/root" + root + "/tmp/secret",
      "/" + id + "/tmp/secret",
      "/../" + id + "/tmp/secret",
      "/var/lib/space/storage/pool/roots/" + id + "/tmp/secret",
      "/var/lib/space/storage/btrfs/roots/" + id + "/tmp/secret",
      "/.space/run/../../" + id + "/tmp/secret",
  };
  for (const auto& g : guesses) a.Check("open " + g, HoldsToken(AT_FDCWD, g, token));
  return a.Done();
}

// ---- cases: processes ----

Outcome HostProcesses() {
  Attempts a;
  std::vector<int> pids = Pids();
  std::string init_exe;
  char buf[4096];
  ssize_t n = ::readlink("/proc/1/exe", buf, sizeof buf - 1);
  if (n > 0) init_exe.assign(buf, static_cast<size_t>(n));
  a.Check("pid 1 is " + init_exe, init_exe != "/.space/bin/space-agent");
  // The sibling runs `probe sleep marker-<other_token>`; our own argv holds the token and
  // "spaced_pid=", so the probe skips itself.
  std::string other = Param("other_token").empty() ? "" : "marker-" + Param("other_token");
  for (int pid : pids) {
    if (pid == ::getpid()) continue;
    std::string cmd = Cmdline(pid);
    bool host = cmd.find("spaced") != std::string::npos || cmd.find("crun") != std::string::npos ||
                cmd.find("systemd") != std::string::npos || cmd.find("kthreadd") != std::string::npos;
    bool sibling = !other.empty() && cmd.find(other) != std::string::npos;
    if (host || sibling) a.Check("pid " + std::to_string(pid) + " " + cmd, true);
  }
  a.Note(std::to_string(pids.size()) + " processes visible, none outside the sandbox");
  return a.Done();
}

Outcome PtraceOutside() {
  Attempts a;
  long host_pid = ParamInt("spaced_pid", 0);
  if (host_pid <= 1) {
    a.Error("no spaced_pid");
    return a.Done();
  }
  std::string cmd = Cmdline(static_cast<int>(host_pid));
  // The number may exist in our pid namespace (a sandbox process): that is not spaced.
  bool is_spaced = cmd.find("spaced") != std::string::npos;
  long rc = ::ptrace(PTRACE_ATTACH, host_pid, nullptr, nullptr);
  if (rc == 0) {
    a.Check("ptrace attach pid " + std::to_string(host_pid), is_spaced, "a sandbox process: " + cmd);
    ::ptrace(PTRACE_DETACH, host_pid, nullptr, nullptr);
  } else {
    a.Note("ptrace attach spaced's host pid " + std::to_string(host_pid) + ": " +
           Attempts::ErrnoName(errno));
  }
  long k = ::kill(static_cast<pid_t>(host_pid), 0);
  a.Check("kill(spaced's pid, 0)", k == 0 && is_spaced, k == 0 ? "a sandbox process" : Attempts::ErrnoName(errno));
  char local[8], remote[8] = {};
  iovec l{local, sizeof local}, r{remote, sizeof remote};
  long v = ::process_vm_readv(static_cast<pid_t>(host_pid), &l, 1, &r, 1, 0);
  a.Check("process_vm_readv", v >= 0 && is_spaced, v >= 0 ? "a sandbox process" : Attempts::ErrnoName(errno));
  long pfd = Sys(SYS_pidfd_open, host_pid, 0);
  if (pfd >= 0) {
    a.Syscall("pidfd_getfd", Sys(SYS_pidfd_getfd, pfd, 0, 0));
    ::close(static_cast<int>(pfd));
  }
  a.Syscall("kcmp", Sys(SYS_kcmp, ::getpid(), 1, 0 /*KCMP_FILE*/, 0, 0));
  return a.Done();
}

// ---- cases: mounts ----

Outcome MountFs(const char* type, const char* source, const char* data) {
  Attempts a;
  ::mkdir("/tmp/escape-mnt", 0755);
  long rc = ::mount(source, "/tmp/escape-mnt", type, 0, data);
  a.Syscall(std::string("mount -t ") + type, rc);
  if (rc == 0) ::umount2("/tmp/escape-mnt", MNT_DETACH);
  return a.Done();
}

Outcome MountBind() {
  Attempts a;
  ::mkdir("/tmp/escape-mnt", 0755);
  a.Syscall("bind / on /tmp/escape-mnt", ::mount("/", "/tmp/escape-mnt", nullptr, MS_BIND | MS_REC, nullptr));
  a.Syscall("remount /proc/sys read-write",
            ::mount(nullptr, "/proc/sys", nullptr, MS_REMOUNT | MS_BIND, nullptr));
  a.Syscall("umount /proc/kcore (unmask)", ::umount2("/proc/kcore", MNT_DETACH));
  a.Syscall("make / shared", ::mount(nullptr, "/", nullptr, MS_SHARED | MS_REC, nullptr));
  return a.Done();
}

Outcome MountCgroup() {
  Attempts a;
  ::mkdir("/tmp/escape-cg", 0755);
  a.Syscall("mount cgroup v1 memory",
            ::mount("cgroup", "/tmp/escape-cg", "cgroup", 0, "memory"));
  a.Syscall("mount cgroup v1 rdma+release_agent",
            ::mount("cgroup", "/tmp/escape-cg", "cgroup", 0, "rdma"));
  a.Syscall("mount cgroup2", ::mount("cgroup2", "/tmp/escape-cg", "cgroup2", 0, nullptr));
  return a.Done();
}

Outcome NewMountApi() {
  Attempts a;
  a.Syscall("fsopen tmpfs", Sys(SYS_fsopen, reinterpret_cast<long>("tmpfs"), 0));
  a.Syscall("fspick /", Sys(SYS_fspick, AT_FDCWD, reinterpret_cast<long>("/"), 0));
  a.Syscall("open_tree / clone",
            Sys(SYS_open_tree, AT_FDCWD, reinterpret_cast<long>("/"), 1 /*OPEN_TREE_CLONE*/));
  a.Syscall("mount_setattr /", Sys(SYS_mount_setattr, AT_FDCWD, reinterpret_cast<long>("/"), 0, 0, 0));
  return a.Done();
}

// ---- cases: kernel ----

Outcome KernelModule() {
  Attempts a;
  // A bogus ELF image: with the capability the kernel would say ENOEXEC, not EPERM.
  static char image[64] = "\177ELF";
  a.Syscall("init_module", Sys(SYS_init_module, reinterpret_cast<long>(image), sizeof image,
                               reinterpret_cast<long>("")));
  int fd = ::open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
  a.Syscall("finit_module", Sys(SYS_finit_module, fd, reinterpret_cast<long>(""), 0));
  ::close(fd);
  a.Syscall("delete_module loop", Sys(SYS_delete_module, reinterpret_cast<long>("loop"), O_NONBLOCK));
  return a.Done();
}

Outcome Mknod() {
  Attempts a;
  struct Dev {
    const char* path;
    mode_t type;
    int maj, min;
  };
  for (const Dev& d : {Dev{"/tmp/escape-mem", S_IFCHR, 1, 1}, Dev{"/tmp/escape-kmsg", S_IFCHR, 1, 11},
                       Dev{"/tmp/escape-sda", S_IFBLK, 8, 0}, Dev{"/tmp/escape-loop", S_IFBLK, 7, 0}}) {
    ::unlink(d.path);
    long rc = ::mknod(d.path, d.type | 0666, makedev(d.maj, d.min));
    if (rc != 0) {
      a.Note(std::string("mknod ") + d.path + ": " + Attempts::ErrnoName(errno));
      continue;
    }
    int fd = ::open(d.path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    a.Check(std::string("open new node ") + d.path, fd >= 0,
            fd >= 0 ? "" : "mknod ok, open " + Attempts::ErrnoName(errno));
    if (fd >= 0) ::close(fd);
  }
  for (const char* p : {"/dev/mem", "/dev/kmem", "/dev/port", "/dev/kmsg", "/dev/sda", "/dev/vda",
                        "/dev/loop-control", "/dev/fuse", "/dev/kvm", "/dev/net/tun"}) {
    int fd = ::open(p, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    a.Check(std::string("open ") + p, fd >= 0, fd >= 0 ? "" : Attempts::ErrnoName(errno));
    if (fd >= 0) ::close(fd);
  }
  return a.Done();
}

Outcome RawSocket() {
  Attempts a;
  auto try_socket = [&](const char* what, int dom, int type, int proto) {
    int fd = ::socket(dom, type | SOCK_CLOEXEC, proto);
    a.Syscall(what, fd);
    if (fd >= 0) ::close(fd);
  };
  try_socket("socket(AF_PACKET, SOCK_RAW)", AF_PACKET, SOCK_RAW, htons(0x0003 /*ETH_P_ALL*/));
  try_socket("socket(AF_INET, SOCK_RAW, IPPROTO_RAW)", AF_INET, SOCK_RAW, IPPROTO_RAW);
  try_socket("socket(AF_INET6, SOCK_RAW, ICMPV6)", AF_INET6, SOCK_RAW, IPPROTO_ICMPV6);
  return a.Done();
}

Outcome Vsock() {
  Attempts a;
  int fd = ::socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    // Even if the socket exists, the host (cid 2) must not be reachable.
    sockaddr_vm addr{};
    addr.svm_family = AF_VSOCK;
    addr.svm_cid = VMADDR_CID_HOST;
    addr.svm_port = 22;
    long rc = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    a.Syscall("socket(AF_VSOCK) then connect host cid", rc);
    ::close(fd);
  } else {
    a.Syscall("socket(AF_VSOCK)", fd);
  }
  return a.Done();
}

Outcome Clock() {
  Attempts a;
  timeval tv{};
  ::gettimeofday(&tv, nullptr);
  a.Syscall("settimeofday(now)", ::settimeofday(&tv, nullptr));
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  a.Syscall("clock_settime(CLOCK_REALTIME, now)", ::clock_settime(CLOCK_REALTIME, &ts));
  timex tx{};
  tx.modes = ADJ_OFFSET;
  tx.offset = 0;
  a.Syscall("adjtimex(ADJ_OFFSET 0)", ::adjtimex(&tx));
  a.Syscall("clock_adjtime", Sys(SYS_clock_adjtime, CLOCK_REALTIME, reinterpret_cast<long>(&tx)));
  return a.Done();
}

Outcome Hostname() {
  Attempts a;
  const char* name = "escaped-host";
  a.Syscall("sethostname", ::sethostname(name, std::strlen(name)));
  a.Syscall("setdomainname", ::setdomainname(name, std::strlen(name)));
  int err = 0;
  bool w = CanWriteOpen("/proc/sys/kernel/hostname", &err);
  a.Check("open /proc/sys/kernel/hostname for writing", w, w ? "" : Attempts::ErrnoName(err));
  return a.Done();
}

Outcome Unshare() {
  Attempts a;
  struct Flag {
    int flag;
    const char* name;
  };
  for (const Flag& f : {Flag{CLONE_NEWUSER, "CLONE_NEWUSER"}, Flag{CLONE_NEWNS, "CLONE_NEWNS"},
                        Flag{CLONE_NEWNET, "CLONE_NEWNET"}, Flag{CLONE_NEWPID, "CLONE_NEWPID"},
                        Flag{CLONE_NEWUTS, "CLONE_NEWUTS"}, Flag{CLONE_NEWCGROUP, "CLONE_NEWCGROUP"},
                        Flag{CLONE_NEWIPC, "CLONE_NEWIPC"}}) {
    // In a child, so a success does not change the probe itself.
    pid_t pid = ::fork();
    if (pid == 0) {
      if (::unshare(f.flag) != 0) _exit(errno == EPERM ? 10 : 11);
      // It worked: with a new user namespace we hold every capability in it; try to use them.
      if (f.flag == CLONE_NEWUSER) {
        ::unshare(CLONE_NEWNS);
        if (::mount("none", "/tmp", "tmpfs", 0, nullptr) == 0) _exit(2);
      }
      _exit(1);
    }
    int st = 0;
    ::waitpid(pid, &st, 0);
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : 100;
    a.Check(std::string("unshare(") + f.name + ")", code < 10,
            code == 10 ? "EPERM" : code == 11 ? "refused (not EPERM)" : "");
  }
  // clone(2) with namespace flags, raw (glibc's clone() would need a stack).
  pid_t c = static_cast<pid_t>(Sys(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0));
  if (c == 0) _exit(0);
  if (c > 0) ::waitpid(c, nullptr, 0);
  a.Syscall("clone(CLONE_NEWUSER)", c);
  struct {
    uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls;
  } args{};
  args.flags = CLONE_NEWUSER;
  args.exit_signal = SIGCHLD;
  pid_t c3 = static_cast<pid_t>(Sys(SYS_clone3, reinterpret_cast<long>(&args), sizeof args));
  if (c3 == 0) _exit(0);
  if (c3 > 0) ::waitpid(c3, nullptr, 0);
  a.Syscall("clone3(CLONE_NEWUSER)", c3);
  return a.Done();
}

Outcome Setns() {
  Attempts a;
  for (const char* ns : {"user", "mnt", "net", "pid", "uts", "ipc", "cgroup"}) {
    std::string p = std::string("/proc/1/ns/") + ns;
    int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      a.Note("open " + p + ": " + Attempts::ErrnoName(errno));
      continue;
    }
    a.Syscall(std::string("setns ") + ns, ::setns(fd, 0));
    ::close(fd);
  }
  // A pidfd of pid 1 as setns target (kernel 5.8+).
  long pfd = Sys(SYS_pidfd_open, 1, 0);
  if (pfd >= 0) {
    a.Syscall("setns(pidfd 1, all)", ::setns(static_cast<int>(pfd), CLONE_NEWNS | CLONE_NEWNET));
    ::close(static_cast<int>(pfd));
  }
  return a.Done();
}

Outcome Keyring() {
  Attempts a;
  a.Syscall("add_key user", Sys(SYS_add_key, reinterpret_cast<long>("user"),
                                reinterpret_cast<long>("escape"), reinterpret_cast<long>("x"), 1,
                                -3 /*KEY_SPEC_SESSION_KEYRING*/));
  a.Syscall("keyctl JOIN_SESSION_KEYRING", Sys(SYS_keyctl, 1, 0));
  a.Syscall("request_key", Sys(SYS_request_key, reinterpret_cast<long>("user"),
                               reinterpret_cast<long>("escape"), 0, 0));
  int fd = ::open("/proc/keys", O_RDONLY | O_CLOEXEC);
  std::string keys = fd >= 0 ? ReadFd(fd) : "";
  if (fd >= 0) ::close(fd);
  a.Check("read /proc/keys", !keys.empty(), "empty (masked)");
  return a.Done();
}

Outcome Bpf() {
  Attempts a;
  bpf_attr attr{};
  attr.map_type = BPF_MAP_TYPE_ARRAY;
  attr.key_size = 4;
  attr.value_size = 4;
  attr.max_entries = 1;
  a.Syscall("bpf(BPF_MAP_CREATE)", Sys(SYS_bpf, BPF_MAP_CREATE, reinterpret_cast<long>(&attr), sizeof attr));
  bpf_insn prog[2] = {};
  prog[0].code = BPF_ALU64 | BPF_MOV | BPF_K;  // r0 = 0
  prog[1].code = BPF_JMP | BPF_EXIT;
  bpf_attr p{};
  p.prog_type = BPF_PROG_TYPE_SOCKET_FILTER;
  p.insns = reinterpret_cast<uint64_t>(prog);
  p.insn_cnt = 2;
  p.license = reinterpret_cast<uint64_t>("GPL");
  a.Syscall("bpf(BPF_PROG_LOAD socket filter)", Sys(SYS_bpf, BPF_PROG_LOAD, reinterpret_cast<long>(&p), sizeof p));
  return a.Done();
}

Outcome PerfEvent() {
  Attempts a;
  perf_event_attr attr{};
  attr.size = sizeof attr;
  attr.type = PERF_TYPE_SOFTWARE;
  attr.config = PERF_COUNT_SW_CPU_CLOCK;
  attr.exclude_kernel = 1;
  a.Syscall("perf_event_open(self)", Sys(SYS_perf_event_open, reinterpret_cast<long>(&attr), 0, -1, -1, 0));
  perf_event_attr k{};
  k.size = sizeof k;
  k.type = PERF_TYPE_HARDWARE;
  k.config = PERF_COUNT_HW_CPU_CYCLES;
  a.Syscall("perf_event_open(all cpus, kernel)", Sys(SYS_perf_event_open, reinterpret_cast<long>(&k), -1, 0, -1, 0));
  return a.Done();
}

Outcome Userfaultfd() {
  Attempts a;
  a.Syscall("userfaultfd", Sys(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
  int fd = ::open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
  a.Syscall("open /dev/userfaultfd", fd);
  return a.Done();
}

Outcome IoUring() {
  Attempts a;
  io_uring_params p{};
  long fd = Sys(SYS_io_uring_setup, 4, reinterpret_cast<long>(&p));
  a.Syscall("io_uring_setup", fd);
  if (fd >= 0) ::close(static_cast<int>(fd));
  return a.Done();
}

Outcome RebootKexec() {
  Attempts a;
  a.Syscall("reboot(CAD_OFF)", Sys(SYS_reboot, LINUX_REBOOT_MAGIC1, LINUX_REBOOT_MAGIC2,
                                   LINUX_REBOOT_CMD_CAD_OFF, 0));
  a.Syscall("kexec_load (empty)", Sys(SYS_kexec_load, 0, 0, 0, 0));
  a.Syscall("kexec_file_load", Sys(SYS_kexec_file_load, -1, -1, 0, 0, 4 /*KEXEC_FILE_NO_INITRAMFS*/));
  a.Syscall("swapon /tmp", Sys(SYS_swapon, reinterpret_cast<long>("/tmp"), 0));
  a.Syscall("acct", Sys(SYS_acct, 0));
  a.Syscall("iopl(3)", Sys(SYS_iopl, 3));
  a.Syscall("ioperm", Sys(SYS_ioperm, 0x80, 1, 1));
  return a.Done();
}

Outcome KernelLog() {
  Attempts a;
  char buf[256];
  a.Syscall("syslog(READ_ALL)", Sys(SYS_syslog, 3, reinterpret_cast<long>(buf), sizeof buf));
  int fd = ::open("/dev/kmsg", O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  a.Syscall("open /dev/kmsg", fd);
  if (fd >= 0) ::close(fd);
  return a.Done();
}

Outcome Fanotify() {
  Attempts a;
  long fd = Sys(SYS_fanotify_init, FAN_CLASS_NOTIF | FAN_CLOEXEC, O_RDONLY);
  a.Syscall("fanotify_init", fd);
  if (fd >= 0) ::close(static_cast<int>(fd));
  return a.Done();
}

Outcome Personality() {
  Attempts a;
  // Docker's profile only lets a process query or pick the plain Linux personalities.
  long rc = Sys(SYS_personality, ADDR_NO_RANDOMIZE);
  a.Syscall("personality(ADDR_NO_RANDOMIZE)", rc);
  if (rc >= 0) Sys(SYS_personality, rc);
  long rc2 = Sys(SYS_personality, READ_IMPLIES_EXEC);
  a.Syscall("personality(READ_IMPLIES_EXEC)", rc2);
  if (rc2 >= 0) Sys(SYS_personality, rc2);
  return a.Done();
}

Outcome NumaPolicy() {
  Attempts a;
  unsigned long mask = 1;
  a.Syscall("set_mempolicy(MPOL_BIND)", Sys(SYS_set_mempolicy, 2 /*MPOL_BIND*/, reinterpret_cast<long>(&mask), 64));
  void* p = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  a.Syscall("mbind", Sys(SYS_mbind, reinterpret_cast<long>(p), 4096, 2, reinterpret_cast<long>(&mask), 64, 0));
  a.Syscall("move_pages", Sys(SYS_move_pages, 0, 0, 0, 0, 0, 0));
  ::munmap(p, 4096);
  return a.Done();
}

// ---- cases: /proc and /sys ----

// Opens each path for writing; if one opens, writes its own content back (harmless) and
// reports it.
Outcome WriteKernelFiles(const std::vector<std::string>& paths) {
  Attempts a;
  for (const auto& p : paths) {
    int fd = ::open(p.c_str(), O_RDWR | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
      a.Note("open " + p + " rw: " + Attempts::ErrnoName(errno));
      continue;
    }
    std::string cur = ReadFd(fd, 4096);
    long w = ::pwrite(fd, cur.data(), cur.size(), 0);
    a.Check("write " + p, w >= 0, w >= 0 ? "" : "open ok, write " + Attempts::ErrnoName(errno));
    ::close(fd);
  }
  return a.Done();
}

Outcome SysrqTrigger() {
  Attempts a;
  int fd = ::open("/proc/sysrq-trigger", O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    a.Note(std::string("open /proc/sysrq-trigger: ") + Attempts::ErrnoName(errno));
  } else {
    long w = ::write(fd, "h", 1);  // 'h' prints help: harmless if it got through
    a.Check("write sysrq 'h'", w == 1, w == 1 ? "" : "open ok, write " + Attempts::ErrnoName(errno));
    ::close(fd);
  }
  return a.Done();
}

Outcome MaskedProc() {
  Attempts a;
  for (const char* p : {"/proc/kcore", "/proc/timer_list", "/proc/sched_debug", "/proc/keys",
                        "/proc/latency_stats", "/sys/firmware/acpi/tables/DSDT"}) {
    int fd = ::open(p, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
      a.Note(std::string(p) + ": " + Attempts::ErrnoName(errno));
      continue;
    }
    std::string data = ReadFd(fd, 4096);
    a.Check(std::string("read ") + p, !data.empty(), "0 bytes");
    ::close(fd);
  }
  return a.Done();
}

Outcome CgroupWrite() {
  std::vector<std::string> paths;
  for (const char* h : {"memory", "pids", "cpu", "devices", "freezer", "systemd", "rdma", "unified", ""}) {
    std::string base = std::string("/sys/fs/cgroup/") + h;
    for (const char* f : {"release_agent", "notify_on_release", "memory.limit_in_bytes",
                          "memory.max", "pids.max", "cgroup.procs", "devices.allow",
                          "cpu.cfs_quota_us", "freezer.state", "cgroup.subtree_control"}) {
      std::string p = base + (h[0] ? "/" : "") + f;
      struct stat st;
      if (::stat(p.c_str(), &st) == 0) paths.push_back(p);
    }
  }
  Outcome o = WriteKernelFiles(paths);
  o.detail += "; " + std::to_string(paths.size()) + " cgroup files tried";
  return o;
}

// ---- cases: network ----

long ConnectTcp(const std::string& ip, int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
  timeval tv{2, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  long rc = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  int e = errno;
  ::close(fd);
  errno = e;
  return rc;
}

Outcome HostLoopback() {
  Attempts a;
  for (const auto& port : ParamList("ports")) {
    a.Syscall("connect 127.0.0.1:" + port, ConnectTcp("127.0.0.1", std::atoi(port.c_str())));
  }
  if (ParamList("ports").empty()) a.Error("no ports");
  return a.Done();
}

Outcome HostAddresses() {
  Attempts a;
  int port = static_cast<int>(ParamInt("port", 0));
  for (const auto& ip : ParamList("host_ips")) a.Syscall("connect " + ip, ConnectTcp(ip, port));
  for (const char* ip : {"10.0.2.2", "172.17.0.1", "169.254.169.254", "192.168.1.1"})
    a.Syscall(std::string("connect ") + ip, ConnectTcp(ip, port ? port : 80));
  return a.Done();
}

Outcome HostAbstractUnix() {
  Attempts a;
  std::string name = Param("abstract");
  if (name.empty()) {
    a.Error("no abstract name");
    return a.Done();
  }
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path + 1, name.data(), name.size());
  socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  a.Syscall("connect @" + name, ::connect(fd, reinterpret_cast<sockaddr*>(&addr), len));
  ::close(fd);
  return a.Done();
}

Outcome AgentSocket() {
  Attempts a;
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strcpy(addr.sun_path, "/.space/run/agent.sock");
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    a.Note(std::string("connect: ") + Attempts::ErrnoName(errno));
  } else {
    // The agent refuses peers inside its pid namespace: it closes at once, sending nothing.
    timeval tv{3, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char buf[64];
    ssize_t n = ::read(fd, buf, sizeof buf);
    a.Check("agent served an in-sandbox peer", n > 0,
            n == 0 ? "closed by the agent" : "read " + Attempts::ErrnoName(errno));
    if (n < 0 && errno == EAGAIN) a.Check("agent kept the connection open", true);
  }
  ::close(fd);
  return a.Done();
}

// ---- cases: resources ----

Outcome ForkBomb() {
  Attempts a;
  long limit = ParamInt("pids", 64);
  std::vector<pid_t> kids;
  int err = 0;
  for (int i = 0; i < 100000; ++i) {
    pid_t p = ::fork();
    if (p == 0) {
      ::pause();
      _exit(0);
    }
    if (p < 0) {
      err = errno;
      break;
    }
    kids.push_back(p);
  }
  for (pid_t p : kids) ::kill(p, SIGKILL);
  for (pid_t p : kids) ::waitpid(p, nullptr, 0);
  a.Check("forked " + std::to_string(kids.size()) + " processes (limit " + std::to_string(limit) + ")",
          static_cast<long>(kids.size()) >= limit || err == 0,
          "stopped by " + Attempts::ErrnoName(err) + " after " + std::to_string(kids.size()));
  return a.Done();
}

Outcome MemoryHog() {
  Attempts a;
  long limit_mb = ParamInt("memory_mb", 64);
  long want_mb = limit_mb * 4;
  pid_t p = ::fork();
  if (p == 0) {
    for (long i = 0; i < want_mb; ++i) {
      char* m = static_cast<char*>(::mmap(nullptr, 1 << 20, PROT_READ | PROT_WRITE,
                                          MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
      if (m == MAP_FAILED) _exit(3);
      std::memset(m, 0x5a, 1 << 20);
    }
    _exit(0);
  }
  int st = 0;
  ::waitpid(p, &st, 0);
  bool oom = WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL;
  bool failed = WIFEXITED(st) && WEXITSTATUS(st) == 3;
  a.Check("touched " + std::to_string(want_mb) + " MiB with a " + std::to_string(limit_mb) + " MiB limit",
          !oom && !failed, oom ? "killed by SIGKILL (memory cgroup OOM)" : "mmap failed");
  return a.Done();
}

// Writes `dir`/fill until it fails; returns bytes written and the errno.
std::pair<long long, int> Fill(const std::string& dir, long long cap) {
  std::string path = dir + "/escape-fill";
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return {0, errno};
  static char block[1 << 20];
  std::memset(block, 0x42, sizeof block);
  long long total = 0;
  int err = 0;
  while (total < cap) {
    ssize_t n = ::write(fd, block, sizeof block);
    if (n < 0) {
      err = errno;
      break;
    }
    total += n;
    if (total % (16 << 20) == 0 && ::fsync(fd) != 0) {
      err = errno;
      break;
    }
  }
  if (!err && ::fsync(fd) != 0) err = errno;
  ::close(fd);
  ::unlink(path.c_str());
  ::sync();
  return {total, err};
}

Outcome DiskFill() {
  Attempts a;
  long long limit = ParamInt("disk_mb", 32) << 20;
  auto [n, err] = Fill("/tmp", limit * 4);
  a.Check("wrote " + std::to_string(n >> 20) + " MiB into a " + std::to_string(limit >> 20) + " MiB quota",
          n > limit + (limit / 2) || err == 0, "stopped by " + Attempts::ErrnoName(err) + " at " +
                                                   std::to_string(n >> 20) + " MiB");
  return a.Done();
}

Outcome DiskFillSubvolume() {
  Attempts a;
  long long limit = ParamInt("disk_mb", 32) << 20;
  int dir = ::open("/tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  btrfs_ioctl_vol_args args{};
  std::strcpy(args.name, "escape-subvol");
  long rc = ::ioctl(dir, BTRFS_IOC_SUBVOL_CREATE, &args);
  btrfs_ioctl_vol_args_v2 v2{};
  std::strcpy(v2.name, "escape-subvol2");
  long rc2 = ::ioctl(dir, BTRFS_IOC_SUBVOL_CREATE_V2, &v2);
  btrfs_ioctl_vol_args_v2 snap{};
  snap.fd = ::open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  std::strcpy(snap.name, "escape-snap");
  long rc3 = ::ioctl(dir, BTRFS_IOC_SNAP_CREATE_V2, &snap);
  ::close(dir);
  a.Note(std::string("SUBVOL_CREATE: ") + (rc == 0 ? "ok" : Attempts::ErrnoName(errno)));
  (void)rc2;
  (void)rc3;
  for (const char* sv : {"/tmp/escape-subvol", "/tmp/escape-subvol2", "/tmp/escape-snap/tmp"}) {
    struct stat st;
    if (::stat(sv, &st) != 0) continue;
    auto [n, err] = Fill(sv, limit * 4);
    a.Check(std::string("a new subvolume ") + sv + ": wrote " + std::to_string(n >> 20) + " MiB",
            n > limit + (limit / 2) || err == 0,
            "stopped by " + Attempts::ErrnoName(err) + " at " + std::to_string(n >> 20) + " MiB");
  }
  struct stat st;
  if (::stat("/tmp/escape-subvol", &st) != 0 && ::stat("/tmp/escape-subvol2", &st) != 0 &&
      ::stat("/tmp/escape-snap", &st) != 0)
    a.Note("no subvolume or snapshot could be created");
  return a.Done();
}

Outcome ShmFill() {
  Attempts a;
  // tmpfs pages are charged to the sandbox's memory cgroup: the writer may hit the size
  // limit of /dev/shm (ENOSPC) or be killed by the memory cgroup first. In a child, so
  // either way the probe reports, and then frees the memory.
  long long cap = 256ll << 20;
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) {
    a.Error("pipe");
    return a.Done();
  }
  pid_t p = ::fork();
  if (p == 0) {
    auto [n, err] = Fill("/dev/shm", cap);
    long long msg[2] = {n, err};
    (void)!::write(pipefd[1], msg, sizeof msg);
    _exit(0);
  }
  ::close(pipefd[1]);
  long long msg[2] = {0, 0};
  ssize_t got = ::read(pipefd[0], msg, sizeof msg);
  ::close(pipefd[0]);
  int st = 0;
  ::waitpid(p, &st, 0);
  ::unlink("/dev/shm/escape-fill");
  if (got == sizeof msg) {
    a.Check("wrote " + std::to_string(msg[0] >> 20) + " MiB into /dev/shm", msg[1] == 0,
            "stopped by " + Attempts::ErrnoName(static_cast<int>(msg[1])) + " at " +
                std::to_string(msg[0] >> 20) + " MiB");
  } else {
    bool oom = WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL;
    a.Check("filling /dev/shm", !oom, "the writer was killed by the memory cgroup");
  }
  return a.Done();
}

Outcome FdExhaust() {
  Attempts a;
  long limit = ParamInt("nofile", 256);
  rlimit rl{};
  ::getrlimit(RLIMIT_NOFILE, &rl);
  a.Check("RLIMIT_NOFILE is " + std::to_string(rl.rlim_cur) + "/" + std::to_string(rl.rlim_max),
          static_cast<long>(rl.rlim_max) > limit, "as set at create");
  rlimit up{rl.rlim_max + 1, rl.rlim_max + 1};
  a.Syscall("raise the hard limit", ::setrlimit(RLIMIT_NOFILE, &up));
  int opened = 0, err = 0;
  std::vector<int> fds;
  for (;;) {
    int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      err = errno;
      break;
    }
    fds.push_back(fd);
    if (++opened > 1 << 20) break;
  }
  for (int fd : fds) ::close(fd);
  a.Check("opened " + std::to_string(opened) + " fds", opened >= limit || err != EMFILE,
          "stopped by " + Attempts::ErrnoName(err) + " at " + std::to_string(opened));
  return a.Done();
}

// Double-forks a daemon in its own session that sleeps forever, its argv carrying `token`
// so the host can look for it after the sandbox is deleted.
Outcome Daemon() {
  Attempts a;
  std::string token = Param("token");
  pid_t p = ::fork();
  if (p == 0) {
    ::setsid();
    if (::fork() == 0) {
      for (int fd = 0; fd < 3; ++fd) ::close(fd);
      ::signal(SIGHUP, SIG_IGN);
      ::signal(SIGTERM, SIG_IGN);
      std::string arg = "daemon-" + token;
      execl("/proc/self/exe", "space-escape-probe", "sleep", arg.c_str(), nullptr);
      _exit(1);
    }
    _exit(0);
  }
  ::waitpid(p, nullptr, 0);
  a.Note("daemon started; the host checks it is gone after delete");
  return a.Done();
}

// ---- cases: the template ----

Outcome TemplateWrite() {
  Attempts a;
  // Writes in the sandbox's root are allowed (it is a private copy); the host checks that
  // the template and new sandboxes do not see them.
  int fd = ::open("/etc/escape-template", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    a.Error("cannot write /etc/escape-template: " + Attempts::ErrnoName(errno));
  } else {
    (void)!::write(fd, "written in a sandbox\n", 21);
    ::close(fd);
    a.Note("wrote /etc/escape-template in the sandbox's own root");
  }
  return a.Done();
}

struct Case {
  const char* name;
  std::function<Outcome()> run;
};

const std::vector<Case>& Cases() {
  static const std::vector<Case> cases = {
      {"proc1_root", Proc1Root},
      {"proc_cwd_root", ProcCwdRoot},
      {"proc_fd_walk", ProcFdWalk},
      {"dotdot", DotDot},
      {"chroot_breakout", ChrootBreakout},
      {"symlink", Symlink},
      {"hardlink", Hardlink},
      {"agent_binary_write", AgentBinaryWrite},
      {"open_by_handle", OpenByHandle},
      {"other_sandbox_files", OtherSandboxFiles},
      {"host_processes", HostProcesses},
      {"ptrace_outside", PtraceOutside},
      {"mount_tmpfs", [] { return MountFs("tmpfs", "tmpfs", nullptr); }},
      {"mount_proc", [] { return MountFs("proc", "proc", nullptr); }},
      {"mount_sysfs", [] { return MountFs("sysfs", "sysfs", nullptr); }},
      {"mount_bind", MountBind},
      {"mount_cgroup", MountCgroup},
      {"new_mount_api", NewMountApi},
      {"kernel_module", KernelModule},
      {"mknod", Mknod},
      {"raw_socket", RawSocket},
      {"vsock", Vsock},
      {"clock", Clock},
      {"hostname", Hostname},
      {"unshare", Unshare},
      {"setns", Setns},
      {"keyring", Keyring},
      {"bpf", Bpf},
      {"perf_event", PerfEvent},
      {"userfaultfd", Userfaultfd},
      {"io_uring", IoUring},
      {"reboot_kexec", RebootKexec},
      {"kernel_log", KernelLog},
      {"fanotify", Fanotify},
      {"personality", Personality},
      {"numa_policy", NumaPolicy},
      {"sysrq_trigger", SysrqTrigger},
      {"masked_proc", MaskedProc},
      {"proc_sys_write",
       [] {
         return WriteKernelFiles({"/proc/sys/kernel/core_pattern", "/proc/sys/vm/drop_caches",
                                  "/proc/sys/kernel/modprobe", "/proc/sys/fs/binfmt_misc/register"});
       }},
      {"sys_write",
       [] {
         return WriteKernelFiles({"/sys/kernel/uevent_helper", "/sys/kernel/mm/transparent_hugepage/enabled",
                                  "/sys/class/net/lo/mtu", "/sys/power/state"});
       }},
      {"cgroup_write", CgroupWrite},
      {"host_loopback", HostLoopback},
      {"host_addresses", HostAddresses},
      {"host_abstract_unix", HostAbstractUnix},
      {"agent_socket", AgentSocket},
      {"fork_bomb", ForkBomb},
      {"memory_hog", MemoryHog},
      {"disk_fill", DiskFill},
      {"disk_fill_subvolume", DiskFillSubvolume},
      {"shm_fill", ShmFill},
      {"fd_exhaust", FdExhaust},
      {"daemon", Daemon},
      {"template_write", TemplateWrite},
  };
  return cases;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CASE [key=value...] | list\n", argv[0]);
    return 2;
  }
  std::string name = argv[1];
  if (name == "sleep") {  // the body of the `daemon` case
    for (;;) ::pause();
  }
  if (name == "list") {
    for (const auto& c : Cases()) std::printf("%s\n", c.name);
    return 0;
  }
  for (int i = 2; i < argc; ++i) {
    std::string kv = argv[i];
    size_t eq = kv.find('=');
    if (eq != std::string::npos) g_params[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& c : Cases()) {
    if (name != c.name) continue;
    Outcome o = c.run();
    const char* verdict = o.escaped ? "ESCAPED" : o.error ? "ERROR" : "BLOCKED";
    std::printf("CASE %s %s %s\n", c.name, verdict, o.detail.c_str());
    std::fflush(stdout);
    return o.escaped ? 1 : o.error ? 2 : 0;
  }
  std::fprintf(stderr, "unknown case %s\n", name.c_str());
  return 2;
}
