// microvm: template disk images, per-VM overlays and template snapshots.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sodium.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "runtime/microvm/internal.h"

namespace space::runtime::microvm {

Status MicrovmRuntime::CreateOverlay(const std::string& image, const std::string& path) {
  sys::SpawnOptions o;
  o.argv = {"qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", image, path};
  auto r = sys::RunChecked(o, 60000);
  if (!r) return tl::unexpected(std::move(r.error()).Wrap("create disk overlay"));
  return Ok();
}

Result<std::string> MicrovmRuntime::EnsureImage(const std::string& tree, const std::string& digest,
                                                int64_t disk_bytes) {
  std::string hex = StartsWith(digest, "sha256:") ? digest.substr(7) : digest;
  if (!ValidName(hex)) return Fail(Errc::kInvalidArgument, "bad template digest " + digest);
  // The guest's disk is the image's size: limits.disk_bytes (whole MiB), or kImageBytes
  // where the operator allows unlimited disks.
  const uint64_t bytes = disk_bytes > 0 ? ((static_cast<uint64_t>(disk_bytes) + (1u << 20) - 1) >> 20) << 20
                                        : kImageBytes;
  const std::string name = hex + (bytes == kImageBytes ? "" : "-" + std::to_string(bytes >> 20) + "m");
  const std::string path = opts_.state_dir + "/images/" + name + ".ext4";
  std::lock_guard lock(KeyMutex("image:" + name));
  if (sys::Exists(path)) return path;
  const std::string tmp = opts_.state_dir + "/tmp/image-" + name + ".ext4";
  (void)::unlink(tmp.c_str());
  {
    auto fd = sys::Open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (!fd) return tl::unexpected(fd.error());
    if (::ftruncate(fd->get(), static_cast<off_t>(bytes)) != 0) return ErrnoFail("size image");
  }
  const int64_t t0 = MonotonicNanos();
  std::vector<std::string> mkfs = {"mkfs.ext4", "-q", "-F", "-L", "space-root",
                                   "-E", "lazy_itable_init=1,lazy_journal_init=1", "-d", tree, tmp};
  Status st;
  if (opts_.template_uid_shift != 0) {
    if (::chown(tmp.c_str(), opts_.template_uid_shift, opts_.template_uid_shift) != 0)
      return ErrnoFail("chown image");
    // The namespace's root may not traverse the (root-only) storage dirs above the
    // tree: hand it the tree as an inherited descriptor.
    int tree_fd = ::open(tree.c_str(), O_PATH | O_DIRECTORY);
    if (tree_fd < 0) return ErrnoFail("open " + tree);
    mkfs[8] = "/proc/self/fd/" + std::to_string(tree_fd);
    st = RunInShiftedUserNs(mkfs, opts_.template_uid_shift);
    ::close(tree_fd);
    (void)::chown(tmp.c_str(), 0, 0);
  } else {
    sys::SpawnOptions o;
    o.argv = mkfs;
    auto r = sys::RunChecked(o, 600000);
    st = r ? Ok() : Status(tl::unexpected(r.error()));
  }
  if (!st) {
    (void)::unlink(tmp.c_str());
    return tl::unexpected(st.error());
  }
  ::chmod(tmp.c_str(), 0644);
  if (::rename(tmp.c_str(), path.c_str()) != 0) return ErrnoFail("rename image");
  spdlog::info("microvm: built disk image of template {} in {:.0f} ms", digest,
               (MonotonicNanos() - t0) / 1e6);
  return path;
}

std::mutex& MicrovmRuntime::KeyMutex(const std::string& key) {
  std::lock_guard lock(keys_mu_);
  auto& m = key_mutexes_[key];
  if (!m) m = std::make_unique<std::mutex>();
  return *m;
}

Result<std::string> MicrovmRuntime::EnsureTemplateSnapshot(const std::string& image, const std::string& digest,
                                           const VmConfig& want) {
  std::string key = Fnv64(digest + "|" + image + "|" + std::to_string(want.mem_mib) + "|" +
                          std::to_string(want.cpus) + "|" + want.accel + "|" +
                          FileIdentity(opts_.kernel) + "|" + FileIdentity(opts_.initrd) + "|" +
                          opts_.qemu_binary);
  const std::string final_dir = opts_.state_dir + "/templates/" + key;
  std::lock_guard lock(KeyMutex("template:" + key));
  if (sys::Exists(final_dir + "/ready")) return final_dir;
  const int64_t t0 = MonotonicNanos();
  const std::string id = "tpl-" + key;
  const std::string dir = VmDir(id);
  (void)Destroy(id);
  VmConfig cfg = want;
  cfg.uid = 0;  // runs briefly, as root, only to save its state
  auto st = [&]() -> Status {
    SPACE_TRY(sys::MkdirAll(dir, 0711));
    SPACE_TRY(sys::WriteFileAtomic(dir + "/vm.json", cfg.ToJson().dump(), 0644));
    SPACE_TRY(CreateOverlay(image, dir + "/disk.qcow2"));
    Launch launch;
    launch.mem_file = dir + "/mem";
    launch.mem_shared = true;
    Handles h;
    // With `sync`: /etc/machine-id then exists, and each clone's sync overwrites it in place.
    SPACE_TRY(Boot(id, cfg, launch, /*sync=*/true, &h));
    // One command before the snapshot: the shell, loader and libc it reads are then in
    // the page cache of every clone (read once here, not from the disk by each clone).
    SPACE_TRY_WRAP(WarmUp(id, h.agent.get()), "warm-up command");
    QmpClient* q = &h.qmp;
    SPACE_TRY(q->Execute("stop").map([](auto&&) {}));
    SPACE_TRY(SaveState(*q, dir + "/state", true));
    (void)q->Execute("quit");
    SPACE_TRY(Kill(id));
    (void)sys::RemoveAll(final_dir);
    SPACE_TRY(sys::MkdirAll(final_dir, 0711));
    for (const char* f : {"/mem", "/state", "/disk.qcow2"}) {
      if (::rename((dir + f).c_str(), (final_dir + f).c_str()) != 0) return ErrnoFail("move template snapshot");
      ::chmod((final_dir + f).c_str(), 0600);
    }
    return sys::WriteFileAtomic(final_dir + "/ready", "", 0644);
  }();
  (void)Destroy(id);
  if (!st) {
    (void)sys::RemoveAll(final_dir);
    return tl::unexpected(st.error());
  }
  spdlog::info("microvm: template snapshot of {} ({} MiB, {} cpu) made in {:.0f} ms", digest,
               want.mem_mib, want.cpus, (MonotonicNanos() - t0) / 1e6);
  return final_dir;
}

}  // namespace space::runtime::microvm
