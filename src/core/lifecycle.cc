// Lifecycle transitions of a running sandbox: pause, resume, suspend, wake.
#include <spdlog/spdlog.h>

#include <malloc.h>

#include <algorithm>

#include "core/internal.h"

namespace space::core {

namespace {

struct TransitionRule {
  const char* kind;
  std::vector<std::string> from;  // legal starting states
  const char* transitional;       // state persisted while the operation runs ("" = none)
};

const TransitionRule* RuleFor(const std::string& kind) {
  static const TransitionRule kRules[] = {
      {"pause", {"running"}, ""},
      {"resume", {"paused"}, ""},
      {"suspend", {"running", "paused"}, "suspending"},
      {"wake", {"suspended"}, "waking"},
  };
  for (const auto& r : kRules) {
    if (kind == r.kind) return &r;
  }
  return nullptr;
}

}  // namespace

Json Platform::ListRuntimes() const {
  Json out = Json::array();
  for (const auto& [name, rt] : impl_->runtimes) {
    runtime::RuntimeDescription d = rt->Describe();
    Json j{{"name", name},
           {"kind", d.kind},
           {"default", name == config_.default_runtime},
           {"available", d.available},
           {"capabilities", runtime::CapabilitiesToJson(rt->Caps())},
           {"limitations", d.limitations}};
    if (!d.available) j["why_not"] = d.why_not;
    if (!d.path.empty()) j["path"] = d.path;
    out.push_back(std::move(j));
  }
  return out;
}

Result<runtime::Capabilities> Platform::CapabilitiesOf(const store::SandboxRecord& rec) const {
  auto it = impl_->runtimes.find(rec.runtime);
  if (it == impl_->runtimes.end()) return Fail(Errc::kUnavailable, "runtime " + rec.runtime + " is not available");
  return it->second->Caps();
}

Result<std::string> Platform::SandboxNetNamespace(const std::string& id) {
  auto sb = impl_->Find(id);
  if (!sb) return Fail(Errc::kNotFound, "no sandbox " + id);
  std::string rt_name, state;
  {
    std::lock_guard l(sb->mu);
    rt_name = sb->rec.runtime;
    state = sb->rec.state;
  }
  if (state == "deleting" || state == "deleted") return Fail(Errc::kNotFound, "no sandbox " + id);
  if (state != "running") {
    std::string hint = state == "paused" ? "; resume it first"
                       : state == "suspended" ? "; wake it first" : "";
    return Fail(Errc::kConflict, "sandbox " + id + " is " + state + hint);
  }
  auto it = impl_->runtimes.find(rt_name);
  if (it == impl_->runtimes.end()) return Fail(Errc::kUnavailable, "runtime " + rt_name + " is not available");
  return it->second->NetNamespacePath(id);
}

Result<store::OperationRecord> Platform::Transition(const std::string& id, const std::string& kind) {
  const TransitionRule* rule = RuleFor(kind);
  if (!rule) return Fail(Errc::kInvalidArgument, "unknown transition \"" + kind + "\"");
  auto sb = impl_->Find(id);
  if (!sb) return Fail(Errc::kNotFound, "no sandbox " + id);
  store::OperationRecord op;
  {
    std::unique_lock l(sb->mu, std::try_to_lock);
    if (!l.owns_lock() || !sb->busy_op.empty())
      return Fail(Errc::kConflict, "sandbox " + id + " has an operation in progress" +
                                       (sb->busy_op.empty() ? "" : " (" + sb->busy_op + ")") +
                                       "; try again when it ends");
    bool legal = false;
    for (const auto& f : rule->from) legal = legal || sb->rec.state == f;
    if (!legal)
      return Fail(Errc::kConflict, "cannot " + kind + " sandbox " + id + ": it is " + sb->rec.state);
    if (kind == "suspend") SPACE_TRY(impl_->RefuseWithVolumes(sb->rec, "suspended"));
    if (kind == "pause" || kind == "resume") {
      auto caps = impl_->RuntimeFor(sb->rec);
      if (caps && !caps->Caps().pause)
        return Fail(Errc::kInvalidArgument, "runtime " + sb->rec.runtime + " cannot pause");
    }
    // A suspended sandbox commits no memory: waking it is admitted like a create, and it
    // counts as committed (waking) before anyone else is admitted.
    std::optional<std::unique_lock<std::mutex>> admitted;
    if (kind == "wake") {
      const Json* lj = JsonField(sb->rec.spec, "limits");
      auto a = impl_->AdmitMemory(lj ? JsonIntOr(*lj, "memory_bytes", 0) : 0, 1);
      if (!a) return tl::unexpected(std::move(a.error()).Wrap("wake " + id));
      admitted.emplace(std::move(*a));
    }
    op.id = NewId("op");
    op.kind = kind;
    op.target = id;
    op.state = "pending";
    op.created_ms = op.updated_ms = NowUnixMillis();
    SPACE_TRY(impl_->store->PutOperation(op));
    sb->busy_op = op.id;
    if (admitted) {
      sb->rec.state = rule->transitional;
      if (auto st = impl_->SaveSandbox(*sb); !st) {
        sb->rec.state = "suspended";
        sb->busy_op.clear();
        return tl::unexpected(st.error());
      }
    }
  }
  impl_->Enqueue([impl = impl_.get(), sb, op] { impl->RunTransition(sb, op); });
  return op;
}

void Platform::Impl::RunTransition(std::shared_ptr<Sandbox> sb, store::OperationRecord op) {
  op.state = "running";
  SaveOperation(op);
  Status st;
  {
    std::lock_guard lock(sb->mu);
    auto* rt = RuntimeFor(sb->rec);
    const std::string& id = sb->rec.id;
    const TransitionRule* rule = RuleFor(op.kind);
    auto run = [&]() -> Status {
      if (!rt) return Fail(Errc::kUnavailable, "runtime " + sb->rec.runtime + " is not available");
      if (op.kind == "pause") {
        SPACE_TRY_WRAP(rt->Pause(id), "pause");
        CrashPoint("pause.frozen");
        sb->rec.state = "paused";
        return SaveSandbox(*sb);
      }
      if (op.kind == "resume") {
        SPACE_TRY_WRAP(rt->Resume(id), "resume");
        sb->rec.state = "running";
        // After a daemon restart a paused sandbox has no agent session yet.
        if (!sb->session || !sb->session->connected()) {
          SPACE_TRY_WRAP(ConnectAgent(sb, config.agent_connect_timeout_ms), "connect to agent");
        }
        return SaveSandbox(*sb);
      }
      if (op.kind == "suspend") {
        // The filesystem is already on disk; the processes cannot be kept by this runtime
        // (Capabilities::suspend_keeps_processes), so they are stopped and reported lost.
        sb->rec.state = rule->transitional;
        SPACE_TRY(SaveSandbox(*sb));
        CrashPoint("suspend.stopping");
        if (sb->session) {
          sb->session->Close();
          sb->session.reset();
        }
        if (rt->Caps().suspend_keeps_processes) {
          // Memory and devices go to disk; the commands continue on wake.
          SPACE_TRY_WRAP(rt->Suspend(id), "suspend instance");
        } else if (rt->Caps().own_disk) {
          // The runtime keeps the disk but not the processes: it stops the instance and
          // keeps its disk (destroying it would lose the disk).
          LoseCommands(*sb, "the sandbox was suspended; its processes were stopped");
          SPACE_TRY_WRAP(rt->Suspend(id), "suspend instance");
        } else {
          LoseCommands(*sb, "the sandbox was suspended; its processes were stopped");
          SPACE_TRY_WRAP(DestroyInstance(rt, id), "stop instance");
        }
        CrashPoint("suspend.stopped");
        sb->rec.state = "suspended";
        sb->rec.reason.clear();
        return SaveSandbox(*sb);
      }
      // wake
      sb->rec.state = rule->transitional;
      SPACE_TRY(SaveSandbox(*sb));
      Status started;
      if (rt->Caps().suspend_keeps_processes || rt->Caps().own_disk) {
        // A runtime that keeps processes but not the disk (a plugin such as gvisor) gets
        // the sandbox's root, mounted again, to restore onto.
        std::string root;
        if (!rt->Caps().own_disk) {
          SPACE_TRY_WRAP(storage->Remount(id), "mount root filesystem");
          root = storage->RootPath(id);
          if (root.empty()) return Fail(Errc::kInternal, "the sandbox's root filesystem is gone");
        }
        started = WakeInstance(*sb, rt, InstanceSpecFor(sb->rec, root));
      } else {
        SPACE_TRY_WRAP(storage->Remount(id), "mount root filesystem");
        std::string root = storage->RootPath(id);
        if (root.empty()) return Fail(Errc::kInternal, "the sandbox's root filesystem is gone");
        started = StartInstance(*sb, rt, InstanceSpecFor(sb->rec, root));
      }
      if (!started) return tl::unexpected(std::move(started.error()).Wrap("start instance"));
      CrashPoint("wake.started");
      SPACE_TRY_WRAP(ConnectAgent(sb, config.agent_connect_timeout_ms), "connect to agent");
      sb->rec.state = "running";
      sb->rec.reason.clear();
      if (!rt->Caps().suspend_keeps_processes) SPACE_TRY(RunStartCommand(*sb));
      return SaveSandbox(*sb);
    };
    st = run();
    if (st && (op.kind == "resume" || op.kind == "wake")) {
      int64_t timeout_s = JsonIntOr(sb->rec.spec, "timeout_s", 0);
      sb->rec.spec["expires_ms"] = timeout_s > 0 ? NowUnixMillis() + timeout_s * 1000 : 0;
      sb->last_activity_ms = NowUnixMillis();
      (void)SaveSandbox(*sb);
    }
    if (!st) {
      // Roll back to a definite state: what the runtime really says.
      if ((op.kind == "wake" || op.kind == "suspend") && rt &&
          (rt->Caps().suspend_keeps_processes || rt->Caps().own_disk)) {
        // The runtime keeps the saved state on a failed wake; a failed suspend leaves
        // the instance as it was (running, or gone).
        if (sb->session) {
          sb->session->Close();
          sb->session.reset();
        }
        auto state = op.kind == "suspend" ? rt->Inspect(id) : Result<runtime::InstanceState>(runtime::InstanceState::kStopped);
        if (state && *state == runtime::InstanceState::kRunning &&
            ConnectAgent(sb, config.agent_connect_timeout_ms)) {
          sb->rec.state = "running";
        } else {
          sb->rec.state = "suspended";
        }
        // Without kept processes, a half-woken instance is stopped again; the disk stays.
        if (op.kind == "wake" && !rt->Caps().suspend_keeps_processes) (void)rt->Suspend(id);
        sb->rec.reason = op.kind + " failed: " + st.error().message;
      } else if (op.kind == "wake" || op.kind == "suspend") {
        if (sb->session) {
          sb->session->Close();
          sb->session.reset();
        }
        (void)DestroyInstance(rt, id);
        sb->rec.state = "suspended";
        sb->rec.reason = op.kind + " failed: " + st.error().message;
      } else if (rt) {
        auto state = rt->Inspect(id);
        if (state && *state == runtime::InstanceState::kPaused) {
          sb->rec.state = "paused";
        } else if (state && *state == runtime::InstanceState::kRunning) {
          sb->rec.state = "running";
        } else {
          sb->rec.state = "error";
          sb->rec.reason = op.kind + " failed: " + st.error().message;
        }
      }
      (void)SaveSandbox(*sb);
    }
    sb->busy_op.clear();
  }
  FinishOperation(op, st, {{"sandbox_id", sb->rec.id}});
}

}  // namespace space::core

namespace space::core {

// ---------------------------------------------------------------- timeouts

Result<store::SandboxRecord> Platform::SetTimeout(const std::string& id, int64_t timeout_s,
                                                  const std::string& on_timeout) {
  if (timeout_s < 0 || timeout_s > 366ll * 24 * 3600)
    return Fail(Errc::kInvalidArgument, "timeout must be 0 (none) .. one year, in seconds");
  if (!on_timeout.empty() && on_timeout != "delete" && on_timeout != "pause" &&
      on_timeout != "suspend")
    return Fail(Errc::kInvalidArgument, "on_timeout must be delete, pause or suspend");
  auto sb = impl_->Find(id);
  if (!sb) return Fail(Errc::kNotFound, "no sandbox " + id);
  std::lock_guard l(sb->mu);
  if (sb->rec.state == "deleting" || sb->rec.state == "deleted")
    return Fail(Errc::kConflict, "sandbox " + id + " is " + sb->rec.state);
  if (on_timeout == "suspend") SPACE_TRY(impl_->RefuseWithVolumes(sb->rec, "suspended at its timeout"));
  sb->rec.spec["timeout_s"] = timeout_s;
  if (!on_timeout.empty()) sb->rec.spec["on_timeout"] = on_timeout;
  sb->rec.spec["expires_ms"] = timeout_s > 0 ? NowUnixMillis() + timeout_s * 1000 : 0;
  SPACE_TRY(impl_->SaveSandbox(*sb));
  return sb->rec;
}

void Platform::Impl::ReaperLoop() {
  for (;;) {
    {
      std::unique_lock lock(q_mu);
      // Wake sooner when a pool refill is due.
      int64_t wait_ms = config.reaper_interval_ms;
      if (int64_t due = refill_due_ms; due > 0) {
        wait_ms = std::clamp<int64_t>(due - NowUnixMillis(), 1, wait_ms);
      }
      reaper_cv.wait_for(lock, std::chrono::milliseconds(wait_ms), [&] { return stopping; });
      if (stopping) return;
    }
    ReapOnce();
  }
}

void Platform::Impl::TrimAfterDeletes(int64_t now_ms) {
  int64_t deleted = last_delete_ms.load();
  if (deleted == 0) return;
  if (now_ms - deleted < 1000 && now_ms - last_trim_ms < 10000) return;
  last_delete_ms.compare_exchange_strong(deleted, 0);  // a newer delete waits for the next round
  last_trim_ms = now_ms;
  store->ReleaseMemory();
  ::malloc_trim(0);
}

void Platform::Impl::ReapOnce() {
  GuardTick();
  TrimAfterDeletes(NowUnixMillis());
  std::vector<std::shared_ptr<Sandbox>> all;
  {
    std::lock_guard lock(mu);
    for (auto& [id, sb] : sandboxes) all.push_back(sb);
  }
  const int64_t now = NowUnixMillis();
  if (int64_t due = refill_due_ms; due > 0 && now >= due) {
    refill_due_ms = 0;
    self->FillPools();
  }
  for (auto& sb : all) {
    ScheduledSnapshots(sb, now);
    std::string id, action, why;
    {
      std::unique_lock l(sb->mu, std::try_to_lock);
      if (!l.owns_lock() || !sb->busy_op.empty()) continue;  // busy: look again next round
      const std::string& state = sb->rec.state;
      int64_t expires = JsonIntOr(sb->rec.spec, "expires_ms", 0);
      int64_t idle_s = JsonIntOr(sb->rec.spec, "idle_timeout_s", 0);
      action = JsonStringOr(sb->rec.spec, "on_timeout", "delete");
      bool live = state == "running" || (state == "paused" && action != "pause");
      if (!live) continue;
      if (expires > 0 && now >= expires) {
        why = "timeout";
      } else if (idle_s > 0 && state == "running") {
        bool commands_running;
        {
          std::lock_guard cl(sb->cmd_mu);
          commands_running = !sb->commands.empty();
        }
        if (!commands_running && now - sb->last_activity_ms >= idle_s * 1000) why = "idle timeout";
      }
      if (why.empty()) continue;
      id = sb->rec.id;
    }
    Result<store::OperationRecord> op =
        action == "delete" ? self->DeleteSandbox(id) : self->Transition(id, action);
    if (!op) {
      spdlog::debug("sandbox {}: {} {} deferred: {}", id, why, action, op.error().message);
      continue;
    }
    spdlog::info("sandbox {}: {} reached, {} ({})", id, why, action, op->id);
    if (action != "delete") {
      // The action is under way; the expiry fired. Resume/wake arm it again.
      std::lock_guard l(sb->mu);
      sb->rec.spec["expires_ms"] = 0;
      (void)SaveSandbox(*sb);
    }
  }
}

}  // namespace space::core
