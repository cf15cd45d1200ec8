#include "runtime/oci/bundle.h"

#include <cmath>

namespace space::runtime::oci {

std::vector<std::string> DefaultCapabilities() {
  return {"CAP_CHOWN",   "CAP_DAC_OVERRIDE", "CAP_FSETID",           "CAP_FOWNER",
          "CAP_MKNOD",   "CAP_NET_RAW",      "CAP_SETGID",           "CAP_SETUID",
          "CAP_SETFCAP", "CAP_SETPCAP",      "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT",
          "CAP_KILL",    "CAP_AUDIT_WRITE"};
}

namespace {

constexpr int kEperm = 1;
constexpr int kEnosys = 38;

// Syscalls a sandbox never needs and that widen the kernel attack surface or act on the
// whole host (clocks, swap, modules, keyrings) — refused with EPERM. Names unknown to the
// host's libseccomp (e.g. 32-bit-only ones on some arches) are skipped by crun and runc.
constexpr const char* kBlocked[] = {
    "_sysctl",
    "acct",
    "add_key",
    "adjtimex",
    "bpf",
    "clock_adjtime",
    "clock_settime",
    "create_module",
    "delete_module",
    "finit_module",
    "fsconfig",
    "fsmount",
    "fsopen",
    "fspick",
    "get_kernel_syms",
    "init_module",
    "io_uring_enter",
    "io_uring_register",
    "io_uring_setup",
    "ioperm",
    "iopl",
    "kexec_file_load",
    "kexec_load",
    "keyctl",
    "lookup_dcookie",
    "mount",
    "mount_setattr",
    "move_mount",
    "name_to_handle_at",
    "nfsservctl",
    "open_by_handle_at",
    "open_tree",
    "perf_event_open",
    "pivot_root",
    "query_module",
    "quotactl",
    "quotactl_fd",
    "reboot",
    "request_key",
    "setns",
    "settimeofday",
    "stime",
    "swapoff",
    "swapon",
    "syslog",
    "umount",
    "umount2",
    "unshare",
    "uselib",
    "userfaultfd",
    "vhangup",
    "vm86",
    "vm86old",
};

// clone(2) flags that create namespaces. clone() with any of them is refused, as Docker's
// profile does for processes without CAP_SYS_ADMIN: nested user namespaces would hand the
// sandbox a fresh set of capabilities over more of the kernel.
constexpr uint64_t kCloneNsFlags[] = {
    0x00020000,  // CLONE_NEWNS
    0x02000000,  // CLONE_NEWCGROUP
    0x04000000,  // CLONE_NEWUTS
    0x08000000,  // CLONE_NEWIPC
    0x10000000,  // CLONE_NEWUSER
    0x20000000,  // CLONE_NEWPID
    0x40000000,  // CLONE_NEWNET
};

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
  Json syscalls = Json::array();
  std::vector<std::string> names(std::begin(kBlocked), std::end(kBlocked));
  syscalls.push_back({{"names", names}, {"action", "SCMP_ACT_ERRNO"}, {"errnoRet", kEperm}});
  for (uint64_t flag : kCloneNsFlags) {
    syscalls.push_back(
        {{"names", {"clone"}},
         {"action", "SCMP_ACT_ERRNO"},
         {"errnoRet", kEperm},
         {"args",
          {{{"index", 0}, {"value", flag}, {"valueTwo", flag}, {"op", "SCMP_CMP_MASKED_EQ"}}}}});
  }
  // clone3 passes its flags in memory, where seccomp cannot look: answer ENOSYS so libc
  // falls back to clone(2), which the rules above filter (Docker does the same).
  syscalls.push_back({{"names", {"clone3"}}, {"action", "SCMP_ACT_ERRNO"}, {"errnoRet", kEnosys}});
  Json profile{{"defaultAction", "SCMP_ACT_ALLOW"}, {"syscalls", syscalls}};
#if defined(__x86_64__)
  profile["architectures"] = {"SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"};
#elif defined(__aarch64__)
  profile["architectures"] = {"SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"};
#endif
  return profile;
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
      {"noNewPrivileges", true},
  };
  if (spec.limits.nofile > 0) {
    process["rlimits"] = {
        {{"type", "RLIMIT_NOFILE"}, {"hard", spec.limits.nofile}, {"soft", spec.limits.nofile}}};
  }

  Json mounts = Json::array({
      Mount("/proc", "proc", "proc", {"nosuid", "noexec", "nodev"}),
      Mount("/dev", "tmpfs", "tmpfs", {"nosuid", "strictatime", "mode=755", "size=65536k"}),
      Mount("/dev/pts", "devpts", "devpts",
            {"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}),
      Mount("/dev/shm", "tmpfs", "shm", {"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}),
      Mount("/dev/mqueue", "mqueue", "mqueue", {"nosuid", "noexec", "nodev"}),
      Mount("/sys", "sysfs", "sysfs", {"nosuid", "noexec", "nodev", "ro"}),
      Mount("/sys/fs/cgroup", "cgroup", "cgroup", {"nosuid", "noexec", "nodev", "relatime", "ro"}),
      // A private tmpfs holds the agent's mount points, so nothing is written into the
      // sandbox's root beyond the empty /.space directory the tmpfs is mounted on.
      Mount(kAgentDir, "tmpfs", "tmpfs", {"nosuid", "nodev", "mode=755", "size=1024k"}),
  });
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
    constexpr int64_t kPeriod = 100000;
    int64_t quota = static_cast<int64_t>(std::llround(l.cpus * kPeriod));
    if (quota < 1000) quota = 1000;  // the kernel's minimum cfs quota is 1 ms
    resources["cpu"] = {{"quota", quota}, {"period", kPeriod}};
  }

  Json namespaces = Json::array({{{"type", "pid"}},
                                 {{"type", "ipc"}},
                                 {{"type", "uts"}},
                                 {{"type", "mount"}},
                                 {{"type", "network"}},
                                 {{"type", "cgroup"}}});
  Json linux{
      {"namespaces", namespaces},
      {"resources", resources},
      {"cgroupsPath", p.cgroups_path},
      // Host mount events must not reach into the sandbox.
      {"rootfsPropagation", "rprivate"},
      {"seccomp", SeccompProfile()},
      {"maskedPaths",
       {"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
        "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware", "/proc/scsi",
        "/sys/devices/virtual/powercap"}},
      {"readonlyPaths", {"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}},
  };
  if (p.user_namespace) {
    linux["namespaces"].push_back({{"type", "user"}});
    Json map = Json::array({{{"containerID", 0}, {"hostID", p.uid_shift}, {"size", p.uid_count}}});
    linux["uidMappings"] = map;
    linux["gidMappings"] = map;
  }

  return Json{
      {"ociVersion", "1.0.2"},
      {"process", process},
      {"root", {{"path", p.root_path}, {"readonly", false}}},
      {"hostname", spec.hostname.empty() ? spec.id : spec.hostname},
      {"mounts", mounts},
      {"linux", linux},
  };
}

}  // namespace space::runtime::oci
