// microvm: QEMU's command line, boot and restore, the agent handshake, acceleration.
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

Status MicrovmRuntime::SaveState(QmpClient& q, const std::string& path, bool ignore_shared) {
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

Status MicrovmRuntime::WaitMigration(QmpClient& q, const std::string& what) {
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

std::vector<std::string> MicrovmRuntime::QemuArgs(const std::string& id, const VmConfig& cfg, const Launch& l) {
  const std::string dir = VmDir(id);
  std::string append =
      "console=ttyS0 reboot=t panic=-1 quiet tsc=reliable no_timer_check cryptomgr.notests "
      "random.trust_cpu=on i8042.noaux i8042.nokbd i8042.nopnp i8042.dumbkbd mitigations=off "
      "nokaslr audit=0 8250.nr_uarts=1 SPACE_HOSTNAME=" + cfg.hostname;
  if (tsc_khz_ > 0) append += " tsc_early_khz=" + std::to_string(tsc_khz_);
  const bool volumes = !cfg.volumes.empty();
  if (volumes) append += " SPACE_VOLUMES=1";  // the init loads fuse and virtiofs
  std::string mem = std::to_string(cfg.mem_mib) + "M";
  // virtiofsd maps the guest's RAM: a VM with volumes has it in a shared memfd (it never
  // restores a snapshot, so it needs no file).
  std::string backend = volumes ? "memory-backend-memfd,id=mem0,size=" + mem + ",share=on"
                        : l.mem_file.empty()
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
  if (cfg.nic) {
    // One MAC for every VM: each NIC is alone on its sandbox's bridge. No vnet header on the
    // tap (OpenTap leaves IFF_VNET_HDR off, and QEMU reads that from the fd): its offload
    // features would differ from the hub port's, and a snapshot taken with one backend
    // must restore with the other.
    a.insert(a.end(), {"-device", "virtio-net-device,netdev=n0,mac=52:54:00:5a:00:01"});
    a.insert(a.end(), {"-netdev", l.tap_fd >= 0 ? "tap,id=n0,fd=3" : "hubport,id=n0,hubid=0"});
  }
  if (volumes) {
    // libvhost-user (virtiofsd) refuses legacy virtio, microvm's default for virtio-mmio;
    // the setting changes every device's migration state, so only VMs that are never
    // migrated get it.
    a.insert(a.end(), {"-global", "virtio-mmio.force-legacy=false",
                       "-chardev", "socket,id=volumes,path=" + dir + "/fs.sock",
                       "-device", "vhost-user-fs-device,chardev=volumes,tag=space-volumes"});
  }
  if (cfg.accel == "kvm") a.insert(a.end(), {"-cpu", "host"});
  if (cfg.uid != 0) a.insert(a.end(), {"-runas", std::to_string(cfg.uid) + ":" + std::to_string(cfg.uid)});
  if (!l.incoming_state.empty()) a.insert(a.end(), {"-incoming", "defer"});
  // A restore-pool VM is made in the background: at a lower priority than running VMs.
  if (l.pool) a.insert(a.begin(), {"nice", "-n", "10"});
  return a;
}

Status MicrovmRuntime::Boot(const std::string& id, const VmConfig& cfg, const Launch& l, bool sync,
            Handles* keep) {
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
  o.pass_fd = l.tap_fd;
  auto child = sys::Spawn(o);
  if (!child) return tl::unexpected(std::move(child.error()).Wrap("start QEMU"));
  pid_t pid = child->Release();
  if (auto j = sys::JoinCgroup(hierarchies_, CgroupOf(cfg.marker.empty() ? "space-vm-" + id : cfg.marker), pid);
      !j && !cgroup_warned_.exchange(true))
    spdlog::warn("microvm: QEMU stays in spaced's cgroup ({}): it would end with spaced's container",
                 j.error().message);
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
  auto agent = AgentHandshake(id, cfg, sync, !l.incoming_state.empty(), keep ? &agent_fd : nullptr, l.files);
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

std::string MicrovmRuntime::SyncFrame(const std::string& id, const VmConfig& cfg, uint32_t request,
                                      const std::map<std::string, std::string>* files) {
  unsigned char rnd[32];
  randombytes_buf(rnd, sizeof rnd);
  Json req = {{"op", "sync"},
              {"time_ns", static_cast<int64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                   std::chrono::system_clock::now().time_since_epoch())
                                                   .count())},
              {"hostname", cfg.hostname},
              {"machine_id", Fnv64(id + "a") + Fnv64(id + "b")},
              {"entropy", HexEncode(std::string_view(reinterpret_cast<char*>(rnd), sizeof rnd))}};
  if (cfg.net.enabled()) {
    req["net"] = {{"interface", "eth0"}, {"address", cfg.net.address},
                  {"prefix_len", cfg.net.prefix_len}, {"gateway", cfg.net.gateway}};
  }
  if (files && !files->empty()) req["files"] = *files;
  if (!cfg.volumes.empty()) {
    Json vs = Json::array();  // the k-th is directory k of the virtiofs share (volumes.cc)
    for (const auto& v : cfg.volumes) vs.push_back({{"path", v.path}, {"read_only", v.read_only}});
    req["volumes"] = vs;
  }
  return agent::EncodeFrame(agent::FrameType::kRequest, request, agent::EncodeMessage(req));
}

Status MicrovmRuntime::AgentAwait(const std::string& id, int fd, agent::FrameDecoder& dec, int64_t deadline_ns,
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

// What went wrong in the guest with a sync that carried network settings or files ("" if
// nothing): an agent too old to know them, or its error.
static std::string SyncError(const agent::Frame& f, bool want_net, bool want_files, bool want_volumes) {
  auto m = agent::DecodeMessage(f.payload);
  if (!m) return "the agent's answer to sync is unreadable";
  if (auto e = agent::ErrorFromJson(m->json)) return "sync: " + e->message;
  if (want_net && !JsonBoolOr(m->json, "net_set", false))
    return "the guest could not take its network address: " +
           JsonStringOr(m->json, "net_error", "the agent does not configure networks");
  if (want_files && !JsonBoolOr(m->json, "files_written", false))
    return "the guest could not write its network files: " +
           JsonStringOr(m->json, "files_error", "the agent does not write files on sync");
  if (want_volumes && !JsonBoolOr(m->json, "volumes_mounted", false))
    return "the guest could not mount its volumes: " +
           JsonStringOr(m->json, "volumes_error", "the agent does not mount volumes");
  return "";
}

Status MicrovmRuntime::AgentHandshake(const std::string& id, const VmConfig& cfg, bool sync, bool restored,
                                      sys::UniqueFd* keep, const std::map<std::string, std::string>* files) {
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
    std::string sync_error;  // the guest could not take its network or files
    auto st = AgentAwait(id, fd.get(), dec, std::min(deadline, MonotonicNanos() + retry_ns),
                         [&](const agent::Frame& f) {
                           if (f.type == agent::FrameType::kHello && !sync_sent) {
                             if (!sync) return true;
                             sync_sent = true;
                             write_failed = !sys::WriteAll(fd.get(), SyncFrame(id, cfg, kSyncRequest, files));
                             return write_failed;
                           }
                           if (f.type != agent::FrameType::kResponse || f.stream != kSyncRequest) return false;
                           sync_error = SyncError(f, cfg.net.enabled(), files && !files->empty(), !cfg.volumes.empty());
                           return true;
                         });
    if (st && !write_failed && !sync_error.empty()) return Fail(Errc::kInternal, sync_error);
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

Result<std::string> MicrovmRuntime::Accel() {
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

Status MicrovmRuntime::ProbeKvm() {
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

}  // namespace space::runtime::microvm
