// microvm: the runtime's lifecycle — start, destroy, inspect, snapshots, suspend and wake.
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

MicrovmRuntime::~MicrovmRuntime() {
  {
    std::lock_guard lock(pool_mu_);
    pool_stop_ = true;
  }
  pool_cv_.notify_all();
  if (pool_thread_.joinable()) pool_thread_.join();
  for (auto& [key, vms] : pool_) {
    for (auto& vm : vms) DiscardPooled(vm.slot);
  }
}

Status MicrovmRuntime::Init() {
  for (const char* d : {"", "/images", "/templates", "/vms", "/snapshots", "/tmp"}) {
    SPACE_TRY(sys::MkdirAll(opts_.state_dir + d, 0711));
    ::chmod((opts_.state_dir + d).c_str(), 0711);
  }
  // Every ancestor must be searchable by the VMs' uids (they reopen their disks).
  for (std::string p = opts_.state_dir; p.size() > 1; p = p.substr(0, p.rfind('/'))) {
    struct stat st;
    if (::stat(p.c_str(), &st) == 0 && !(st.st_mode & S_IXOTH)) ::chmod(p.c_str(), st.st_mode | S_IXOTH);
    if (p.rfind('/') == 0) break;
  }
  (void)sys::RemoveAll(opts_.state_dir + "/tmp");
  (void)sys::MkdirAll(opts_.state_dir + "/tmp", 0711);
  hierarchies_ = sys::CgroupHierarchies();
  // Restore-pool VMs of an earlier run (spaced was killed): their connections are gone.
  if (auto all = ListDir(opts_.state_dir + "/vms", /*hidden=*/true)) {
    for (const auto& slot : *all) {
      struct stat st;
      if (!StartsWith(slot, kPoolPrefix) || ::lstat(VmDir(slot).c_str(), &st) != 0) continue;
      if (S_ISDIR(st.st_mode)) {
        DiscardPooled(slot);
      } else if (S_ISLNK(st.st_mode) && !sys::Exists(VmDir(slot) + "/vm.json")) {
        ::unlink(VmDir(slot).c_str());  // the link of a taken VM that is gone
      }
    }
  }
  if (!sys::Exists(opts_.kernel)) {
    unavailable_ = "guest kernel " + opts_.kernel +
                   " is missing (install linux-image-cloud-amd64 and rebuild)";
  } else if (!sys::Exists(opts_.initrd)) {
    unavailable_ = "guest initramfs " + opts_.initrd + " is missing (rebuild SPACE)";
  } else {
    sys::SpawnOptions o;
    o.argv = {opts_.qemu_binary, "--version"};
    auto r = sys::Run(o, 10000);
    if (!r || !r->ok()) unavailable_ = "QEMU (" + opts_.qemu_binary + ") is not installed";
  }
  if (!unavailable_.empty()) spdlog::warn("microvm runtime unavailable: {}", unavailable_);
  if (opts_.accel != "auto" && opts_.accel != "kvm" && opts_.accel != "tcg")
    return Fail(Errc::kInvalidArgument, "microvm acceleration must be auto, kvm or tcg");
  tsc_khz_ = HostTscKhz();
  if (unavailable_.empty() && opts_.template_snapshots && opts_.restore_pool > 0)
    pool_thread_ = std::thread([this] { PoolLoop(); });
  return Ok();
}

Capabilities MicrovmRuntime::Caps() const {
  Capabilities c;
  c.pause = true;
  c.pause_keeps_memory = true;
  c.suspend_keeps_processes = true;
  c.snapshot_kinds = {"full"};
  c.own_disk = true;
  c.network = true;
  c.network_tap = true;
  c.volumes = VolumesUnavailable().empty();
  // Memory cannot be saved while virtiofs shares volumes (VmConfig::volumes).
  c.snapshot_with_volumes = false;
  return c;
}

Result<Runtime::Usage> MicrovmRuntime::ResourceUsage(const std::string& id) {
  if (!ValidName(id)) return Fail(Errc::kInvalidArgument, "bad instance id " + id);
  const std::string dir = VmDir(id);
  if (!sys::Exists(dir + "/vm.json")) return Fail(Errc::kNotFound, "no microvm instance " + id);
  Usage u;
  struct stat st {};
  if (::stat((dir + "/disk.qcow2").c_str(), &st) == 0) u.disk_bytes = static_cast<int64_t>(st.st_blocks) * 512;
  pid_t pid = Pid(id);
  if (!PidAlive(pid, Marker(id))) return u;  // stopped (suspended): no CPU or memory in use
  const std::string proc = "/proc/" + std::to_string(pid);
  if (auto stat = sys::ReadFile(proc + "/stat")) {
    // Fields after "(comm)": state is the 3rd field; utime and stime the 14th and 15th.
    size_t close = stat->rfind(')');
    if (close != std::string::npos) {
      std::vector<std::string> f;
      size_t pos = close + 2;
      while (pos < stat->size() && f.size() < 13) {
        size_t sp = stat->find(' ', pos);
        if (sp == std::string::npos) sp = stat->size();
        f.push_back(stat->substr(pos, sp - pos));
        pos = sp + 1;
      }
      if (f.size() >= 13) {
        const long hz = ::sysconf(_SC_CLK_TCK);
        const int64_t ticks = std::strtoll(f[11].c_str(), nullptr, 10) + std::strtoll(f[12].c_str(), nullptr, 10);
        if (hz > 0) u.cpu_ns = ticks * (1000000000ll / hz);
      }
    }
  }
  if (auto status = sys::ReadFile(proc + "/status")) {
    size_t pos = status->find("VmRSS:");
    if (pos != std::string::npos) u.memory_bytes = std::strtoll(status->c_str() + pos + 6, nullptr, 10) * 1024;
  }
  return u;
}

std::map<std::string, int64_t> MicrovmRuntime::ReadyPoolSizes() const {
  std::lock_guard lock(pool_mu_);
  std::map<std::string, int64_t> out;
  // Keyed by the template snapshot's directory name (its path's last component).
  for (const auto& [tpl, vms] : pool_) out[tpl.substr(tpl.rfind('/') + 1)] += static_cast<int64_t>(vms.size());
  return out;
}

Status MicrovmRuntime::Start(const InstanceSpec& spec) {
  SPACE_TRY(Available());
  if (!ValidName(spec.id)) return Fail(Errc::kInvalidArgument, "bad instance id " + spec.id);
  const GuestNet net = GuestNet::FromSpec(spec);
  if (spec.network && !net.enabled())
    return Fail(Errc::kInvalidArgument, "microvm: a networked sandbox needs a tap in its namespace");
  const std::string dir = VmDir(spec.id);
  if (sys::Exists(dir)) return Fail(Errc::kConflict, "microvm instance " + spec.id + " exists");
  // Volumes need a cold boot: a saved VM (template snapshot, pool VM, full snapshot) has no
  // virtiofs device and private memory, and its kernel found its devices long ago.
  const bool with_volumes = !spec.volumes.empty();
  if (with_volumes && !spec.snapshot_id.empty())
    return Fail(Errc::kInvalidArgument, "microvm snapshot " + spec.snapshot_id +
                                            " holds a VM's memory, which cannot gain volumes "
                                            "(a virtiofs device cannot be added to a saved VM)");
  if (with_volumes) {
    if (std::string why = VolumesUnavailable(); !why.empty()) return Fail(Errc::kUnavailable, why);
  }
  auto accel = Accel();
  if (!accel) return tl::unexpected(accel.error());
  VmConfig cfg;
  cfg.accel = *accel;
  cfg.hostname = spec.hostname.empty() ? "sandbox" : spec.hostname;
  cfg.mem_mib = spec.limits.memory_bytes > 0 ? std::max<int64_t>(spec.limits.memory_bytes >> 20, 64)
                                             : kDefaultMemMiB;
  cfg.cpus = std::clamp(static_cast<int>(std::ceil(spec.limits.cpus > 0 ? spec.limits.cpus : 1.0)), 1, 64);
  Launch launch;
  std::string disk_src;  // qcow2 to copy, or "" for a new overlay on `image`
  std::string image;
  std::string pool_tpl;  // the template snapshot whose restore pool to refill afterwards
  if (!spec.snapshot_id.empty()) {
    std::string sdir = SnapshotDir(spec.snapshot_id);
    auto meta = sys::ReadFile(sdir + "/meta.json");
    if (!ValidName(spec.snapshot_id) || !meta)
      return Fail(Errc::kNotFound, "microvm snapshot " + spec.snapshot_id + " is missing");
    auto mj = ParseJson(*meta);
    if (!mj) return Fail(Errc::kInvalidArgument, "microvm snapshot " + spec.snapshot_id + ": corrupt meta.json");
    cfg.mem_mib = JsonIntOr(*mj, "mem_mib", cfg.mem_mib);
    cfg.cpus = static_cast<int>(JsonIntOr(*mj, "cpus", cfg.cpus));
    cfg.nic = JsonBoolOr(*mj, "nic", false);
    if (net.enabled() && !cfg.nic)
      return Fail(Errc::kInvalidArgument, "microvm snapshot " + spec.snapshot_id +
                                              " was taken before guest networking (its VM has no "
                                              "network device): start it with network mode none");
    disk_src = sdir + "/disk.qcow2";
    launch.incoming_state = sdir + "/state";
  } else {
    if (spec.template_dir.empty() || spec.template_digest.empty())
      return Fail(Errc::kInvalidArgument, "microvm: no template to build the disk from");
    auto img = EnsureImage(spec.template_dir, spec.template_digest, spec.limits.disk_bytes);
    if (!img) return tl::unexpected(std::move(img.error()).Wrap("template disk image"));
    image = *img;
    if (opts_.template_snapshots && !with_volumes) {
      auto tpl = EnsureTemplateSnapshot(image, spec.template_digest, cfg);
      // Pool VMs are restored ahead of time with no network backend: a networked sandbox
      // restores the template snapshot itself, onto its tap.
      if (tpl && opts_.restore_pool > 0 && !net.enabled()) {
        pool_tpl = *tpl;
        if (auto vm = TakePooled(*tpl)) {
          auto st = StartPooled(std::move(*vm), spec.id, cfg.hostname);
          WantPool(*tpl, cfg);
          if (st) return Ok();
          spdlog::warn("microvm {}: pooled VM failed, restoring instead: {}", spec.id, st.error().message);
        }
      }
      if (tpl) {
        disk_src = *tpl + "/disk.qcow2";
        launch.mem_file = *tpl + "/mem";
        launch.mem_shared = false;
        launch.incoming_state = *tpl + "/state";
        launch.ignore_shared = true;
      } else {
        spdlog::warn("microvm: template snapshot unavailable, booting cold: {}", tpl.error().message);
      }
    }
  }
  auto uid = AllocateUid(spec.id);
  if (!uid) return tl::unexpected(uid.error());
  cfg.uid = *uid;
  cfg.net = net;
  cfg.volumes = spec.volumes;
  // The guest's resolv.conf and the files the network asks for (e.g. the trust bundle with
  // the sandbox's CA), written by the agent at the first sync.
  std::map<std::string, std::string> files = spec.files;
  if (net.enabled() && !spec.resolv_conf.empty()) files["/etc/resolv.conf"] = spec.resolv_conf;
  launch.files = &files;
  sys::UniqueFd tap;
  auto st = [&]() -> Status {
    if (net.enabled()) {
      auto t = OpenTap(net);
      if (!t) return tl::unexpected(std::move(t.error()).Wrap("microvm network"));
      tap = std::move(*t);
      launch.tap_fd = tap.get();
    }
    SPACE_TRY(sys::MkdirAll(dir, 0711));
    SPACE_TRY(sys::WriteFileAtomic(dir + "/vm.json", cfg.ToJson().dump(), 0644));
    if (!disk_src.empty()) {
      SPACE_TRY_WRAP(CopySparse(disk_src, dir + "/disk.qcow2"), "copy disk");
    } else {
      SPACE_TRY(CreateOverlay(image, dir + "/disk.qcow2"));
    }
    SPACE_TRY(ChownToVm(dir + "/disk.qcow2", cfg.uid));
    if (with_volumes) SPACE_TRY_WRAP(StartVirtiofsd(spec.id, cfg), "volumes");
    return Boot(spec.id, cfg, launch, /*sync=*/true);
  }();
  if (!st) {
    (void)Destroy(spec.id);
    return st;
  }
  if (!pool_tpl.empty()) WantPool(pool_tpl, cfg);
  return Ok();
}

Status MicrovmRuntime::Destroy(const std::string& id) {
  if (!ValidName(id)) return Fail(Errc::kInvalidArgument, "bad instance id " + id);
  std::string marker = Marker(id);
  SPACE_TRY(Kill(id));
  SPACE_TRY(StopVirtiofsd(id));
  ReleaseCgroup(marker);
  // A VM taken from the pool left a link at its slot's name (StartPooled).
  if (StartsWith(marker, std::string("space-vm-") + kPoolPrefix)) {
    std::string slot = VmDir(marker.substr(9));
    struct stat st;
    if (::lstat(slot.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) ::unlink(slot.c_str());
  }
  return sys::RemoveAll(VmDir(id));
}

Result<InstanceState> MicrovmRuntime::Inspect(const std::string& id) {
  if (!ValidName(id)) return Fail(Errc::kInvalidArgument, "bad instance id " + id);
  const std::string dir = VmDir(id);
  if (!sys::Exists(dir + "/vm.json")) return InstanceState::kMissing;
  if (!PidAlive(Pid(id), Marker(id))) return InstanceState::kStopped;
  auto q = QmpClient::Connect(dir + "/qmp.sock", 5000);
  if (!q) return InstanceState::kStopped;
  auto r = q->Execute("query-status", Json(), 5000);
  if (!r) return InstanceState::kStopped;
  return JsonBoolOr(*r, "running", false) ? InstanceState::kRunning : InstanceState::kPaused;
}

Status MicrovmRuntime::Snapshot(const std::string& id, const std::string& snapshot_id) {
  if (!ValidName(id) || !ValidName(snapshot_id))
    return Fail(Errc::kInvalidArgument, "bad instance or snapshot id");
  const std::string dir = VmDir(id);
  auto cfgj = sys::ReadFile(dir + "/vm.json");
  if (!cfgj) return Fail(Errc::kNotFound, "no microvm instance " + id);
  VmConfig cfg = VmConfig::FromJson(ParseJson(*cfgj).value_or(Json::object()));
  SPACE_TRY(RefuseWithVolumes(id, cfg, "snapshotted with its memory"));
  const std::string final_dir = SnapshotDir(snapshot_id);
  if (sys::Exists(final_dir)) return Fail(Errc::kConflict, "snapshot " + snapshot_id + " exists");
  const std::string tmp = opts_.state_dir + "/snapshots/.tmp-" + snapshot_id;
  (void)sys::RemoveAll(tmp);
  SPACE_TRY(sys::MkdirAll(tmp, 0700));
  auto st = [&]() -> Status {
    if (cfg.suspended) {
      SPACE_TRY(CopySparse(dir + "/suspend.state", tmp + "/state"));
      SPACE_TRY(CopySparse(dir + "/disk.qcow2", tmp + "/disk.qcow2"));
    } else {
      auto q = QmpClient::Connect(dir + "/qmp.sock", 5000);
      if (!q) return tl::unexpected(q.error());
      auto status = q->Execute("query-status");
      if (!status) return tl::unexpected(status.error());
      bool was_running = JsonBoolOr(*status, "running", false);
      if (was_running) SPACE_TRY(q->Execute("stop").map([](auto&&) {}));
      auto saved = SaveState(*q, tmp + "/state", false);
      // The disk is consistent while QEMU holds the guest stopped (it flushed on stop).
      Status copied = saved ? CopySparse(dir + "/disk.qcow2", tmp + "/disk.qcow2") : saved;
      if (was_running) {
        if (auto c = q->Execute("cont"); !c && copied) copied = tl::unexpected(c.error());
      }
      SPACE_TRY(copied);
    }
    Json meta = {{"mem_mib", cfg.mem_mib}, {"cpus", cfg.cpus}, {"nic", cfg.nic}, {"source", id},
                 {"created_ms", NowUnixMillis()}};
    SPACE_TRY(sys::WriteFileAtomic(tmp + "/meta.json", meta.dump(), 0600));
    if (::rename(tmp.c_str(), final_dir.c_str()) != 0) return ErrnoFail("rename snapshot");
    return Ok();
  }();
  if (!st) (void)sys::RemoveAll(tmp);
  return st;
}

Result<int64_t> MicrovmRuntime::SnapshotSize(const std::string& snapshot_id) const {
  if (!HasSnapshot(snapshot_id)) return Fail(Errc::kNotFound, "no snapshot " + snapshot_id);
  int64_t total = 0;
  for (const char* f : {"/state", "/disk.qcow2", "/meta.json"}) {
    struct stat st;
    if (::stat((SnapshotDir(snapshot_id) + f).c_str(), &st) == 0) total += st.st_blocks * 512;
  }
  return total;
}

Status MicrovmRuntime::Suspend(const std::string& id) {
  if (!ValidName(id)) return Fail(Errc::kInvalidArgument, "bad instance id " + id);
  const std::string dir = VmDir(id);
  auto cfgj = sys::ReadFile(dir + "/vm.json");
  if (!cfgj) return Fail(Errc::kNotFound, "no microvm instance " + id);
  VmConfig cfg = VmConfig::FromJson(ParseJson(*cfgj).value_or(Json::object()));
  if (cfg.suspended) return Ok();
  SPACE_TRY(RefuseWithVolumes(id, cfg, "suspended"));
  auto q = QmpClient::Connect(dir + "/qmp.sock", 5000);
  if (!q) return tl::unexpected(q.error());
  SPACE_TRY(q->Execute("stop").map([](auto&&) {}));
  auto st = SaveState(*q, dir + "/suspend.state.tmp", false);
  if (!st) {
    (void)q->Execute("cont");
    return st;
  }
  if (::rename((dir + "/suspend.state.tmp").c_str(), (dir + "/suspend.state").c_str()) != 0)
    return ErrnoFail("rename suspend state");
  cfg.suspended = true;
  SPACE_TRY(sys::WriteFileAtomic(dir + "/vm.json", cfg.ToJson().dump(), 0644));
  (void)q->Execute("quit");
  return Kill(id);
}

Status MicrovmRuntime::Wake(const InstanceSpec& spec) {
  SPACE_TRY(Available());
  const std::string dir = VmDir(spec.id);
  auto cfgj = sys::ReadFile(dir + "/vm.json");
  if (!ValidName(spec.id) || !cfgj) return Fail(Errc::kNotFound, "no microvm instance " + spec.id);
  VmConfig cfg = VmConfig::FromJson(ParseJson(*cfgj).value_or(Json::object()));
  if (!cfg.suspended || !sys::Exists(dir + "/suspend.state"))
    return Fail(Errc::kConflict, "microvm instance " + spec.id + " is not suspended");
  Launch launch;
  launch.incoming_state = dir + "/suspend.state";
  // The network may have been re-made while the VM slept (a restart of spaced): the tap
  // is opened afresh, and the guest told its address again.
  const GuestNet net = GuestNet::FromSpec(spec);
  if (net.enabled() && !cfg.nic)
    return Fail(Errc::kInvalidArgument, "microvm instance " + spec.id + " has no network device");
  cfg.net = net;
  sys::UniqueFd tap;
  if (net.enabled()) {
    auto t = OpenTap(net);
    if (!t) return tl::unexpected(std::move(t.error()).Wrap("microvm network"));
    tap = std::move(*t);
    launch.tap_fd = tap.get();
  }
  auto st = Boot(spec.id, cfg, launch, true);
  if (!st) {
    (void)Kill(spec.id);  // keeps the saved state for another try
    return st;
  }
  cfg.suspended = false;
  (void)sys::WriteFileAtomic(dir + "/vm.json", cfg.ToJson().dump(), 0644);
  (void)::unlink((dir + "/suspend.state").c_str());
  return Ok();
}

std::string MicrovmRuntime::Marker(const std::string& id) const {
  if (auto j = sys::ReadFile(VmDir(id) + "/vm.json")) {
    std::string m = VmConfig::FromJson(ParseJson(*j).value_or(Json::object())).marker;
    if (!m.empty()) return m;
  }
  return "space-vm-" + id;
}

Result<std::vector<std::string>> MicrovmRuntime::ListDir(const std::string& path, bool hidden) {
  std::vector<std::string> out;
  DIR* d = ::opendir(path.c_str());
  if (!d) return errno == ENOENT ? Result<std::vector<std::string>>(out) : ErrnoFail("list " + path);
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != ".." && (hidden || n[0] != '.')) out.push_back(n);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

Status MicrovmRuntime::Qmp(const std::string& id, const std::string& cmd) {
  if (!ValidName(id)) return Fail(Errc::kInvalidArgument, "bad instance id " + id);
  auto q = QmpClient::Connect(VmDir(id) + "/qmp.sock", 5000);
  if (!q) return tl::unexpected(std::move(q.error()).Wrap("microvm " + id));
  auto r = q->Execute(cmd);
  if (!r) return tl::unexpected(r.error());
  return Ok();
}

Status MicrovmRuntime::Kill(const std::string& id) {
  pid_t pid = Pid(id);
  if (!PidAlive(pid, Marker(id))) return Ok();
  ::kill(pid, SIGKILL);
  for (int i = 0; i < 400; ++i) {
    if (!PidAlive(pid, Marker(id))) return Ok();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return Fail(Errc::kInternal, "QEMU " + std::to_string(pid) + " of " + id + " did not exit");
}

Result<uint32_t> MicrovmRuntime::AllocateUid(const std::string& id) {
  if (opts_.vm_uid_base == 0) return 0u;
  std::lock_guard lock(uid_mu_);
  std::set<uint32_t> used(reserved_uids_.begin(), reserved_uids_.end());
  if (auto ids = ListDir(opts_.state_dir + "/vms", /*hidden=*/true)) {  // pool VMs too
    for (const auto& other : *ids) {
      auto j = sys::ReadFile(VmDir(other) + "/vm.json");
      if (j) used.insert(VmConfig::FromJson(ParseJson(*j).value_or(Json::object())).uid);
    }
  }
  for (uint32_t u = opts_.vm_uid_base; u < opts_.vm_uid_base + 65536; ++u) {
    if (!used.count(u)) {
      reserved_uids_.insert(u);
      // Reserved until vm.json records it (a moment later).
      std::thread([this, u] {
        std::this_thread::sleep_for(std::chrono::seconds(5));
        std::lock_guard l(uid_mu_);
        reserved_uids_.erase(u);
      }).detach();
      return u;
    }
  }
  return Fail(Errc::kResourceExhausted, "no free VM uid for " + id);
}

}  // namespace space::runtime::microvm

namespace space::runtime {

Result<std::unique_ptr<Runtime>> CreateMicrovmRuntime(const MicrovmOptions& opts) {
  if (opts.state_dir.empty() || opts.state_dir[0] != '/')
    return Fail(Errc::kInvalidArgument, "microvm state dir must be absolute");
  auto rt = std::make_unique<microvm::MicrovmRuntime>(opts);
  SPACE_TRY(rt->Init());
  return std::unique_ptr<Runtime>(std::move(rt));
}

}  // namespace space::runtime
