// Lifecycle transitions of a running sandbox: pause, resume, suspend, wake.
#include <spdlog/spdlog.h>

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

Result<runtime::Capabilities> Platform::CapabilitiesOf(const std::string& id) {
  auto sb = impl_->Find(id);
  if (!sb) return Fail(Errc::kNotFound, "no sandbox " + id);
  std::string rt_name;
  {
    std::lock_guard l(sb->mu);
    rt_name = sb->rec.runtime;
  }
  auto it = impl_->runtimes.find(rt_name);
  if (it == impl_->runtimes.end()) return Fail(Errc::kUnavailable, "runtime " + rt_name + " is not available");
  return it->second->Caps();
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
    if (kind == "pause" || kind == "resume") {
      auto caps = impl_->RuntimeFor(sb->rec);
      if (caps && !caps->Caps().pause)
        return Fail(Errc::kInvalidArgument, "runtime " + sb->rec.runtime + " cannot pause");
    }
    op.id = NewId("op");
    op.kind = kind;
    op.target = id;
    op.state = "pending";
    op.created_ms = op.updated_ms = NowUnixMillis();
    SPACE_TRY(impl_->store->PutOperation(op));
    sb->busy_op = op.id;
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
        if (sb->session) {
          sb->session->Close();
          sb->session.reset();
        }
        LoseCommands(*sb, "the sandbox was suspended; its processes were stopped");
        SPACE_TRY_WRAP(rt->Destroy(id), "stop instance");
        sb->rec.state = "suspended";
        sb->rec.reason.clear();
        return SaveSandbox(*sb);
      }
      // wake
      sb->rec.state = rule->transitional;
      SPACE_TRY(SaveSandbox(*sb));
      SPACE_TRY_WRAP(storage->Remount(id), "mount root filesystem");
      std::string root = storage->RootPath(id);
      if (root.empty()) return Fail(Errc::kInternal, "the sandbox's root filesystem is gone");
      auto started = rt->Start(InstanceSpecFor(sb->rec, root));
      if (!started) return tl::unexpected(std::move(started.error()).Wrap("start instance"));
      SPACE_TRY_WRAP(ConnectAgent(sb, config.agent_connect_timeout_ms), "connect to agent");
      sb->rec.state = "running";
      sb->rec.reason.clear();
      return SaveSandbox(*sb);
    };
    st = run();
    if (!st) {
      // Roll back to a definite state: what the runtime really says.
      if (op.kind == "wake" || op.kind == "suspend") {
        if (sb->session) {
          sb->session->Close();
          sb->session.reset();
        }
        if (rt) (void)rt->Destroy(id);
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
