// Snapshots (on demand and scheduled) and fork.
#include <spdlog/spdlog.h>

#include "core/internal.h"

namespace space::core {

namespace {

constexpr int kMaxFork = 32;

// What a sandbox created from a snapshot of `rec` inherits.
Json SourceOf(const store::SandboxRecord& rec) {
  Json src = {{"template", rec.template_ref},
              {"template_digest", rec.template_digest},
              {"runtime", rec.runtime}};
  if (const Json* tc = JsonField(rec.spec, "template_config")) src["template_config"] = *tc;
  if (const Json* env = JsonField(rec.spec, "env")) src["env"] = *env;
  if (const Json* l = JsonField(rec.spec, "limits")) src["limits"] = *l;
  src["network"] = Platform::StoredPolicy(rec).internet();
  // The volumes mounted (names and paths, never their contents: docs/volumes.md).
  if (const Json* v = JsonField(rec.spec, "volumes")) src["volumes"] = *v;
  return src;
}

bool Snapshottable(const std::string& state) {
  return state == "running" || state == "paused" || state == "suspended";
}

}  // namespace

runtime::Runtime* Platform::Impl::SnapshotRuntime(const std::string& rt_name) {
  auto it = runtimes.find(rt_name);
  if (it == runtimes.end() || !it->second->Caps().own_disk) return nullptr;
  return it->second.get();
}

Status Platform::Impl::DeleteSnapshotData(const std::string& rt_name, const std::string& snap_id) {
  if (auto* rt = SnapshotRuntime(rt_name)) return rt->DeleteSnapshot(snap_id);
  return storage->DeleteSnapshot(snap_id);
}

Status Platform::Impl::FrozenSnapshot(Sandbox& sb, const std::string& snap_id) {
  auto* rt = RuntimeFor(sb.rec);
  if (rt && rt->Caps().own_disk) {
    // Memory, devices and disk in one go; the runtime stops the guest for the instant.
    CrashPoint("snapshot.frozen");
    auto st = rt->Snapshot(sb.rec.id, snap_id);
    CrashPoint("snapshot.taken");
    return st;
  }
  // Freeze a running sandbox for the instant of the snapshot, so the filesystem is
  // consistent with a single moment of its processes. Paused and suspended ones are still.
  bool froze = false;
  if (sb.rec.state == "running" && rt) {
    SPACE_TRY_WRAP(rt->Pause(sb.rec.id), "freeze");
    froze = true;
  }
  CrashPoint("snapshot.frozen");
  auto st = storage->SnapshotRoot(sb.rec.id, snap_id);
  CrashPoint("snapshot.taken");
  if (froze) {
    if (auto r = rt->Resume(sb.rec.id); !r) {
      spdlog::error("sandbox {}: thaw after snapshot: {}", sb.rec.id, r.error().message);
      if (st) st = tl::unexpected(std::move(r.error()).Wrap("thaw"));
    }
  }
  return st;
}

Result<store::OperationRecord> Platform::SnapshotSandbox(const std::string& id) {
  auto sb = impl_->Find(id);
  if (!sb) return Fail(Errc::kNotFound, "no sandbox " + id);
  SPACE_TRY(impl_->AdmitDisk("snapshot"));
  store::OperationRecord op;
  store::SnapshotRecord snap;
  {
    std::unique_lock l(sb->mu, std::try_to_lock);
    if (!l.owns_lock() || !sb->busy_op.empty())
      return Fail(Errc::kConflict, "sandbox " + id + " has an operation in progress; try again");
    if (!Snapshottable(sb->rec.state))
      return Fail(Errc::kConflict, "cannot snapshot sandbox " + id + ": it is " + sb->rec.state);
    SPACE_TRY(impl_->RefuseWithVolumes(sb->rec, "snapshotted"));
    snap.id = NewId("snap");
    snap.sandbox_id = id;
    auto* srt = impl_->SnapshotRuntime(sb->rec.runtime);
    // An own-disk runtime's snapshot is "full" when it says it keeps memory (microvm).
    const std::vector<std::string> kinds = srt ? srt->Caps().snapshot_kinds : std::vector<std::string>{};
    snap.kind = std::find(kinds.begin(), kinds.end(), "full") != kinds.end() ? "full" : "filesystem";
    snap.state = "creating";
    snap.source = SourceOf(sb->rec);
    snap.created_ms = NowUnixMillis();
    op.id = NewId("op");
    op.kind = "snapshot";
    op.target = id;
    op.state = "pending";
    op.request = {{"snapshot_id", snap.id}};
    op.created_ms = op.updated_ms = snap.created_ms;
    SPACE_TRY(impl_->store->PutSnapshot(snap));
    SPACE_TRY(impl_->store->PutOperation(op));
    sb->busy_op = op.id;
  }
  impl_->Enqueue([impl = impl_.get(), sb, op, sid = snap.id] { impl->RunSnapshot(sb, op, sid); });
  return op;
}

void Platform::Impl::RunSnapshot(std::shared_ptr<Sandbox> sb, store::OperationRecord op,
                                 std::string snap_id) {
  op.state = "running";
  SaveOperation(op);
  Status st;
  {
    std::lock_guard l(sb->mu);
    const int64_t t0 = MonotonicNanos();
    st = Snapshottable(sb->rec.state)
             ? FrozenSnapshot(*sb, snap_id)
             : Status(Fail(Errc::kConflict, "sandbox is " + sb->rec.state));
    spdlog::debug("snapshot {} of {}: {:.1f} ms", snap_id, sb->rec.id, (MonotonicNanos() - t0) / 1e6);
    sb->busy_op.clear();
  }
  auto snap = store->GetSnapshot(snap_id);
  if (st && snap) {
    snap->state = "ready";
    st = store->PutSnapshot(*snap);
    // Measuring the size may walk the whole tree: do it after the operation has finished.
    auto* srt = SnapshotRuntime(sb->rec.runtime);
    Enqueue([this, snap_id, srt] {
      auto rec = store->GetSnapshot(snap_id);
      auto size = srt ? srt->SnapshotSize(snap_id) : storage->SnapshotSize(snap_id);
      if (rec && size) {
        rec->size = *size;
        (void)store->PutSnapshot(*rec);
      }
    });
  }
  if (!st) {
    (void)DeleteSnapshotData(sb->rec.runtime, snap_id);
    (void)store->DeleteSnapshot(snap_id);
  }
  self->notifier().Notify("sb:" + sb->rec.id);
  FinishOperation(op, st, {{"snapshot_id", snap_id}, {"sandbox_id", sb->rec.id}});
}

Result<std::vector<store::SnapshotRecord>> Platform::ListSnapshots(const std::string& sandbox_id) {
  if (!sandbox_id.empty() && !impl_->Find(sandbox_id)) {
    // A deleted sandbox's snapshots are still listed by sandbox id if any exist.
    auto snaps = impl_->store->ListSnapshots(sandbox_id);
    if (snaps && snaps->empty()) return Fail(Errc::kNotFound, "no sandbox " + sandbox_id);
    return snaps;
  }
  return impl_->store->ListSnapshots(sandbox_id);
}

Result<store::SnapshotRecord> Platform::GetSnapshot(const std::string& snapshot_id) {
  return impl_->store->GetSnapshot(snapshot_id);
}

Status Platform::DeleteSnapshot(const std::string& snapshot_id) {
  auto snap = impl_->store->GetSnapshot(snapshot_id);
  if (!snap) return tl::unexpected(snap.error());
  if (snap->state == "creating")
    return Fail(Errc::kConflict, "snapshot " + snapshot_id + " is still being taken");
  SPACE_TRY_WRAP(impl_->DeleteSnapshotData(JsonStringOr(snap->source, "runtime", ""), snapshot_id),
                 "delete snapshot " + snapshot_id);
  return impl_->store->DeleteSnapshot(snapshot_id);
}

Result<std::pair<store::OperationRecord, std::vector<store::SandboxRecord>>> Platform::Fork(
    const std::string& id, int count) {
  if (count < 1 || count > kMaxFork)
    return Fail(Errc::kInvalidArgument, "count must be 1.." + std::to_string(kMaxFork));
  auto sb = impl_->Find(id);
  if (!sb) return Fail(Errc::kNotFound, "no sandbox " + id);
  SPACE_TRY(impl_->AdmitDisk("fork"));
  store::OperationRecord op;
  std::vector<std::shared_ptr<Sandbox>> children;
  std::vector<store::SandboxRecord> recs;
  {
    std::unique_lock l(sb->mu, std::try_to_lock);
    if (!l.owns_lock() || !sb->busy_op.empty())
      return Fail(Errc::kConflict, "sandbox " + id + " has an operation in progress; try again");
    if (sb->rec.state != "running" && sb->rec.state != "paused")
      return Fail(Errc::kConflict, "cannot fork sandbox " + id + ": it is " + sb->rec.state);
    SPACE_TRY(impl_->RefuseWithVolumes(sb->rec, "forked"));
    op.id = NewId("op");
    op.kind = "fork";
    op.target = id;
    op.state = "pending";
    op.created_ms = op.updated_ms = NowUnixMillis();
    const Json* lj = JsonField(sb->rec.spec, "limits");
    auto admitted = impl_->AdmitMemory(lj ? JsonIntOr(*lj, "memory_bytes", 0) : 0, count);
    if (!admitted) return tl::unexpected(admitted.error());
    // The children inherit the parent's configuration; each gets its own record now so
    // the caller learns their ids at once.
    for (int i = 0; i < count; ++i) {
      auto child = std::make_shared<Sandbox>();
      child->rec = sb->rec;
      child->rec.id = NewId("sb");
      child->rec.state = "creating";
      child->rec.reason.clear();
      child->rec.next_stream = 1;
      child->rec.spec["forked_from"] = id;
      child->rec.spec["expires_ms"] = 0;
      child->rec.spec.erase("net");  // each child gets its own address
      child->rec.created_ms = child->rec.updated_ms = NowUnixMillis();
      children.push_back(child);
      recs.push_back(child->rec);
    }
    Json ids = Json::array();
    for (const auto& r : recs) ids.push_back(r.id);
    op.request = {{"count", count}, {"sandboxes", ids}};
    op.result = {{"sandbox_ids", ids}};  // from the start, so clients can follow each fork
    if (impl_->config.admit_sandbox) {
      for (size_t i = 0; i < recs.size(); ++i) {
        if (auto st = impl_->config.admit_sandbox(recs[i]); !st) {
          for (size_t j = 0; j < i && impl_->config.sandbox_gone; ++j) impl_->config.sandbox_gone(recs[j].id);
          return tl::unexpected(st.error());
        }
      }
    }
    SPACE_TRY(impl_->store->PutOperation(op));
    for (const auto& child : children) {
      SPACE_TRY(impl_->store->PutSandbox(child->rec));
      impl_->NoteCommit(child->rec);
    }
    sb->busy_op = op.id;
  }
  {
    std::lock_guard lock(impl_->mu);
    for (const auto& child : children) impl_->sandboxes[child->rec.id] = child;
  }
  impl_->Enqueue([impl = impl_.get(), sb, op, children] { impl->RunFork(sb, op, children); });
  return std::make_pair(op, recs);
}

void Platform::Impl::RunFork(std::shared_ptr<Sandbox> sb, store::OperationRecord op,
                             std::vector<std::shared_ptr<Sandbox>> children) {
  op.state = "running";
  SaveOperation(op);
  // One frozen snapshot of the parent; every child is a writable snapshot of it (btrfs:
  // milliseconds each). The intermediate snapshot is not a user-visible record: recovery
  // removes it as an orphan if the daemon dies here.
  const std::string base = NewId("snap");
  Status st;
  {
    std::lock_guard l(sb->mu);
    const int64_t t0 = MonotonicNanos();
    st = FrozenSnapshot(*sb, base);
    spdlog::debug("fork {}: parent snapshot {:.1f} ms", sb->rec.id, (MonotonicNanos() - t0) / 1e6);
    sb->busy_op.clear();
  }
  CrashPoint("fork.parent_snapshot");
  Json results = Json::array();
  size_t ok = 0;
  for (auto& child : children) {
    std::lock_guard l(child->mu);
    Status cst = st ? BringUp(child, "", base)
                    : Status(tl::unexpected(Error(st.error()).Wrap("snapshot parent")));
    if (!st) {
      child->rec.state = "error";
      child->rec.reason = "fork failed: " + cst.error().message;
      (void)SaveSandbox(*child);
    }
    CrashPoint("fork.child");
    counters.CountCreate(child->rec.runtime, "fork", cst ? "succeeded" : "failed",
                         (NowUnixMillis() - child->rec.created_ms) / 1000.0);
    Json r = {{"id", child->rec.id}, {"state", child->rec.state}, {"error", nullptr}};
    if (cst) {
      ++ok;
    } else {
      r["error"] = {{"code", std::string(ErrcName(cst.error().code))},
                    {"message", cst.error().message}};
    }
    results.push_back(r);
  }
  if (st) (void)DeleteSnapshotData(sb->rec.runtime, base);
  Status overall = ok > 0 ? Ok()
                          : Status(Fail(st ? Errc::kInternal : st.error().code,
                                        "no fork succeeded" +
                                            (st ? std::string() : ": " + st.error().message)));
  FinishOperation(op, overall, {{"sandboxes", results}, {"sandbox_id", sb->rec.id}});
}

void Platform::Impl::ScheduledSnapshots(const std::shared_ptr<Sandbox>& sb, int64_t now) {
  std::string id;
  int64_t keep = 0;
  {
    std::unique_lock l(sb->mu, std::try_to_lock);
    if (!l.owns_lock() || !sb->busy_op.empty() || sb->rec.state != "running") return;
    int64_t every = JsonIntOr(sb->rec.spec, "snapshot_every_s", 0);
    if (every <= 0) return;
    int64_t last = JsonIntOr(sb->rec.spec, "last_snapshot_ms", 0);
    if (last == 0) {
      // The schedule starts when the sandbox first runs.
      sb->rec.spec["last_snapshot_ms"] = now;
      (void)SaveSandbox(*sb);
      return;
    }
    if (now - last < every * 1000) return;
    sb->rec.spec["last_snapshot_ms"] = now;
    (void)SaveSandbox(*sb);
    id = sb->rec.id;
    keep = JsonIntOr(sb->rec.spec, "keep_last", 0);
  }
  auto op = self->SnapshotSandbox(id);
  if (!op) {
    spdlog::warn("sandbox {}: scheduled snapshot: {}", id, op.error().message);
    return;
  }
  if (keep <= 0) return;
  // Prune the oldest ready snapshots beyond keep_last (the one being taken counts).
  auto snaps = store->ListSnapshots(id);
  if (!snaps) return;
  int64_t excess = static_cast<int64_t>(snaps->size()) - keep;
  for (const auto& snap : *snaps) {
    if (excess <= 0) break;
    if (snap.state != "ready") continue;
    if (self->DeleteSnapshot(snap.id)) --excess;
  }
}

}  // namespace space::core
