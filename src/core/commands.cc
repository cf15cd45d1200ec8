// Command sessions and file operations: both go through the sandbox's agent.
#include <spdlog/spdlog.h>

#include "core/internal.h"

namespace space::core {

namespace {

Json CommandSpecJson(const CommandRequest& req) {
  Json j = Json::object();
  if (!req.argv.empty()) {
    j["argv"] = req.argv;
  } else {
    j["cmd"] = req.shell;
  }
  j["env"] = req.env;
  if (!req.cwd.empty()) j["cwd"] = req.cwd;
  if (!req.user.empty()) j["user"] = req.user;
  j["stdin"] = req.stdin || req.pty.has_value();
  j["timeout_ms"] = req.timeout_ms;
  if (req.pty) j["pty"] = {{"cols", req.pty->cols}, {"rows", req.pty->rows}};
  return j;
}

Status ValidatePtySize(int cols, int rows) {
  if (cols < 1 || cols > 4096 || rows < 1 || rows > 4096)
    return Fail(Errc::kInvalidArgument, "pty cols and rows must be 1..4096");
  return Ok();
}

Status ValidateCommand(const CommandRequest& req) {
  if (req.argv.empty() == req.shell.empty())
    return Fail(Errc::kInvalidArgument, "give exactly one of argv (non-empty) or cmd");
  if (req.argv.size() > 4096) return Fail(Errc::kInvalidArgument, "argv has more than 4096 items");
  size_t total = req.shell.size();
  for (const auto& a : req.argv) {
    if (a.find('\0') != std::string::npos)
      return Fail(Errc::kInvalidArgument, "argv items must not contain NUL bytes");
    total += a.size();
  }
  if (req.shell.find('\0') != std::string::npos)
    return Fail(Errc::kInvalidArgument, "cmd must not contain NUL bytes");
  for (const auto& [k, v] : req.env) {
    if (k.empty() || k.find('=') != std::string::npos || k.find('\0') != std::string::npos ||
        v.find('\0') != std::string::npos)
      return Fail(Errc::kInvalidArgument, "invalid environment variable \"" + k + "\"");
    total += k.size() + v.size();
  }
  if (total > (1u << 20)) return Fail(Errc::kTooLarge, "command and environment exceed 1 MiB");
  if (!req.cwd.empty()) SPACE_TRY(ValidateSandboxPath(req.cwd));
  if (req.timeout_ms < 0) return Fail(Errc::kInvalidArgument, "timeout must be >= 0");
  if (req.pty) SPACE_TRY(ValidatePtySize(req.pty->cols, req.pty->rows));
  return Ok();
}

CommandInfo Snapshot(Command& cmd) {
  std::lock_guard l(cmd.mu);
  CommandInfo info;
  info.record = cmd.rec;
  info.stdout_size = cmd.log->Size(store::OutputStream::kStdout);
  info.stderr_size = cmd.log->Size(store::OutputStream::kStderr);
  return info;
}

}  // namespace

namespace {
// Finds a running sandbox with a connected agent, holding nothing afterwards.
Result<std::shared_ptr<AgentSession>> LiveSession(Platform::Sandbox& sb) {
  std::lock_guard l(sb.mu);
  if (sb.rec.state != "running")
    return Fail(Errc::kConflict, "sandbox " + sb.rec.id + " is " + sb.rec.state + ", not running");
  if (!sb.session || !sb.session->connected())
    return Fail(Errc::kUnavailable, "sandbox " + sb.rec.id + ": agent is not connected");
  return sb.session;
}
}  // namespace

Result<CommandInfo> Platform::StartCommand(const std::string& sandbox_id,
                                           const CommandRequest& req) {
  SPACE_TRY(ValidateCommand(req));
  auto sb = impl_->Find(sandbox_id);
  if (!sb) return Fail(Errc::kNotFound, "no sandbox " + sandbox_id);
  sb->last_activity_ms = NowUnixMillis();
  std::lock_guard lock(sb->mu);
  return impl_->StartCommandLocked(*sb, req);
}

Result<CommandInfo> Platform::Impl::StartCommandLocked(Sandbox& sandbox, const CommandRequest& req) {
  Sandbox* sb = &sandbox;
  Impl* impl_ = this;
  const Config& config_ = config;
  Notifier& notifier_ = self->notifier();
  const std::string& sandbox_id = sb->rec.id;
  if (sb->rec.state != "running")
    return Fail(Errc::kConflict, "sandbox " + sandbox_id + " is " + sb->rec.state + ", not running");
  if (!sb->session || !sb->session->connected())
    return Fail(Errc::kUnavailable, "sandbox " + sandbox_id + ": agent is not connected");
  auto cmd = std::make_shared<Command>();
  cmd->rec.id = NewId("cmd");
  cmd->rec.sandbox_id = sandbox_id;
  cmd->rec.stream = sb->next_stream++;
  cmd->rec.spec = CommandSpecJson(req);
  cmd->rec.state = "running";
  cmd->rec.started_ms = NowUnixMillis();
  impl_->counters.commands_started++;
  auto log = store::OutputLog::Open(impl_->LogDir(sandbox_id), cmd->rec.id);
  if (!log) return tl::unexpected(log.error());
  cmd->log = std::move(*log);
  {
    std::lock_guard l(sb->cmd_mu);
    sb->by_stream[cmd->rec.stream] = cmd;
    sb->commands[cmd->rec.id] = cmd;
  }
  // The sandbox's env applies to every command (not to the instance: a warm-pool sandbox
  // is started before anyone says what its env is); the command's own env wins.
  Json env = Json::object();
  if (const Json* sbenv = JsonField(sb->rec.spec, "env"); sbenv && sbenv->is_object()) env = *sbenv;
  for (const auto& [k, v] : req.env) env[k] = v;
  Json exec = {{"op", "exec"},   {"stream", cmd->rec.stream}, {"id", cmd->rec.id},
               {"env", env},     {"stdin", req.stdin},        {"timeout_ms", req.timeout_ms}};
  if (req.pty) exec["pty"] = {{"cols", req.pty->cols}, {"rows", req.pty->rows}};
  if (!req.argv.empty()) {
    exec["argv"] = req.argv;
  } else {
    exec["shell"] = req.shell;
  }
  // Defaults come from the template (WORKDIR, USER); the agent falls back to the user's home.
  const Json* tc = JsonField(sb->rec.spec, "template_config");
  std::string cwd = !req.cwd.empty() ? req.cwd : (tc ? JsonStringOr(*tc, "workdir", "") : "");
  std::string user = !req.user.empty() ? req.user : (tc ? JsonStringOr(*tc, "user", "") : "");
  // Root is the agent's own default; naming it would need a passwd entry some images lack.
  if (req.user.empty() && (user == "root" || user == "0")) user.clear();
  if (!cwd.empty()) exec["cwd"] = cwd;
  if (!user.empty()) exec["user"] = user;
  // The record is committed while the agent starts the process (the fsync overlaps the
  // fork and exec), and durable before anyone hears of the command. A crash in between
  // leaves a process without a record: the agent reports it on reconnect and spaced kills
  // it (ConnectAgent), as nobody was told it exists.
  Status committed = Ok();
  auto commit = [&] {
    impl_->CrashPoint("command.sent");
    // Under cmd->mu: an exit that arrives meanwhile is recorded after this, not before.
    std::lock_guard l(cmd->mu);
    return impl_->store->PutCommand(cmd->rec);
  };
  auto resp = sb->session->Call(exec, {}, config_.agent_request_timeout_ms, commit, &committed);
  if (resp && !committed) {
    (void)sb->session->Call({{"op", "signal"}, {"stream", cmd->rec.stream}, {"signal", 9}}, {},
                            config_.agent_request_timeout_ms);
    resp = tl::unexpected(std::move(committed.error()).Wrap("record the command"));
  }
  if (!resp) {
    {
      std::lock_guard l(sb->cmd_mu);
      sb->by_stream.erase(cmd->rec.stream);
      sb->commands.erase(cmd->rec.id);
    }
    std::lock_guard l(cmd->mu);
    cmd->rec.state = "failed";
    cmd->rec.reason = resp.error().message;
    cmd->rec.ended_ms = NowUnixMillis();
    (void)impl_->store->PutCommand(cmd->rec);
    notifier_.Notify("cmd:" + sandbox_id + ":" + cmd->rec.id);
    return tl::unexpected(resp.error());
  }
  {
    std::lock_guard l(cmd->mu);
    cmd->rec.pid = JsonIntOr(resp->json, "pid", 0);
  }
  if (req.pty && !JsonBoolOr(resp->json, "pty", false)) {
    // An agent from before ptys ignores the field and runs the command on pipes: stop it
    // rather than hand back something else than was asked for.
    (void)sb->session->Call({{"op", "signal"}, {"stream", cmd->rec.stream}, {"signal", 9}}, {},
                            config_.agent_request_timeout_ms);
    return Fail(Errc::kUnavailable, "sandbox " + sandbox_id + ": its agent has no pty support");
  }
  return Snapshot(*cmd);
}

Status Platform::Impl::RunStartCommand(Sandbox& sb) {
  const Json* tc = JsonField(sb.rec.spec, "template_config");
  const Json* start = tc ? JsonField(*tc, "start_cmd") : nullptr;
  if (!start || !start->is_array() || start->empty()) return Ok();
  CommandRequest req;
  for (const auto& a : *start) req.argv.push_back(a.is_string() ? a.get<std::string>() : a.dump());
  auto started = StartCommandLocked(sb, req);
  if (!started) return tl::unexpected(std::move(started.error()).Wrap("the template's start command"));
  const Json* ready = JsonField(*tc, "ready_cmd");
  if (!ready || !ready->is_array() || ready->empty()) return Ok();
  CommandRequest check;
  for (const auto& a : *ready) check.argv.push_back(a.is_string() ? a.get<std::string>() : a.dump());
  check.timeout_ms = 10000;
  // The check runs until it passes, backing off from 50 ms to 1 s, for at most a minute.
  const int64_t deadline = MonotonicNanos() + 60'000'000'000LL;
  int64_t wait_ms = 50;
  std::string last;
  for (;;) {
    auto c = StartCommandLocked(sb, check);
    if (!c) return tl::unexpected(std::move(c.error()).Wrap("the template's readiness check"));
    std::shared_ptr<Command> cmd;
    {
      std::lock_guard l(sb.cmd_mu);
      if (auto it = sb.commands.find(c->record.id); it != sb.commands.end()) cmd = it->second;
    }
    while (cmd) {
      {
        std::lock_guard l(cmd->mu);
        if (cmd->rec.state != "running" && cmd->rec.state != "starting") break;
      }
      if (MonotonicNanos() > deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    int code = -1;
    if (cmd) {
      std::lock_guard l(cmd->mu);
      code = cmd->rec.state == "exited" ? cmd->rec.exit_code.value_or(-1) : -1;
      last = cmd->rec.state + (cmd->rec.reason.empty() ? "" : ": " + cmd->rec.reason);
    } else if (auto info = store->GetCommand(sb.rec.id, c->record.id)) {
      code = info->state == "exited" ? info->exit_code.value_or(-1) : -1;
      last = info->state;
    }
    if (code == 0) return Ok();
    if (MonotonicNanos() + wait_ms * 1000000 > deadline)
      return Fail(Errc::kDeadlineExceeded,
                  "the template's start command did not become ready in 60 s (last check: " +
                      last + ", exit " + std::to_string(code) + ")");
    std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
    wait_ms = std::min<int64_t>(wait_ms * 2, 1000);
  }
}

Result<CommandInfo> Platform::GetCommand(const std::string& sandbox_id, const std::string& cid) {
  auto sb = impl_->Find(sandbox_id);
  if (!sb) return Fail(Errc::kNotFound, "no sandbox " + sandbox_id);
  std::shared_ptr<Command> cmd;
  {
    std::lock_guard l(sb->cmd_mu);
    auto it = sb->commands.find(cid);
    if (it != sb->commands.end()) cmd = it->second;
  }
  if (cmd) return Snapshot(*cmd);
  auto rec = impl_->store->GetCommand(sandbox_id, cid);
  if (!rec) return tl::unexpected(rec.error());
  CommandInfo info;
  info.record = std::move(*rec);
  std::string dir = impl_->LogDir(sandbox_id);
  info.stdout_size = store::OutputSize(dir, cid, store::OutputStream::kStdout);
  info.stderr_size = store::OutputSize(dir, cid, store::OutputStream::kStderr);
  return info;
}

Result<std::vector<CommandInfo>> Platform::ListCommands(const std::string& sandbox_id) {
  if (!impl_->Find(sandbox_id)) return Fail(Errc::kNotFound, "no sandbox " + sandbox_id);
  auto recs = impl_->store->ListCommands(sandbox_id);
  if (!recs) return tl::unexpected(recs.error());
  std::vector<CommandInfo> out;
  for (const auto& r : *recs) {
    auto info = GetCommand(sandbox_id, r.id);
    if (info) out.push_back(std::move(*info));
  }
  return out;
}

Result<std::string> Platform::ReadOutput(const std::string& sandbox_id, const std::string& cid,
                                         store::OutputStream s, uint64_t offset, size_t max) {
  if (!impl_->Find(sandbox_id)) return Fail(Errc::kNotFound, "no sandbox " + sandbox_id);
  if (!IsValidId(cid, "cmd")) return Fail(Errc::kNotFound, "no command " + cid);
  return store::ReadOutput(impl_->LogDir(sandbox_id), cid, s, offset, max);
}

Result<std::unique_ptr<store::OutputReader>> Platform::OpenOutput(const std::string& sandbox_id,
                                                                  const std::string& cid) {
  if (!impl_->Find(sandbox_id)) return Fail(Errc::kNotFound, "no sandbox " + sandbox_id);
  if (!IsValidId(cid, "cmd")) return Fail(Errc::kNotFound, "no command " + cid);
  return std::make_unique<store::OutputReader>(impl_->LogDir(sandbox_id), cid);
}

namespace {
// A command that is still running in a live sandbox: kNotFound for an unknown sandbox or
// command, kConflict for one that has ended.
Result<std::pair<std::shared_ptr<Platform::Sandbox>, std::shared_ptr<Command>>> LiveCommand(
    Platform::Impl& impl, const std::string& sandbox_id, const std::string& cid) {
  auto sb = impl.Find(sandbox_id);
  if (!sb) return Fail(Errc::kNotFound, "no sandbox " + sandbox_id);
  std::shared_ptr<Command> cmd;
  {
    std::lock_guard l(sb->cmd_mu);
    auto it = sb->commands.find(cid);
    if (it != sb->commands.end()) cmd = it->second;
  }
  bool ended = !cmd;
  if (cmd) {
    // Its exit may be being recorded (it is still listed, and the agent may forget it
    // any moment): it has ended for whoever already saw it so.
    std::lock_guard l(cmd->mu);
    ended = cmd->rec.state == "exited";
  } else {
    auto rec = impl.store->GetCommand(sandbox_id, cid);
    if (!rec) return tl::unexpected(rec.error());
  }
  if (ended) return Fail(Errc::kConflict, "command " + cid + " has ended");
  return std::make_pair(sb, cmd);
}
}  // namespace

Status Platform::WriteStdin(const std::string& sandbox_id, const std::string& cid,
                            std::string_view bytes, bool eof) {
  auto live = LiveCommand(*impl_, sandbox_id, cid);
  if (!live) return tl::unexpected(live.error());
  auto& [sb, cmd] = *live;
  uint32_t stream;
  {
    std::lock_guard l(cmd->mu);
    if (!JsonBoolOr(cmd->rec.spec, "stdin", false))
      return Fail(Errc::kConflict, "command " + cid + " was started without stdin");
    stream = cmd->rec.stream;
  }
  auto session = LiveSession(*sb);
  if (!session) return tl::unexpected(session.error());
  return (*session)->SendStdin(stream, bytes, eof);
}

Status Platform::Signal(const std::string& sandbox_id, const std::string& cid, int signal) {
  if (signal < 1 || signal > 64) return Fail(Errc::kInvalidArgument, "signal must be 1..64");
  auto live = LiveCommand(*impl_, sandbox_id, cid);
  if (!live) return tl::unexpected(live.error());
  auto& [sb, cmd] = *live;
  auto session = LiveSession(*sb);
  if (!session) return tl::unexpected(session.error());
  auto r = (*session)->Call({{"op", "signal"}, {"stream", cmd->rec.stream}, {"signal", signal}}, {},
                            config_.agent_request_timeout_ms);
  if (!r) return tl::unexpected(r.error());
  // A held command that ends has its last output let in: look soon (guards.cc).
  if (sb->output_held) sb->probe_due_ms = NowUnixMillis() + 200;
  return Ok();
}

Status Platform::ResizeCommand(const std::string& sandbox_id, const std::string& cid, int cols,
                               int rows) {
  SPACE_TRY(ValidatePtySize(cols, rows));
  auto live = LiveCommand(*impl_, sandbox_id, cid);
  if (!live) return tl::unexpected(live.error());
  auto& [sb, cmd] = *live;
  uint32_t stream;
  {
    std::lock_guard l(cmd->mu);
    if (!JsonField(cmd->rec.spec, "pty"))
      return Fail(Errc::kInvalidArgument, "command " + cid + " has no pty");
    stream = cmd->rec.stream;
  }
  auto session = LiveSession(*sb);
  if (!session) return tl::unexpected(session.error());
  Json req = {{"op", "resize"}, {"stream", stream}, {"cols", cols}, {"rows", rows}};
  auto r = (*session)->Call(req, {}, config_.agent_request_timeout_ms);
  if (!r) return tl::unexpected(r.error());
  return Ok();
}

Result<int> Platform::ForwardLoopbackPort(const std::string& id, int port,
                                          const std::string& address) {
  if (port < 1 || port > 65535) return Fail(Errc::kInvalidArgument, "port must be 1..65535");
  auto sb = impl_->Find(id);
  if (!sb) return Fail(Errc::kNotFound, "no sandbox " + id);
  sb->last_activity_ms = NowUnixMillis();
  auto session = LiveSession(*sb);
  if (!session) return tl::unexpected(session.error());
  auto r = (*session)->Call({{"op", "forward"}, {"port", port}, {"address", address}}, {},
                            config_.agent_request_timeout_ms);
  if (!r) return tl::unexpected(r.error());
  int64_t relay = JsonIntOr(r->json, "port", 0);
  if (relay < 1 || relay > 65535) return Fail(Errc::kInternal, "agent forward: no port");
  return static_cast<int>(relay);
}

// ---------------------------------------------------------------- files

namespace {
Result<agent::Message> FileCall(Platform::Impl& impl, const std::string& sandbox_id,
                                const Json& req, std::string_view body = {}) {
  auto sb = impl.Find(sandbox_id);
  if (!sb) return Fail(Errc::kNotFound, "no sandbox " + sandbox_id);
  sb->last_activity_ms = NowUnixMillis();
  auto session = LiveSession(*sb);
  if (!session) return tl::unexpected(session.error());
  return (*session)->Call(req, body, impl.config.agent_request_timeout_ms);
}
}  // namespace

Result<Json> Platform::StatFile(const std::string& sandbox_id, const std::string& path,
                               const std::string& xattr_prefix) {
  SPACE_TRY(ValidateSandboxPath(path));
  Json req = {{"op", "stat"}, {"path", path}};
  if (!xattr_prefix.empty()) req["xattr_prefix"] = xattr_prefix;
  auto r = FileCall(*impl_, sandbox_id, req);
  if (!r) return tl::unexpected(r.error());
  const Json* e = JsonField(r->json, "entry");
  if (!e) return Fail(Errc::kInternal, "agent stat: no entry");
  return *e;
}

Result<Json> Platform::ListFiles(const std::string& sandbox_id, const std::string& path, int depth,
                                const std::string& xattr_prefix) {
  SPACE_TRY(ValidateSandboxPath(path));
  if (depth < 1 || depth > 16) return Fail(Errc::kInvalidArgument, "depth must be 1..16");
  Json req = {{"op", "list"}, {"path", path}, {"depth", depth}};
  if (!xattr_prefix.empty()) req["xattr_prefix"] = xattr_prefix;
  auto r = FileCall(*impl_, sandbox_id, req);
  if (!r) return tl::unexpected(r.error());
  const Json* e = JsonField(r->json, "entries");
  if (!e || !e->is_array()) return Fail(Errc::kInternal, "agent list: no entries");
  return *e;
}

Result<std::string> Platform::ReadFileChunk(const std::string& sandbox_id, const std::string& path,
                                            uint64_t offset, size_t length, bool* eof,
                                            uint64_t* size) {
  SPACE_TRY(ValidateSandboxPath(path));
  length = std::min<size_t>(length, agent::kMaxFileChunk);
  auto r = FileCall(*impl_, sandbox_id,
                    {{"op", "read"}, {"path", path}, {"offset", offset}, {"length", length}});
  if (!r) return tl::unexpected(r.error());
  if (eof) *eof = JsonBoolOr(r->json, "eof", true);
  if (size) *size = static_cast<uint64_t>(JsonIntOr(r->json, "size", 0));
  return std::move(r->body);
}

Status Platform::WriteFileChunk(const std::string& sandbox_id, const std::string& path,
                                uint64_t offset, std::string_view bytes, bool truncate, int mode,
                                const std::string& user, const FileAttrs* attrs) {
  SPACE_TRY(ValidateSandboxPath(path));
  if (offset + bytes.size() > static_cast<uint64_t>(config_.max_file_bytes))
    return Fail(Errc::kTooLarge, "file larger than the limit of " +
                                     std::to_string(config_.max_file_bytes) + " bytes");
  Json req = {{"op", "write"}, {"path", path},   {"offset", offset},
              {"truncate", truncate}, {"mode", mode}, {"create_parents", true}};
  if (!user.empty()) req["user"] = user;
  if (attrs && offset == 0) {
    req["xattr_prefix"] = attrs->prefix;
    req["xattrs"] = attrs->set;
  }
  auto r = FileCall(*impl_, sandbox_id, req, bytes);
  if (!r) return tl::unexpected(r.error());
  return Ok();
}

Status Platform::MakeDir(const std::string& sandbox_id, const std::string& path,
                        const std::string& user) {
  SPACE_TRY(ValidateSandboxPath(path));
  Json req = {{"op", "mkdir"}, {"path", path}, {"parents", true}, {"mode", 0755}};
  if (!user.empty()) req["user"] = user;
  auto r = FileCall(*impl_, sandbox_id, req);
  if (!r) return tl::unexpected(r.error());
  return Ok();
}

Status Platform::RemoveFile(const std::string& sandbox_id, const std::string& path,
                            bool recursive) {
  SPACE_TRY(ValidateSandboxPath(path));
  auto r = FileCall(*impl_, sandbox_id, {{"op", "remove"}, {"path", path}, {"recursive", recursive}});
  if (!r) return tl::unexpected(r.error());
  return Ok();
}

Status Platform::RenameFile(const std::string& sandbox_id, const std::string& from,
                            const std::string& to) {
  SPACE_TRY(ValidateSandboxPath(from));
  SPACE_TRY(ValidateSandboxPath(to));
  auto r = FileCall(*impl_, sandbox_id, {{"op", "rename"}, {"from", from}, {"to", to}});
  if (!r) return tl::unexpected(r.error());
  return Ok();
}

}  // namespace space::core
