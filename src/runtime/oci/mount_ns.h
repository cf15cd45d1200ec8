// mount_ns: a persistent helper mount namespace that the OCI runtime binary runs in.
//
// Why: crun 1.8.1 refuses cgroup v1/v2 hybrid hosts ("cgroups in hybrid mode not
// supported"). In a mount namespace where /sys/fs/cgroup/unified is unmounted it sees a
// pure v1 host and works. The namespace is kept alive by a bind mount of its nsfs file
// (`dir/mnt`, inside a private bind mount of `dir`), so it outlives the daemon and is
// re-used by the next one; after a reboot it is created again.
//
// Propagation: none. The namespace is a private copy of the host's at its creation, and
// each of `private_dirs` is a private mount on the host, so the per-sandbox mounts the
// host makes later (rootfs binds, run tmpfs) never appear inside: the namespace's mount
// table stays the size it was made with, however many sandboxes run. A start hands the
// runtime binary the mounts of its own sandbox as detached copies, attached in a mount
// namespace of that start alone (sys::SpawnOptions::attach_mounts). Every mount table the
// runtime binary reads or copies (it reads /proc/mounts and unshares one per container)
// is then as small as this one: with the host's mounts shared in, both grew with every
// sandbox (issue 17, docs/benchmarks-density.md "Create and delete rates").
//
// A namespace made by an older spaced (a slave that received the shared dirs' mounts), or
// one that sees another file system at a private dir than the host does (the dir became a
// mount of its own after the namespace was made), is not re-used: it is replaced, and the
// mounts it had received go with it.
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
    std::vector<std::string> private_dirs;    // host mounts below them stay out
    std::vector<std::string> unmount_inside;  // e.g. {"/sys/fs/cgroup/unified"}
    // Non-empty: inside, /sys/fs/cgroup is a tmpfs of the namespace's own holding the
    // host's cgroup v1 hierarchies and links but these (e.g. {"cpuset"}) and those of
    // unmount_inside. The runtime binary joins (and makes its cgroups in) the hierarchies
    // it finds at /sys/fs/cgroup/<controller>, so it makes none in a hidden one.
    std::vector<std::string> hide_cgroup_hierarchies;
  };

  // Re-uses a live namespace at dir/mnt made private (as above), else (first start, after
  // a reboot, one of an older spaced) creates a new one. Blocks a few ms.
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
