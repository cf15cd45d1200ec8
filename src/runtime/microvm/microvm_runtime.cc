#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sodium.h>
#include <spdlog/spdlog.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "agent/protocol.h"
#include "common/json.h"
#include "runtime/microvm/microvm.h"
#include "runtime/microvm/qmp.h"
#include "sys/sys.h"

namespace space::runtime {
namespace {

using microvm::QmpClient;

constexpr uint64_t kImageBytes = 4ull << 30;  // guest root disk (sparse)
constexpr int64_t kDefaultMemMiB = 512;

bool ValidName(const std::string& s) {
  if (s.empty() || s.size() > 128) return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') return false;
  }
  return s[0] != '.';
}

std::string Fnv64(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::string FileIdentity(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return path + ":missing";
  return path + ":" + std::to_string(st.st_size) + ":" + std::to_string(st.st_mtim.tv_sec) + "." +
         std::to_string(st.st_mtim.tv_nsec);
}

// The last `max` bytes of a file, for error messages.
std::string Tail(const std::string& path, size_t max = 600) {
  auto s = sys::ReadFile(path);
  if (!s || s->empty()) return "";
  std::string t = s->size() > max ? s->substr(s->size() - max) : *s;
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r')) t.pop_back();
  return t;
}

// Host TSC frequency for tsc_early_khz: under TCG the guest kernel otherwise hangs in TSC
// calibration in a good share of boots.
int64_t HostTscKhz() {
  if (auto f = sys::ReadFile("/sys/devices/system/cpu/cpu0/tsc_freq_khz")) {
    int64_t v = std::atoll(f->c_str());
    if (v > 0) return v;
  }
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (StartsWith(line, "cpu MHz")) {
      size_t colon = line.find(':');
      if (colon != std::string::npos) return static_cast<int64_t>(std::atof(line.c_str() + colon + 1) * 1000);
    }
  }
  return 0;
}

bool PidAlive(pid_t pid, const std::string& marker) {
  if (pid <= 0) return false;
  auto stat = sys::ReadFile("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return false;
  size_t rp = stat->rfind(')');
  if (rp != std::string::npos && rp + 2 < stat->size() && (*stat)[rp + 2] == 'Z') return false;
  auto cmd = sys::ReadFile("/proc/" + std::to_string(pid) + "/cmdline");
  return cmd && cmd->find(marker) != std::string::npos;
}

Status CopySparse(const std::string& from, const std::string& to) {
  sys::SpawnOptions o;
  o.argv = {"cp", "--sparse=always", "--reflink=auto", from, to};
  auto r = sys::RunChecked(o, 300000);
  if (!r) return tl::unexpected(r.error());
  return Ok();
}

// Runs argv in a new user namespace where host uids/gids shift..shift+65535 appear as
// 0..65535 and the program runs as that namespace's root, so tools that record ownership
// (mkfs.ext4 -d) see a shifted tree as root's. (util-linux's unshare needs newuidmap for
// such a map; a privileged parent can write it directly.)
Status RunInShiftedUserNs(const std::vector<std::string>& argv, uint32_t shift) {
  std::string exe;
  for (const char* dir : {"/usr/sbin/", "/sbin/", "/usr/bin/", "/bin/"}) {
    if (::access((dir + argv[0]).c_str(), X_OK) == 0) {
      exe = dir + argv[0];
      break;
    }
  }
  if (exe.empty()) return Fail(Errc::kNotFound, argv[0] + " is not installed");
  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  int ready[2], go[2], errp[2];
  if (::pipe2(ready, O_CLOEXEC) != 0 || ::pipe2(go, O_CLOEXEC) != 0 || ::pipe2(errp, O_CLOEXEC) != 0)
    return ErrnoFail("pipe");
  pid_t pid = ::fork();
  if (pid < 0) return ErrnoFail("fork");
  if (pid == 0) {
    // Child: async-signal-safe calls only.
    char c = 0;
    if (::unshare(CLONE_NEWUSER) != 0) ::_exit(120);
    if (::write(ready[1], &c, 1) != 1) ::_exit(121);
    if (::read(go[0], &c, 1) != 1) ::_exit(122);
    if (::setresgid(0, 0, 0) != 0 || ::setresuid(0, 0, 0) != 0) ::_exit(123);
    ::dup2(errp[1], 2);
    ::execv(exe.c_str(), cargv.data());
    ::_exit(127);
  }
  sys::UniqueFd r0(ready[0]), r1(ready[1]), g0(go[0]), g1(go[1]), e0(errp[0]), e1(errp[1]);
  r1.Reset();
  g0.Reset();
  e1.Reset();
  char c;
  bool mapped = false;
  if (::read(r0.get(), &c, 1) == 1) {
    const std::string proc = "/proc/" + std::to_string(pid);
    std::string map = "0 " + std::to_string(shift) + " 65536\n";
    auto write_map = [&](const std::string& file) {
      auto fd = sys::Open(proc + file, O_WRONLY);
      return fd && sys::WriteAll(fd->get(), map).has_value();
    };
    mapped = write_map("/uid_map") && write_map("/gid_map");
    if (mapped) mapped = ::write(g1.get(), "g", 1) == 1;
  }
  g1.Reset();
  auto err = sys::ReadAll(e0.get());
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!mapped) return Fail(Errc::kInternal, "could not map ids into a user namespace for " + argv[0]);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return Fail(Errc::kInternal, argv[0] + " failed (status " + std::to_string(status) + "): " +
                                     (err ? *err : std::string()));
  return Ok();
}

struct VmConfig {
  uint32_t uid = 0;
  int64_t mem_mib = kDefaultMemMiB;
  int cpus = 1;
  std::string accel;
  std::string hostname = "sandbox";
  bool suspended = false;
  std::string marker;  // QEMU's -name; "" = space-vm-<id> (a pooled VM keeps its slot's)
  Json ToJson() const {
    Json j = {{"uid", uid}, {"mem_mib", mem_mib}, {"cpus", cpus}, {"accel", accel},
              {"hostname", hostname}, {"suspended", suspended}};
    if (!marker.empty()) j["marker"] = marker;
    return j;
  }
  static VmConfig FromJson(const Json& j) {
    VmConfig c;
    c.uid = static_cast<uint32_t>(JsonIntOr(j, "uid", 0));
    c.mem_mib = JsonIntOr(j, "mem_mib", kDefaultMemMiB);
    c.cpus = static_cast<int>(JsonIntOr(j, "cpus", 1));
    c.accel = JsonStringOr(j, "accel", "tcg");
    c.hostname = JsonStringOr(j, "hostname", "sandbox");
    c.suspended = JsonBoolOr(j, "suspended", false);
    c.marker = JsonStringOr(j, "marker", "");
    return c;
  }
};

// How a QEMU process gets its memory and initial state.
struct Launch {
  std::string mem_file;        // memory-backend-file path ("" = memory-backend-ram)
  bool mem_shared = false;     // share=on (template boot) / off (copy-on-write clone)
  std::string incoming_state;  // restore from this migration stream ("" = cold boot)
  bool ignore_shared = false;  // x-ignore-shared on the migration
  bool pool = false;           // a restore-pool VM (lower priority; see MakePooled)
};

// A VM of the restore pool: restored from a template snapshot, run once through the
// agent's handshake and a throwaway command (which warms TCG's translation cache for the
// paths every first command takes), then stopped. Its QMP and agent connections stay
// open, so taking it is `cont` + `sync` on connections already made.
struct PoolVm {
  std::string slot;  // vms/<slot>, a dot name (hidden from List) until taken
  pid_t pid = 0;
  QmpClient qmp;
  sys::UniqueFd agent;
};

class MicrovmRuntime final : public Runtime {
 public:
  explicit MicrovmRuntime(MicrovmOptions o) : opts_(std::move(o)) {}

  // The restore pool's VMs belong to no sandbox: they go with the runtime.
  ~MicrovmRuntime() override {
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

  Status Init() {
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

  std::string_view Name() const override { return "microvm"; }

  Capabilities Caps() const override {
    Capabilities c;
    c.pause = true;
    c.pause_keeps_memory = true;
    c.suspend_keeps_processes = true;
    c.snapshot_kinds = {"full"};
    c.own_disk = true;
    return c;
  }

  std::string AgentSocketPath(const std::string& id) const override { return VmDir(id) + "/agent.sock"; }

  // Seen from the host: the VM's QEMU process (CPU time of every vCPU and device thread;
  // resident memory = the guest RAM it has touched plus QEMU's own), and the blocks of its
  // disk overlay (what the guest wrote on top of the template's image). The guest's own
  // view (its free memory, its page cache) is not asked.
  Result<Usage> ResourceUsage(const std::string& id) override {
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

  std::map<std::string, int64_t> ReadyPoolSizes() const override {
    std::lock_guard lock(pool_mu_);
    std::map<std::string, int64_t> out;
    // Keyed by the template snapshot's directory name (its path's last component).
    for (const auto& [tpl, vms] : pool_) out[tpl.substr(tpl.rfind('/') + 1)] += static_cast<int64_t>(vms.size());
    return out;
  }

  Status Start(const InstanceSpec& spec) override {
    SPACE_TRY(Available());
    if (!ValidName(spec.id)) return Fail(Errc::kInvalidArgument, "bad instance id " + spec.id);
    if (spec.network) return Fail(Errc::kInvalidArgument, "the microvm runtime has no guest networking yet");
    const std::string dir = VmDir(spec.id);
    if (sys::Exists(dir)) return Fail(Errc::kConflict, "microvm instance " + spec.id + " exists");
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
      disk_src = sdir + "/disk.qcow2";
      launch.incoming_state = sdir + "/state";
    } else {
      if (spec.template_dir.empty() || spec.template_digest.empty())
        return Fail(Errc::kInvalidArgument, "microvm: no template to build the disk from");
      auto img = EnsureImage(spec.template_dir, spec.template_digest);
      if (!img) return tl::unexpected(std::move(img.error()).Wrap("template disk image"));
      image = *img;
      if (opts_.template_snapshots) {
        auto tpl = EnsureTemplateSnapshot(image, spec.template_digest, cfg);
        if (tpl && opts_.restore_pool > 0) {
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
    auto st = [&]() -> Status {
      SPACE_TRY(sys::MkdirAll(dir, 0711));
      SPACE_TRY(sys::WriteFileAtomic(dir + "/vm.json", cfg.ToJson().dump(), 0644));
      if (!disk_src.empty()) {
        SPACE_TRY_WRAP(CopySparse(disk_src, dir + "/disk.qcow2"), "copy disk");
      } else {
        SPACE_TRY(CreateOverlay(image, dir + "/disk.qcow2"));
      }
      SPACE_TRY(ChownToVm(dir + "/disk.qcow2", cfg.uid));
      return Boot(spec.id, cfg, launch, /*sync=*/true);
    }();
    if (!st) {
      (void)Destroy(spec.id);
      return st;
    }
    if (!pool_tpl.empty()) WantPool(pool_tpl, cfg);
    return Ok();
  }

  Status Pause(const std::string& id) override { return Qmp(id, "stop"); }
  Status Resume(const std::string& id) override { return Qmp(id, "cont"); }

  Status Destroy(const std::string& id) override {
    if (!ValidName(id)) return Fail(Errc::kInvalidArgument, "bad instance id " + id);
    SPACE_TRY(Kill(id));
    // A VM taken from the pool left a link at its slot's name (StartPooled).
    std::string marker = Marker(id);
    if (StartsWith(marker, std::string("space-vm-") + kPoolPrefix)) {
      std::string slot = VmDir(marker.substr(9));
      struct stat st;
      if (::lstat(slot.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) ::unlink(slot.c_str());
    }
    return sys::RemoveAll(VmDir(id));
  }

  Result<InstanceState> Inspect(const std::string& id) override {
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

  Result<std::vector<std::string>> List() override { return ListDir(opts_.state_dir + "/vms"); }

  // --- snapshots, suspend, wake

  Status Snapshot(const std::string& id, const std::string& snapshot_id) override {
    if (!ValidName(id) || !ValidName(snapshot_id))
      return Fail(Errc::kInvalidArgument, "bad instance or snapshot id");
    const std::string dir = VmDir(id);
    auto cfgj = sys::ReadFile(dir + "/vm.json");
    if (!cfgj) return Fail(Errc::kNotFound, "no microvm instance " + id);
    VmConfig cfg = VmConfig::FromJson(ParseJson(*cfgj).value_or(Json::object()));
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
      Json meta = {{"mem_mib", cfg.mem_mib}, {"cpus", cfg.cpus}, {"source", id},
                   {"created_ms", NowUnixMillis()}};
      SPACE_TRY(sys::WriteFileAtomic(tmp + "/meta.json", meta.dump(), 0600));
      if (::rename(tmp.c_str(), final_dir.c_str()) != 0) return ErrnoFail("rename snapshot");
      return Ok();
    }();
    if (!st) (void)sys::RemoveAll(tmp);
    return st;
  }

  Status DeleteSnapshot(const std::string& snapshot_id) override {
    if (!ValidName(snapshot_id)) return Fail(Errc::kInvalidArgument, "bad snapshot id");
    return sys::RemoveAll(SnapshotDir(snapshot_id));
  }
  bool HasSnapshot(const std::string& snapshot_id) const override {
    return ValidName(snapshot_id) && sys::Exists(SnapshotDir(snapshot_id) + "/meta.json");
  }
  std::vector<std::string> ListSnapshots() const override {
    auto l = ListDir(opts_.state_dir + "/snapshots");
    return l ? *l : std::vector<std::string>{};
  }
  Result<int64_t> SnapshotSize(const std::string& snapshot_id) const override {
    if (!HasSnapshot(snapshot_id)) return Fail(Errc::kNotFound, "no snapshot " + snapshot_id);
    int64_t total = 0;
    for (const char* f : {"/state", "/disk.qcow2", "/meta.json"}) {
      struct stat st;
      if (::stat((SnapshotDir(snapshot_id) + f).c_str(), &st) == 0) total += st.st_blocks * 512;
    }
    return total;
  }

  Status Suspend(const std::string& id) override {
    if (!ValidName(id)) return Fail(Errc::kInvalidArgument, "bad instance id " + id);
    const std::string dir = VmDir(id);
    auto cfgj = sys::ReadFile(dir + "/vm.json");
    if (!cfgj) return Fail(Errc::kNotFound, "no microvm instance " + id);
    VmConfig cfg = VmConfig::FromJson(ParseJson(*cfgj).value_or(Json::object()));
    if (cfg.suspended) return Ok();
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

  Status Wake(const InstanceSpec& spec) override {
    SPACE_TRY(Available());
    const std::string dir = VmDir(spec.id);
    auto cfgj = sys::ReadFile(dir + "/vm.json");
    if (!ValidName(spec.id) || !cfgj) return Fail(Errc::kNotFound, "no microvm instance " + spec.id);
    VmConfig cfg = VmConfig::FromJson(ParseJson(*cfgj).value_or(Json::object()));
    if (!cfg.suspended || !sys::Exists(dir + "/suspend.state"))
      return Fail(Errc::kConflict, "microvm instance " + spec.id + " is not suspended");
    Launch launch;
    launch.incoming_state = dir + "/suspend.state";
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

 private:
  std::string VmDir(const std::string& id) const { return opts_.state_dir + "/vms/" + id; }
  std::string SnapshotDir(const std::string& id) const { return opts_.state_dir + "/snapshots/" + id; }
  // The name QEMU runs under (its command line proves a pid is this VM's): space-vm-<id>,
  // or for a VM taken from the restore pool the name of its slot (vm.json says which).
  std::string Marker(const std::string& id) const {
    if (auto j = sys::ReadFile(VmDir(id) + "/vm.json")) {
      std::string m = VmConfig::FromJson(ParseJson(*j).value_or(Json::object())).marker;
      if (!m.empty()) return m;
    }
    return "space-vm-" + id;
  }

  Status Available() const {
    if (!unavailable_.empty()) return Fail(Errc::kUnavailable, "microvm runtime unavailable: " + unavailable_);
    return Ok();
  }

  pid_t Pid(const std::string& id) const {
    auto s = sys::ReadFile(VmDir(id) + "/qemu.pid");
    return s ? static_cast<pid_t>(std::atoi(s->c_str())) : 0;
  }

  static Result<std::vector<std::string>> ListDir(const std::string& path, bool hidden = false) {
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

  Status Qmp(const std::string& id, const std::string& cmd) {
    if (!ValidName(id)) return Fail(Errc::kInvalidArgument, "bad instance id " + id);
    auto q = QmpClient::Connect(VmDir(id) + "/qmp.sock", 5000);
    if (!q) return tl::unexpected(std::move(q.error()).Wrap("microvm " + id));
    auto r = q->Execute(cmd);
    if (!r) return tl::unexpected(r.error());
    return Ok();
  }

  // Kills the instance's QEMU (verified by its command line) and waits for it to go.
  Status Kill(const std::string& id) {
    pid_t pid = Pid(id);
    if (!PidAlive(pid, Marker(id))) return Ok();
    ::kill(pid, SIGKILL);
    for (int i = 0; i < 400; ++i) {
      if (!PidAlive(pid, Marker(id))) return Ok();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return Fail(Errc::kInternal, "QEMU " + std::to_string(pid) + " of " + id + " did not exit");
  }

  // The lowest VM uid no other instance of this runtime uses.
  Result<uint32_t> AllocateUid(const std::string& id) {
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

  Status ChownToVm(const std::string& path, uint32_t uid) {
    if (uid != 0 && ::chown(path.c_str(), uid, uid) != 0) return ErrnoFail("chown " + path);
    return ::chmod(path.c_str(), 0600) == 0 ? Ok() : ErrnoFail("chmod " + path);
  }

  Status CreateOverlay(const std::string& image, const std::string& path) {
    sys::SpawnOptions o;
    o.argv = {"qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", image, path};
    auto r = sys::RunChecked(o, 60000);
    if (!r) return tl::unexpected(std::move(r.error()).Wrap("create disk overlay"));
    return Ok();
  }

  // images/<digest>.ext4, built once per template digest.
  Result<std::string> EnsureImage(const std::string& tree, const std::string& digest) {
    std::string hex = StartsWith(digest, "sha256:") ? digest.substr(7) : digest;
    if (!ValidName(hex)) return Fail(Errc::kInvalidArgument, "bad template digest " + digest);
    const std::string path = opts_.state_dir + "/images/" + hex + ".ext4";
    std::lock_guard lock(KeyMutex("image:" + hex));
    if (sys::Exists(path)) return path;
    const std::string tmp = opts_.state_dir + "/tmp/image-" + hex + ".ext4";
    (void)::unlink(tmp.c_str());
    {
      auto fd = sys::Open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (!fd) return tl::unexpected(fd.error());
      if (::ftruncate(fd->get(), static_cast<off_t>(kImageBytes)) != 0) return ErrnoFail("size image");
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

  std::mutex& KeyMutex(const std::string& key) {
    std::lock_guard lock(keys_mu_);
    auto& m = key_mutexes_[key];
    if (!m) m = std::make_unique<std::mutex>();
    return *m;
  }

  // templates/<key>/: boots the template once, waits for its agent, saves it with RAM in
  // a shared file; later instances restore it copy-on-write.
  Result<std::string> EnsureTemplateSnapshot(const std::string& image, const std::string& digest,
                                             const VmConfig& want) {
    std::string key = Fnv64(digest + "|" + std::to_string(want.mem_mib) + "|" +
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

  // Saves the (stopped) VM's state into `path` through a descriptor the daemon opened.
  Status SaveState(QmpClient& q, const std::string& path, bool ignore_shared) {
    auto fd = sys::Open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (!fd) return tl::unexpected(fd.error());
    SPACE_TRY(q.Execute("migrate-set-capabilities",
                        {{"capabilities", Json::array({{{"capability", "x-ignore-shared"},
                                                        {"state", ignore_shared}}})}})
                  .map([](auto&&) {}));
    SPACE_TRY(q.Execute("migrate-set-parameters", {{"max-bandwidth", 100ll << 30}}).map([](auto&&) {}));
    SPACE_TRY(q.SendFd("snap", fd->get()));
    SPACE_TRY(q.Execute("migrate", {{"uri", "fd:snap"}}).map([](auto&&) {}));
    SPACE_TRY(WaitMigration(q, "save"));
    if (::fsync(fd->get()) != 0) return ErrnoFail("fsync " + path);
    return Ok();
  }

  Status WaitMigration(QmpClient& q, const std::string& what) {
    const int64_t deadline = MonotonicNanos() + 120'000'000'000;
    for (;;) {
      auto r = q.Execute("query-migrate");
      if (!r) return tl::unexpected(r.error());
      std::string status = JsonStringOr(*r, "status", "");
      if (status == "completed") return Ok();
      if (status == "failed" || status == "cancelled")
        return Fail(Errc::kInternal, "microvm " + what + " failed: " +
                                         JsonStringOr(*r, "error-desc", status));
      if (MonotonicNanos() > deadline) return Fail(Errc::kDeadlineExceeded, "microvm " + what + " timed out");
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }

  std::vector<std::string> QemuArgs(const std::string& id, const VmConfig& cfg, const Launch& l) {
    const std::string dir = VmDir(id);
    std::string append =
        "console=ttyS0 reboot=t panic=-1 quiet tsc=reliable no_timer_check cryptomgr.notests "
        "random.trust_cpu=on i8042.noaux i8042.nokbd i8042.nopnp i8042.dumbkbd mitigations=off "
        "nokaslr audit=0 8250.nr_uarts=1 SPACE_HOSTNAME=" + cfg.hostname;
    if (tsc_khz_ > 0) append += " tsc_early_khz=" + std::to_string(tsc_khz_);
    std::string mem = std::to_string(cfg.mem_mib) + "M";
    std::string backend = l.mem_file.empty()
                              ? "memory-backend-ram,id=mem0,size=" + mem
                              : "memory-backend-file,id=mem0,size=" + mem + ",mem-path=" + l.mem_file +
                                    ",share=" + (l.mem_shared ? "on" : "off");
    std::vector<std::string> a = {
        opts_.qemu_binary, "-name", cfg.marker.empty() ? "space-vm-" + id : cfg.marker,
        "-M", "microvm,x-option-roms=off,rtc=on,memory-backend=mem0",
        "-accel", cfg.accel, "-smp", std::to_string(cfg.cpus), "-m", mem,
        "-object", backend,
        "-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
        "-serial", "file:" + dir + "/console.log",
        "-kernel", opts_.kernel, "-initrd", opts_.initrd, "-append", append,
        "-drive", "if=none,id=root,file=" + dir + "/disk.qcow2,format=qcow2,discard=unmap",
        "-device", "virtio-blk-device,drive=root",
        "-device", "virtio-serial-device",
        "-chardev", "socket,id=agent,path=" + dir + "/agent.sock,server=on,wait=off",
        "-device", "virtserialport,chardev=agent,name=space.0",
        "-qmp", "unix:" + dir + "/qmp.sock,server=on,wait=off",
        "-device", "vmgenid,guid=auto",
        "-pidfile", dir + "/qemu.pid",
        "-sandbox", "on,obsolete=deny,resourcecontrol=deny",
    };
    if (cfg.accel == "kvm") a.insert(a.end(), {"-cpu", "host"});
    if (cfg.uid != 0) a.insert(a.end(), {"-runas", std::to_string(cfg.uid) + ":" + std::to_string(cfg.uid)});
    if (!l.incoming_state.empty()) a.insert(a.end(), {"-incoming", "defer"});
    // A restore-pool VM is made in the background: at a lower priority than running VMs.
    if (l.pool) a.insert(a.begin(), {"nice", "-n", "10"});
    return a;
  }

  // What Boot leaves open for a caller that asks (the template and restore-pool VMs).
  struct Handles {
    pid_t pid = 0;
    QmpClient qmp;
    sys::UniqueFd agent;
  };

  // Starts QEMU detached, restores its state if asked, and waits for the agent's HELLO
  // (and, with `sync`, hands the agent the time and identity). On failure the caller
  // kills the process.
  Status Boot(const std::string& id, const VmConfig& cfg, const Launch& l, bool sync,
              Handles* keep = nullptr) {
    const std::string dir = VmDir(id);
    for (const char* f : {"/qmp.sock", "/agent.sock", "/qemu.pid", "/console.log"}) (void)::unlink((dir + f).c_str());
    if ((dir + "/agent.sock").size() >= sizeof(sockaddr_un{}.sun_path))
      return Fail(Errc::kInvalidArgument, "microvm state dir path too long for unix sockets: " + dir);
    const int64_t t0 = MonotonicNanos();
    auto log = sys::Open(dir + "/qemu.log", O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (!log) return tl::unexpected(log.error());
    sys::SpawnOptions o;
    o.argv = QemuArgs(id, cfg, l);
    o.cwd = dir;
    o.new_session = true;
    o.stdout_fd = log->get();
    o.stderr_fd = log->get();
    auto child = sys::Spawn(o);
    if (!child) return tl::unexpected(std::move(child.error()).Wrap("start QEMU"));
    pid_t pid = child->Release();
    // QEMU is our child while we run: reap it when it ends (it then no longer counts as
    // alive). After a restart of spaced it is init's child.
    std::thread([pid] { ::waitpid(pid, nullptr, 0); }).detach();
    auto failure = [&](const std::string& what) {
      std::string msg = what;
      std::string qlog = Tail(dir + "/qemu.log");
      std::string con = Tail(dir + "/console.log");
      if (!qlog.empty()) msg += "; QEMU: " + qlog;
      if (!con.empty()) msg += "; console: " + con;
      return msg;
    };
    // QMP socket up = QEMU initialised (pid file written).
    auto q = QmpClient::Connect(dir + "/qmp.sock", 30000);
    if (!q) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      return Fail(Errc::kUnavailable, failure("QEMU exited during start-up"));
    }
    if (!l.incoming_state.empty()) {
      auto fd = sys::Open(l.incoming_state, O_RDONLY);
      if (!fd) return tl::unexpected(std::move(fd.error()).Wrap("open saved state"));
      auto restore = [&]() -> Status {
        SPACE_TRY(q->Execute("migrate-set-capabilities",
                             {{"capabilities", Json::array({{{"capability", "x-ignore-shared"},
                                                             {"state", l.ignore_shared}}})}})
                      .map([](auto&&) {}));
        SPACE_TRY(q->SendFd("state", fd->get()));
        SPACE_TRY(q->Execute("migrate-incoming", {{"uri", "fd:state"}}).map([](auto&&) {}));
        // QEMU exits when the stream cannot be loaded (a corrupt or truncated file).
        const int64_t deadline = MonotonicNanos() + 120'000'000'000;
        for (;;) {
          auto r = q->Execute("query-migrate", Json(), 5000);
          if (!r) return Fail(Errc::kInvalidArgument, "the saved state could not be loaded (" + r.error().message + ")");
          std::string status = JsonStringOr(*r, "status", "");
          if (status == "completed") break;
          if (status == "failed")
            return Fail(Errc::kInvalidArgument, "the saved state could not be loaded: " +
                                                    JsonStringOr(*r, "error-desc", "failed"));
          if (MonotonicNanos() > deadline) return Fail(Errc::kDeadlineExceeded, "restore timed out");
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        // QEMU may already run the guest (it does after an incoming migration unless -S).
        SPACE_TRY(q->Execute("cont").map([](auto&&) {}));
        return Ok();
      }();
      if (!restore) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        return Fail(restore.error().code, failure("restore " + id + ": " + restore.error().message));
      }
    }
    const int64_t t1 = MonotonicNanos();
    sys::UniqueFd agent_fd;
    auto agent = AgentHandshake(id, cfg, sync, !l.incoming_state.empty(), keep ? &agent_fd : nullptr);
    if (!agent) return Fail(agent.error().code, failure(agent.error().message));
    spdlog::debug("microvm {}: qemu+{} {:.0f} ms, agent {:.0f} ms", id,
                  l.incoming_state.empty() ? "boot" : "restore", (t1 - t0) / 1e6,
                  (MonotonicNanos() - t1) / 1e6);
    if (keep) {
      keep->pid = pid;
      keep->qmp = std::move(*q);
      keep->agent = std::move(agent_fd);
    }
    return Ok();
  }

  // The agent's `sync` request: real time, this VM's identity, fresh entropy.
  std::string SyncFrame(const std::string& id, const std::string& hostname, uint32_t request) {
    unsigned char rnd[32];
    randombytes_buf(rnd, sizeof rnd);
    Json req = {{"op", "sync"},
                {"time_ns", static_cast<int64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                     std::chrono::system_clock::now().time_since_epoch())
                                                     .count())},
                {"hostname", hostname},
                {"machine_id", Fnv64(id + "a") + Fnv64(id + "b")},
                {"entropy", HexEncode(std::string_view(reinterpret_cast<char*>(rnd), sizeof rnd))}};
    return agent::EncodeFrame(agent::FrameType::kRequest, request, agent::EncodeMessage(req));
  }

  // Reads frames from an agent connection until `done` accepts one. Fails when the
  // connection ends, the VM's QEMU is gone, or at the deadline.
  Status AgentAwait(const std::string& id, int fd, agent::FrameDecoder& dec, int64_t deadline_ns,
                    const std::function<bool(const agent::Frame&)>& done) {
    while (MonotonicNanos() < deadline_ns) {
      pollfd p{fd, POLLIN, 0};
      int r = ::poll(&p, 1, 100);
      if (r == 0) {
        if (!PidAlive(Pid(id), Marker(id))) return Fail(Errc::kUnavailable, "QEMU exited");
        continue;
      }
      char buf[65536];
      ssize_t n = r > 0 ? ::read(fd, buf, sizeof buf) : -1;
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return Fail(Errc::kUnavailable, "the agent connection ended");
      dec.Feed(std::string_view(buf, static_cast<size_t>(n)));
      for (;;) {
        auto f = dec.Next();
        if (!f) return Fail(Errc::kUnavailable, "agent protocol error: " + f.error().message);
        if (!*f) break;
        if (done(**f)) return Ok();
      }
    }
    return Fail(Errc::kDeadlineExceeded, "the agent did not answer in time");
  }

  // Connects to the agent channel, waits for HELLO and optionally sends `sync`; then
  // disconnects (core connects next) unless `keep` takes the connection. A restored guest
  // may not notice a connection made in the instant its state was loaded, so without
  // HELLO in a short while we reconnect.
  Status AgentHandshake(const std::string& id, const VmConfig& cfg, bool sync, bool restored,
                        sys::UniqueFd* keep = nullptr) {
    const std::string path = AgentSocketPath(id);
    const int64_t deadline = MonotonicNanos() + opts_.boot_timeout_ms * 1'000'000;
    const int64_t retry_ns = restored ? 500'000'000 : INT64_MAX / 4;
    constexpr uint32_t kSyncRequest = 0x7fff0001;
    while (MonotonicNanos() < deadline) {
      if (!PidAlive(Pid(id), Marker(id))) return Fail(Errc::kUnavailable, "QEMU exited during boot");
      sys::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
      sockaddr_un addr{};
      addr.sun_family = AF_UNIX;
      std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
      if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        continue;
      }
      std::string hello_request = agent::EncodeFrame(agent::FrameType::kRequest, agent::kHelloRequest,
                                                     agent::EncodeMessage(Json{{"op", "hello"}}));
      if (!sys::WriteAll(fd.get(), hello_request)) continue;
      agent::FrameDecoder dec;
      bool sync_sent = false, write_failed = false;
      auto st = AgentAwait(id, fd.get(), dec, std::min(deadline, MonotonicNanos() + retry_ns),
                           [&](const agent::Frame& f) {
                             if (f.type == agent::FrameType::kHello && !sync_sent) {
                               if (!sync) return true;
                               sync_sent = true;
                               write_failed = !sys::WriteAll(fd.get(), SyncFrame(id, cfg.hostname, kSyncRequest));
                               return write_failed;
                             }
                             return f.type == agent::FrameType::kResponse && f.stream == kSyncRequest;
                           });
      // A protocol error is most likely bytes of a frame from before the restore: start over.
      if (!st && st.error().code != Errc::kDeadlineExceeded && !PidAlive(Pid(id), Marker(id)))
        return Fail(Errc::kUnavailable, "QEMU exited during boot");
      if (st && !write_failed) {
        if (keep) *keep = std::move(fd);
        return Ok();
      }
    }
    return Fail(Errc::kDeadlineExceeded, "the guest's agent did not come up within " +
                                             std::to_string(opts_.boot_timeout_ms) + " ms");
  }

  // --- the restore pool

  static constexpr char kPoolPrefix[] = ".pool-";

  // Pools are kept for this many template snapshots, the most recently started ones (a
  // pool VM holds ~30 MiB of private memory while it waits).
  static constexpr size_t kPoolTemplates = 4;

  // Asks the pool thread to keep `restore_pool` VMs of this template snapshot ready; the
  // pool of the template started least recently goes if that makes too many.
  void WantPool(const std::string& tpl, const VmConfig& cfg) {
    VmConfig want;
    want.mem_mib = cfg.mem_mib;
    want.cpus = cfg.cpus;
    want.accel = cfg.accel;
    std::vector<PoolVm> evicted;
    {
      std::lock_guard lock(pool_mu_);
      pool_want_[tpl] = want;
      pool_lru_.erase(std::remove(pool_lru_.begin(), pool_lru_.end(), tpl), pool_lru_.end());
      pool_lru_.push_front(tpl);
      while (pool_lru_.size() > kPoolTemplates) {
        const std::string old = pool_lru_.back();
        pool_lru_.pop_back();
        pool_want_.erase(old);
        for (auto& vm : pool_[old]) evicted.push_back(std::move(vm));
        pool_.erase(old);
      }
    }
    pool_cv_.notify_all();
    for (auto& vm : evicted) DiscardPooled(vm.slot);
  }

  std::optional<PoolVm> TakePooled(const std::string& tpl) {
    std::lock_guard lock(pool_mu_);
    auto it = pool_.find(tpl);
    if (it == pool_.end() || it->second.empty()) return std::nullopt;
    PoolVm vm = std::move(it->second.front());
    it->second.pop_front();
    return vm;
  }

  // Makes the pool's VMs, one at a time, while a wanted template has fewer than
  // restore_pool ready. A failure drops the template until its next start asks again.
  void PoolLoop() {
    std::unique_lock lock(pool_mu_);
    while (!pool_stop_) {
      std::string tpl;
      VmConfig want;
      for (const auto& [t, w] : pool_want_) {
        if (pool_[t].size() < static_cast<size_t>(opts_.restore_pool)) {
          tpl = t;
          want = w;
          break;
        }
      }
      if (tpl.empty()) {
        pool_cv_.wait(lock);
        continue;
      }
      lock.unlock();
      auto vm = MakePooled(tpl, want);
      lock.lock();
      if (!vm) {
        spdlog::warn("microvm: restore pool of {}: {}", tpl, vm.error().message);
        pool_want_.erase(tpl);
        pool_lru_.erase(std::remove(pool_lru_.begin(), pool_lru_.end(), tpl), pool_lru_.end());
        continue;
      }
      if (!pool_want_.count(tpl)) {  // its template lost its pool meanwhile
        lock.unlock();
        DiscardPooled(vm->slot);
        lock.lock();
        continue;
      }
      pool_[tpl].push_back(std::move(*vm));
    }
  }

  // Restores the template snapshot into a hidden VM dir, lets the agent handshake and
  // run a throwaway command (warming TCG's translation cache for the paths a first
  // command takes), and stops the VM, keeping its QMP and agent connections.
  Result<PoolVm> MakePooled(const std::string& tpl, VmConfig cfg) {
    unsigned char rnd[6];
    randombytes_buf(rnd, sizeof rnd);
    const std::string slot = kPoolPrefix + HexEncode(std::string_view(reinterpret_cast<char*>(rnd), sizeof rnd));
    const std::string dir = VmDir(slot);
    const int64_t t0 = MonotonicNanos();
    cfg.marker = "space-vm-" + slot;
    PoolVm vm;
    vm.slot = slot;
    auto st = [&]() -> Status {
      auto uid = AllocateUid(slot);
      if (!uid) return tl::unexpected(uid.error());
      cfg.uid = *uid;
      SPACE_TRY(sys::MkdirAll(dir, 0711));
      SPACE_TRY(sys::WriteFileAtomic(dir + "/vm.json", cfg.ToJson().dump(), 0644));
      SPACE_TRY_WRAP(CopySparse(tpl + "/disk.qcow2", dir + "/disk.qcow2"), "copy disk");
      SPACE_TRY(ChownToVm(dir + "/disk.qcow2", cfg.uid));
      Launch l;
      l.mem_file = tpl + "/mem";
      l.incoming_state = tpl + "/state";
      l.ignore_shared = true;
      l.pool = true;
      Handles h;
      SPACE_TRY(Boot(slot, cfg, l, /*sync=*/true, &h));
      vm.pid = h.pid;
      vm.qmp = std::move(h.qmp);
      vm.agent = std::move(h.agent);
      SPACE_TRY_WRAP(WarmUp(slot, vm.agent.get()), "warm-up command");
      SPACE_TRY(vm.qmp.Execute("stop").map([](auto&&) {}));
      return sys::WriteFileAtomic(dir + "/pooled", "", 0644);  // ready (for tests and people)
    }();
    if (!st) {
      DiscardPooled(slot);
      return tl::unexpected(st.error());
    }
    spdlog::debug("microvm: restore pool VM {} ready in {:.0f} ms", slot, (MonotonicNanos() - t0) / 1e6);
    return vm;
  }

  // Runs `/bin/sh -c :` through the agent (any outcome will do: a template without a
  // shell still went through the agent's fork and exec) and lets the agent forget it.
  Status WarmUp(const std::string& slot, int fd) {
    constexpr uint32_t kRequest = 0x7fff0002, kStream = 0x7fff0002;
    Json exec = {{"op", "exec"}, {"stream", kStream}, {"id", "pool-warm-up"},
                 {"argv", Json::array({"/bin/sh", "-c", ":"})}, {"timeout_ms", 20000}};
    SPACE_TRY(sys::WriteAll(fd, agent::EncodeFrame(agent::FrameType::kRequest, kRequest,
                                                   agent::EncodeMessage(exec))));
    agent::FrameDecoder dec;
    bool started = false;
    SPACE_TRY(AgentAwait(slot, fd, dec, MonotonicNanos() + 30'000'000'000, [&](const agent::Frame& f) {
      if (f.type == agent::FrameType::kResponse && f.stream == kRequest) {
        auto m = agent::DecodeMessage(f.payload);
        started = m && !agent::ErrorFromJson(m->json);
        return !started;  // a failed exec leaves nothing behind
      }
      return f.type == agent::FrameType::kExit && f.stream == kStream;
    }));
    if (!started) return Ok();
    return sys::WriteAll(fd, agent::EncodeFrame(agent::FrameType::kAck, kStream, agent::EncodeAck(0, 0)));
  }

  // Hands a pooled VM to instance `id`: its dir is renamed, the guest continues and gets
  // its identity (`sync`) on the connection the pool kept.
  Status StartPooled(PoolVm vm, const std::string& id, const std::string& hostname) {
    const int64_t t0 = MonotonicNanos();
    const std::string from = VmDir(vm.slot), dir = VmDir(id);
    bool moved = false;
    auto st = [&]() -> Status {
      auto j = sys::ReadFile(from + "/vm.json");
      if (!j) return tl::unexpected(j.error());
      VmConfig cfg = VmConfig::FromJson(ParseJson(*j).value_or(Json::object()));
      cfg.hostname = hostname;
      if (::rename(from.c_str(), dir.c_str()) != 0) return ErrnoFail("take pooled VM");
      moved = true;
      // QEMU reopens its disk by the name it was given (e.g. read-only when a snapshot
      // inactivates it): that name must keep working.
      if (::symlink(id.c_str(), from.c_str()) != 0) return ErrnoFail("link pooled VM's old dir");
      SPACE_TRY(sys::WriteFileAtomic(dir + "/vm.json", cfg.ToJson().dump(), 0644));
      ::setpriority(PRIO_PGRP, vm.pid, 0);  // every QEMU thread back to normal priority
      SPACE_TRY(vm.qmp.Execute("cont").map([](auto&&) {}));
      constexpr uint32_t kSyncRequest = 0x7fff0003;
      SPACE_TRY(sys::WriteAll(vm.agent.get(), SyncFrame(id, hostname, kSyncRequest)));
      agent::FrameDecoder dec;
      return AgentAwait(id, vm.agent.get(), dec, MonotonicNanos() + 10'000'000'000, [&](const agent::Frame& f) {
        return f.type == agent::FrameType::kResponse && f.stream == kSyncRequest;
      });
    }();
    if (!st) {
      if (moved) {
        (void)Destroy(id);
      } else {
        DiscardPooled(vm.slot);
      }
      return st;
    }
    spdlog::debug("microvm {}: from the restore pool ({}) in {:.1f} ms", id, vm.slot,
                  (MonotonicNanos() - t0) / 1e6);
    return Ok();
  }

  void DiscardPooled(const std::string& slot) {
    (void)Kill(slot);
    (void)sys::RemoveAll(VmDir(slot));
  }

  Result<std::string> Accel() {
    std::lock_guard lock(accel_mu_);
    if (!accel_.empty()) return accel_;
    if (opts_.accel != "auto") {
      accel_ = opts_.accel;
      spdlog::info("microvm: acceleration {} (chosen by configuration)", accel_);
      return accel_;
    }
    const std::string cache = opts_.state_dir + "/accel.json";
    const std::string identity = FileIdentity(opts_.kernel) + "|" + FileIdentity(opts_.initrd) + "|" +
                                 FileIdentity("/dev/kvm");
    if (auto c = sys::ReadFile(cache)) {
      auto j = ParseJson(*c);
      if (j && JsonStringOr(*j, "identity", "") == identity) {
        accel_ = JsonStringOr(*j, "accel", "tcg");
        spdlog::info("microvm: acceleration {} ({}; cached probe)", accel_, JsonStringOr(*j, "why", ""));
        return accel_;
      }
    }
    std::string why;
    int fd = ::open("/dev/kvm", O_RDWR | O_CLOEXEC);
    if (fd < 0) {
      accel_ = "tcg";
      why = std::string("/dev/kvm cannot be opened: ") + std::strerror(errno);
    } else {
      ::close(fd);
      auto st = ProbeKvm();
      accel_ = st ? "kvm" : "tcg";
      why = st ? "a probe boot under KVM reached the agent"
               : "a probe boot under KVM did not reach the agent: " + st.error().message;
    }
    // Falling back to TCG costs a lot of speed: say so above the info level.
    if (accel_ == "kvm") {
      spdlog::info("microvm: acceleration kvm ({})", why);
    } else {
      spdlog::warn("microvm: acceleration tcg ({})", why);
    }
    Json j = {{"accel", accel_}, {"why", why}, {"identity", identity}};
    (void)sys::WriteFileAtomic(cache, j.dump(), 0644);
    return accel_;
  }

  // Boots a throwaway VM under KVM on a tiny empty disk and waits for its agent.
  Status ProbeKvm() {
    const std::string id = "probe-kvm";
    (void)Destroy(id);
    const std::string dir = VmDir(id);
    auto st = [&]() -> Status {
      SPACE_TRY(sys::MkdirAll(dir + "/empty", 0755));
      auto fd = sys::Open(dir + "/probe.ext4", O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (!fd) return tl::unexpected(fd.error());
      if (::ftruncate(fd->get(), 16 << 20) != 0) return ErrnoFail("size probe disk");
      sys::SpawnOptions o;
      o.argv = {"mkfs.ext4", "-q", "-F", "-d", dir + "/empty", dir + "/probe.ext4"};
      SPACE_TRY(sys::RunChecked(o, 60000).map([](auto&&) {}));
      SPACE_TRY(CreateOverlay(dir + "/probe.ext4", dir + "/disk.qcow2"));
      VmConfig cfg;
      cfg.accel = "kvm";
      cfg.mem_mib = 128;
      SPACE_TRY(sys::WriteFileAtomic(dir + "/vm.json", cfg.ToJson().dump(), 0644));
      MicrovmOptions saved = opts_;
      opts_.boot_timeout_ms = 5000;
      auto b = Boot(id, cfg, Launch{}, false);
      opts_ = saved;
      return b;
    }();
    (void)Destroy(id);
    return st;
  }

  MicrovmOptions opts_;
  std::string unavailable_;
  int64_t tsc_khz_ = 0;
  std::mutex accel_mu_;
  std::string accel_;
  std::mutex uid_mu_;
  std::set<uint32_t> reserved_uids_;
  std::mutex keys_mu_;
  std::map<std::string, std::unique_ptr<std::mutex>> key_mutexes_;
  // The restore pool, per template snapshot dir (PoolLoop).
  mutable std::mutex pool_mu_;
  std::condition_variable pool_cv_;
  bool pool_stop_ = false;
  std::map<std::string, VmConfig> pool_want_;
  std::deque<std::string> pool_lru_;  // templates with a pool, most recently started first
  std::map<std::string, std::deque<PoolVm>> pool_;
  std::thread pool_thread_;
};

}  // namespace

Result<std::unique_ptr<Runtime>> CreateMicrovmRuntime(const MicrovmOptions& opts) {
  if (opts.state_dir.empty() || opts.state_dir[0] != '/')
    return Fail(Errc::kInvalidArgument, "microvm state dir must be absolute");
  auto rt = std::make_unique<MicrovmRuntime>(opts);
  SPACE_TRY(rt->Init());
  return std::unique_ptr<Runtime>(std::move(rt));
}

}  // namespace space::runtime
