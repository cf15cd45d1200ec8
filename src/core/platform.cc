// Sandbox lifecycle, operations and crash recovery.
#include <dirent.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>

#include <set>

#include "core/internal.h"
#include "core/templates.h"
#include "sys/sys.h"

namespace space::core {

namespace {

constexpr const char* kDefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

std::string DigestHex(const std::string& digest) {
  return StartsWith(digest, "sha256:") ? digest.substr(7) : digest;
}

Json LimitsJson(const runtime::Limits& l, int64_t output_bytes) {
  return {{"memory_bytes", l.memory_bytes}, {"pids", l.pids}, {"cpus", l.cpus},
          {"disk_bytes", l.disk_bytes}, {"nofile", l.nofile}, {"output_bytes", output_bytes}};
}

runtime::Limits LimitsFromJson(const Json& j) {
  runtime::Limits l;
  l.memory_bytes = JsonIntOr(j, "memory_bytes", l.memory_bytes);
  l.pids = JsonIntOr(j, "pids", l.pids);
  if (const Json* c = JsonField(j, "cpus"); c && c->is_number()) l.cpus = c->get<double>();
  l.disk_bytes = JsonIntOr(j, "disk_bytes", l.disk_bytes);
  l.nofile = JsonIntOr(j, "nofile", l.nofile);
  return l;
}

}  // namespace

runtime::InstanceSpec InstanceSpecFor(const store::SandboxRecord& rec, const std::string& rootfs) {
  runtime::InstanceSpec spec;
  spec.id = rec.id;
  spec.rootfs = rootfs;
  spec.hostname = "sandbox";
  const Json* lj = JsonField(rec.spec, "limits");
  spec.limits = LimitsFromJson(lj ? *lj : Json::object());
  spec.network = Platform::StoredPolicy(rec).internet();
  bool have_path = false;
  if (const Json* tc = JsonField(rec.spec, "template_config")) {
    if (const Json* env = JsonField(*tc, "env"); env && env->is_array()) {
      for (const auto& e : *env) {
        if (!e.is_string()) continue;
        spec.env.push_back(e.get<std::string>());
        if (StartsWith(spec.env.back(), "PATH=")) have_path = true;
      }
    }
  }
  if (!have_path) spec.env.push_back(std::string("PATH=") + kDefaultPath);
  if (const Json* vols = JsonField(rec.spec, "volumes"); vols && vols->is_array()) {
    for (const auto& v : *vols)
      spec.volumes.push_back({JsonStringOr(v, "host_path", ""), JsonStringOr(v, "path", ""),
                              JsonBoolOr(v, "read_only", false)});
  }
  return spec;
}

namespace {

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

// ---------------------------------------------------------------- Notifier

struct Notifier::Entry {
  std::mutex mu;
  Callback cb;
};

std::shared_ptr<void> Notifier::Watch(const std::string& key, Callback cb) {
  auto e = std::make_shared<Entry>();
  e->cb = std::move(cb);
  {
    std::lock_guard lock(mu_);
    entries_.emplace(key, e);
  }
  // The handle clears the callback (so a late Notify does nothing) and the entry.
  return std::shared_ptr<void>(nullptr, [this, key, e](void*) {
    {
      std::lock_guard l(e->mu);
      e->cb = nullptr;
    }
    std::lock_guard lock(mu_);
    auto [b, end] = entries_.equal_range(key);
    for (auto it = b; it != end; ++it) {
      if (it->second == e) {
        entries_.erase(it);
        break;
      }
    }
  });
}

struct Notifier::Subscriber {
  std::mutex mu;
  KeyCallback cb;
};

std::shared_ptr<void> Notifier::Subscribe(KeyCallback cb) {
  auto s = std::make_shared<Subscriber>();
  s->cb = std::move(cb);
  {
    std::lock_guard lock(mu_);
    subscribers_.push_back(s);
  }
  // As Watch's handle: once it is gone, no callback runs or is running.
  return std::shared_ptr<void>(nullptr, [this, s](void*) {
    {
      std::lock_guard l(s->mu);
      s->cb = nullptr;
    }
    std::lock_guard lock(mu_);
    std::erase(subscribers_, s);
  });
}

void Notifier::Notify(const std::string& key) {
  std::vector<std::shared_ptr<Entry>> fire;
  std::vector<std::shared_ptr<Subscriber>> subs;
  {
    std::lock_guard lock(mu_);
    auto [b, end] = entries_.equal_range(key);
    for (auto it = b; it != end; ++it) fire.push_back(it->second);
    entries_.erase(b, end);
    subs = subscribers_;
  }
  for (auto& s : subs) {
    std::lock_guard l(s->mu);
    if (s->cb) s->cb(key);
  }
  for (auto& e : fire) {
    Callback cb;
    {
      std::lock_guard l(e->mu);
      cb = std::move(e->cb);
      e->cb = nullptr;
    }
    if (cb) cb();
  }
}

// ---------------------------------------------------------------- Impl helpers

void Platform::Impl::CrashPoint(const char* point) const {
  if (!config.crash_point.empty() && config.crash_point == point) {
    spdlog::critical("crash point {} reached: exiting as if killed", point);
    std::_Exit(137);
  }
}

void Platform::Impl::Enqueue(std::function<void()> job) {
  std::lock_guard lock(q_mu);
  queue.push_back(std::move(job));
  q_cv.notify_one();
}

void Platform::Impl::WorkerLoop() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock lock(q_mu);
      q_cv.wait(lock, [&] { return stopping || !queue.empty(); });
      if (stopping) return;
      job = std::move(queue.front());
      queue.pop_front();
    }
    job();
  }
}

std::shared_ptr<Platform::Sandbox> Platform::Impl::Find(const std::string& id) {
  std::lock_guard lock(mu);
  auto it = sandboxes.find(id);
  return it == sandboxes.end() ? nullptr : it->second;
}

runtime::Runtime* Platform::Impl::RuntimeFor(const store::SandboxRecord& rec) {
  auto it = runtimes.find(rec.runtime);
  return it == runtimes.end() ? nullptr : it->second.get();
}

std::string Platform::Impl::LogDir(const std::string& sandbox_id) const {
  return config.data_dir + "/logs/" + sandbox_id;
}

Status Platform::Impl::SaveSandbox(Sandbox& sb) {
  sb.rec.updated_ms = NowUnixMillis();
  auto st = store->PutSandbox(sb.rec);
  self->notifier().Notify("sb:" + sb.rec.id);
  return st;
}

void Platform::Impl::SaveOperation(store::OperationRecord& op) {
  op.updated_ms = NowUnixMillis();
  if (auto st = store->PutOperation(op); !st) {
    spdlog::error("persist operation {}: {}", op.id, st.error().message);
  }
  self->notifier().Notify("op:" + op.id);
}

void Platform::Impl::FinishOperation(store::OperationRecord& op, const Status& st, Json result) {
  if (st) {
    op.state = "succeeded";
    op.result = std::move(result);
    op.error_code.clear();
    op.error_message.clear();
  } else {
    op.state = "failed";
    op.error_code = std::string(ErrcName(st.error().code));
    op.error_message = st.error().message;
    spdlog::warn("operation {} ({} {}) failed: {}", op.id, op.kind, op.target, op.error_message);
  }
  SaveOperation(op);
}

// ---------------------------------------------------------------- Platform

Platform::Platform(Config config) : config_(std::move(config)) {}

Platform::~Platform() { Shutdown(); }

Result<std::unique_ptr<Platform>> Platform::Create(
    Config config, std::unique_ptr<store::Store> store, std::unique_ptr<storage::Driver> storage,
    std::map<std::string, std::unique_ptr<runtime::Runtime>> runtimes,
    std::unique_ptr<net::Network> network) {
  if (runtimes.find(config.default_runtime) == runtimes.end())
    return Fail(Errc::kInvalidArgument, "default runtime " + config.default_runtime + " is not available");
  SPACE_TRY(sys::MkdirAll(config.data_dir + "/logs", 0700));
  SPACE_TRY(sys::MkdirAll(config.data_dir + "/tmp", 0700));
  std::unique_ptr<Platform> p(new Platform(config));
  p->impl_ = std::make_unique<Impl>();
  Impl& impl = *p->impl_;
  impl.self = p.get();
  impl.config = std::move(config);
  impl.store = std::move(store);
  impl.storage = std::move(storage);
  impl.runtimes = std::move(runtimes);
  impl.network = std::move(network);
  for (int i = 0; i < std::max(1, impl.config.worker_threads); ++i) {
    impl.workers.emplace_back([&impl] { impl.WorkerLoop(); });
  }
  impl.reaper = std::thread([&impl] { impl.ReaperLoop(); });
  return p;
}

void Platform::Shutdown() {
  if (!impl_) return;
  {
    std::lock_guard lock(impl_->q_mu);
    if (impl_->stopping) return;
    impl_->stopping = true;
    impl_->q_cv.notify_all();
    impl_->reaper_cv.notify_all();
  }
  for (auto& t : impl_->workers) t.join();
  if (impl_->reaper.joinable()) impl_->reaper.join();
  std::vector<std::shared_ptr<AgentSession>> sessions;
  {
    std::lock_guard lock(impl_->mu);
    for (auto& [id, sb] : impl_->sandboxes) {
      std::lock_guard l(sb->mu);
      if (sb->session) sessions.push_back(std::move(sb->session));
    }
  }
  for (auto& s : sessions) s->Close();
}

Status Platform::EnsureBaseTemplate(const std::string& busybox_path) {
  auto existing = impl_->store->GetTemplate("base", "latest");
  if (existing && impl_->storage->HasLayer(DigestHex(existing->digest))) return Ok();
  auto tmp = sys::TempDir::Create(config_.data_dir + "/tmp", "base-");
  if (!tmp) return tl::unexpected(tmp.error());
  SPACE_TRY_WRAP(BuildBaseTree(tmp->path(), busybox_path), "build base template");
  auto digest = TreeDigest(tmp->path());
  if (!digest) return tl::unexpected(digest.error());
  if (!impl_->storage->HasLayer(DigestHex(*digest))) {
    SPACE_TRY_WRAP(impl_->storage->ImportLayer(DigestHex(*digest), tmp->path(), config_.uid_shift),
                   "import base template");
  }
  store::TemplateRecord t;
  t.name = "base";
  t.tag = "latest";
  t.digest = *digest;
  t.config = {{"env", Json::array({std::string("PATH=") + kDefaultPath})},
              {"workdir", "/root"},
              {"user", "root"}};
  t.created_ms = NowUnixMillis();
  SPACE_TRY(impl_->store->PutTemplate(t));
  spdlog::info("built template base:latest ({})", *digest);
  return Ok();
}

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
    for (const char* key : {"env", "network", "timeout_s", "on_timeout", "idle_timeout_s",
                            "snapshot_every_s", "keep_last"}) {
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
  if (auto st = impl_->store->PutSandboxAndOperation(sb->rec, op); !st) {
    if (impl_->config.sandbox_gone) impl_->config.sandbox_gone(sb->rec.id);
    return tl::unexpected(st.error());
  }
  {
    std::lock_guard lock(impl_->mu);
    impl_->sandboxes[sb->rec.id] = sb;
  }
  auto rec = sb->rec;
  uncount.n = nullptr;  // RunCreate uncounts it
  impl_->Enqueue([impl = impl_.get(), sb, op, digest, snapshot] {
    impl->RunCreate(sb, op, digest, snapshot);
    impl->creating.fetch_sub(1);
  });
  return std::make_pair(op, rec);
}

void Platform::Impl::RunCreate(std::shared_ptr<Sandbox> sb, store::OperationRecord op,
                               std::string digest, std::string snapshot) {
  op.state = "running";
  SaveOperation(op);
  Status st;
  Json result = {{"sandbox_id", sb->rec.id}};
  {
    std::lock_guard lock(sb->mu);
    st = BringUp(sb, digest, snapshot, &op, result);
  }
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
                               Json result) {
  auto* rt = RuntimeFor(sb->rec);
  auto run = [&]() -> Status {
    if (!rt) return Fail(Errc::kInvalidArgument, "runtime " + sb->rec.runtime + " is gone");
    const Json* lj = JsonField(sb->rec.spec, "limits");
    runtime::Limits limits = LimitsFromJson(lj ? *lj : Json::object());
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
      auto root = snapshot.empty()
                      ? storage->CreateRoot(sb->rec.id, DigestHex(digest), limits.disk_bytes)
                      : storage->CreateRootFromSnapshot(sb->rec.id, snapshot, limits.disk_bytes);
      if (!root) return tl::unexpected(std::move(root.error()).Wrap("create root filesystem"));
      spec = InstanceSpecFor(sb->rec, *root);
    }
    const int64_t t1 = MonotonicNanos();
    SPACE_TRY_WRAP(StartInstance(*sb, rt, std::move(spec)), "start " + sb->rec.runtime + " instance");
    const int64_t t2 = MonotonicNanos();
    SPACE_TRY_WRAP(ConnectAgent(sb, config.agent_connect_timeout_ms), "connect to agent");
    // Made now, not by the first command: a warm-pool claim should not pay for it.
    SPACE_TRY_WRAP(sys::MkdirAll(LogDir(sb->rec.id), 0700), "output log dir");
    const int64_t t3 = MonotonicNanos();
    spdlog::debug("create {}: root {:.1f} ms, start {:.1f} ms, agent {:.1f} ms", sb->rec.id,
                  (t1 - t0) / 1e6, (t2 - t1) / 1e6, (t3 - t2) / 1e6);
    sb->rec.state = "running";
    sb->rec.reason.clear();
    // New processes (from the template, or a snapshot of the filesystem alone): the
    // template's start command runs and is ready before anyone hears of the sandbox.
    const std::vector<std::string> kinds = rt->Caps().snapshot_kinds;
    bool kept = rt->Caps().own_disk && std::find(kinds.begin(), kinds.end(), "full") != kinds.end();
    if (snapshot.empty() || !kept) SPACE_TRY(RunStartCommand(*sb));
    int64_t timeout_s = JsonIntOr(sb->rec.spec, "timeout_s", 0);
    sb->rec.spec["expires_ms"] = timeout_s > 0 ? NowUnixMillis() + timeout_s * 1000 : 0;
    sb->last_activity_ms = NowUnixMillis();
    if (!done) return SaveSandbox(*sb);
    // One commit for both: the sandbox is running and its create succeeded.
    sb->rec.updated_ms = done->updated_ms = NowUnixMillis();
    done->state = "succeeded";
    done->result = std::move(result);
    SPACE_TRY(store->PutSandboxAndOperation(sb->rec, *done));
    // The caller notifies once it has let go of sb->mu: a client woken by the operation's
    // end may act on the sandbox at once (a snapshot, a transition), and would find it busy.
    return Ok();
  };
  auto st = run();
  if (!st) {
    if (sb->session) {
      sb->session->Close();
      sb->session.reset();
    }
    (void)DestroyInstance(rt, sb->rec.id);
    (void)storage->DeleteRoot(sb->rec.id);
    sb->rec.state = "error";
    sb->rec.reason = "create failed: " + st.error().message;
    (void)SaveSandbox(*sb);
  }
  return st;
}

Status Platform::Impl::ConnectAgent(const std::shared_ptr<Sandbox>& sb, int64_t timeout_ms) {
  auto* rt = RuntimeFor(sb->rec);
  if (!rt) return Fail(Errc::kInternal, "no runtime " + sb->rec.runtime);
  std::weak_ptr<Sandbox> weak = sb;
  AgentSession::Handlers h;
  Platform* platform = self;
  InitGuards(*sb);
  h.on_output = [weak, platform, this](uint32_t stream, store::OutputStream s, uint64_t offset,
                                 std::string_view bytes) -> Result<uint64_t> {
    auto sb = weak.lock();
    if (!sb) return offset + bytes.size();
    std::shared_ptr<Command> cmd;
    {
      std::lock_guard l(sb->cmd_mu);
      auto it = sb->by_stream.find(stream);
      if (it != sb->by_stream.end()) cmd = it->second;
    }
    if (!cmd) {
      // Output of a command we no longer track (already ended): let the agent drain it.
      return offset + bytes.size();
    }
    std::string key;
    Result<uint64_t> size;
    {
      std::lock_guard l(cmd->mu);
      size = StoreOutput(*sb, *cmd, s, offset, bytes);
      key = "cmd:" + sb->rec.id + ":" + cmd->rec.id;
    }
    platform->notifier().Notify(key);
    return size;
  };
  h.on_exit = [weak, this](uint32_t stream, const Json& exit) -> Status {
    auto sb = weak.lock();
    if (!sb) return Fail(Errc::kNotFound, "sandbox gone");
    std::shared_ptr<Command> cmd;
    {
      std::lock_guard l(sb->cmd_mu);
      auto it = sb->by_stream.find(stream);
      if (it == sb->by_stream.end()) return Fail(Errc::kNotFound, "unknown command stream");
      cmd = it->second;
    }
    store::CommandRecord rec;
    {
      std::lock_guard l(cmd->mu);
      SPACE_TRY(ExitComplete(*cmd, exit));  // kResourceExhausted: output still held
      cmd->rec.state = "exited";
      if (auto c = JsonInt(exit, "exit_code")) cmd->rec.exit_code = static_cast<int>(*c);
      if (auto s = JsonInt(exit, "signal")) cmd->rec.signal = static_cast<int>(*s);
      cmd->rec.timed_out = JsonBoolOr(exit, "timed_out", false);
      if (cmd->rec.signal == 9 && OomKilled(*sb)) cmd->rec.reason = "oom_killed";
      cmd->rec.ended_ms = NowUnixMillis();
      rec = cmd->rec;
    }
    // The syncs run without cmd->mu: readers (and the StartCommand that is about to
    // answer) need not wait for two fdatasyncs. No output can follow an exit, and until the
    // record is durable the agent keeps the exit unacknowledged, so a crash re-delivers it.
    (void)cmd->log->Sync();
    if (auto put = store->PutCommand(rec); !put) SPACE_TRY(DeferExit(*sb, *cmd, put.error()));
    const std::string key = "cmd:" + sb->rec.id + ":" + rec.id;
    {
      std::lock_guard l(sb->cmd_mu);
      sb->by_stream.erase(stream);
      sb->commands.erase(cmd->rec.id);
    }
    sb->last_activity_ms = NowUnixMillis();
    self->notifier().Notify(key);
    return Ok();
  };
  h.on_hello = [weak, this](const Json& hello) {
    if (auto sb = weak.lock()) NoteHello(*sb, hello);
  };
  h.on_disconnect = [weak, this](const Error& why) {
    Enqueue([this, weak, why] { OnAgentLost(weak, why); });
  };
  Json hello;
  auto session = AgentSession::Connect(rt->AgentSocketPath(sb->rec.id), std::move(h), timeout_ms,
                                       &hello);
  if (!session) return tl::unexpected(session.error());
  sb->session = std::move(*session);
  // Commands we think run but the agent does not know were lost (e.g. the sandbox's
  // init restarted).
  std::set<uint32_t> known;
  if (const Json* cmds = JsonField(hello, "commands"); cmds && cmds->is_array()) {
    for (const auto& c : *cmds) {
      if (auto s = JsonInt(c, "stream")) known.insert(static_cast<uint32_t>(*s));
    }
  }
  // Commands the agent runs that we have no record of were started just before a crash,
  // before their record was committed; nobody was told they exist, so they are killed.
  // New commands must not reuse their streams.
  std::vector<uint32_t> orphans;
  {
    std::lock_guard l(sb->cmd_mu);
    for (uint32_t s : known) {
      if (!sb->by_stream.count(s)) orphans.push_back(s);
      sb->next_stream = std::max(sb->next_stream, s + 1);
    }
  }
  for (uint32_t s : orphans) {
    spdlog::warn("sandbox {}: killing command stream {} that has no record", sb->rec.id, s);
    (void)sb->session->Call({{"op", "signal"}, {"stream", s}, {"signal", 9}}, {},
                            config.agent_request_timeout_ms);
  }
  std::vector<std::shared_ptr<Command>> lost;
  {
    std::lock_guard l(sb->cmd_mu);
    // Streams the agent still uses are never handed out again (a sandbox restored from
    // another one's memory inherits that one's commands).
    for (uint32_t s : known) sb->next_stream = std::max(sb->next_stream, s + 1);
    for (auto it = sb->by_stream.begin(); it != sb->by_stream.end();) {
      if (known.count(it->first)) {
        ++it;
        continue;
      }
      lost.push_back(it->second);
      sb->commands.erase(it->second->rec.id);
      it = sb->by_stream.erase(it);
    }
  }
  for (auto& cmd : lost) {
    std::lock_guard l(cmd->mu);
    cmd->rec.state = "lost";
    cmd->rec.reason = "the sandbox's agent no longer knows this command";
    cmd->rec.ended_ms = NowUnixMillis();
    (void)store->PutCommand(cmd->rec);
    self->notifier().Notify("cmd:" + sb->rec.id + ":" + cmd->rec.id);
  }
  return Ok();
}

void Platform::Impl::LoseCommands(Sandbox& sb, const std::string& reason) {
  std::map<std::string, std::shared_ptr<Command>> cmds;
  {
    std::lock_guard l(sb.cmd_mu);
    cmds.swap(sb.commands);
    sb.by_stream.clear();
  }
  for (auto& [id, cmd] : cmds) {
    std::lock_guard l(cmd->mu);
    if (cmd->rec.state != "running" && cmd->rec.state != "starting") continue;
    cmd->rec.state = "lost";
    cmd->rec.reason = reason;
    cmd->rec.ended_ms = NowUnixMillis();
    (void)store->PutCommand(cmd->rec);
    self->notifier().Notify("cmd:" + sb.rec.id + ":" + id);
  }
}

Status Platform::Impl::LoadLiveCommands(Sandbox& sb) {
  auto cmds = store->ListCommands(sb.rec.id);
  if (!cmds) return tl::unexpected(cmds.error());
  std::lock_guard l(sb.cmd_mu);
  for (auto& rec : *cmds) {
    sb.next_stream = std::max(sb.next_stream, rec.stream + 1);
    if (rec.state != "running" && rec.state != "starting") continue;
    auto cmd = std::make_shared<Command>();
    cmd->rec = rec;
    auto log = store::OutputLog::Open(LogDir(sb.rec.id), rec.id);
    if (!log) return tl::unexpected(log.error());
    cmd->log = std::move(*log);
    sb.by_stream[rec.stream] = cmd;
    sb.commands[rec.id] = cmd;
  }
  return Ok();
}

void Platform::Impl::OnAgentLost(const std::weak_ptr<Sandbox>& weak, const Error& why) {
  auto sb = weak.lock();
  if (!sb) return;
  std::lock_guard lock(sb->mu);
  if (sb->rec.state != "running") return;  // deleting, paused, or already handled
  if (sb->session && sb->session->connected()) return;
  sb->session.reset();
  auto* rt = RuntimeFor(sb->rec);
  auto state = rt ? rt->Inspect(sb->rec.id) : Fail(Errc::kInternal, "no runtime");
  if (state && *state == runtime::InstanceState::kRunning) {
    // The instance lives: the connection broke (e.g. a protocol error). Reconnect; the
    // agent retransmits everything unacknowledged.
    spdlog::warn("sandbox {}: agent connection lost ({}); reconnecting", sb->rec.id, why.message);
    if (ConnectAgent(sb, 5000)) return;
  }
  std::string reason = "the sandbox's init exited (" + why.message + ")";
  spdlog::warn("sandbox {}: {}", sb->rec.id, reason);
  LoseCommands(*sb, "the sandbox stopped");
  (void)DestroyInstance(rt, sb->rec.id);
  sb->rec.state = "error";
  sb->rec.reason = reason;
  (void)SaveSandbox(*sb);
}

Result<std::vector<store::SandboxRecord>> Platform::ListSandboxes(const SandboxFilter& f) {
  std::vector<std::shared_ptr<Sandbox>> all;
  {
    std::lock_guard lock(impl_->mu);
    for (auto& [id, sb] : impl_->sandboxes) all.push_back(sb);
  }
  std::vector<store::SandboxRecord> out;
  for (auto& sb : all) {
    store::SandboxRecord rec;
    {
      std::lock_guard l(sb->mu);
      rec = sb->rec;
    }
    if (IsPoolMember(rec)) continue;
    if (!f.state.empty() && rec.state != f.state) continue;
    bool match = true;
    for (const auto& [k, v] : f.labels) {
      auto it = rec.metadata.find(k);
      if (it == rec.metadata.end() || !it->is_string() || it->get<std::string>() != v) {
        match = false;
        break;
      }
    }
    if (match) out.push_back(std::move(rec));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.created_ms != b.created_ms ? a.created_ms < b.created_ms : a.id < b.id;
  });
  return out;
}

Result<store::SandboxRecord> Platform::GetSandbox(const std::string& id) {
  auto sb = impl_->Find(id);
  if (!sb) return Fail(Errc::kNotFound, "no sandbox " + id);
  std::unique_lock l(sb->mu, std::try_to_lock);
  if (!l.owns_lock()) {
    // An operation holds it (a create waiting for its start command, a fork bringing up
    // its children...): answer with the record as last committed rather than wait.
    auto rec = impl_->store->GetSandbox(id);
    if (!rec) return tl::unexpected(rec.error());
    if (IsPoolMember(*rec)) return Fail(Errc::kNotFound, "no sandbox " + id);
    return rec;
  }
  if (IsPoolMember(sb->rec)) return Fail(Errc::kNotFound, "no sandbox " + id);
  return sb->rec;
}

Result<store::OperationRecord> Platform::DeleteSandbox(const std::string& id) {
  return DeleteSandbox(id, false);
}

Result<store::OperationRecord> Platform::DeleteSandbox(const std::string& id,
                                                       bool delete_snapshots) {
  auto sb = impl_->Find(id);
  if (!sb) return Fail(Errc::kNotFound, "no sandbox " + id);
  store::OperationRecord op;
  {
    // try_lock: a transition in progress holds the lock; answer 409 instead of waiting.
    std::unique_lock l(sb->mu, std::try_to_lock);
    if (!l.owns_lock() || sb->rec.state == "creating" || !sb->busy_op.empty())
      return Fail(Errc::kConflict, "sandbox " + id + " is " +
                                       (l.owns_lock() ? sb->rec.state : "busy") +
                                       "; try again when the current operation ends");
    if (sb->rec.state == "deleting")
      return Fail(Errc::kConflict, "sandbox " + id + " is already being deleted");
    op.id = NewId("op");
    op.kind = "delete";
    op.target = id;
    op.state = "pending";
    op.request = {{"delete_snapshots", delete_snapshots}};
    op.created_ms = op.updated_ms = NowUnixMillis();
    SPACE_TRY(impl_->store->PutOperation(op));
    sb->rec.state = "deleting";
    SPACE_TRY(impl_->SaveSandbox(*sb));
  }
  impl_->Enqueue([impl = impl_.get(), sb, op] { impl->RunDelete(sb, op); });
  return op;
}

Status Platform::Impl::Teardown(Sandbox& sb) {
  if (sb.session) {
    sb.session->Close();
    sb.session.reset();
  }
  LoseCommands(sb, "the sandbox was deleted");
  SPACE_TRY_WRAP(DestroyInstance(RuntimeFor(sb.rec), sb.rec.id), "destroy instance");
  SPACE_TRY_WRAP(storage->DeleteRoot(sb.rec.id), "delete root filesystem");
  SPACE_TRY_WRAP(sys::RemoveAll(LogDir(sb.rec.id)), "remove output logs");
  SPACE_TRY(store->DeleteSandbox(sb.rec.id));
  if (config.sandbox_gone) config.sandbox_gone(sb.rec.id);
  return Ok();
}

void Platform::Impl::RunDelete(std::shared_ptr<Sandbox> sb, store::OperationRecord op) {
  op.state = "running";
  SaveOperation(op);
  Status st;
  {
    std::lock_guard l(sb->mu);
    st = Teardown(*sb);
    if (st) {
      sb->rec.state = "deleted";
    } else {
      sb->rec.state = "error";
      sb->rec.reason = "delete failed: " + st.error().message;
      (void)SaveSandbox(*sb);
    }
  }
  if (st) {
    std::lock_guard lock(mu);
    sandboxes.erase(sb->rec.id);
  }
  if (st) last_delete_ms = NowUnixMillis();
  if (st && JsonBoolOr(op.request, "delete_snapshots", false)) {
    if (auto snaps = store->ListSnapshots(sb->rec.id)) {
      for (const auto& snap : *snaps) {
        if (auto d = DeleteSnapshotData(JsonStringOr(snap.source, "runtime", ""), snap.id); !d) {
          st = tl::unexpected(std::move(d.error()).Wrap("delete snapshot " + snap.id));
          break;
        }
        (void)store->DeleteSnapshot(snap.id);
      }
    }
  }
  self->notifier().Notify("sb:" + sb->rec.id);
  FinishOperation(op, st, {{"sandbox_id", sb->rec.id}});
}

Result<store::OperationRecord> Platform::GetOperation(const std::string& id) {
  return impl_->store->GetOperation(id);
}

Result<std::vector<store::OperationRecord>> Platform::ListOperations(size_t limit,
                                                                    const std::string& state) {
  return impl_->store->ListOperations(limit, state);
}

Result<std::vector<store::TemplateRecord>> Platform::ListTemplates() {
  return impl_->store->ListTemplates();
}

// ---------------------------------------------------------------- recovery


Status ValidateSandboxPath(const std::string& path) {
  if (path.empty() || path[0] != '/')
    return Fail(Errc::kInvalidArgument, "path must be absolute: \"" + path + "\"");
  if (path.size() > 4096) return Fail(Errc::kInvalidArgument, "path longer than 4096 bytes");
  if (path.find('\0') != std::string::npos)
    return Fail(Errc::kInvalidArgument, "path contains a NUL byte");
  return Ok();
}

}  // namespace space::core
