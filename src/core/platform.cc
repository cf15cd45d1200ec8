// Sandbox lifecycle, operations and crash recovery.
#include <dirent.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>

#include <set>
#include <thread>

#include "core/internal.h"
#include "core/templates.h"
#include "sys/sys.h"

namespace space::core {

namespace {

constexpr const char* kDefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

}  // namespace

runtime::Limits LimitsFromJson(const Json& j) {
  runtime::Limits l;
  l.memory_bytes = JsonIntOr(j, "memory_bytes", l.memory_bytes);
  l.pids = JsonIntOr(j, "pids", l.pids);
  if (const Json* c = JsonField(j, "cpus"); c && c->is_number()) l.cpus = c->get<double>();
  l.disk_bytes = JsonIntOr(j, "disk_bytes", l.disk_bytes);
  l.nofile = JsonIntOr(j, "nofile", l.nofile);
  return l;
}

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
    spec.allow_setuid = JsonBoolOr(*tc, "allow_setuid", false);
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

Status Platform::Impl::FailPoint(const char* point) const {
  if (config.fail_point.empty() || config.fail_point != point) return Ok();
  return Fail(Errc::kInternal, std::string("fail point ") + point + " reached");
}

void Platform::Impl::PausePoint(const char* point) const {
  if (config.pause_point.empty() || config.pause_point != point) return;
  spdlog::warn("pause point {} reached: waiting {} ms", point, config.pause_ms);
  std::this_thread::sleep_for(std::chrono::milliseconds(config.pause_ms));
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
  if (st) NoteCommit(sb.rec);
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

Status Platform::Impl::ConnectAgent(const std::shared_ptr<Sandbox>& sb, int64_t timeout_ms) {
  auto* rt = RuntimeFor(sb->rec);
  if (!rt) return Fail(Errc::kInternal, "no runtime " + sb->rec.runtime);
  std::weak_ptr<Sandbox> weak = sb;
  AgentSession::Handlers h;
  Platform* platform = self;
  InitGuards(*sb);
  h.on_output = [weak, platform, this](uint32_t stream, store::OutputStream s, uint64_t offset,
                                       store::OutputBytes& bytes) -> Result<uint64_t> {
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
  std::vector<std::pair<std::string, std::shared_ptr<Sandbox>>> all;
  {
    std::lock_guard lock(impl_->mu);
    for (auto& [id, sb] : impl_->sandboxes) all.emplace_back(id, sb);
  }
  std::vector<store::SandboxRecord> out;
  for (auto& [id, sb] : all) {
    auto read = impl_->ReadRecord(*sb, id);
    if (!read) continue;  // not committed yet, or gone meanwhile
    store::SandboxRecord rec = std::move(*read);
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

Result<store::SandboxRecord> Platform::Impl::ReadRecord(Sandbox& sb, const std::string& id) {
  if (std::unique_lock l(sb.mu, std::try_to_lock); l.owns_lock()) return sb.rec;
  // An operation holds it (a create waiting for its start command, a fork bringing up its
  // children...): the record as last committed rather than a wait.
  auto rec = store->GetSandbox(id);
  if (rec) Unannounced(*rec);
  return rec;
}

Result<store::SandboxRecord> Platform::GetSandbox(const std::string& id) {
  auto sb = impl_->Find(id);
  if (!sb) return Fail(Errc::kNotFound, "no sandbox " + id);
  auto rec = impl_->ReadRecord(*sb, id);
  if (rec && IsPoolMember(*rec)) return Fail(Errc::kNotFound, "no sandbox " + id);
  return rec;
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
    // A transition in progress holds the lock: answer 409 instead of waiting for it. The
    // reaper and the guards hold it for a moment on every sandbox in turn, so a few
    // milliseconds' wait tells the two apart (a delete answered "busy" by a background
    // check failed now and then with a thousand sandboxes).
    std::unique_lock l(sb->mu, std::defer_lock);
    for (int i = 0; i < 20 && !l.try_lock(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
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
  ForgetCommit(sb.rec.id);
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
  if (st) EraseSandbox(sb->rec.id);
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

void Platform::Impl::Unannounced(store::SandboxRecord& rec) {
  std::lock_guard l(unannounced_mu);
  if (!unannounced.count(rec.id)) return;
  rec.state = "creating";
  rec.reason.clear();
}

void Platform::Impl::Unannounced(store::OperationRecord& op) {
  if (op.kind != "create") return;
  std::lock_guard l(unannounced_mu);
  auto it = unannounced.find(op.target);
  if (it != unannounced.end() && it->second.id == op.id) op = it->second;
}

Result<store::OperationRecord> Platform::GetOperation(const std::string& id) {
  auto op = impl_->store->GetOperation(id);
  if (op) impl_->Unannounced(*op);
  return op;
}

Result<std::vector<store::OperationRecord>> Platform::ListOperations(size_t limit,
                                                                    const std::string& state) {
  // Filtered by state, the store's answer may hold unannounced creates that go from it
  // below: asked for that many more, the list still has `limit` entries when it can.
  size_t extra = 0;
  if (!state.empty() && limit > 0) {
    std::lock_guard l(impl_->unannounced_mu);
    extra = impl_->unannounced.size();
  }
  auto ops = impl_->store->ListOperations(limit > 0 ? limit + extra : 0, state);
  if (!ops) return ops;
  for (auto& op : *ops) impl_->Unannounced(op);
  if (state.empty()) return ops;
  // A create whose end is committed but not yet announced is in the state it was in to
  // every reader: the store filtered it by its committed end, so it comes from the
  // unannounced ones (and goes from the others).
  std::erase_if(*ops, [&](const auto& op) { return op.state != state; });
  std::set<std::string> have;
  for (const auto& op : *ops) have.insert(op.id);
  bool added = false;
  {
    std::lock_guard l(impl_->unannounced_mu);
    for (const auto& [target, op] : impl_->unannounced) {
      if (op.state != state || have.count(op.id)) continue;
      ops->push_back(op);
      added = true;
    }
  }
  if (added) {
    // The store's order: newest first.
    std::sort(ops->begin(), ops->end(), [](const auto& a, const auto& b) {
      return a.created_ms != b.created_ms ? a.created_ms > b.created_ms : a.id < b.id;
    });
  }
  if (limit > 0 && ops->size() > limit) ops->resize(limit);
  return ops;
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
