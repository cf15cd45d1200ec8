// E2B's in-sandbox API ("envd"), served by spaced for every sandbox: /health, /files and
// the Connect-RPC services process.Process and filesystem.Filesystem (JSON codec). The
// sandbox is named by the E2b-Sandbox-Id header; processes are SPACE command sessions
// found by their pid, files go through the agent like SPACE's own /files routes.
#include <csignal>

#include "agent/users.h"
#include "api/e2b/connect.h"
#include "api/e2b/e2b.h"
#include "api/e2b/parse.h"
#include "api/e2b/watch.h"
#include "net/ingress.h"

namespace space::api::e2b {

Awaitable<void> ReplyRestError(Ctx& ctx, int status, const std::string& message) {
  Json body = {{"code", status}, {"message", message}};
  co_await ctx.Reply(status, body);
}

Awaitable<void> ReplyRestError(Ctx& ctx, const Error& e) {
  co_await ReplyRestError(ctx, HttpStatusFor(e.code), e.message);
}

std::string EnvdContentType(const Ctx& ctx) { return MediaType(ctx.Header(http::field::content_type)); }

std::string RelativeBase(core::Platform* p, const std::string& sb, const std::string& user) {
  if (!user.empty()) {
    // As envd: the home of the user the call names, from the sandbox's own passwd.
    bool eof = false;
    uint64_t size = 0;
    auto passwd = p->ReadFileChunk(sb, "/etc/passwd", 0, core::kFileChunkBytes, &eof, &size);
    if (passwd) {
      auto info = agent::LookupUserIn(user, *passwd, "", "/etc/passwd");
      if (info && !info->home.empty() && info->home[0] == '/') return info->home;
    }
  }
  auto rec = p->GetSandbox(sb);
  if (!rec) return "/";
  const Json* tc = JsonField(rec->spec, "template_config");
  std::string wd = tc ? JsonStringOr(*tc, "workdir", "") : "";
  return !wd.empty() && wd[0] == '/' ? wd : "/";
}

std::string FileUser(core::Platform* p, const std::string& sb, const std::string& requested) {
  if (!requested.empty()) return requested;
  auto rec = p->GetSandbox(sb);
  if (!rec) return "";
  const Json* tc = JsonField(rec->spec, "template_config");
  std::string user = tc ? JsonStringOr(*tc, "user", "") : "";
  return user == "root" || user == "0" ? "" : user;
}

namespace {

namespace rpc = connect;
using store::OutputStream;

// ---------------------------------------------------------------- replies

// A unary RPC's error: the Connect status for the code, a JSON body.
Awaitable<void> ReplyRpcError(Ctx& ctx, std::string_view code, const std::string& message) {
  Json body = rpc::ErrorJson(code, message);
  co_await ctx.Reply(rpc::HttpStatusFor(code), body);
}

Awaitable<void> ReplyRpcError(Ctx& ctx, const Error& e) {
  co_await ReplyRpcError(ctx, rpc::CodeFor(e.code), e.message);
}

// A streaming RPC that fails before its first message: just the end-stream message.
Awaitable<void> ReplyStreamError(Ctx& ctx, std::string_view code, const std::string& message) {
  std::string end = rpc::EndStream(rpc::ErrorJson(code, message));
  co_await ctx.ReplyBytes(200, std::move(end), "application/connect+json");
}

Awaitable<void> ReplyStreamError(Ctx& ctx, const Error& e) {
  co_await ReplyStreamError(ctx, rpc::CodeFor(e.code), e.message);
}

// Reads a request message: a JSON body for unary calls, one envelope for streaming ones.
// On failure the error is already answered and nullopt returned.
Awaitable<std::optional<Json>> ReadRequest(Ctx& ctx, bool streaming) {
  const std::string want = streaming ? "application/connect+json" : "application/json";
  if (EnvdContentType(ctx) != want) {
    // The Connect protocol answers an unsupported codec with 415.
    Json body = rpc::ErrorJson("unimplemented", "content type must be " + want + " (JSON codec)");
    co_await ctx.Reply(415, body);
    co_return std::nullopt;
  }
  auto body = co_await ctx.ReadBody(rpc::kMaxMessage + 5);
  Result<std::string> payload = body;
  if (body && streaming) payload = rpc::SingleMessage(*body);
  Result<Json> msg = payload ? rpc::ParseMessage(*payload) : Result<Json>(tl::unexpected(payload.error()));
  if (!msg) {
    if (streaming) {
      co_await ReplyStreamError(ctx, msg.error());
    } else {
      co_await ReplyRpcError(ctx, msg.error());
    }
    co_return std::nullopt;
  }
  co_return std::move(*msg);
}

// ---------------------------------------------------------------- helpers

std::string Permissions(const std::string& type, int mode) {
  std::string out(1, type == "dir" ? 'd' : type == "symlink" ? 'L' : '-');
  const char* rwx = "rwxrwxrwx";
  for (int i = 0; i < 9; ++i) out.push_back(mode & (0400 >> i) ? rwx[i] : '-');
  return out;
}

std::string Owner(int64_t id) { return id == 0 ? "root" : std::to_string(id); }


// The ProcessConfig of a command (what it was started with).
Json ProcessConfig(const store::CommandRecord& r) {
  std::vector<std::string> argv;
  if (const Json* a = JsonField(r.spec, "argv"); a && a->is_array()) {
    argv = a->get<std::vector<std::string>>();
  } else {
    argv = {"/bin/sh", "-c", JsonStringOr(r.spec, "cmd", "")};
  }
  Json args = Json::array();
  for (size_t i = 1; i < argv.size(); ++i) args.push_back(argv[i]);
  const Json* env = JsonField(r.spec, "env");
  Json out = {{"cmd", argv.empty() ? "" : argv[0]},
              {"args", args},
              {"envs", env && env->is_object() ? *env : Json::object()}};
  if (const Json* cwd = JsonField(r.spec, "cwd")) out["cwd"] = *cwd;
  return out;
}

// The running command with that pid (pids are per sandbox and recycled: an ended command
// never matches).
Result<core::CommandInfo> CommandByPid(core::Platform* p, const std::string& sb, int64_t pid) {
  auto list = p->ListCommands(sb);
  if (!list) return tl::unexpected(list.error());
  for (auto it = list->rbegin(); it != list->rend(); ++it) {
    if (it->record.pid == pid && !it->ended()) return *it;
  }
  return Fail(Errc::kNotFound, "process with pid " + std::to_string(pid) + " not found");
}

std::string SignalName(int sig) {
  switch (sig) {
    case SIGKILL:
      return "killed";
    case SIGTERM:
      return "terminated";
    case SIGINT:
      return "interrupt";
    case SIGHUP:
      return "hangup";
    default:
      return "signal " + std::to_string(sig);
  }
}

// The EndEvent of a finished command, as Go's os.ProcessState renders it in envd.
Json EndEvent(const core::CommandInfo& info) {
  const auto& r = info.record;
  Json end = Json::object();
  if (r.exit_code) {
    end = {{"exitCode", *r.exit_code}, {"exited", true},
           {"status", "exit status " + std::to_string(*r.exit_code)}};
    if (*r.exit_code != 0) end["error"] = "exit status " + std::to_string(*r.exit_code);
  } else if (r.signal) {
    end = {{"exitCode", -1}, {"exited", false}, {"status", "signal: " + SignalName(*r.signal)}};
    end["error"] = end["status"];
  } else {
    end = {{"exitCode", -1}, {"exited", false}, {"status", r.state},
           {"error", r.reason.empty() ? r.state : r.reason}};
  }
  return {{"event", {{"end", end}}}};
}

// Streams a command's events from the given offsets as StartResponse/ConnectResponse
// envelopes, then the end-stream message. The response has already been started.
Awaitable<void> StreamProcess(Ctx& ctx, const std::string& sb, const core::CommandInfo& info,
                              uint64_t out_off, uint64_t err_off) {
  const bool pty = info.record.spec.contains("pty");
  bool finished = false;
  auto emit = [&](OutputStream st, uint64_t, std::string_view data) -> Awaitable<void> {
    const char* key = pty ? "pty" : st == OutputStream::kStdout ? "stdout" : "stderr";
    Json ev = {{"event", {{"data", {{key, rpc::Base64Encode(data)}}}}}};
    std::string env = rpc::Envelope(0, ev.dump());
    co_await ctx.WriteChunk(env);
  };
  auto finish = [&](const core::CommandInfo& done) -> Awaitable<void> {
    finished = true;
    // Killed with its sandbox: as envd's stream, the connection is reset (the SDKs read a
    // reset as a transport failure, probe /health, get 502 and raise "the sandbox was
    // killed"; Python's takes a clean EOF mid-chunk for a protocol error and does not).
    const bool gone = co_await ctx.Blocking([&] {
      auto rec = ctx.platform->GetSandbox(sb);
      return !rec || rec->state == "deleting" || rec->state == "deleted";
    });
    if (gone) throw ResetConnection("sandbox " + sb + " was deleted while " + done.record.id + " ran");
    std::string out;
    if (done.record.timed_out) {
      // The call's deadline (Connect-Timeout-Ms) is the command's timeout.
      out = rpc::EndStream(rpc::ErrorJson("deadline_exceeded", "command timed out"));
    } else {
      out = rpc::Envelope(0, EndEvent(done).dump()) + rpc::EndStream();
    }
    co_await ctx.WriteChunk(out);
  };
  auto keepalive = [&]() -> Awaitable<void> {
    std::string env = rpc::Envelope(0, R"({"event":{"keepalive":{}}})");
    co_await ctx.WriteChunk(env);
  };
  OutputEmitFn emit_fn = emit;
  OutputFinishFn finish_fn = finish;
  OutputKeepaliveFn keepalive_fn = keepalive;
  co_await StreamOutput(ctx, sb, info.record.id, out_off, err_off, emit_fn, finish_fn,
                        keepalive_fn);
  if (!finished) {
    std::string end = rpc::EndStream(rpc::ErrorJson("unavailable", "lost the command's output"));
    co_await ctx.WriteChunk(end);
  }
  co_await ctx.EndChunked();
}

Awaitable<void> StartStream(Ctx& ctx, int64_t pid) {
  co_await ctx.StartChunked(200, "application/connect+json");
  std::string start = rpc::Envelope(0, Json{{"event", {{"start", {{"pid", pid}}}}}}.dump());
  co_await ctx.WriteChunk(start);
}

// ---------------------------------------------------------------- process.Process

Awaitable<void> ProcessStart(Ctx& ctx, const std::string& sb) {
  core::Platform* p = ctx.platform;
  auto msg = co_await ReadRequest(ctx, true);
  if (!msg) co_return;
  auto req = ParseStart(*msg);
  if (!req) {
    co_await ReplyStreamError(ctx, req.error());
    co_return;
  }
  req->user = BasicUser(ctx.Header(http::field::authorization));
  std::string deadline = HeaderOr(ctx, "Connect-Timeout-Ms");
  if (!deadline.empty()) req->timeout_ms = std::strtoll(deadline.c_str(), nullptr, 10);
  if (req->timeout_ms < 0) req->timeout_ms = 0;
  auto info = co_await ctx.Blocking([&]() -> Result<core::CommandInfo> {
    // The SDK runs everything through /bin/bash; images without bash (busybox) get sh.
    if (req->argv[0] == "/bin/bash" && !p->StatFile(sb, "/bin/bash")) req->argv[0] = "/bin/sh";
    // As envd: a relative cwd starts at the home of the user the command runs as.
    if (!req->cwd.empty() && req->cwd[0] != '/') req->cwd = AbsPath(req->cwd, RelativeBase(p, sb, req->user));
    return p->StartCommand(sb, *req);
  });
  if (!info) {
    co_await ReplyStreamError(ctx, info.error());
    co_return;
  }
  co_await StartStream(ctx, info->record.pid);
  co_await StreamProcess(ctx, sb, *info, 0, 0);
}

Awaitable<void> ProcessConnect(Ctx& ctx, const std::string& sb) {
  core::Platform* p = ctx.platform;
  auto msg = co_await ReadRequest(ctx, true);
  if (!msg) co_return;
  auto pid = SelectedPid(*msg);
  if (!pid) {
    co_await ReplyStreamError(ctx, pid.error());
    co_return;
  }
  int64_t want = *pid;
  auto info = co_await ctx.Blocking([&] { return CommandByPid(p, sb, want); });
  if (!info) {
    co_await ReplyStreamError(ctx, info.error());
    co_return;
  }
  co_await StartStream(ctx, info->record.pid);
  // The output from the start (a command's output is durable in SPACE), so that a client
  // that connects after the command began misses nothing it printed.
  co_await StreamProcess(ctx, sb, *info, 0, 0);
}

// process.Process/StreamInput (client streaming): a StartEvent naming the process, then
// DataEvents whose bytes go to its stdin as they arrive (keepalives ignored); answered
// once the request ends, with the empty StreamInputResponse.
Awaitable<void> ProcessStreamInput(Ctx& ctx, const std::string& sb) {
  core::Platform* p = ctx.platform;
  if (EnvdContentType(ctx) != "application/connect+json") {
    Json body = rpc::ErrorJson("unimplemented", "content type must be application/connect+json (JSON codec)");
    co_await ctx.Reply(415, body);
    co_return;
  }
  rpc::EnvelopeReader reader;
  std::string cid;
  int64_t pid = 0;
  std::function<Awaitable<Status>(std::string_view)> feed =
      [&](std::string_view data) -> Awaitable<Status> {
    auto msgs = reader.Feed(data);
    if (!msgs) co_return tl::unexpected(msgs.error());
    for (const auto& m : *msgs) {
      if (m.flags & rpc::kFlagEndStream) continue;
      auto msg = rpc::ParseMessage(m.payload);
      if (!msg) co_return tl::unexpected(msg.error());
      if (const Json* start = rpc::Field(*msg, "start")) {
        if (!cid.empty()) co_return Fail(Errc::kInvalidArgument, "StreamInput has one StartEvent");
        auto want = SelectedPid(*start);
        if (!want) co_return tl::unexpected(want.error());
        int64_t n = *want;
        auto info = co_await ctx.Blocking([&] { return CommandByPid(p, sb, n); });
        if (!info) co_return tl::unexpected(info.error());
        cid = info->record.id;
        pid = n;
      } else if (const Json* ev = rpc::Field(*msg, "data")) {
        if (cid.empty()) co_return Fail(Errc::kInvalidArgument, "StreamInput must start with a StartEvent");
        auto bytes = ParseSendInput(*ev);
        if (!bytes) co_return tl::unexpected(bytes.error());
        std::string b = std::move(*bytes);
        Status st = co_await ctx.Blocking([&] { return p->WriteStdin(sb, cid, b, false); });
        if (!st && st.error().code == Errc::kConflict)
          st = Fail(Errc::kNotFound, "process with pid " + std::to_string(pid) + " has ended");
        if (!st) co_return st;
      } else if (!rpc::Field(*msg, "keepalive")) {
        co_return Fail(Errc::kInvalidArgument, "a StreamInputRequest is a start, data or keepalive event");
      }
    }
    co_return Ok();
  };
  Status st = co_await ctx.ReadBodyStream(rpc::kMaxMessage + 5, feed);
  if (st && !reader.at_boundary()) st = Fail(Errc::kInvalidArgument, "the request ends inside a message");
  if (st && cid.empty()) st = Fail(Errc::kInvalidArgument, "StreamInput must start with a StartEvent");
  if (!st) {
    co_await ReplyStreamError(ctx, st.error());
    co_return;
  }
  std::string reply = rpc::Envelope(0, "{}") + rpc::EndStream();
  co_await ctx.ReplyBytes(200, std::move(reply), "application/connect+json");
}

// The unary process.Process methods: each returns its response message.
Result<Json> ProcessUnary(core::Platform* p, const std::string& sb, const std::string& method,
                          const Json& req) {
  if (method == "List") {
    auto list = p->ListCommands(sb);
    if (!list) return tl::unexpected(list.error());
    Json procs = Json::array();
    for (const auto& c : *list) {
      if (c.ended()) continue;
      procs.push_back({{"config", ProcessConfig(c.record)}, {"pid", c.record.pid}});
    }
    return Json{{"processes", procs}};
  }
  auto pid = SelectedPid(req);
  if (!pid) return tl::unexpected(pid.error());
  auto cmd = CommandByPid(p, sb, *pid);
  if (!cmd) return tl::unexpected(cmd.error());
  const std::string cid = cmd->record.id;
  Status st = Ok();
  if (method == "SendInput") {
    auto bytes = ParseSendInput(req);
    if (!bytes) return tl::unexpected(bytes.error());
    st = p->WriteStdin(sb, cid, *bytes, false);
  } else if (method == "CloseStdin") {
    st = p->WriteStdin(sb, cid, "", true);
  } else if (method == "SendSignal") {
    auto n = ParseSendSignal(req);
    if (!n) return tl::unexpected(n.error());
    st = p->Signal(sb, cid, *n);
  } else if (method == "Update") {
    auto dims = ParseUpdate(req);
    if (!dims) return tl::unexpected(dims.error());
    st = p->ResizeCommand(sb, cid, dims->cols, dims->rows);
  } else {
    return Fail(Errc::kNotFound, "no method process.Process/" + method);
  }
  if (!st && st.error().code == Errc::kConflict) {
    // A command that ended between the lookup and the call is gone, as far as E2B knows.
    auto now = p->GetCommand(sb, cid);
    if (now && now->ended())
      return Fail(Errc::kNotFound, "process with pid " + std::to_string(*pid) + " has ended");
  }
  if (!st) return tl::unexpected(st.error());
  return Json::object();
}

// ---------------------------------------------------------------- filesystem.Filesystem

Result<Json> FilesystemUnary(core::Platform* p, const std::string& sb, const std::string& method,
                             const Json& req, const std::string& caller) {
  const std::string base = RelativeBase(p, sb, caller);
  if (method == "Move") {
    auto from = PathField(req, "source", base);
    auto to = PathField(req, "destination", base);
    if (!from || !to) return tl::unexpected(!from ? from.error() : to.error());
    SPACE_TRY(p->RenameFile(sb, *from, *to));
    auto entry = p->StatFile(sb, *to, kMetadataXattrPrefix);
    if (!entry) return tl::unexpected(entry.error());
    return Json{{"entry", EntryInfo(*entry)}};
  }
  auto path = PathField(req, "path", base);
  if (!path) return tl::unexpected(path.error());
  if (method == "Stat") {
    auto entry = p->StatFile(sb, *path, kMetadataXattrPrefix);
    if (!entry) return tl::unexpected(entry.error());
    return Json{{"entry", EntryInfo(*entry)}};
  }
  if (method == "MakeDir") {
    // envd: an existing path is already_exists (the SDK's makeDir then returns false).
    if (p->StatFile(sb, *path)) return Fail(Errc::kConflict, "path already exists: " + *path);
    // The directories it makes are the caller's (the sandbox's default user unless named).
    std::string user = caller;
    if (user.empty()) {
      if (const Json* u = JsonField(req, "user")) user = JsonStringOr(*u, "username", "");
    }
    SPACE_TRY(p->MakeDir(sb, *path, FileUser(p, sb, user)));
    auto entry = p->StatFile(sb, *path);
    if (!entry) return tl::unexpected(entry.error());
    return Json{{"entry", EntryInfo(*entry)}};
  }
  if (method == "ListDir") {
    auto entries = p->ListFiles(sb, *path, ListDirDepth(req), kMetadataXattrPrefix);
    if (!entries) return tl::unexpected(entries.error());
    Json out = Json::array();
    for (const auto& e : *entries) out.push_back(EntryInfo(e));
    return Json{{"entries", out}};
  }
  if (method == "Remove") {
    // As envd: removing what is not there is no error.
    Status st = p->RemoveFile(sb, *path, /*recursive=*/true);
    if (!st && st.error().code != Errc::kNotFound) return tl::unexpected(st.error());
    return Json::object();
  }
  return Fail(Errc::kNotFound, "no method filesystem.Filesystem/" + method);
}

}  // namespace

Json EntryInfo(const Json& e) {
  std::string type = JsonStringOr(e, "type", "other");
  int mode = static_cast<int>(JsonIntOr(e, "mode", 0));
  Json out = {{"name", JsonStringOr(e, "name", "")},
              {"type", type == "file"      ? "FILE_TYPE_FILE"
                       : type == "dir"     ? "FILE_TYPE_DIRECTORY"
                       : type == "symlink" ? "FILE_TYPE_SYMLINK"
                                           : "FILE_TYPE_UNSPECIFIED"},
              {"path", JsonStringOr(e, "path", "")},
              {"size", std::to_string(JsonIntOr(e, "size", 0))},  // int64: a JSON string
              {"mode", mode},
              {"permissions", Permissions(type, mode)},
              {"owner", JsonStringOr(e, "user", Owner(JsonIntOr(e, "uid", 0)))},
              {"group", JsonStringOr(e, "group", Owner(JsonIntOr(e, "gid", 0)))},
              {"modifiedTime", FormatRfc3339(JsonIntOr(e, "mtime_ms", 0))}};
  // As envd: a symlink is reported as what it leads to, with where that is, absolute.
  if (type == "symlink") {
    if (const Json* t = JsonField(e, "target_path"); t && t->is_string()) {
      out["symlinkTarget"] = *t;
    } else if (const Json* l = JsonField(e, "link_target"); l && l->is_string()) {
      const std::string path = JsonStringOr(e, "path", "/");
      out["symlinkTarget"] = AbsPath(l->get<std::string>(), path.substr(0, path.rfind('/') + 1));
    }
    const std::string target = JsonStringOr(e, "target_type", "");
    if (target == "file") out["type"] = "FILE_TYPE_FILE";
    if (target == "dir") out["type"] = "FILE_TYPE_DIRECTORY";
  }
  if (const Json* x = JsonField(e, "xattrs"); x && x->is_object()) {
    const std::string_view prefix = kMetadataXattrPrefix;
    Json metadata = Json::object();
    for (const auto& [name, value] : x->items()) {
      if (StartsWith(name, prefix) && name.size() > prefix.size())
        metadata[name.substr(prefix.size())] = value;
    }
    if (!metadata.empty()) out["metadata"] = std::move(metadata);
  }
  return out;
}

Awaitable<bool> RouteEnvd(Ctx& ctx, const std::string& sb) {
  core::Platform* p = ctx.platform;
  const std::string& path = ctx.path;
  const bool is_process = StartsWith(path, "/process.Process/");
  const bool is_fs = StartsWith(path, "/filesystem.Filesystem/");
  const bool is_rpc = is_process || is_fs;
  const std::string method = is_rpc ? path.substr(path.find('/', 1) + 1) : "";
  const bool streaming = method == "Start" || method == "Connect" || method == "WatchDir" || method == "StreamInput";

  // envd only exists while its sandbox runs: otherwise answer as E2B's proxy does (502
  // for REST, unavailable for RPCs), which the SDK reports as a timed-out sandbox.
  auto rec = co_await ctx.Blocking([&] { return p->GetSandbox(sb); });
  if (!rec || rec->state != "running") {
    std::string why = "sandbox " + sb + (rec ? " is " + rec->state : " not found");
    if (path == "/health" || path == "/files" || !is_rpc) {
      co_await ReplyRestError(ctx, 502, why);
    } else if (streaming) {
      co_await ReplyStreamError(ctx, "unavailable", why);
    } else {
      co_await ReplyRpcError(ctx, "unavailable", why);
    }
    co_return true;
  }
  if (path == "/health" && ctx.method == "GET") {
    co_await ctx.ReplyBytes(204, "", "application/json");
    co_return true;
  }
  if (path == "/files" && ctx.method == "GET") {
    co_await EnvdFilesGet(ctx, sb);
    co_return true;
  }
  if (path == "/files" && ctx.method == "POST") {
    co_await EnvdFilesPost(ctx, sb);
    co_return true;
  }
  if (!is_rpc) {
    co_await ReplyRestError(ctx, 404, "no route " + ctx.method + " " + path);
    co_return true;
  }
  if (ctx.method != "POST") {
    co_await ReplyRpcError(ctx, "unimplemented", "Connect calls are POSTs");
    co_return true;
  }
  if (is_process && method == "Start") {
    co_await ProcessStart(ctx, sb);
    co_return true;
  }
  if (is_process && method == "Connect") {
    co_await ProcessConnect(ctx, sb);
    co_return true;
  }
  if (is_process && method == "StreamInput") {
    co_await ProcessStreamInput(ctx, sb);
    co_return true;
  }
  if (is_fs && method == "WatchDir") {
    auto msg = co_await ReadRequest(ctx, true);
    if (!msg) co_return true;
    co_await WatchDir(ctx, sb, *msg);
    co_return true;
  }
  static const std::set<std::string> kProcessUnary = {"List", "SendInput", "CloseStdin",
                                                      "SendSignal", "Update"};
  static const std::set<std::string> kFsUnary = {"Stat",   "MakeDir",       "Move",
                                                 "ListDir", "Remove",       "CreateWatcher",
                                                 "GetWatcherEvents", "RemoveWatcher"};
  if (!(is_process ? kProcessUnary : kFsUnary).count(method)) {
    std::string msg = path.substr(1) + " is not supported by SPACE";
    if (streaming) {
      co_await ReplyStreamError(ctx, "unimplemented", msg);
    } else {
      co_await ReplyRpcError(ctx, "unimplemented", msg);
    }
    co_return true;
  }
  auto msg = co_await ReadRequest(ctx, false);
  if (!msg) co_return true;
  Json req = std::move(*msg);
  const std::string caller = BasicUser(ctx.Header(http::field::authorization));
  auto resp = co_await ctx.Blocking([&] {
    if (is_fs && (method == "CreateWatcher" || method == "GetWatcherEvents" || method == "RemoveWatcher"))
      return WatcherUnary(p, sb, method, req);
    return is_process ? ProcessUnary(p, sb, method, req) : FilesystemUnary(p, sb, method, req, caller);
  });
  if (!resp) {
    // The one conflict envd names differently: making a directory that exists.
    if (method == "MakeDir" && resp.error().code == Errc::kConflict) {
      co_await ReplyRpcError(ctx, "already_exists", resp.error().message);
    } else {
      co_await ReplyRpcError(ctx, resp.error());
    }
    co_return true;
  }
  co_await ctx.Reply(200, *resp);
  co_return true;
}

bool IsEnvdRequest(const Ctx& ctx) {
  if (!HeaderOr(ctx, "E2b-Sandbox-Id").empty()) return true;
  const std::string& p = ctx.path;
  const bool envd_path = p == "/health" || p == "/files" || StartsWith(p, "/process.Process/") ||
                         StartsWith(p, "/filesystem.Filesystem/");
  if (envd_path && auth::LooksLikeToken(HeaderOr(ctx, "X-Access-Token"))) return true;
  // A signed /files URL (downloadUrl/uploadUrl) names no sandbox: its signature does.
  return p == "/files" && !ctx.Query("signature").empty();
}

Awaitable<bool> Route(Ctx& ctx) {
  std::string sb = HeaderOr(ctx, "E2b-Sandbox-Id");
  const bool signed_url = ctx.path == "/files" && !ctx.Query("signature").empty() &&
                          HeaderOr(ctx, "X-Access-Token").empty();
  const char* operation = ctx.method == "POST" ? "write" : "read";
  if (sb.empty() && signed_url) {
    // The sandbox whose envd token signed the URL (a hash per sandbox: signed URLs are
    // not a hot path). None: 401 as envd answers a bad signature.
    auto found = co_await ctx.Blocking([&]() -> Result<std::string> {
      auto all = ctx.platform->ListSandboxes({});
      if (!all) return tl::unexpected(all.error());
      Error last(Errc::kUnauthenticated, 0, "invalid signature");
      for (const auto& rec : *all) {
        if (rec.state == "deleting" || rec.state == "deleted") continue;
        auto ok = SignatureValid(ctx, rec, operation);
        if (ok) return rec.id;
        if (ok.error().message != "invalid signature") last = ok.error();  // expired
      }
      return tl::unexpected(last);
    });
    if (!found) {
      co_await ReplyRestError(ctx, found.error().code == Errc::kUnauthenticated ? 401 : 500,
                              found.error().message);
      co_return true;
    }
    sb = *found;
  }
  if (sb.empty()) {
    // No header: the sandbox the envd token names (checked below like any other).
    auto claims = ctx.opts->signing_keys->Verify(HeaderOr(ctx, "X-Access-Token"), NowUnixMillis() / 1000);
    if (!claims) {
      if (StartsWith(ctx.path, "/process.Process/") || StartsWith(ctx.path, "/filesystem.Filesystem/")) {
        co_await ReplyRpcError(ctx, "unauthenticated", "invalid X-Access-Token: " + claims.error().message);
      } else {
        co_await ReplyRestError(ctx, 401, "invalid X-Access-Token: " + claims.error().message);
      }
      co_return true;
    }
    sb = claims->sandbox_id;
  }
  // Another port than envd's (the code interpreter's 49999, or any service): E2B's proxy
  // relays it to that port in the sandbox, as a sandbox host {port}-{id}.{domain} would be,
  // with that port's traffic rules (public unless allowPublicTraffic was false, then the
  // e2b-traffic-access-token header), not envd's X-Access-Token.
  if (std::string port = HeaderOr(ctx, "E2b-Sandbox-Port"); !port.empty() && port != kEnvdPort) {
    auto n = net::ParsePort(port);
    if (!n) {
      co_await ReplyRestError(ctx, 400, "E2b-Sandbox-Port: " + n.error().message);
      co_return true;
    }
    co_await RoutePortTraffic(ctx, sb, *n);
    co_return true;
  }
  // A sandbox that is gone answers as E2B's proxy does (not found), whatever the token:
  // its token was revoked with it, and the SDK expects SandboxNotFoundError here.
  auto known = ctx.platform->GetSandbox(sb);
  const bool live = known && known->state != "deleting" && known->state != "deleted";
  if (live && signed_url) {
    // envd's signed URL instead of the token: for /files only.
    if (auto ok = SignatureValid(ctx, *known, operation); !ok) {
      co_await ReplyRestError(ctx, 401, ok.error().message);
      co_return true;
    }
  } else if (live && !AccessTokenValid(ctx, sb, HeaderOr(ctx, "X-Access-Token"))) {
    if (StartsWith(ctx.path, "/process.Process/") || StartsWith(ctx.path, "/filesystem.Filesystem/")) {
      co_await ReplyRpcError(ctx, "unauthenticated", "missing or invalid X-Access-Token");
    } else {
      co_await ReplyRestError(ctx, 401, "missing or invalid X-Access-Token");
    }
    co_return true;
  }
  co_return co_await RouteEnvd(ctx, sb);
}

}  // namespace space::api::e2b
