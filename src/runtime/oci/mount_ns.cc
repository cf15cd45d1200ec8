#include "runtime/oci/mount_ns.h"

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

// Creates a new mount namespace (slave of ours) and bind-mounts its nsfs file at `file`.
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
    } else if (::mount("none", "/", nullptr, MS_REC | MS_SLAVE, nullptr) != 0) {
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

// Inside the namespace: unmounts `unmount_inside`, then checks that a tmpfs mounted at
// `<shared dir>/.probe` on the host is visible there (i.e. propagation works).
Result<bool> PrepareAndProbe(int ns_fd, const std::vector<std::string>& unmount_inside,
                             const std::vector<std::string>& shared_dirs) {
  std::vector<std::string> probes;
  auto cleanup = [&]() {
    for (const auto& p : probes) {
      ::umount2(p.c_str(), MNT_DETACH);
      ::rmdir(p.c_str());
    }
  };
  for (const auto& d : shared_dirs) {
    std::string probe = d + "/.probe";
    if (::mkdir(probe.c_str(), 0700) != 0 && errno != EEXIST) {
      int e = errno;
      cleanup();
      return ErrnoFail("mkdir " + probe, e);
    }
    probes.push_back(probe);
    while (::umount2(probe.c_str(), MNT_DETACH) == 0) {  // left by a crash
    }
    if (::mount("tmpfs", probe.c_str(), "tmpfs", 0, "size=4k") != 0) {
      int e = errno;
      cleanup();
      return ErrnoFail("mount probe " + probe, e);
    }
  }
  std::vector<const char*> targets, probe_paths;
  for (const auto& t : unmount_inside) targets.push_back(t.c_str());
  for (const auto& p : probes) probe_paths.push_back(p.c_str());
  auto r = RunInChild(ns_fd, [&]() -> int {
    for (const char* t : targets) {
      // Not mounted (a re-used namespace) is EINVAL: fine.
      if (::umount2(t, MNT_DETACH) != 0 && errno != EINVAL && errno != ENOENT) return errno;
    }
    for (const char* p : probe_paths) {
      struct statfs fs;
      if (::statfs(p, &fs) != 0) return errno;
      if (fs.f_type != TMPFS_MAGIC) return 200;
    }
    return 0;
  });
  cleanup();
  if (!r) return tl::unexpected(r.error());
  if (*r == 200) return false;
  if (*r != 0) return ErrnoFail("prepare helper mount namespace", *r);
  return true;
}

}  // namespace

Result<HelperMountNs> HelperMountNs::Ensure(const Options& opts) {
  SPACE_TRY(SelfBind(opts.dir, /*shared=*/false));
  for (const auto& d : opts.shared_dirs) SPACE_TRY(SelfBind(d, /*shared=*/true));
  std::string file = opts.dir + "/mnt";

  HelperMountNs ns;
  ns.path_ = file;
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto fd = sys::Open(file, O_RDONLY);
    if (fd && IsMountNsFd(fd->get())) {
      auto ok = PrepareAndProbe(fd->get(), opts.unmount_inside, opts.shared_dirs);
      if (!ok) return tl::unexpected(std::move(ok.error()).Wrap("helper mount namespace"));
      if (*ok) {
        ns.fd_ = std::move(*fd);
        return ns;
      }
    }
    if (attempt == 1) break;
    // Stale: a plain file after a reboot, or a namespace that no longer sees shared_dirs.
    fd = sys::UniqueFd();
    while (sys::IsMountPoint(file)) {
      if (::umount2(file.c_str(), MNT_DETACH) != 0) return ErrnoFail("umount " + file);
    }
    SPACE_TRY_WRAP(CreateNs(file), "helper mount namespace");
  }
  return Fail(Errc::kInternal, "helper mount namespace at " + file +
                                   " does not see mounts made under the shared dirs");
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
