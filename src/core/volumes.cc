// Named volumes (docs/volumes.md): durable filesystems that outlive sandboxes.
//
// A volume is a sparse ext4 image of its quota's size, DATA/volumes/<id>/disk.img, loop-
// mounted at DATA/volumes/<id>/mnt (nosuid, nodev, noexec on the host) for as long as the
// volume exists; a sandbox that names it gets a bind of that directory (the runtime makes
// it, read-only in the kernel when asked). A write past the quota fails with ENOSPC inside
// the sandbox, as on any full filesystem. File access without a sandbox goes through the
// agent's FileService, rooted at the mount with openat2(RESOLVE_IN_ROOT).
#include <dirent.h>
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/statvfs.h>
#include <sys/fsuid.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <set>

#include "agent/files.h"
#include "core/internal.h"
#include "sys/sys.h"

namespace space::core {

namespace {

constexpr int64_t kDefaultVolumeBytes = 1ll << 30;
constexpr int64_t kMinVolumeBytes = 8ll << 20;     // ext4 with a journal needs a few MiB
constexpr int64_t kMaxVolumeBytes = 16ll << 40;
constexpr size_t kMaxVolumesPerSandbox = 16;

Status ValidateVolumeName(const std::string& name) {
  bool ok = !name.empty() && name.size() <= 63 && std::isalnum(static_cast<unsigned char>(name[0]));
  for (char c : name) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-');
  if (!ok || StartsWith(name, "vol-"))
    return Fail(Errc::kInvalidArgument,
                "invalid volume name \"" + name +
                    "\": 1-63 of [A-Za-z0-9._-], starting with a letter or digit, not \"vol-\"");
  return Ok();
}

// An absolute, already clean path a volume may be bound at.
Status ValidateMountPath(const std::string& path) {
  auto bad = [&](const std::string& why) {
    return Fail(Errc::kInvalidArgument, "invalid volume path \"" + path + "\": " + why);
  };
  if (path.empty() || path[0] != '/') return bad("must be absolute");
  if (path.size() > 4096 || path.find('\0') != std::string::npos) return bad("too long or holds NUL");
  if (path == "/") return bad("a volume cannot replace the root");
  auto clean = agent::CleanPath(path);
  if (!clean || *clean != path) return bad("must be clean (no \".\", \"..\", \"//\" or trailing /)");
  for (const char* reserved : {"/proc", "/sys", "/dev", "/.space"}) {
    std::string r = reserved;
    if (path == r || StartsWith(path, r + "/")) return bad(r + " is the runtime's");
  }
  if (path == "/etc/resolv.conf") return bad("/etc/resolv.conf is the runtime's");
  return Ok();
}

bool Overlaps(const std::string& a, const std::string& b) {
  return a == b || StartsWith(a, b + "/") || StartsWith(b, a + "/");
}

// Switches the calling thread's filesystem uid and gid (setfsuid is per thread) for the
// guard's life. Leaving uid 0 also drops CAP_DAC_OVERRIDE and friends from the thread's
// effective set (capabilities(7)), so file access is checked as for the sandboxes' root.
class FsIdentity {
 public:
  FsIdentity(uint32_t uid, uint32_t gid) {
    ::setfsgid(gid);
    ::setfsuid(uid);
  }
  ~FsIdentity() {
    ::setfsuid(0);
    ::setfsgid(0);
  }
  FsIdentity(const FsIdentity&) = delete;
  FsIdentity& operator=(const FsIdentity&) = delete;
};

// Host ids of the sandboxes' user namespace -> the ids inside.
void UnshiftIds(Json& entry, uint32_t shift) {
  for (const char* k : {"uid", "gid"}) {
    if (!entry.contains(k) || !entry[k].is_number_integer()) continue;
    int64_t v = entry[k].get<int64_t>();
    if (v >= shift && v < static_cast<int64_t>(shift) + 65536) entry[k] = v - shift;
  }
}

}  // namespace

std::string Platform::Impl::VolumeDir(const std::string& volume_id) const {
  return config.data_dir + "/volumes/" + volume_id;
}

namespace {

Status MountVolume(const std::string& dir) {
  const std::string mnt = dir + "/mnt";
  if (sys::IsMountPoint(mnt)) return Ok();
  SPACE_TRY(sys::MkdirAll(mnt, 0700));
  // mount(8) sets the loop device up with LO_FLAGS_AUTOCLEAR: unmounting frees it.
  auto r = sys::RunChecked({.argv = {"mount", "-t", "ext4", "-o", "loop,noatime,nosuid,nodev,noexec",
                                     dir + "/disk.img", mnt}});
  if (!r) return tl::unexpected(std::move(r.error()).Wrap("mount volume image"));
  // Its root is open to every user of every sandbox that mounts it (templates run as
  // different users: e2b-base's `user`, others root); the files below keep their owners.
  if (::chmod(mnt.c_str(), 0777) != 0) return ErrnoFail("chmod volume root");
  return Ok();
}

Status UnmountVolume(const std::string& dir) {
  const std::string mnt = dir + "/mnt";
  for (int i = 0; i < 16 && sys::IsMountPoint(mnt); ++i) {
    if (::umount2(mnt.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW) != 0 && errno != EINVAL)
      return ErrnoFail("unmount " + mnt);
  }
  return Ok();
}

// Unmounts and removes a volume's directory (RemoveAll never crosses a mount point).
Status RemoveVolumeDir(const std::string& dir) {
  SPACE_TRY(UnmountVolume(dir));
  return sys::RemoveAll(dir);
}

}  // namespace

Result<store::VolumeRecord> Platform::CreateVolume(const std::string& name, int64_t size_bytes) {
  SPACE_TRY(ValidateVolumeName(name));
  if (size_bytes <= 0) size_bytes = kDefaultVolumeBytes;
  if (size_bytes < kMinVolumeBytes || size_bytes > kMaxVolumeBytes)
    return Fail(Errc::kInvalidArgument, "size_bytes must be 8 MiB .. 16 TiB");
  SPACE_TRY(impl_->AdmitDisk("create volume"));
  std::unique_lock vl(impl_->volumes_mu);
  if (auto existing = impl_->store->GetVolume(name); existing)
    return Fail(Errc::kConflict, "volume " + name + " exists");
  store::VolumeRecord rec;
  rec.id = NewId("vol");
  rec.name = name;
  rec.size_bytes = size_bytes;
  rec.state = "creating";
  rec.created_ms = NowUnixMillis();
  SPACE_TRY(impl_->store->PutVolume(rec));
  const std::string dir = impl_->VolumeDir(rec.id);
  auto made = [&]() -> Status {
    SPACE_TRY(sys::MkdirAll(dir, 0700));
    const std::string image = dir + "/disk.img";
    {
      auto fd = sys::Open(image, O_WRONLY | O_CREAT | O_EXCL, 0600);
      if (!fd) return tl::unexpected(fd.error());
      if (::ftruncate(fd->get(), static_cast<off_t>(size_bytes)) != 0) return ErrnoFail("truncate " + image);
    }
    // No reserved blocks (nobody but the sandboxes writes here); the root directory
    // belongs to root inside the sandboxes (the user namespace's shifted root).
    const std::string owner = std::to_string(config_.uid_shift) + ":" + std::to_string(config_.uid_shift);
    auto r = sys::RunChecked({.argv = {"mkfs.ext4", "-q", "-F", "-m", "0", "-L", name.substr(0, 16),
                                       "-E", "root_owner=" + owner, image}});
    if (!r) return tl::unexpected(std::move(r.error()).Wrap("mkfs volume"));
    SPACE_TRY(MountVolume(dir));
    (void)::rmdir((dir + "/mnt/lost+found").c_str());  // e2fsck makes it again if it must
    return Ok();
  }();
  if (!made) {
    (void)RemoveVolumeDir(dir);
    (void)impl_->store->DeleteVolume(rec.id);
    return tl::unexpected(std::move(made.error()).Wrap("create volume " + name));
  }
  rec.state = "ready";
  if (auto st = impl_->store->PutVolume(rec); !st) {
    (void)RemoveVolumeDir(dir);
    (void)impl_->store->DeleteVolume(rec.id);
    return tl::unexpected(st.error());
  }
  spdlog::info("volume {} ({}) created, {} MiB", name, rec.id, size_bytes >> 20);
  return rec;
}

Result<std::vector<store::VolumeRecord>> Platform::ListVolumes() {
  auto all = impl_->store->ListVolumes();
  if (!all) return all;
  std::vector<store::VolumeRecord> ready;
  for (auto& v : *all)
    if (v.state == "ready") ready.push_back(std::move(v));
  return ready;
}

Result<store::VolumeRecord> Platform::GetVolume(const std::string& id_or_name) {
  auto v = impl_->store->GetVolume(id_or_name);
  if (!v && v.error().code == Errc::kNotFound) return Fail(Errc::kNotFound, "no volume " + id_or_name);
  if (v && v->state != "ready") return Fail(Errc::kNotFound, "no volume " + id_or_name + " (it is " + v->state + ")");
  return v;
}

namespace {

// Ids of the sandboxes (failed ones aside) whose spec names the volume.
Result<std::vector<std::string>> UsersOf(store::Store& store, const std::string& volume_id,
                                         bool include_failed) {
  auto recs = store.ListSandboxes();
  if (!recs) return tl::unexpected(recs.error());
  std::vector<std::string> users;
  for (const auto& rec : *recs) {
    if (!include_failed && (rec.state == "error" || rec.state == "deleted")) continue;
    const Json* vols = JsonField(rec.spec, "volumes");
    if (!vols || !vols->is_array()) continue;
    for (const auto& v : *vols) {
      if (JsonStringOr(v, "id", "") == volume_id) {
        users.push_back(rec.id);
        break;
      }
    }
  }
  return users;
}

}  // namespace

Result<Json> Platform::VolumeUsage(const std::string& id_or_name) {
  auto v = GetVolume(id_or_name);
  if (!v) return tl::unexpected(v.error());
  auto users = UsersOf(*impl_->store, v->id, false);
  if (!users) return tl::unexpected(users.error());
  Json out = {{"size_bytes", v->size_bytes}, {"sandboxes", *users}};
  struct statvfs sv;
  const std::string mnt = impl_->VolumeDir(v->id) + "/mnt";
  if (::statvfs(mnt.c_str(), &sv) == 0) {
    out["used_bytes"] = static_cast<int64_t>((sv.f_blocks - sv.f_bfree) * sv.f_frsize);
    out["free_bytes"] = static_cast<int64_t>(sv.f_bavail * sv.f_frsize);
  }
  return out;
}

Status Platform::DeleteVolume(const std::string& id_or_name) {
  std::unique_lock vl(impl_->volumes_mu);
  auto v = GetVolume(id_or_name);
  if (!v) return tl::unexpected(v.error());
  auto users = UsersOf(*impl_->store, v->id, false);
  if (!users) return tl::unexpected(users.error());
  if (!users->empty()) {
    std::string list;
    for (const auto& u : *users) list += (list.empty() ? "" : ", ") + u;
    return Fail(Errc::kConflict, "volume " + v->name + " is mounted by sandbox " + list +
                                     "; delete those sandboxes first");
  }
  v->state = "deleting";
  SPACE_TRY(impl_->store->PutVolume(*v));
  SPACE_TRY_WRAP(RemoveVolumeDir(impl_->VolumeDir(v->id)), "delete volume " + v->name);
  SPACE_TRY(impl_->store->DeleteVolume(v->id));
  spdlog::info("volume {} ({}) deleted", v->name, v->id);
  return Ok();
}

Result<std::pair<Json, std::string>> Platform::VolumeFileOp(const std::string& id_or_name,
                                                            const std::string& op, const Json& req,
                                                            std::string_view body) {
  if (!agent::FileService::IsFileOp(op)) return Fail(Errc::kInvalidArgument, "unknown file op " + op);
  std::shared_lock vl(impl_->volumes_mu);  // the volume is not deleted under the operation
  auto v = GetVolume(id_or_name);
  if (!v) return tl::unexpected(v.error());
  const std::string mnt = impl_->VolumeDir(v->id) + "/mnt";
  if (!sys::IsMountPoint(mnt)) return Fail(Errc::kUnavailable, "volume " + v->name + " is not mounted");
  if (op == "write" || op == "mkdir" || op == "rename") SPACE_TRY(impl_->AdmitDisk("write to a volume"));
  // The root is opened as spaced (DATA/volumes is spaced's alone); everything below it
  // as the sandboxes' root.
  auto fs = agent::FileService::Open(mnt);
  if (!fs) return tl::unexpected(fs.error());
  FsIdentity as_root_inside(config_.uid_shift, config_.uid_shift);
  auto r = fs->Handle(op, req, body);
  if (!r && (r.error().sys_errno == ENOSPC || r.error().sys_errno == EDQUOT))
    return Fail(Errc::kInsufficientStorage,
                "volume " + v->name + " is full (its quota is " + std::to_string(v->size_bytes) +
                    " bytes): " + r.error().message);
  if (!r) return tl::unexpected(r.error());
  Json& j = r->json;
  j.erase("ok");
  if (j.contains("entry")) UnshiftIds(j["entry"], config_.uid_shift);
  if (j.contains("entries") && j["entries"].is_array())
    for (auto& e : j["entries"]) UnshiftIds(e, config_.uid_shift);
  return std::make_pair(std::move(j), std::move(r->body));
}

Status Platform::CheckVolumeMounts(const std::vector<VolumeMount>& mounts) {
  return impl_->ResolveVolumes(mounts, nullptr, /*any_runtime=*/true).map([](Json) {});
}

Result<Json> Platform::Impl::ResolveVolumes(const std::vector<VolumeMount>& mounts,
                                            runtime::Runtime* rt, bool any_runtime) {
  Json out = Json::array();
  if (mounts.empty()) return out;
  if (!any_runtime && (!rt || !rt->Caps().volumes))
    return Fail(Errc::kInvalidArgument, "the " + std::string(rt ? rt->Name() : "?") +
                                            " runtime cannot mount volumes (use runtime oci)");
  if (mounts.size() > kMaxVolumesPerSandbox)
    return Fail(Errc::kInvalidArgument, "at most 16 volumes per sandbox");
  std::vector<std::string> paths;
  for (const auto& m : mounts) {
    SPACE_TRY(ValidateMountPath(m.path));
    for (const auto& p : paths)
      if (Overlaps(p, m.path))
        return Fail(Errc::kInvalidArgument, "volume paths " + p + " and " + m.path + " overlap");
    paths.push_back(m.path);
    auto v = store->GetVolume(m.volume);
    if (!v || v->state != "ready") {
      if (!v && v.error().code != Errc::kNotFound) return tl::unexpected(v.error());
      return Fail(Errc::kNotFound, "no volume " + m.volume);
    }
    out.push_back({{"id", v->id},
                   {"name", v->name},
                   {"path", m.path},
                   {"read_only", m.read_only},
                   {"host_path", VolumeDir(v->id) + "/mnt"}});
  }
  return out;
}

Status Platform::Impl::RefuseWithVolumes(const store::SandboxRecord& rec, const std::string& what) {
  const Json* vols = JsonField(rec.spec, "volumes");
  auto* rt = RuntimeFor(rec);
  if (!vols || !vols->is_array() || vols->empty() || !rt || rt->Caps().snapshot_with_volumes) return Ok();
  std::string names;
  for (const auto& v : *vols) names += (names.empty() ? "" : ", ") + JsonStringOr(v, "name", "?");
  return Fail(Errc::kConflict, "sandbox " + rec.id + " mounts volumes (" + names + ") and cannot be " +
                                   what + ": the " + rec.runtime +
                                   " runtime cannot save a VM's memory while it shares volumes "
                                   "(virtiofs); pause keeps it in memory (docs/volumes.md)");
}

void Platform::Impl::RecoverVolumes() {
  std::unique_lock vl(volumes_mu);
  std::set<std::string> known;
  if (auto vols = store->ListVolumes()) {
    for (auto& v : *vols) {
      const std::string dir = VolumeDir(v.id);
      if (v.state != "ready") {
        // An interrupted create or delete: either way the volume goes.
        spdlog::info("recovery: volume {} ({}) was {}: removing it", v.name, v.id, v.state);
        if (RemoveVolumeDir(dir)) (void)store->DeleteVolume(v.id);
        continue;
      }
      known.insert(v.id);
      // After a reboot the loop mount is gone; after a daemon restart it is still there.
      if (auto st = MountVolume(dir); !st)
        spdlog::error("recovery: volume {} ({}): {}", v.name, v.id, st.error().message);
    }
  }
  const std::string root = config.data_dir + "/volumes";
  if (DIR* d = ::opendir(root.c_str())) {
    std::vector<std::string> orphans;
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != ".." && !known.count(n)) orphans.push_back(n);
    }
    ::closedir(d);
    for (const auto& n : orphans) {
      spdlog::info("recovery: removing orphan volume directory {}", n);
      (void)RemoveVolumeDir(root + "/" + n);
    }
  }
}

}  // namespace space::core
