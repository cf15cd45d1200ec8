// microvm: the restore pool (VMs restored ahead of time, stopped, ready to hand out).
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

void MicrovmRuntime::WantPool(const std::string& tpl, const VmConfig& cfg) {
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

std::optional<PoolVm> MicrovmRuntime::TakePooled(const std::string& tpl) {
  std::lock_guard lock(pool_mu_);
  auto it = pool_.find(tpl);
  if (it == pool_.end() || it->second.empty()) return std::nullopt;
  PoolVm vm = std::move(it->second.front());
  it->second.pop_front();
  return vm;
}

void MicrovmRuntime::PoolLoop() {
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

Result<PoolVm> MicrovmRuntime::MakePooled(const std::string& tpl, VmConfig cfg) {
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

Status MicrovmRuntime::WarmUp(const std::string& slot, int fd) {
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

Status MicrovmRuntime::StartPooled(PoolVm vm, const std::string& id, const std::string& hostname) {
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
    SPACE_TRY(sys::WriteAll(vm.agent.get(), SyncFrame(id, cfg, kSyncRequest)));
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

}  // namespace space::runtime::microvm
