// Sandbox creation: a request checked and turned into a sandbox record, then its instance
// brought up (root filesystem, runtime, agent) on a worker.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <future>
#include <optional>

#include "core/internal.h"
#include "core/templates.h"
#include "sys/sys.h"

namespace space::core {

namespace {

Json LimitsJson(const runtime::Limits& l, int64_t output_bytes) {
  return {{"memory_bytes", l.memory_bytes}, {"pids", l.pids}, {"cpus", l.cpus},
          {"disk_bytes", l.disk_bytes}, {"nofile", l.nofile}, {"output_bytes", output_bytes}};
}

// Arms the sandbox's timeout from now (a sandbox's life is counted from when it runs).
void ArmExpiry(store::SandboxRecord& rec) {
  int64_t timeout_s = JsonIntOr(rec.spec, "timeout_s", 0);
  rec.spec["expires_ms"] = timeout_s > 0 ? NowUnixMillis() + timeout_s * 1000 : 0;
}

// Whether the template names a start command (RunStartCommand runs it).
bool HasStartCommand(const store::SandboxRecord& rec) {
  const Json* tc = JsonField(rec.spec, "template_config");
  const Json* start = tc ? JsonField(*tc, "start_cmd") : nullptr;
  return start && start->is_array() && !start->empty();
}

Status ValidateEnvKey(const std::string& k) {
  if (k.empty() || k.size() > 1024 || k.find('=') != std::string::npos ||
      k.find('\0') != std::string::npos)
    return Fail(Errc::kInvalidArgument, "invalid environment variable name \"" + k + "\"");
  return Ok();
}

// A sandbox id a caller picks (a cluster gateway does) has the shape of the ones made
// here, "sb-" and 16 of [a-z0-9]: ids name cgroups, paths and hosts.
Status ValidateSandboxId(const std::string& id) {
  bool ok = id.size() == 19 && id.rfind("sb-", 0) == 0;
  for (size_t i = 3; ok && i < id.size(); ++i)
    ok = (id[i] >= 'a' && id[i] <= 'z') || (id[i] >= '0' && id[i] <= '9');
  if (!ok) return Fail(Errc::kInvalidArgument, "a sandbox id is sb- and 16 of [a-z0-9], not \"" + id + "\"");
  return Ok();
}

}  // namespace

Result<std::shared_ptr<Platform::Sandbox>> Platform::Impl::NewSandbox(
    const CreateSandboxRequest& req, std::string* source_digest, std::string* source_snapshot) {
  std::string template_ref, template_digest, rt;
  Json template_config = Json::object();
  Json base_env = Json::object();
  std::vector<VolumeMount> volume_mounts = req.volumes;
  if (!req.snapshot_id.empty()) {
    auto snap = store->GetSnapshot(req.snapshot_id);
    if (!snap) {
      if (snap.error().code == Errc::kNotFound)
        return Fail(Errc::kNotFound, "unknown snapshot " + req.snapshot_id);
      return tl::unexpected(snap.error());
    }
    if (snap->state != "ready")
      return Fail(Errc::kConflict, "snapshot " + req.snapshot_id + " is " + snap->state);
    template_ref = JsonStringOr(snap->source, "template", "");
    template_digest = JsonStringOr(snap->source, "template_digest", "");
    rt = JsonStringOr(snap->source, "runtime", config.default_runtime);
    if (const Json* tc = JsonField(snap->source, "template_config")) template_config = *tc;
    if (const Json* e = JsonField(snap->source, "env"); e && e->is_object()) base_env = *e;
    // The source's proxy settings belong to its own network attachment.
    for (const char* k : {"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "NO_PROXY", "no_proxy"})
      base_env.erase(k);
    // A restore mounts the volumes its source had (their contents now, not at the
    // snapshot: volumes are not part of a snapshot), unless the request names its own.
    if (const Json* vs = JsonField(snap->source, "volumes"); vs && vs->is_array() && volume_mounts.empty()) {
      for (const auto& v : *vs)
        volume_mounts.push_back({JsonStringOr(v, "id", ""), JsonStringOr(v, "path", ""),
                                 JsonBoolOr(v, "read_only", false)});
    }
    *source_snapshot = req.snapshot_id;
  } else {
    std::string ref = req.template_ref.empty() ? config.default_template : req.template_ref;
    Result<store::TemplateRecord> tmpl = Fail(Errc::kNotFound, "");
    if (StartsWith(ref, "sha256:")) {
      // Pinned by content digest.
      if (ref.size() != 7 + 64 || ref.find_first_not_of("0123456789abcdef", 7) != std::string::npos)
        return Fail(Errc::kInvalidArgument, "invalid template digest \"" + ref + "\"");
      tmpl = store->GetTemplateByDigest(ref);
      if (!tmpl && tmpl.error().code == Errc::kNotFound)
        return Fail(Errc::kNotFound, "unknown template " + ref);
      if (!tmpl) return tl::unexpected(tmpl.error());
      template_ref = tmpl->name + ":" + tmpl->tag;
    } else {
      auto parsed = ParseTemplateRef(ref);
      if (!parsed) return tl::unexpected(parsed.error());
      tmpl = store->GetTemplate(parsed->first, parsed->second);
      if (!tmpl) {
        if (tmpl.error().code == Errc::kNotFound)
          return tl::unexpected(MissingTemplate(parsed->first, parsed->second));
        return tl::unexpected(tmpl.error());
      }
      template_ref = parsed->first + ":" + parsed->second;
    }
    template_digest = tmpl->digest;
    template_config = tmpl->config;
    rt = config.default_runtime;
    *source_digest = tmpl->digest;
  }
  if (!req.runtime.empty()) {
    // A full snapshot (memory and devices) only starts under the runtime that took it;
    // a filesystem snapshot only under a runtime that uses the storage driver.
    if (!req.snapshot_id.empty() && req.runtime != rt &&
        (SnapshotRuntime(rt) || SnapshotRuntime(req.runtime)))
      return Fail(Errc::kInvalidArgument, "snapshot " + req.snapshot_id + " was taken by runtime " +
                                              rt + " and cannot start a " + req.runtime + " sandbox");
    rt = req.runtime;
  }
  if (runtimes.find(rt) == runtimes.end()) {
    std::string known;
    for (const auto& [name, r] : runtimes) known += (known.empty() ? "" : ", ") + name;
    return Fail(Errc::kInvalidArgument, "unknown runtime \"" + rt + "\" (known: " + known + ")");
  }
  if (auto d = runtimes.at(rt)->Describe(); !d.available)
    return Fail(Errc::kInvalidArgument, "runtime " + rt + " is not available on this host: " + d.why_not);
  auto volumes = ResolveVolumes(volume_mounts, runtimes.at(rt).get());
  if (!volumes) return tl::unexpected(volumes.error());
  runtime::Limits l = req.limits;
  if (l.disk_bytes == 0) l.disk_bytes = config.default_disk_bytes;  // guards: every sandbox a disk
  if (l.memory_bytes != 0 && l.memory_bytes < (16ll << 20))
    return Fail(Errc::kInvalidArgument, "limits.memory_bytes must be 0 (unlimited) or >= 16 MiB");
  if (l.pids != 0 && l.pids < 8) return Fail(Errc::kInvalidArgument, "limits.pids must be 0 or >= 8");
  if (l.cpus < 0 || l.cpus > 1024) return Fail(Errc::kInvalidArgument, "limits.cpus out of range");
  if (l.disk_bytes != 0 && l.disk_bytes < (1ll << 20))
    return Fail(Errc::kInvalidArgument, "limits.disk_bytes must be 0 (unlimited) or >= 1 MiB");
  if (l.nofile != 0 && (l.nofile < 64 || l.nofile > (1 << 20)))
    return Fail(Errc::kInvalidArgument, "limits.nofile must be 0 (runtime default) or 64..1048576");
  auto policy = net::ParsePolicy(req.network, network ? network->presets() : net::Presets{});
  if (!policy) return tl::unexpected(policy.error());
  if (policy->internet()) {
    if (!network) return Fail(Errc::kUnavailable, "spaced runs without networking");
    if (!runtimes.at(rt)->Caps().network)
      return Fail(Errc::kInvalidArgument,
                  "the " + rt + " runtime has no sandbox networking yet (network.mode must be none)");
  }
  net::AssignPlaceholders(*policy);
  Json env = base_env;
  for (const auto& s : policy->secrets) env[s.name] = s.placeholder;
  for (const auto& [k, v] : req.env) {
    SPACE_TRY(ValidateEnvKey(k));
    if (v.find('\0') != std::string::npos)
      return Fail(Errc::kInvalidArgument, "environment value of " + k + " contains NUL");
    env[k] = v;
  }
  if (req.metadata.size() > 64) return Fail(Errc::kInvalidArgument, "at most 64 metadata labels");
  Json meta = Json::object();
  for (const auto& [k, v] : req.metadata) {
    if (k.empty() || k.size() > 256 || v.size() > 4096)
      return Fail(Errc::kInvalidArgument, "metadata keys must be 1-256 bytes, values <= 4096");
    meta[k] = v;
  }
  int64_t timeout_s = req.timeout_s < 0 ? config.default_timeout_s : req.timeout_s;
  if (timeout_s > 366ll * 24 * 3600) return Fail(Errc::kInvalidArgument, "timeout longer than a year");
  std::string on_timeout = req.on_timeout.empty() ? "delete" : req.on_timeout;
  if (on_timeout != "delete" && on_timeout != "pause" && on_timeout != "suspend")
    return Fail(Errc::kInvalidArgument, "on_timeout must be delete, pause or suspend");
  if (req.idle_timeout_s < 0) return Fail(Errc::kInvalidArgument, "idle_timeout must be >= 0");
  if (req.snapshot_every_s < 0 || req.keep_last < 0)
    return Fail(Errc::kInvalidArgument, "snapshot_every and keep_last must be >= 0");
  if (!volumes->empty() && !runtimes.at(rt)->Caps().snapshot_with_volumes) {
    // What would need the VM's memory saved later is refused now (docs/volumes.md).
    const std::string why = "the " + rt + " runtime cannot save a VM's memory while it shares volumes (virtiofs)";
    if (!req.snapshot_id.empty())
      return Fail(Errc::kInvalidArgument, "snapshot " + req.snapshot_id +
                                              " holds a VM's memory, which cannot gain volumes: " + why +
                                              "; create from a template to mount volumes");
    if (on_timeout == "suspend")
      return Fail(Errc::kInvalidArgument, "on_timeout suspend with volumes: " + why + "; use pause or delete");
    if (req.snapshot_every_s > 0)
      return Fail(Errc::kInvalidArgument, "snapshot_every with volumes: " + why);
  }

  auto sb = std::make_shared<Sandbox>();
  sb->rec.id = NewId("sb");
  if (!req.id.empty()) {
    SPACE_TRY(ValidateSandboxId(req.id));
    auto have = store->GetSandbox(req.id);
    if (have) return Fail(Errc::kConflict, "sandbox " + req.id + " exists already");
    if (have.error().code != Errc::kNotFound) return tl::unexpected(have.error());
    sb->rec.id = req.id;
  }
  sb->rec.template_ref = template_ref;
  sb->rec.template_digest = template_digest;
  sb->rec.runtime = rt;
  sb->rec.state = "creating";
  const int64_t output_bytes = req.output_bytes < 0 ? config.max_output_bytes : req.output_bytes;
  sb->rec.spec = {{"limits", LimitsJson(l, output_bytes)}, {"env", env}, {"network", policy->ToJson(true)},
                  {"template_config", template_config}};
  if (!req.snapshot_id.empty()) sb->rec.spec["from_snapshot"] = req.snapshot_id;
  if (!volumes->empty()) sb->rec.spec["volumes"] = *volumes;
  sb->rec.metadata = meta;
  sb->rec.created_ms = sb->rec.updated_ms = NowUnixMillis();
  sb->rec.spec["timeout_s"] = timeout_s;
  sb->rec.spec["on_timeout"] = on_timeout;
  sb->rec.spec["auto_resume"] = req.auto_resume;
  sb->rec.spec["idle_timeout_s"] = req.idle_timeout_s;
  sb->rec.spec["expires_ms"] = 0;  // armed when the sandbox is running (BringUp)
  sb->rec.spec["snapshot_every_s"] = req.snapshot_every_s;
  sb->rec.spec["keep_last"] = req.keep_last;
  sb->last_activity_ms = sb->rec.created_ms;
  return sb;
}

Result<std::pair<store::OperationRecord, store::SandboxRecord>> Platform::CreateSandbox(
    const CreateSandboxRequest& req) {
  const int64_t t0 = MonotonicNanos();
  std::string digest, snapshot;
  SPACE_TRY(impl_->FetchMissingTemplate(req));
  // Held until the record is stored: the volumes it names are not deleted meanwhile.
  std::shared_lock volumes_held(impl_->volumes_mu);
  auto made = impl_->NewSandbox(req, &digest, &snapshot);
  if (!made) return tl::unexpected(made.error());
  SPACE_TRY(impl_->AdmitDisk("create"));
  // A warm sandbox has an id of its own: not when the request names one.
  if (auto member = req.id.empty() ? impl_->ClaimFromPool(req) : nullptr) {
    // A warm sandbox takes on what the request asked for; its instance is already running.
    if (impl_->config.admit_sandbox) {
      store::SandboxRecord probe;
      {
        std::lock_guard l(member->mu);
        probe = member->rec;
      }
      probe.metadata = (*made)->rec.metadata;
      if (auto st = impl_->config.admit_sandbox(probe); !st) {
        (void)DeleteSandbox(probe.id);  // out of the pool already; the pool refills
        return tl::unexpected(st.error());
      }
    }
    store::OperationRecord op;
    std::lock_guard l(member->mu);
    const store::SandboxRecord& want = (*made)->rec;
    member->rec.metadata = want.metadata;
    for (const char* key : {"env", "network", "timeout_s", "on_timeout", "auto_resume",
                            "idle_timeout_s", "snapshot_every_s", "keep_last"}) {
      member->rec.spec[key] = want.spec[key];
    }
    member->rec.spec.erase("pool");
    member->rec.spec["limits"]["output_bytes"] = want.spec["limits"]["output_bytes"];
    member->output_quota = want.spec["limits"].value("output_bytes", int64_t{0});
    member->rec.created_ms = NowUnixMillis();
    int64_t timeout_s = JsonIntOr(member->rec.spec, "timeout_s", 0);
    member->rec.spec["expires_ms"] = timeout_s > 0 ? member->rec.created_ms + timeout_s * 1000 : 0;
    member->last_activity_ms = member->rec.created_ms;
    op.id = NewId("op");
    op.kind = "create";
    op.target = member->rec.id;
    op.state = "succeeded";
    op.request = {{"warm", true}};
    op.result = {{"sandbox_id", member->rec.id}, {"warm", true}};
    op.created_ms = op.updated_ms = member->rec.created_ms;
    member->rec.updated_ms = member->rec.created_ms;
    SPACE_TRY(impl_->store->PutSandboxAndOperation(member->rec, op));
    impl_->NoteCommit(member->rec);
    notifier_.Notify("sb:" + member->rec.id);
    impl_->refill_due_ms = NowUnixMillis() + 250;
    impl_->counters.CountCreate(member->rec.runtime, "warm_pool", "succeeded",
                                (MonotonicNanos() - t0) / 1e9);
    return std::make_pair(op, member->rec);
  }
  auto sb = *made;
  // Memory admission: held until the record is stored, so concurrent creates add up.
  auto admitted = impl_->AdmitMemory(req.limits.memory_bytes, 1);
  if (!admitted) return tl::unexpected(admitted.error());
  // Counted from here until RunCreate is done with it.
  const int creating = impl_->creating.fetch_add(1);
  if (impl_->config.max_creating > 0 && creating >= impl_->config.max_creating) {
    impl_->creating.fetch_sub(1);
    impl_->counters.CountCreate(sb->rec.runtime, snapshot.empty() ? "template" : "snapshot",
                                "rejected", -1);
    return Fail(Errc::kResourceExhausted,
                std::to_string(creating) + " sandboxes are being created (the limit is " +
                    std::to_string(impl_->config.max_creating) + "); retry later");
  }
  struct Uncount {
    std::atomic<int>* n;
    ~Uncount() { if (n) n->fetch_sub(1); }
  } uncount{&impl_->creating};  // until the job is queued
  store::OperationRecord op;
  op.id = NewId("op");
  op.kind = "create";
  op.target = sb->rec.id;
  op.state = "pending";
  op.request = {{"snapshot", snapshot}};
  op.created_ms = op.updated_ms = sb->rec.created_ms;
  if (impl_->config.admit_sandbox) SPACE_TRY(impl_->config.admit_sandbox(sb->rec));
  // The job starts before the record is committed and makes the root filesystem while
  // the commit waits for the disk (the two fsyncs overlap); it goes on only once the
  // record is in. A crash in between leaves a root without a record, which recovery
  // removes as an orphan. Only for ids made here: a caller's id might be another
  // create's, and its root is not this one's to remove.
  struct Recorded {
    std::promise<bool> p;
    bool set = false;
    void Set(bool ok) { if (!set) p.set_value(ok); set = true; }
    ~Recorded() { Set(false); }
  } recorded;
  std::shared_future<bool> go = recorded.p.get_future().share();
  const bool early_root = req.id.empty();
  auto job = [impl = impl_.get(), sb, op, digest, snapshot, go] {
    impl->RunCreate(sb, op, digest, snapshot, go);
    impl->creating.fetch_sub(1);
  };
  if (early_root) {
    uncount.n = nullptr;  // the job uncounts it
    impl_->Enqueue(job);
  }
  if (auto st = impl_->store->PutSandboxAndOperation(sb->rec, op); !st) {
    if (impl_->config.sandbox_gone) impl_->config.sandbox_gone(sb->rec.id);
    return tl::unexpected(st.error());
  }
  impl_->NoteCommit(sb->rec);
  impl_->AddSandbox(sb);
  auto rec = sb->rec;
  // Told now, in state creating (GET /v1/events shows the sandbox being created, then
  // its change to running), before the job can change it.
  notifier_.Notify("sb:" + rec.id);
  notifier_.Notify("op:" + op.id);
  recorded.Set(true);  // after the copy above: the job changes sb->rec from now on
  if (!early_root) {
    uncount.n = nullptr;  // RunCreate uncounts it
    impl_->Enqueue(job);
  }
  return std::make_pair(op, rec);
}

Result<std::string> Platform::Impl::MakeRoot(const store::SandboxRecord& rec, const std::string& digest,
                                             const std::string& snapshot) {
  const Json* lj = JsonField(rec.spec, "limits");
  const int64_t disk_bytes = LimitsFromJson(lj ? *lj : Json::object()).disk_bytes;
  // A claimed root is settled (safe from a power loss) by BringUp before it commits.
  auto root = snapshot.empty() ? storage->ClaimRoot(rec.id, DigestHex(digest), disk_bytes)
                               : storage->CreateRootFromSnapshot(rec.id, snapshot, disk_bytes);
  if (!root) return tl::unexpected(std::move(root.error()).Wrap("create root filesystem"));
  storage::ReadAhead(*root, storage::kFirstExec);
  return root;
}

void Platform::Impl::RunCreate(std::shared_ptr<Sandbox> sb, store::OperationRecord op,
                               std::string digest, std::string snapshot,
                               std::shared_future<bool> recorded) {
  // Until `recorded` is ready CreateSandbox may still read sb->rec: read it only.
  std::optional<Result<std::string>> root;
  if (recorded.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
    auto* rt = RuntimeFor(sb->rec);
    if (rt && !rt->Caps().own_disk) root = MakeRoot(sb->rec, digest, snapshot);
  }
  // The operation goes from pending to its end in one step: a "running" state on disk
  // would cost a commit on every create and tell recovery nothing (both are interrupted).
  Status st;
  Json result = {{"sandbox_id", sb->rec.id}};
  bool unrecorded = false;
  {
    std::lock_guard lock(sb->mu);
    st = BringUp(sb, digest, snapshot, &op, result, std::move(root), &recorded, &unrecorded);
  }
  if (unrecorded) return;  // CreateSandbox failed; nobody was told of the sandbox
  if (st) {
    self->notifier().Notify("sb:" + sb->rec.id);
    self->notifier().Notify("op:" + op.id);
  }
  if (!st) FinishOperation(op, st, result);  // success was committed with the sandbox
  counters.CountCreate(sb->rec.runtime, snapshot.empty() ? "template" : "snapshot",
                       st ? "succeeded" : "failed", (NowUnixMillis() - sb->rec.created_ms) / 1000.0);
}

Status Platform::Impl::BringUp(const std::shared_ptr<Sandbox>& sb, const std::string& digest,
                               const std::string& snapshot, store::OperationRecord* done,
                               Json result, std::optional<Result<std::string>> made_root,
                               const std::shared_future<bool>* recorded, bool* unrecorded) {
  auto* rt = RuntimeFor(sb->rec);
  // The instance starts while CreateSandbox commits the record (its fsync is time the
  // start can use); sb->rec is read only until the record is in. A crash before the commit
  // leaves an instance and a root without a record: recovery removes both as orphans.
  bool lost = false;
  std::optional<std::future<Status>> ending;
  // Once BringUp returns (before anyone is told), readers of the store see what it
  // committed: see end_early.
  struct Announce {
    Impl* impl;
    std::string id;
    ~Announce() {
      std::lock_guard l(impl->unannounced_mu);
      impl->unannounced.erase(id);
    }
  } announce{this, sb->rec.id};
  auto await_record = [&]() -> Status {
    if (!recorded || recorded->get()) return Ok();
    lost = true;
    return Fail(Errc::kInternal, "the sandbox's record was not stored");
  };
  // The create's end (the sandbox running, its operation succeeded) committed in the
  // background from a copy of the record, which BringUp applies once the agent has
  // connected and the commit is in. A crash after the commit and before the instance runs
  // leaves a record that says running: recovery finds the instance, adopts it if its
  // agent answers and marks it error otherwise, as for any running sandbox; a create that
  // fails after it commits its failure over it. Nobody hears of the sandbox before both:
  // until BringUp returns, the sandbox and its operation read from the store show as they
  // were (Impl::Unannounced).
  store::SandboxRecord ended_rec;
  auto end_early = [&](const std::shared_ptr<Sandbox>& s, store::OperationRecord& op,
                       const Json& res, const std::shared_future<bool>* rec_in) {
    ended_rec = s->rec;  // CreateSandbox may still read s->rec: only read it here
    {
      std::lock_guard l(unannounced_mu);
      unannounced[s->rec.id] = op;
    }
    ended_rec.state = "running";
    ended_rec.reason.clear();
    ArmExpiry(ended_rec);
    ended_rec.updated_ms = op.updated_ms = NowUnixMillis();
    op.state = "succeeded";
    op.result = res;
    std::optional<std::shared_future<bool>> in;
    if (rec_in) in = *rec_in;
    return std::async(std::launch::async, [this, rec = ended_rec, op, in]() -> Status {
      if (in && !in->get()) return Fail(Errc::kInternal, "the sandbox's record was not stored");
      SPACE_TRY_WRAP(storage->SettleRoot(rec.id), "root filesystem");
      SPACE_TRY(store->PutSandboxAndOperation(rec, op));
      CrashPoint("create.ended");
      return Ok();
    });
  };
  auto run = [&]() -> Status {
    if (!rt) return Fail(Errc::kInvalidArgument, "runtime " + sb->rec.runtime + " is gone");
    const int64_t t0 = MonotonicNanos();
    runtime::InstanceSpec spec;
    if (rt->Caps().own_disk) {
      // The runtime builds the disk itself: from the template's layer, or its snapshot.
      spec = InstanceSpecFor(sb->rec, "");
      spec.snapshot_id = snapshot;
      if (snapshot.empty()) {
        auto layer = storage->LayerPath(DigestHex(digest));
        if (!layer) return tl::unexpected(std::move(layer.error()).Wrap("template layer"));
        spec.template_dir = *layer;
        spec.template_digest = digest;
      }
    } else {
      auto root = made_root ? std::move(*made_root) : MakeRoot(sb->rec, digest, snapshot);
      if (!root) return tl::unexpected(root.error());
      spec = InstanceSpecFor(sb->rec, *root);
    }
    const int64_t t1 = MonotonicNanos();
    CrashPoint("create.root");
    // New processes (from the template, or a snapshot of the filesystem alone): the
    // template's start command runs and is ready before anyone hears of the sandbox.
    const std::vector<std::string> kinds = rt->Caps().snapshot_kinds;
    bool kept = rt->Caps().own_disk && std::find(kinds.begin(), kinds.end(), "full") != kinds.end();
    const bool start_cmd = (snapshot.empty() || !kept) && HasStartCommand(sb->rec);
    const bool networked = StoredPolicy(sb->rec).internet();
    // A networked start writes the sandbox's addresses into its record.
    if (networked) SPACE_TRY(await_record());
    // With nothing left to run in the sandbox before it is answered, the create's end is
    // committed while the instance starts and the agent connects (the commit's fsync
    // overlaps them) rather than after, where the runtime's interrupted starts can be
    // adopted; otherwise, and when a networked start is to write the sandbox's addresses
    // into the record, once the start has returned. See end_early.
    const bool end_early_ok = done && !start_cmd;
    const bool end_before_start = rt->Caps().adopt_interrupted_start && !networked;
    if (end_early_ok && end_before_start) ending = end_early(sb, *done, result, recorded);
    SPACE_TRY_WRAP(StartInstance(*sb, rt, std::move(spec)), "start " + sb->rec.runtime + " instance");
    CrashPoint("create.started");
    if (end_early_ok && !end_before_start) ending = end_early(sb, *done, result, recorded);
    const int64_t t2 = MonotonicNanos();
    PausePoint("create.connect");
    SPACE_TRY_WRAP(FailPoint("create.connect"), "connect to agent");
    SPACE_TRY_WRAP(ConnectAgent(sb, config.agent_connect_timeout_ms), "connect to agent");
    // Made now, not by the first command: a warm-pool claim should not pay for it.
    SPACE_TRY_WRAP(sys::MkdirAll(LogDir(sb->rec.id), 0700), "output log dir");
    const int64_t t3 = MonotonicNanos();
    spdlog::debug("create {}: root {:.1f} ms, start {:.1f} ms, agent {:.1f} ms", sb->rec.id,
                  (t1 - t0) / 1e6, (t2 - t1) / 1e6, (t3 - t2) / 1e6);
    if (ending) {
      Status ended = ending->get();
      ending.reset();
      SPACE_TRY(await_record());
      SPACE_TRY(ended);
      sb->rec.state = ended_rec.state;
      sb->rec.reason.clear();
      sb->rec.spec["expires_ms"] = ended_rec.spec["expires_ms"];
      sb->rec.updated_ms = ended_rec.updated_ms;
      sb->last_activity_ms = NowUnixMillis();
      NoteCommit(sb->rec);
      CrashPoint("create.committed");
      return Ok();
    }
    SPACE_TRY_WRAP(storage->SettleRoot(sb->rec.id), "root filesystem");
    SPACE_TRY(await_record());
    sb->rec.state = "running";
    sb->rec.reason.clear();
    if (start_cmd) SPACE_TRY(RunStartCommand(*sb));
    ArmExpiry(sb->rec);
    sb->last_activity_ms = NowUnixMillis();
    if (!done) return SaveSandbox(*sb);
    // One commit for both: the sandbox is running and its create succeeded.
    sb->rec.updated_ms = done->updated_ms = NowUnixMillis();
    done->state = "succeeded";
    done->result = std::move(result);
    SPACE_TRY(store->PutSandboxAndOperation(sb->rec, *done));
    NoteCommit(sb->rec);
    CrashPoint("create.committed");
    // The caller notifies once it has let go of sb->mu: a client woken by the operation's
    // end may act on the sandbox at once (a snapshot, a transition), and would find it busy.
    return Ok();
  };
  auto st = run();
  if (!st) {
    // An early end's commit lands before the failure's, which overwrites it.
    bool ended = false;
    if (ending) ended = ending->get().has_value();
    if (sb->session) {
      sb->session->Close();
      sb->session.reset();
    }
    (void)DestroyInstance(rt, sb->rec.id);
    (void)storage->DeleteRoot(sb->rec.id);
    if (!lost) (void)await_record();
    if (lost) {
      if (unrecorded) *unrecorded = true;
      return st;
    }
    sb->rec.state = "error";
    sb->rec.reason = "create failed: " + st.error().message;
    if (ended && done) {
      // Undone in the same commit, so that no crash leaves the create succeeded on disk
      // (RunCreate's FinishOperation stores the same failure once more).
      sb->rec.updated_ms = done->updated_ms = NowUnixMillis();
      done->state = "failed";
      done->error_code = std::string(ErrcName(st.error().code));
      done->error_message = st.error().message;
      if (store->PutSandboxAndOperation(sb->rec, *done)) NoteCommit(sb->rec);
      self->notifier().Notify("sb:" + sb->rec.id);
    } else {
      (void)SaveSandbox(*sb);
    }
  }
  return st;
}

}  // namespace space::core
