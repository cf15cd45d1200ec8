#include "sys/cgroups.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <signal.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "sys/sys.h"

namespace space::sys {

std::string_view CgroupLayoutName(CgroupLayout l) {
  switch (l) {
    case CgroupLayout::kV1:
      return "v1";
    case CgroupLayout::kV2:
      return "v2";
    case CgroupLayout::kHybrid:
      return "hybrid";
  }
  return "?";
}

Result<CgroupLayout> DetectCgroupLayout() {
  struct statfs fs;
  if (::statfs("/sys/fs/cgroup", &fs) != 0) return ErrnoFail("statfs /sys/fs/cgroup");
  if (fs.f_type == CGROUP2_SUPER_MAGIC) return CgroupLayout::kV2;
  if (fs.f_type != TMPFS_MAGIC) {
    return Fail(Errc::kUnavailable,
                "/sys/fs/cgroup is neither cgroup2 nor a tmpfs of v1 "
                "hierarchies");
  }
  struct statfs uni;
  if (::statfs("/sys/fs/cgroup/unified", &uni) == 0 && uni.f_type == CGROUP2_SUPER_MAGIC)
    return CgroupLayout::kHybrid;
  return CgroupLayout::kV1;
}

namespace {

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream ss(s);
  while (std::getline(ss, cur, sep)) out.push_back(cur);
  return out;
}

// `dir` and every cgroup below it, deepest first.
void CollectTree(const std::string& dir, std::vector<std::string>* out) {
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      if (e->d_type != DT_DIR || !std::strcmp(e->d_name, ".") || !std::strcmp(e->d_name, ".."))
        continue;
      CollectTree(dir + "/" + e->d_name, out);
    }
    ::closedir(d);
  }
  out->push_back(dir);
}

std::vector<pid_t> ReadPids(const std::string& dir) {
  std::vector<pid_t> pids;
  std::ifstream in(dir + "/cgroup.procs");
  pid_t p;
  while (in >> p) pids.push_back(p);
  return pids;
}

bool WriteSmall(const std::string& path, std::string_view value) {
  auto fd = sys::Open(path, O_WRONLY);
  if (!fd) return false;
  return static_cast<bool>(sys::WriteAll(fd->get(), value));
}

}  // namespace

std::vector<Hierarchy> CgroupHierarchies() {
  std::vector<Hierarchy> out;
  std::set<std::string> seen_devs;
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    // id parent major:minor root mount_point options [optional...] - fstype source super
    size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream head(line.substr(0, dash));
    std::string id, parent, dev, root, mp;
    head >> id >> parent >> dev >> root >> mp;
    std::istringstream tail(line.substr(dash + 3));
    std::string fstype, source, super;
    tail >> fstype >> source >> super;
    if (fstype != "cgroup" && fstype != "cgroup2") continue;
    // A bind of a sub-cgroup (root != "/") would give wrong paths; the same hierarchy
    // mounted twice is counted once.
    if (root != "/" || !seen_devs.insert(dev).second) continue;
    Hierarchy h;
    h.mount_point = UnescapeMountField(mp);
    h.v2 = fstype == "cgroup2";
    for (auto& o : Split(super, ',')) {
      if (o != "rw" && o != "ro") (h.v2 ? h.options : h.controllers).push_back(o);
    }
    out.push_back(std::move(h));
  }
  return out;
}

namespace {

const Hierarchy* V2Of(const std::vector<Hierarchy>& all) {
  for (const auto& h : all) {
    if (h.v2) return &h;
  }
  return nullptr;
}

}  // namespace

bool CgroupFavorDynmods(const std::vector<Hierarchy>& all) {
  const Hierarchy* v2 = V2Of(all);
  return v2 && std::find(v2->options.begin(), v2->options.end(), "favordynmods") != v2->options.end();
}

Result<bool> SetCgroupFavorDynmods(bool on) {
  const auto all = CgroupHierarchies();
  const Hierarchy* v2 = V2Of(all);
  if (!v2) return false;
  if (CgroupFavorDynmods(all) == on) return on;
  // A new mount of cgroup2 applies its options to the one hierarchy (in the initial
  // cgroup namespace): the superblock's others are repeated so none is dropped.
  // (Off: left out; the kernel takes no "nofavordynmods" on a new mount.)
  std::string data;
  for (const auto& o : v2->options) {
    if (o != "favordynmods") data += o + ",";
  }
  if (on) data += "favordynmods";
  else if (!data.empty()) data.pop_back();
  // Mounted on the directory above the hierarchy's own mount point: on that one the
  // kernel would apply the options and then refuse the mount (EBUSY, the same file
  // system on the same place).
  std::string target = v2->mount_point.substr(0, v2->mount_point.find_last_of('/'));
  if (target.empty()) target = "/";
  pid_t pid = ::fork();
  if (pid < 0) return ErrnoFail("fork");
  if (pid == 0) {
    // Raw syscalls only: the caller may be multi-threaded.
    if (::unshare(CLONE_NEWNS) != 0) ::_exit(errno);
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) ::_exit(errno);
    if (::mount("cgroup2", target.c_str(), "cgroup2", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                data.c_str()) != 0)
      ::_exit(errno);
    ::_exit(0);
  }
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0) {
    if (errno != EINTR) return ErrnoFail("waitpid");
  }
  if (!WIFEXITED(st)) return Fail(Errc::kInternal, "cgroup2 mount helper killed by a signal");
  if (int e = WEXITSTATUS(st); e != 0)
    return ErrnoFail("mount cgroup2 -o '" + data + "'", e);
  return CgroupFavorDynmods(CgroupHierarchies());
}

const Hierarchy* FindHierarchy(const std::vector<Hierarchy>& all, std::string_view controller) {
  for (const auto& h : all) {
    if (std::find(h.controllers.begin(), h.controllers.end(), controller) != h.controllers.end())
      return &h;
  }
  return V2Of(all);
}

std::vector<std::string> ExistingCgroupDirs(const std::vector<Hierarchy>& hierarchies,
                                            const std::string& rel) {
  std::vector<std::string> out;
  for (const auto& h : hierarchies) {
    std::string dir = h.mount_point + rel;
    if (sys::Exists(dir)) out.push_back(dir);
  }
  return out;
}

Status KillAndRemoveCgroup(const std::vector<Hierarchy>& hierarchies, const std::string& rel) {
  if (rel.empty() || rel == "/" || rel.find("..") != std::string::npos)
    return Fail(Errc::kInvalidArgument, "cgroup path " + rel);
  std::vector<std::string> roots = ExistingCgroupDirs(hierarchies, rel);
  if (roots.empty()) return Ok();
  std::vector<std::string> dirs;
  for (const auto& r : roots) CollectTree(r, &dirs);

  auto kill_all = [&]() {
    size_t n = 0;
    for (const auto& d : dirs) {
      for (pid_t p : ReadPids(d)) {
        if (p > 1) {
          ::kill(p, SIGKILL);
          ++n;
        }
      }
    }
    return n;
  };

  // Freeze, kill, thaw: frozen tasks cannot fork or exit, so every pid read is still the
  // task it names when SIGKILL is sent; the kill takes effect on thaw.
  std::string freezer_v1, freeze_v2;
  for (const auto& h : hierarchies) {
    std::string dir = h.mount_point + rel;
    if (!sys::Exists(dir)) continue;
    if (h.v2) {
      // cgroup.kill (Linux 5.14) kills the whole subtree atomically.
      WriteSmall(dir + "/cgroup.kill", "1");
      if (WriteSmall(dir + "/cgroup.freeze", "1")) freeze_v2 = dir + "/cgroup.freeze";
    } else if (std::find(h.controllers.begin(), h.controllers.end(), "freezer") !=
               h.controllers.end()) {
      if (WriteSmall(dir + "/freezer.state", "FROZEN")) freezer_v1 = dir + "/freezer.state";
    }
  }
  if (!freezer_v1.empty()) {
    // FREEZING -> FROZEN takes a moment; the kill is correct either way.
    for (int i = 0; i < 100; ++i) {
      auto st = sys::ReadFile(freezer_v1);
      if (!st || StartsWith(*st, "FROZEN")) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  kill_all();
  if (!freezer_v1.empty()) WriteSmall(freezer_v1, "THAWED");
  if (!freeze_v2.empty()) WriteSmall(freeze_v2, "0");

  int64_t deadline = MonotonicNanos() + 2'000'000'000;
  while (kill_all() > 0) {
    if (MonotonicNanos() > deadline)
      return Fail(Errc::kInternal, "cgroup " + rel + ": processes survive SIGKILL");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }

  // dirs is deepest-first per hierarchy already.
  Status result = Ok();
  for (const auto& d : dirs) {
    for (int i = 0;; ++i) {
      if (::rmdir(d.c_str()) == 0 || errno == ENOENT) break;
      if (errno != EBUSY || i >= 200) {
        if (result) result = ErrnoFail("rmdir " + d);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  return result;
}

bool InheritCpusetSets(const std::string& parent, const std::string& dir) {
  for (const char* f : {"/cpuset.cpus", "/cpuset.mems"}) {
    auto cur = sys::ReadFile(dir + f);
    if (cur && cur->find_first_not_of(" \n") != std::string::npos) continue;
    auto from = sys::ReadFile(parent + f);
    if (!from || !WriteSmall(dir + f, *from)) return false;
  }
  return true;
}

Status JoinCgroup(const std::vector<Hierarchy>& hierarchies, const std::string& rel, pid_t pid) {
  std::string refused;
  for (const Hierarchy& h : hierarchies) {
    const bool cpuset = !h.v2 && std::find(h.controllers.begin(), h.controllers.end(), "cpuset") != h.controllers.end();
    // Each level below the mount point, made in turn (cpuset's need their cpus and mems
    // before they can take a task).
    std::string dir = h.mount_point;
    bool ok = true;
    for (size_t at = 1; ok && at <= rel.size();) {
      size_t next = rel.find('/', at);
      if (next == std::string::npos) next = rel.size();
      const std::string parent = dir;
      dir += "/" + rel.substr(at, next - at);
      at = next + 1;
      if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) ok = false;
      if (ok && cpuset) ok = InheritCpusetSets(parent, dir);
    }
    if (!ok || !WriteSmall(dir + "/cgroup.procs", std::to_string(pid)))
      refused += (refused.empty() ? "" : ", ") + h.mount_point;
  }
  if (!refused.empty()) return Fail(Errc::kInternal, "cgroup " + rel + " refused pid " + std::to_string(pid) + " in " + refused);
  return {};
}

}  // namespace space::sys
