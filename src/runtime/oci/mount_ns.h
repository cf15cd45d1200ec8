// mount_ns: a persistent helper mount namespace that the OCI runtime binary runs in.
//
// Why: crun 1.8.1 refuses cgroup v1/v2 hybrid hosts ("cgroups in hybrid mode not
// supported"). In a mount namespace where /sys/fs/cgroup/unified is unmounted it sees a
// pure v1 host and works. The namespace is kept alive by a bind mount of its nsfs file
// (`dir/mnt`, inside a private bind mount of `dir`), so it outlives the daemon and is
// re-used by the next one; after a reboot it is created again.
//
// Propagation: the namespace is a slave of the host. Each of `shared_dirs` is made a shared
// mount (its own peer group) before the namespace is created, so mounts the host makes
// below them later (per-sandbox rootfs binds and run tmpfs) appear inside, and their
// unmounts too.
//
// Ownership: the object owns an fd of the namespace (for sys::SpawnOptions::mount_ns_fd);
// the namespace itself persists on disk. Methods are const and thread-safe. The daemon
// is multi-threaded, so it never setns()es itself: helpers fork a child that does.
#pragma once

#include <string>
#include <vector>

#include "common/common.h"
#include "sys/sys.h"

namespace space::runtime::oci {

class HelperMountNs {
 public:
  struct Options {
    std::string dir;                          // holds the nsfs bind mount "mnt"
    std::vector<std::string> shared_dirs;     // host mounts below them propagate inside
    std::vector<std::string> unmount_inside;  // e.g. {"/sys/fs/cgroup/unified"}
  };

  // Re-uses a live namespace at dir/mnt if it still shows mounts made under shared_dirs,
  // else (first start, after a reboot, or broken) creates a new one. Blocks a few ms.
  [[nodiscard]] static Result<HelperMountNs> Ensure(const Options& opts);

  HelperMountNs() = default;
  HelperMountNs(HelperMountNs&&) = default;
  HelperMountNs& operator=(HelperMountNs&&) = default;

  int fd() const { return fd_.get(); }
  const std::string& path() const { return path_; }
  // Lazily unmounts `target` inside the namespace; ok if it is not a mount point there.
  [[nodiscard]] Status UnmountInside(const std::string& target) const;

 private:
  sys::UniqueFd fd_;
  std::string path_;
};

}  // namespace space::runtime::oci
