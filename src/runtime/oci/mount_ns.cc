#include "runtime/oci/mount_ns.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <linux/nsfs.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include <spdlog/spdlog.h>

namespace space::runtime::oci {

namespace {

// Runs `fn` in a forked child that first joins the mount namespace `ns_fd` (-1: stays).
// The child exits with fn's return value (0 or an errno); the parent returns it. The
// daemon is multi-threaded, so `fn` must only make raw syscalls (no malloc, no locks).
template <class Fn>
Result<int> RunInChild(int ns_fd, Fn fn) {
  pid_t pid = ::fork();
  if (pid < 0) return ErrnoFail("fork");
  if (pid == 0) {
    if (ns_fd >= 0 && ::setns(ns_fd, CLONE_NEWNS) != 0) ::_exit(errno ? errno : 255);
    ::_exit(fn());
  }
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0) {
    if (errno != EINTR) return ErrnoFail("waitpid");
  }
  if (!WIFEXITED(st)) return Fail(Errc::kInternal, "mount ns helper killed by a signal");
  return WEXITSTATUS(st);
}

bool IsMountNsFd(int fd) {
  struct statfs fs;
  if (::fstatfs(fd, &fs) != 0 || fs.f_type != NSFS_MAGIC) return false;
  return ::ioctl(fd, NS_GET_NSTYPE) == CLONE_NEWNS;
}

// Makes `dir` a bind mount of itself (if it is not a mount point yet), then sets its
// propagation: private, and then shared if asked (private first so it gets a peer group
// of its own instead of joining its parent's).
Status SelfBind(const std::string& dir, bool shared) {
  SPACE_TRY(sys::MkdirAll(dir, 0711));
  if (!sys::IsMountPoint(dir)) {
    if (::mount(dir.c_str(), dir.c_str(), nullptr, MS_BIND, nullptr) != 0)
      return ErrnoFail("bind " + dir);
    if (::mount(nullptr, dir.c_str(), nullptr, MS_PRIVATE, nullptr) != 0)
      return ErrnoFail("make-private " + dir);
  }
  unsigned long prop = shared ? MS_SHARED : MS_PRIVATE;
  if (::mount(nullptr, dir.c_str(), nullptr, prop, nullptr) != 0)
    return ErrnoFail(std::string(shared ? "make-shared " : "make-private ") + dir);
  return Ok();
}

// Creates a new mount namespace (a private copy of ours) and bind-mounts its nsfs file at
// `file`.
Status CreateNs(const std::string& file) {
  {
    auto f = sys::Open(file, O_RDONLY | O_CREAT, 0600);
    if (!f) return tl::unexpected(f.error());
  }
  int ready[2], go[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) return ErrnoFail("pipe2");
  if (::pipe2(go, O_CLOEXEC) != 0) {
    ::close(ready[0]);
    ::close(ready[1]);
    return ErrnoFail("pipe2");
  }
  pid_t pid = ::fork();
  if (pid < 0) {
    int e = errno;
    for (int fd : {ready[0], ready[1], go[0], go[1]}) ::close(fd);
    return ErrnoFail("fork", e);
  }
  if (pid == 0) {
    ::close(ready[0]);
    ::close(go[1]);
    int e = 0;
    if (::unshare(CLONE_NEWNS) != 0) {
      e = errno;
    } else if (::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      e = errno;
    }
    (void)!::write(ready[1], &e, sizeof e);
    // Stay alive until the parent has bound /proc/<pid>/ns/mnt (EOF on `go`).
    char c;
    (void)!::read(go[0], &c, 1);
    ::_exit(0);
  }
  ::close(ready[1]);
  ::close(go[0]);
  int e = -1;
  ssize_t n = ::read(ready[0], &e, sizeof e);
  ::close(ready[0]);
  Status result = Ok();
  if (n != sizeof e) {
    result = Fail(Errc::kInternal, "mount ns helper died");
  } else if (e != 0) {
    result = ErrnoFail("unshare mount namespace", e);
  } else {
    std::string src = "/proc/" + std::to_string(pid) + "/ns/mnt";
    if (::mount(src.c_str(), file.c_str(), nullptr, MS_BIND, nullptr) != 0)
      result = ErrnoFail("bind " + src + " to " + file);
  }
  ::close(go[1]);
  int st;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return result;
}

// Inside the namespace: unmounts `unmount_inside`.
Status PrepareInside(int ns_fd, const std::vector<std::string>& unmount_inside) {
  std::vector<const char*> targets;
  for (const auto& t : unmount_inside) targets.push_back(t.c_str());
  auto r = RunInChild(ns_fd, [&]() -> int {
    for (const char* t : targets) {
      // Not mounted (a re-used namespace) is EINVAL: fine.
      if (::umount2(t, MNT_DETACH) != 0 && errno != EINVAL && errno != ENOENT) return errno;
    }
    return 0;
  });
  if (!r) return tl::unexpected(r.error());
  if (*r != 0) return ErrnoFail("prepare helper mount namespace", *r);
  return Ok();
}

// Inside the namespace: /sys/fs/cgroup becomes a tmpfs of its own with the host's
// entries but `hide` (and whatever is no mount point inside, as the unmounted unified
// hierarchy): each hierarchy a detached copy of the namespace's mount moved onto a
// directory of the new tmpfs, each link (cpu -> cpu,cpuacct) made again. Nothing to do
// where none of `hide` is there any more (a namespace prepared before).
Status HideCgroupHierarchies(int ns_fd, const std::vector<std::string>& hide) {
  constexpr const char* kRoot = "/sys/fs/cgroup";
  struct Entry {
    std::string path, link;  // link: the target of a symlink, "" for a directory
  };
  std::vector<Entry> keep;
  std::vector<std::string> hidden;
  DIR* d = ::opendir(kRoot);
  if (!d) return ErrnoFail(std::string("opendir ") + kRoot);
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    std::string path = std::string(kRoot) + "/" + name;
    if (std::find(hide.begin(), hide.end(), name) != hide.end()) {
      hidden.push_back(path);
      continue;
    }
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0) continue;
    if (S_ISLNK(st.st_mode)) {
      char buf[256];
      ssize_t n = ::readlink(path.c_str(), buf, sizeof buf - 1);
      if (n <= 0) continue;
      std::string target(buf, static_cast<size_t>(n));
      // A link to a hidden hierarchy goes with it.
      if (std::find(hide.begin(), hide.end(), target) != hide.end()) continue;
      keep.push_back({path, target});
    } else if (S_ISDIR(st.st_mode)) {
      keep.push_back({path, ""});
    }
  }
  ::closedir(d);
  std::vector<int> fds(keep.size(), -1);
  // The child makes raw syscalls only (the daemon is multi-threaded): everything above.
  auto r = RunInChild(ns_fd, [&]() -> int {
    bool any = false;
    for (const auto& h : hidden) any = any || ::access(h.c_str(), F_OK) == 0;
    if (!any) return 0;
    for (size_t i = 0; i < keep.size(); ++i) {
      if (!keep[i].link.empty()) continue;
      struct statfs fs;
      // Only the mounted hierarchies: a directory left by an unmount stays out.
      if (::statfs(keep[i].path.c_str(), &fs) != 0 || fs.f_type != CGROUP_SUPER_MAGIC) continue;
      fds[i] = ::open_tree(AT_FDCWD, keep[i].path.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
      if (fds[i] < 0) return errno;
    }
    if (::mount("tmpfs", kRoot, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=755,size=64k") != 0)
      return errno;
    // All or nothing: a hierarchy missing by mistake (memory, pids) would leave sandboxes
    // without its limits, so a failure takes the new tmpfs away again.
    auto undo = [&](int e) {
      (void)::umount2(kRoot, MNT_DETACH);
      return e;
    };
    for (size_t i = 0; i < keep.size(); ++i) {
      const char* p = keep[i].path.c_str();
      if (!keep[i].link.empty()) {
        if (::symlink(keep[i].link.c_str(), p) != 0) return undo(errno);
        continue;
      }
      if (fds[i] < 0) continue;
      if (::mkdir(p, 0555) != 0) return undo(errno);
      if (::move_mount(fds[i], "", AT_FDCWD, p, MOVE_MOUNT_F_EMPTY_PATH) != 0) return undo(errno);
    }
    return 0;
  });
  if (!r) return tl::unexpected(r.error());
  if (*r != 0) return ErrnoFail("hide cgroup hierarchies in helper mount namespace", *r);
  return Ok();
}

// Whether the namespace sees each of `dirs` on the file system the host sees it on: a
// namespace copied before a directory became a mount of its own (e.g. the runtime's
// tmpfs) still shows the directory beneath it, and the runtime binary would read and
// write where the daemon does not look.
Result<bool> SameFilesystemsInside(int ns_fd, const std::vector<std::string>& dirs) {
  std::vector<const char*> paths;
  std::vector<dev_t> devs;
  for (const auto& d : dirs) {
    struct stat st;
    if (::stat(d.c_str(), &st) != 0) return ErrnoFail("stat " + d);
    paths.push_back(d.c_str());
    devs.push_back(st.st_dev);
  }
  auto r = RunInChild(ns_fd, [&]() -> int {
    for (size_t i = 0; i < paths.size(); ++i) {
      struct stat st;
      if (::stat(paths[i], &st) != 0 || st.st_dev != devs[i]) return ESTALE;
    }
    return 0;
  });
  if (!r) return tl::unexpected(r.error());
  return *r == 0;
}

// Written beside the nsfs bind once a namespace is made private (this version); one
// without it was made by an older spaced, as a slave receiving the shared dirs' mounts.
constexpr const char* kPrivateMarker = "/mnt.private";

}  // namespace

Result<HelperMountNs> HelperMountNs::Ensure(const Options& opts) {
  SPACE_TRY(SelfBind(opts.dir, /*shared=*/false));
  // Private on the host, also where an older spaced had made them shared.
  for (const auto& d : opts.private_dirs) SPACE_TRY(SelfBind(d, /*shared=*/false));
  std::string file = opts.dir + "/mnt";
  const std::string marker = opts.dir + kPrivateMarker;

  HelperMountNs ns;
  ns.path_ = file;
  std::vector<std::string> unmount = opts.unmount_inside;
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto fd = sys::Open(file, O_RDONLY);
    bool same = false;
    if (fd && IsMountNsFd(fd->get()) && sys::Exists(marker)) {
      auto r = SameFilesystemsInside(fd->get(), opts.private_dirs);
      if (!r) return tl::unexpected(std::move(r.error()).Wrap("helper mount namespace"));
      same = *r;
    }
    if (same) {
      SPACE_TRY_WRAP(PrepareInside(fd->get(), unmount), "helper mount namespace");
      if (!opts.hide_cgroup_hierarchies.empty()) {
        // Best effort: without it the runtime binary makes cgroups in every hierarchy.
        if (auto st = HideCgroupHierarchies(fd->get(), opts.hide_cgroup_hierarchies); !st)
          spdlog::warn("oci: {}", st.error().message);
      }
      ns.fd_ = std::move(*fd);
      return ns;
    }
    if (attempt == 1) break;
    // Stale: a plain file after a reboot, a namespace of an older spaced, or one that sees
    // other file systems at the private dirs than the host does.
    fd = sys::UniqueFd();
    (void)::unlink(marker.c_str());
    while (sys::IsMountPoint(file)) {
      if (::umount2(file.c_str(), MNT_DETACH) != 0) return ErrnoFail("umount " + file);
    }
    // A new namespace copies the host's mounts of the sandboxes running now (a restart
    // with a stale namespace): they go again inside, deepest first, as they would not with
    // their unmounts on the host.
    for (const auto& d : opts.private_dirs) {
      for (const auto& m : sys::MountsUnder(d)) {
        if (m != d) unmount.push_back(m);
      }
    }
    SPACE_TRY_WRAP(CreateNs(file), "helper mount namespace");
    SPACE_TRY_WRAP(sys::WriteFileAtomic(marker, "1\n", 0600), "helper mount namespace");
  }
  return Fail(Errc::kInternal, "helper mount namespace at " + file + " could not be made");
}

Status HelperMountNs::UnmountInside(const std::string& target) const {
  const char* t = target.c_str();
  auto r = RunInChild(fd_.get(), [t]() -> int {
    if (::umount2(t, MNT_DETACH) != 0 && errno != EINVAL && errno != ENOENT) return errno;
    return 0;
  });
  if (!r) return tl::unexpected(r.error());
  if (*r != 0) return ErrnoFail("umount " + target + " in helper mount namespace", *r);
  return Ok();
}

}  // namespace space::runtime::oci
