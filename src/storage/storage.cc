#include "storage/storage.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <spdlog/spdlog.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>

#include "storage/btrfs.h"
#include "storage/fs_util.h"
#include "storage/overlay.h"
#include "sys/sys.h"

namespace space::storage {

void ReadAhead(const std::string& root, const char* rel_path) {
  sys::UniqueFd dir(::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!dir) return;
  open_how how{};
  how.flags = O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
  sys::UniqueFd fd(static_cast<int>(::syscall(SYS_openat2, dir.get(), rel_path, &how, sizeof how)));
  struct stat st;
  if (!fd || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return;
  (void)::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_WILLNEED);
}

namespace {

// Makes `dir` a mount point (a bind mount of itself unless something is mounted there
// already) with recursive shared propagation. Must happen before anything is mounted
// inside it: mounts made later under a shared mount propagate to its slaves, i.e. into
// mount namespaces created afterwards with slave propagation (where crun runs), whereas
// a mount that already existed when a namespace was created is merely copied into it.
Status EnsureSharedMount(const std::string& dir) {
  auto mounts = internal::ReadMountInfo();
  const auto* m = internal::FindMount(mounts, dir);
  if (!m) {
    if (::mount(dir.c_str(), dir.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0)
      return ErrnoFail("bind mount " + dir);
  } else if (m->shared) {
    return Ok();   // daemon restart: already set up
  }
  if (::mount(nullptr, dir.c_str(), nullptr, MS_SHARED | MS_REC, nullptr) != 0)
    return ErrnoFail("make " + dir + " rshared");
  return Ok();
}

Result<std::unique_ptr<Driver>> OpenKind(const std::string& storage_dir,
                                         const std::string& kind, const OpenOptions& opts) {
  if (kind == "btrfs") return BtrfsDriver::Open(storage_dir, opts);
  return OverlayDriver::Open(storage_dir);
}

// Containers run as an unprivileged host uid (root in a user namespace) that must walk
// from "/" to its root; a data dir such as a 0700 temp dir makes crun fail obscurely.
void WarnIfNotTraversable(const std::string& dir) {
  std::string path = dir;
  while (!path.empty()) {
    struct stat st;
    if (::stat(path.c_str(), &st) == 0 && !(st.st_mode & S_IXOTH)) {
      spdlog::warn("storage: {} is not searchable by other users (mode {:o}); sandboxes "
                   "with user namespaces cannot reach their root filesystems",
                   path, st.st_mode & 07777);
      return;
    }
    path = path.substr(0, path.find_last_of('/'));
  }
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

Result<std::unique_ptr<Driver>> Driver::Open(const std::string& data_dir,
                                             const std::string& kind,
                                             const OpenOptions& opts) {
  if (data_dir.empty() || data_dir[0] != '/')
    return Fail(Errc::kInvalidArgument, "storage: data dir must be absolute: " + data_dir);
  if (kind != "auto" && kind != "btrfs" && kind != "overlay")
    return Fail(Errc::kInvalidArgument, "storage: unknown driver \"" + kind + "\"");
  SPACE_TRY_WRAP(sys::MkdirAll(data_dir, 0755), "storage");
  // Canonical, because it is compared with /proc/self/mountinfo.
  auto real = sys::RealPath(data_dir);
  if (!real) return tl::unexpected(std::move(real.error()).Wrap("storage"));
  std::string storage_dir = *real + "/storage";
  SPACE_TRY_WRAP(sys::MkdirAll(storage_dir, 0711), "storage");
  if (::chmod(storage_dir.c_str(), 0711) != 0) return ErrnoFail("chmod " + storage_dir);
  SPACE_TRY_WRAP(EnsureSharedMount(storage_dir), "storage");
  WarnIfNotTraversable(*real);

  // The first successful Open records its driver: "auto" must keep finding the layers
  // and roots it made, even if btrfs stops working (it then fails rather than switch).
  std::string record = storage_dir + "/driver";
  std::string recorded;
  if (auto r = sys::ReadFile(record)) recorded = Trim(*r);
  if (!recorded.empty() && recorded != "btrfs" && recorded != "overlay") {
    return Fail(Errc::kInternal, "storage: " + record + ": unknown driver \"" + recorded + "\"");
  }
  std::string chosen = kind != "auto" ? kind : recorded;
  Result<std::unique_ptr<Driver>> d = Fail(Errc::kInternal, "unreachable");
  if (!chosen.empty()) {
    d = OpenKind(storage_dir, chosen, opts);
  } else {
    d = OpenKind(storage_dir, "btrfs", opts);
    if (!d) {
      spdlog::warn("storage: btrfs unavailable ({}); using overlay", d.error().message);
      d = OpenKind(storage_dir, "overlay", opts);
    }
  }
  if (!d) return tl::unexpected(std::move(d.error()).Wrap("storage"));
  if (std::string((*d)->Name()) != recorded) {
    SPACE_TRY_WRAP(sys::WriteFileAtomic(record, std::string((*d)->Name()) + "\n"), "storage");
  }
  return d;
}

Status Driver::Teardown(const std::string& data_dir) {
  auto real = sys::RealPath(data_dir);
  if (!real) {
    if (real.error().sys_errno == ENOENT) return Ok();
    return tl::unexpected(std::move(real.error()).Wrap("storage teardown"));
  }
  std::string storage_dir = *real + "/storage";
  Status result = Ok();
  auto unmount = [&](const std::string& mp) {
    if (::umount2(mp.c_str(), UMOUNT_NOFOLLOW) == 0) return;
    if (errno == EINVAL || errno == ENOENT) return;   // gone already (propagated unmount)
    if (errno == EBUSY && ::umount2(mp.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW) == 0) {
      spdlog::warn("storage teardown: {} busy; detached lazily", mp);
      return;
    }
    auto e = ErrnoFail("unmount " + mp);
    if (result) result = std::move(e);
  };

  // Everything below DATA/storage is ours (overlay roots, the pool): deepest first, and
  // for mounts stacked on one point, the topmost (latest in mountinfo) first.
  auto mounts = internal::ReadMountInfo();
  std::vector<std::pair<size_t, std::string>> below;
  for (size_t i = 0; i < mounts.size(); ++i) {
    if (StartsWith(mounts[i].mount_point, storage_dir + "/"))
      below.emplace_back(i, mounts[i].mount_point);
  }
  std::stable_sort(below.begin(), below.end(), [](const auto& a, const auto& b) {
    if (a.second.size() != b.second.size()) return a.second.size() > b.second.size();
    return a.first > b.first;
  });
  for (const auto& [i, mp] : below) unmount(mp);

  // DATA/storage itself only if it is our bind mount: same filesystem as its parent
  // mount. A separate filesystem mounted there by the admin stays.
  for (int guard = 0; guard < 8; ++guard) {
    mounts = internal::ReadMountInfo();
    const auto* m = internal::FindMount(mounts, storage_dir);
    if (!m) break;
    auto parent = std::find_if(mounts.begin(), mounts.end(),
                               [&](const auto& p) { return p.id == m->parent; });
    if (parent == mounts.end() || parent->devno != m->devno) break;
    if (::umount2(storage_dir.c_str(), UMOUNT_NOFOLLOW) != 0) {
      unmount(storage_dir);
      break;
    }
  }
  if (!result) return tl::unexpected(std::move(result.error()).Wrap("storage teardown"));
  return Ok();
}

}  // namespace space::storage
