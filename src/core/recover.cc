// Platform::Recover: reconciling the store with what really runs after a daemon restart
// (interrupted operations finished or rolled back, agents reattached, orphans removed,
// the network data plane rebuilt).
#include <dirent.h>
#include <spdlog/spdlog.h>

#include <set>

#include "core/internal.h"
#include "sys/sys.h"

namespace space::core {

Status Platform::Recover() {
  Impl& impl = *impl_;
  // Volumes first: a sandbox that still runs keeps its binds of them (its own mount
  // namespace holds them), and one that is woken later binds them again.
  impl.RecoverVolumes();
  auto recs = impl.store->ListSandboxes();
  if (!recs) return tl::unexpected(recs.error());
  std::set<std::string> keep_instances, keep_roots, keep_logs;
  // Template build logs (template_build.cc) outlive the builds. Build sandboxes ("bld-...")
  // have no record, so their instances and roots are removed below as orphans, and a
  // build operation left pending or running is marked failed with the others.
  keep_logs.insert("templates");
  for (auto& rec : *recs) {
    auto sb = std::make_shared<Sandbox>();
    sb->rec = rec;
    sb->last_activity_ms = NowUnixMillis();
    std::lock_guard l(sb->mu);
    auto* rt = impl.RuntimeFor(rec);
    keep_roots.insert(rec.id);
    keep_logs.insert(rec.id);
    if (rec.state == "creating" || rec.state == "deleting" || !rt) {
      // Interrupted create: roll back. Interrupted delete: finish it.
      bool deleting = rec.state == "deleting";
      (void)impl.DestroyInstance(rt, rec.id);
      if (deleting) {
        auto st = impl.Teardown(*sb);
        if (st) {
          keep_roots.erase(rec.id);
          keep_logs.erase(rec.id);
          spdlog::info("recovery: finished deleting sandbox {}", rec.id);
          continue;
        }
        sb->rec.state = "error";
        sb->rec.reason = "delete interrupted by a daemon restart and failed: " + st.error().message;
      } else {
        (void)impl.storage->DeleteRoot(rec.id);
        sb->rec.state = "error";
        sb->rec.reason = rt ? "creation was interrupted by a daemon restart"
                            : "runtime " + rec.runtime + " is not available";
      }
      SPACE_TRY(impl.SaveSandbox(*sb));
    } else if (rec.state == "running" || rec.state == "paused") {
      SPACE_TRY(impl.LoadLiveCommands(*sb));
      // After a reboot an overlay root is no longer mounted (no-op on btrfs). Runtimes
      // that keep their own disk (microvm) have no storage root.
      if (auto st = rt && rt->Caps().own_disk ? Status(Ok()) : impl.storage->Remount(rec.id); !st)
        spdlog::warn("recovery: sandbox {}: remount root: {}", rec.id, st.error().message);
      auto state = rt->Inspect(rec.id);
      bool alive = state && (*state == runtime::InstanceState::kRunning ||
                             *state == runtime::InstanceState::kPaused);
      if (alive) {
        keep_instances.insert(rec.id);
        if (*state == runtime::InstanceState::kPaused && rec.state == "running") {
          // Frozen by an operation the daemon did not finish (pause, snapshot, fork):
          // roll back to what the record says.
          (void)rt->Resume(rec.id);
          state = runtime::InstanceState::kRunning;
        }
        if (*state == runtime::InstanceState::kPaused) {
          sb->rec.state = "paused";  // the agent answers after resume
        } else {
          sb->rec.state = "running";
          auto st = impl.ConnectAgent(sb, 5000);
          if (!st) {
            alive = false;
            spdlog::warn("recovery: sandbox {}: agent unreachable: {}", rec.id, st.error().message);
          } else {
            rt->Adopted(rec.id);
          }
        }
        if (alive && sb->rec.state != rec.state) SPACE_TRY(impl.SaveSandbox(*sb));
      }
      if (!alive) {
        impl.LoseCommands(*sb, "the sandbox's processes died while spaced was down");
        keep_instances.erase(rec.id);
        (void)impl.DestroyInstance(rt, rec.id);
        sb->rec.state = "error";
        sb->rec.reason = "the sandbox's processes died while spaced was down";
        SPACE_TRY(impl.SaveSandbox(*sb));
      }
    } else {
      // error / suspended (and an interrupted suspend or wake, which end suspended): no
      // instance should run; the root filesystem is kept.
      if (rec.state == "suspending" || rec.state == "waking") {
        sb->rec.state = "suspended";
        sb->rec.reason = rec.state == "waking" ? "wake was interrupted by a daemon restart" : "";
        SPACE_TRY(impl.SaveSandbox(*sb));
      }
      sb->next_stream = 1;
      SPACE_TRY(impl.LoadLiveCommands(*sb));
      if (sb->rec.state == "suspended" && rt->Caps().suspend_keeps_processes) {
        // The instance's saved state holds its processes: they continue on wake.
        keep_instances.insert(rec.id);
      } else if (sb->rec.state == "suspended" && rt->Caps().own_disk) {
        // The runtime holds the disk (destroy would lose it) but no processes: make sure
        // none run (an interrupted suspend or wake), keep the rest for wake.
        impl.LoseCommands(*sb, "the sandbox is in state " + rec.state);
        if (auto st = rt->Suspend(rec.id); !st)
          spdlog::warn("recovery: sandbox {}: suspend: {}", rec.id, st.error().message);
        keep_instances.insert(rec.id);
      } else {
        impl.LoseCommands(*sb, "the sandbox is in state " + rec.state);
        (void)impl.DestroyInstance(rt, rec.id);
      }
    }
    impl.AddSandbox(sb);
  }
  // Operations left pending or running were interrupted.
  auto ops = impl.store->ListOperations(0, "");
  if (!ops) return tl::unexpected(ops.error());
  for (auto& op : *ops) {
    if (op.state != "pending" && op.state != "running") continue;
    if (op.kind == "delete" && !impl.Find(op.target)) {
      impl.FinishOperation(op, Ok(), {{"sandbox_id", op.target}});
    } else {
      impl.FinishOperation(op, Fail(Errc::kUnavailable, "interrupted by a daemon restart"));
    }
  }
  // Snapshots: one being taken when the daemon died is complete if storage has it (the
  // snapshot is a single atomic step); otherwise its record goes.
  std::set<std::string> known_snapshots;
  if (auto snaps = impl.store->ListSnapshots()) {
    for (auto snap : *snaps) {
      if (snap.state == "ready") {
        known_snapshots.insert(snap.id);
      } else if (auto* srt = impl.SnapshotRuntime(JsonStringOr(snap.source, "runtime", ""));
                 srt ? srt->HasSnapshot(snap.id) : impl.storage->HasSnapshot(snap.id)) {
        snap.state = "ready";
        if (auto size = srt ? srt->SnapshotSize(snap.id) : impl.storage->SnapshotSize(snap.id))
          snap.size = *size;
        (void)impl.store->PutSnapshot(snap);
        known_snapshots.insert(snap.id);
      } else {
        (void)impl.store->DeleteSnapshot(snap.id);
      }
    }
  }
  for (const auto& id : impl.storage->ListSnapshots()) {
    if (known_snapshots.count(id)) continue;
    spdlog::info("recovery: removing orphan snapshot {}", id);
    (void)impl.storage->DeleteSnapshot(id);
  }
  for (auto& [name, rt] : impl.runtimes) {
    if (!rt->Caps().own_disk) continue;
    for (const auto& id : rt->ListSnapshots()) {
      if (known_snapshots.count(id)) continue;
      spdlog::info("recovery: removing orphan {} snapshot {}", name, id);
      (void)rt->DeleteSnapshot(id);
    }
  }
  // Orphans: instances, roots and logs without a sandbox record.
  for (auto& [name, rt] : impl.runtimes) {
    auto ids = rt->List();
    if (!ids) {
      spdlog::warn("recovery: list {} instances: {}", name, ids.error().message);
      continue;
    }
    for (const auto& id : *ids) {
      if (keep_instances.count(id)) continue;
      auto sb = impl.Find(id);
      if (sb && sb->rec.runtime == name && (sb->rec.state == "running" || sb->rec.state == "paused"))
        continue;
      spdlog::info("recovery: removing orphan {} instance {}", name, id);
      (void)impl.DestroyInstance(rt.get(), id);
    }
  }
  for (const auto& id : impl.storage->ListRoots()) {
    if (keep_roots.count(id)) continue;
    spdlog::info("recovery: removing orphan root filesystem {}", id);
    (void)impl.storage->DeleteRoot(id);
  }
  if (DIR* d = ::opendir((config_.data_dir + "/logs").c_str())) {
    std::vector<std::string> names;
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != ".." && !keep_logs.count(n)) names.push_back(n);
    }
    ::closedir(d);
    for (const auto& n : names) (void)sys::RemoveAll(config_.data_dir + "/logs/" + n);
  }
  (void)sys::RemoveAll(config_.data_dir + "/tmp");
  (void)sys::MkdirAll(config_.data_dir + "/tmp", 0700);
  impl.ReconcileNetwork();
  return Ok();
}

}  // namespace space::core
