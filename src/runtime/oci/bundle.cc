#include "runtime/oci/bundle.h"

#include <algorithm>
#include <cmath>

namespace space::runtime::oci {

std::vector<std::string> DefaultCapabilities() {
  return {"CAP_CHOWN",   "CAP_DAC_OVERRIDE", "CAP_FSETID",           "CAP_FOWNER",
          "CAP_MKNOD",   "CAP_SETGID",       "CAP_SETUID",           "CAP_SETFCAP",
          "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT",   "CAP_KILL",
          "CAP_AUDIT_WRITE"};
}

namespace {

constexpr int kEperm = 1;
constexpr int kEnosys = 38;

// The allow-list: Docker's default seccomp profile (moby profiles/seccomp/default.json)
// as it applies to a container holding DefaultCapabilities() — i.e. its unconditional
// allow-list, less io_uring_* and name_to_handle_at, plus syscalls newer than that list
// that libc uses when present. Everything else answers ENOSYS (kDefaultErrno), so a libc
// or runtime probing a syscall we do not list falls back as on an older kernel. Names
// unknown to the host's libseccomp (other arches' syscalls, very new ones) are skipped by
// crun and runc. Conditional allows (clone, socket, personality, ioctl) are in
// SeccompProfile().
constexpr const char* kAllowed[] = {
    "accept", "accept4", "access", "alarm", "arch_prctl", "bind", "brk", "cachestat",
    "capget", "capset", "chdir", "chmod", "chown", "chown32", "chroot", "clock_getres",
    "clock_getres_time64", "clock_gettime", "clock_gettime64", "clock_nanosleep",
    "clock_nanosleep_time64", "close", "close_range", "connect", "copy_file_range", "creat",
    "dup", "dup2", "dup3", "epoll_create", "epoll_create1", "epoll_ctl", "epoll_ctl_old",
    "epoll_pwait", "epoll_pwait2", "epoll_wait", "epoll_wait_old", "eventfd", "eventfd2",
    "execve", "execveat", "exit", "exit_group", "faccessat", "faccessat2", "fadvise64",
    "fadvise64_64", "fallocate", "fanotify_mark", "fchdir", "fchmod", "fchmodat", "fchmodat2",
    "fchown", "fchown32", "fchownat", "fcntl", "fcntl64", "fdatasync", "fgetxattr",
    "flistxattr", "flock", "fork", "fremovexattr", "fsetxattr", "fstat", "fstat64",
    "fstatat64", "fstatfs", "fstatfs64", "fsync", "ftruncate", "ftruncate64", "futex",
    "futex_requeue", "futex_time64", "futex_wait", "futex_waitv", "futex_wake", "futimesat",
    "get_robust_list", "get_thread_area", "getcpu", "getcwd", "getdents", "getdents64",
    "getegid", "getegid32", "geteuid", "geteuid32", "getgid", "getgid32", "getgroups",
    "getgroups32", "getitimer", "getpeername", "getpgid", "getpgrp", "getpid", "getppid",
    "getpriority", "getrandom", "getresgid", "getresgid32", "getresuid", "getresuid32",
    "getrlimit", "getrusage", "getsid", "getsockname", "getsockopt", "gettid",
    "gettimeofday", "getuid", "getuid32", "getxattr", "inotify_add_watch", "inotify_init",
    "inotify_init1", "inotify_rm_watch", "io_cancel", "io_destroy", "io_getevents",
    "io_pgetevents", "io_pgetevents_time64", "io_setup", "io_submit", "ioprio_get",
    "ioprio_set", "ipc", "kill", "landlock_add_rule", "landlock_create_ruleset",
    "landlock_restrict_self", "lchown", "lchown32", "lgetxattr", "link", "linkat", "listen",
    "listxattr", "llistxattr", "_llseek", "lremovexattr", "lseek", "lsetxattr", "lstat",
    "lstat64", "madvise", "map_shadow_stack", "membarrier", "memfd_create", "memfd_secret",
    "mincore", "mkdir", "mkdirat", "mknod", "mknodat", "mlock", "mlock2", "mlockall",
    "mmap", "mmap2", "modify_ldt", "mprotect", "mq_getsetattr", "mq_notify", "mq_open",
    "mq_timedreceive", "mq_timedreceive_time64", "mq_timedsend", "mq_timedsend_time64",
    "mq_unlink", "mremap", "mseal", "msgctl", "msgget", "msgrcv", "msgsnd", "msync",
    "munlock", "munlockall", "munmap", "nanosleep", "newfstatat", "_newselect", "open",
    "openat", "openat2", "pause", "pidfd_open", "pidfd_send_signal", "pipe", "pipe2",
    "pkey_alloc", "pkey_free", "pkey_mprotect", "poll", "ppoll", "ppoll_time64", "prctl",
    "pread64", "preadv", "preadv2", "prlimit64", "process_mrelease", "process_vm_readv",
    "process_vm_writev", "pselect6", "pselect6_time64", "ptrace", "pwrite64", "pwritev",
    "pwritev2", "read", "readahead", "readlink", "readlinkat", "readv", "recv", "recvfrom",
    "recvmmsg", "recvmmsg_time64", "recvmsg", "remap_file_pages", "removexattr", "rename",
    "renameat", "renameat2", "restart_syscall", "rmdir", "rseq", "rt_sigaction",
    "rt_sigpending", "rt_sigprocmask", "rt_sigqueueinfo", "rt_sigreturn", "rt_sigsuspend",
    "rt_sigtimedwait", "rt_sigtimedwait_time64", "rt_tgsigqueueinfo", "sched_get_priority_max",
    "sched_get_priority_min", "sched_getaffinity", "sched_getattr", "sched_getparam",
    "sched_getscheduler", "sched_rr_get_interval", "sched_rr_get_interval_time64",
    "sched_setaffinity", "sched_setattr", "sched_setparam", "sched_setscheduler",
    "sched_yield", "seccomp", "select", "semctl", "semget", "semop", "semtimedop",
    "semtimedop_time64", "send", "sendfile", "sendfile64", "sendmmsg", "sendmsg", "sendto",
    "set_robust_list", "set_thread_area", "set_tid_address", "setfsgid", "setfsgid32",
    "setfsuid", "setfsuid32", "setgid", "setgid32", "setgroups", "setgroups32", "setitimer",
    "setpgid", "setpriority", "setregid", "setregid32", "setresgid", "setresgid32",
    "setresuid", "setresuid32", "setreuid", "setreuid32", "setrlimit", "setsid",
    "setsockopt", "setuid", "setuid32", "setxattr", "shmat", "shmctl", "shmdt", "shmget",
    "shutdown", "sigaltstack", "signalfd", "signalfd4", "sigprocmask", "sigreturn",
    "socketcall", "socketpair", "splice", "stat", "stat64", "statfs", "statfs64", "statx",
    "symlink", "symlinkat", "sync", "sync_file_range", "syncfs", "sysinfo", "tee", "tgkill",
    "time", "timer_create", "timer_delete", "timer_getoverrun", "timer_gettime",
    "timer_gettime64", "timer_settime", "timer_settime64", "timerfd_create",
    "timerfd_gettime", "timerfd_gettime64", "timerfd_settime", "timerfd_settime64", "times",
    "tkill", "truncate", "truncate64", "ugetrlimit", "umask", "uname", "unlink", "unlinkat",
    "uretprobe", "utime", "utimensat", "utimensat_time64", "utimes", "vfork", "vmsplice",
    "wait4", "waitid", "waitpid", "write", "writev",
};

// Not allowed (so refused anyway), but listed to answer EPERM rather than ENOSYS: what a
// sandbox most likely tries in order to reach the host — kernel modules, kexec, mounts,
// namespaces, keyrings, bpf, perf, clocks, swap, hostnames, io_uring, file handles.
constexpr const char* kDenied[] = {
    "_sysctl", "acct", "add_key", "adjtimex", "bpf", "clock_adjtime", "clock_adjtime64",
    "clock_settime", "clock_settime64", "create_module", "delete_module", "fanotify_init",
    "finit_module", "fsconfig", "fsmount", "fsopen", "fspick", "get_kernel_syms",
    "get_mempolicy", "init_module", "io_uring_enter", "io_uring_register", "io_uring_setup",
    "ioperm", "iopl", "kcmp", "kexec_file_load", "kexec_load", "keyctl", "lookup_dcookie",
    "mbind", "migrate_pages", "mount", "mount_setattr", "move_mount", "move_pages",
    "name_to_handle_at", "nfsservctl", "open_by_handle_at", "open_tree", "perf_event_open",
    "pidfd_getfd", "pivot_root", "process_madvise", "query_module", "quotactl", "quotactl_fd",
    "reboot", "request_key", "set_mempolicy", "set_mempolicy_home_node", "setdomainname",
    "sethostname", "setns", "settimeofday", "stime", "swapoff", "swapon", "syslog", "umount",
    "umount2", "unshare", "uselib", "userfaultfd", "ustat", "vhangup", "vm86", "vm86old",
};

// Every clone(2) flag that creates a namespace (Docker's mask 0x7E020000): clone() with
// any of them is refused, as Docker's profile does for processes without CAP_SYS_ADMIN —
// nested user namespaces would hand the sandbox a fresh set of capabilities over more of
// the kernel.
constexpr uint64_t kCloneNsMask = 0x00020000 |  // CLONE_NEWNS
                                  0x02000000 |  // CLONE_NEWCGROUP
                                  0x04000000 |  // CLONE_NEWUTS
                                  0x08000000 |  // CLONE_NEWIPC
                                  0x10000000 |  // CLONE_NEWUSER
                                  0x20000000 |  // CLONE_NEWPID
                                  0x40000000;   // CLONE_NEWNET

// personality(2) values Docker allows: PER_LINUX, UNAME26, PER_LINUX32, their combination,
// and the 0xffffffff query.
constexpr uint64_t kPersonalities[] = {0x0, 0x8, 0x20000, 0x20008, 0xffffffff};

constexpr uint64_t kAfVsock = 40;

// btrfs ioctls taking struct btrfs_ioctl_vol_args(_v2) (4 KiB, type 0x94): subvolume and
// snapshot creation and deletion, device add/remove, resize, balance, defrag. Any user may
// create a subvolume in a directory it can write, and a new subvolume gets a qgroup of its
// own, outside the sandbox's quota: writes there would not count against
// limits.disk_bytes. The rest need CAP_SYS_ADMIN, or are not needed (defrag).
// FICLONE & co. (type 0x94, other sizes) stay allowed.
constexpr uint64_t kBtrfsVolArgsIoctlMask = 0xffffff00;
constexpr uint64_t kBtrfsVolArgsIoctl = 0x50009400;

Json Mount(const char* dest, const char* type, const char* source,
           std::vector<std::string> options) {
  return Json{{"destination", dest}, {"type", type}, {"source", source}, {"options", options}};
}

Json Device(const char* type, int64_t major, int64_t minor, const char* access) {
  Json d{{"allow", true}, {"type", type}, {"major", major}, {"access", access}};
  if (minor >= 0) d["minor"] = minor;
  return d;
}

}  // namespace

Json SeccompProfile() {
  auto rule = [](std::vector<std::string> names, const char* action) {
    return Json{{"names", std::move(names)}, {"action", action}};
  };
  auto arg = [](int index, uint64_t value, const char* op, uint64_t value_two = 0) {
    Json a{{"index", index}, {"value", value}, {"op", op}};
    if (value_two) a["valueTwo"] = value_two;
    return a;
  };
  Json syscalls = Json::array();
  syscalls.push_back(rule({std::begin(kAllowed), std::end(kAllowed)}, "SCMP_ACT_ALLOW"));
  Json denied = rule({std::begin(kDenied), std::end(kDenied)}, "SCMP_ACT_ERRNO");
  denied["errnoRet"] = kEperm;
  syscalls.push_back(denied);
  Json clone = rule({"clone"}, "SCMP_ACT_ALLOW");
  // MASKED_EQ compares (arg & value) with valueTwo: here, no namespace flag set.
  clone["args"] = {arg(0, kCloneNsMask, "SCMP_CMP_MASKED_EQ")};
  syscalls.push_back(clone);
  Json clone_ns = rule({"clone"}, "SCMP_ACT_ERRNO");
  clone_ns["errnoRet"] = kEperm;
  for (uint64_t bit = 1; bit; bit <<= 1) {
    if (!(kCloneNsMask & bit)) continue;
    Json r = clone_ns;
    r["args"] = {arg(0, bit, "SCMP_CMP_MASKED_EQ", bit)};
    syscalls.push_back(r);
  }
  // clone3 passes its flags in memory, where seccomp cannot look: answer ENOSYS so libc
  // falls back to clone(2), which the rules above filter (Docker does the same).
  Json clone3 = rule({"clone3"}, "SCMP_ACT_ERRNO");
  clone3["errnoRet"] = kEnosys;
  syscalls.push_back(clone3);
  Json socket = rule({"socket"}, "SCMP_ACT_ALLOW");
  socket["args"] = {arg(0, kAfVsock, "SCMP_CMP_NE")};
  syscalls.push_back(socket);
  Json vsock = rule({"socket"}, "SCMP_ACT_ERRNO");
  vsock["errnoRet"] = kEperm;
  vsock["args"] = {arg(0, kAfVsock, "SCMP_CMP_EQ")};
  syscalls.push_back(vsock);
  for (uint64_t p : kPersonalities) {
    Json r = rule({"personality"}, "SCMP_ACT_ALLOW");
    r["args"] = {arg(0, p, "SCMP_CMP_EQ")};
    syscalls.push_back(r);
  }
  // ioctl(2) is allowed unless bits 8..31 of the command (an unsigned int: the upper half
  // of the register is ignored by the kernel, so it is here too) are kBtrfsVolArgsIoctl.
  // libseccomp lets an unconditional allow win over any conditional refusal, so the allow
  // is spelled as "differs in at least one bit": one rule per bit, OR-ed.
  for (int bit = 8; bit < 32; ++bit) {
    uint64_t m = uint64_t{1} << bit;
    Json r = rule({"ioctl"}, "SCMP_ACT_ALLOW");
    r["args"] = {{{"index", 1}, {"value", m}, {"valueTwo", ~kBtrfsVolArgsIoctl & m},
                  {"op", "SCMP_CMP_MASKED_EQ"}}};
    syscalls.push_back(r);
  }
  Json btrfs = rule({"ioctl"}, "SCMP_ACT_ERRNO");
  btrfs["errnoRet"] = kEperm;
  btrfs["args"] = {
      arg(1, kBtrfsVolArgsIoctlMask, "SCMP_CMP_MASKED_EQ", kBtrfsVolArgsIoctl)};
  syscalls.push_back(btrfs);
  Json profile{{"defaultAction", "SCMP_ACT_ERRNO"},
               {"defaultErrnoRet", kEnosys},
               {"syscalls", syscalls}};
#if defined(__x86_64__)
  profile["architectures"] = {"SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"};
#elif defined(__aarch64__)
  profile["architectures"] = {"SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"};
#endif
  return profile;
}

int64_t DevTmpfsBytes(const Limits& limits) {
  int64_t kib = 65536;
  if (limits.memory_bytes > 0)
    kib = std::max<int64_t>(1024, std::min<int64_t>(kib, limits.memory_bytes / 4096));
  return kib * 1024;
}

const std::vector<std::string>& DevNodes() {
  // What crun makes in a /dev of its own, and what the devices cgroup allows (below).
  static const std::vector<std::string> kNodes = {"null", "zero", "full", "tty", "random", "urandom"};
  return kNodes;
}

const std::vector<std::string>& MaskedPaths() {
  static const std::vector<std::string> kPaths = {
      "/proc/acpi",       "/proc/asound",    "/proc/kcore",        "/proc/keys",
      "/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug",
      "/sys/firmware",    "/proc/scsi",      "/sys/devices/virtual/powercap"};
  return kPaths;
}

Json BuildOciConfig(const InstanceSpec& spec, const BundleParams& p) {
  std::vector<std::string> env = spec.env;
  bool has_path = false;
  for (const auto& e : env) has_path = has_path || StartsWith(e, "PATH=");
  if (!has_path) env.insert(env.begin(), kDefaultPath);

  std::vector<std::string> caps = DefaultCapabilities();
  Json process{
      {"terminal", false},
      {"user", {{"uid", 0}, {"gid", 0}}},
      {"args", {kAgentPath, "--listen", kAgentSocketInside}},
      {"env", env},
      {"cwd", "/"},
      {"capabilities",
       {{"bounding", caps},
        {"effective", caps},
        {"permitted", caps},
        {"inheritable", Json::array()},
        {"ambient", Json::array()}}},
      {"noNewPrivileges", !spec.allow_setuid},
  };
  if (spec.limits.nofile > 0) {
    process["rlimits"] = {
        {{"type", "RLIMIT_NOFILE"}, {"hard", spec.limits.nofile}, {"soft", spec.limits.nofile}}};
  }

  const std::string tmpfs_size = "size=" + std::to_string(DevTmpfsBytes(spec.limits) / 1024) + "k";
  Json mounts = Json::array({
      Mount("/proc", "proc", "proc", {"nosuid", "noexec", "nodev"}),
  });
  // /dev/shm is a directory of /dev (the agent makes it, mode 1777), not a tmpfs of its
  // own: one superblock fewer per sandbox (see BundleParams::empty_dir).
  if (p.dev_in_run_dir) {
    // nodev: the device nodes are binds of the host's, which keep their own mount flags.
    mounts.push_back({{"destination", "/dev"},
                      {"type", "bind"},
                      {"source", p.run_dir + "/dev"},
                      {"options", {"bind", "rw", "nosuid", "noexec", "nodev"}}});
    for (const auto& name : DevNodes()) {
      mounts.push_back({{"destination", "/dev/" + name},
                        {"type", "bind"},
                        {"source", "/dev/" + name},
                        {"options", {"bind", "rw", "nosuid", "noexec"}}});
    }
  } else {
    mounts.push_back(
        Mount("/dev", "tmpfs", "tmpfs", {"nosuid", "noexec", "strictatime", "mode=755", tmpfs_size}));
  }
  mounts.push_back(Mount("/dev/pts", "devpts", "devpts",
                         {"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}));
  mounts.push_back(Mount("/dev/mqueue", "mqueue", "mqueue", {"nosuid", "noexec", "nodev"}));
  if (p.sysfs_source.empty()) {
    mounts.push_back(Mount("/sys", "sysfs", "sysfs", {"nosuid", "noexec", "nodev", "ro"}));
  } else {
    mounts.push_back({{"destination", "/sys"},
                      {"type", "bind"},
                      {"source", p.sysfs_source},
                      {"options", {"bind", "ro", "nosuid", "nodev", "noexec"}}});
  }
  if (p.cgroup_skeleton.empty()) {
    mounts.push_back(
        Mount("/sys/fs/cgroup", "cgroup", "cgroup", {"nosuid", "noexec", "nodev", "relatime", "ro"}));
  } else {
    const Json ro = {"bind", "ro", "nosuid", "nodev", "noexec"};
    mounts.push_back({{"destination", "/sys/fs/cgroup"},
                      {"type", "bind"},
                      {"source", p.cgroup_skeleton},
                      {"options", ro}});
    for (const auto& [host, inside] : p.cgroup_binds)
      mounts.push_back({{"destination", inside}, {"type", "bind"}, {"source", host}, {"options", ro}});
  }
  // The agent's mount points live on the sandbox's run tmpfs (bound here and again at
  // kAgentRunDir), so nothing is written into the sandbox's root beyond the empty /.space
  // directory it is mounted on, and no tmpfs of its own is needed.
  mounts.push_back({{"destination", kAgentDir},
                    {"type", "bind"},
                    {"source", p.run_dir},
                    {"options", {"bind", "rw", "nosuid", "nodev", "noexec"}}});
  Json agent_bind{{"destination", kAgentPath},
                  {"type", "bind"},
                  {"source", p.agent_binary},
                  {"options", {"bind", "ro", "nosuid", "nodev"}}};
  Json run_bind{{"destination", kAgentRunDir},
                {"type", "bind"},
                {"source", p.run_dir},
                {"options", {"bind", "rw", "nosuid", "nodev", "noexec"}}};
  mounts.push_back(agent_bind);
  mounts.push_back(run_bind);
  for (const auto& [host, inside] : p.file_binds) {
    mounts.push_back({{"destination", inside},
                      {"type", "bind"},
                      {"source", host},
                      {"options", {"bind", "ro", "nosuid", "nodev", "noexec"}}});
  }
  for (const auto& v : p.volume_binds) {
    mounts.push_back({{"destination", v.inside},
                      {"type", "bind"},
                      {"source", v.host},
                      {"options", {"bind", v.read_only ? "ro" : "rw", "nosuid", "nodev"}}});
  }
  if (!p.resolv_conf_path.empty()) {
    mounts.push_back({{"destination", "/etc/resolv.conf"},
                      {"type", "bind"},
                      {"source", p.resolv_conf_path},
                      {"options", {"bind", "ro", "nosuid", "nodev", "noexec"}}});
  }

  Json resources;
  resources["devices"] = Json::array({
      Json{{"allow", false}, {"access", "rwm"}}, Device("c", 1, 3, "rwm"),  // null
      Device("c", 1, 5, "rwm"),                                             // zero
      Device("c", 1, 7, "rwm"),                                             // full
      Device("c", 1, 8, "rwm"),                                             // random
      Device("c", 1, 9, "rwm"),                                             // urandom
      Device("c", 5, 0, "rwm"),                                             // tty
      Device("c", 5, 2, "rwm"),                                             // ptmx
      Device("c", 136, -1, "rwm"),                                          // pts/*
  });
  const Limits& l = spec.limits;
  if (l.memory_bytes > 0) {
    resources["memory"] = {{"limit", l.memory_bytes}};
    // swap is memory+swap in the OCI spec: equal to the limit means "no swap".
    if (p.memory_swap) resources["memory"]["swap"] = l.memory_bytes;
  }
  if (l.pids > 0) resources["pids"] = {{"limit", l.pids}};
  if (l.cpus > 0) {
    // The quota is per the kernel's default period (100 ms), which is left as it is: on
    // cgroup v1 each write of cpu.cfs_period_us or cpu.cfs_quota_us checks every task group
    // on the host (tg_set_cfs_bandwidth), so writing the period too doubled a cost that
    // grows with the sandboxes (5 % of the machine's time creating beside 5,000).
    constexpr int64_t kDefaultPeriod = 100000;
    int64_t quota = static_cast<int64_t>(std::llround(l.cpus * kDefaultPeriod));
    if (quota < 1000) quota = 1000;  // the kernel's minimum cfs quota is 1 ms
    resources["cpu"] = {{"quota", quota}};
  }

  Json masked = Json::array();
  for (const auto& m : MaskedPaths()) {
    bool dir = std::find(p.masked_dirs.begin(), p.masked_dirs.end(), m) != p.masked_dirs.end();
    if (dir && !p.empty_dir.empty()) {
      mounts.push_back({{"destination", m},
                        {"type", "bind"},
                        {"source", p.empty_dir},
                        {"options", {"bind", "ro", "nosuid", "nodev", "noexec"}}});
    } else {
      masked.push_back(m);
    }
  }

  Json namespaces = Json::array({{{"type", "pid"}},
                                 {{"type", "ipc"}},
                                 {{"type", "uts"}},
                                 {{"type", "mount"}},
                                 p.netns_path.empty()
                                     ? Json{{"type", "network"}}
                                     : Json{{"type", "network"}, {"path", p.netns_path}},
                                 {{"type", "cgroup"}}});
  Json linux{
      {"namespaces", namespaces},
      {"resources", resources},
      {"cgroupsPath", p.cgroups_path},
      // Host mount events must not reach into the sandbox.
      {"rootfsPropagation", "rprivate"},
      {"maskedPaths", masked},
      {"readonlyPaths", {"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}},
  };
  if (p.user_namespace) {
    linux["namespaces"].push_back({{"type", "user"}});
    Json map = Json::array({{{"containerID", 0}, {"hostID", p.uid_shift}, {"size", p.uid_count}}});
    linux["uidMappings"] = map;
    linux["gidMappings"] = map;
  }

  if (p.seccomp_bpf_b64.empty()) linux["seccomp"] = SeccompProfile();
  Json config{
      {"ociVersion", "1.0.2"},
      {"process", process},
      {"root", {{"path", p.root_path}, {"readonly", false}}},
      {"hostname", spec.hostname.empty() ? spec.id : spec.hostname},
      {"mounts", mounts},
      {"linux", linux},
  };
  if (!p.seccomp_bpf_b64.empty())
    config["annotations"] = {{"run.oci.seccomp_bpf_data", p.seccomp_bpf_b64}};
  return config;
}

}  // namespace space::runtime::oci
