// Routes: /v1/sandboxes/{id}/code — cells run in stateful code contexts by the kernel runner
// of the code-interpreter template (space-kernel, docs/code-interpreter.md).
//
// A cell is a command: `space-kernel exec ...` with the code on its stdin, whose stdout is
// one JSON event per line. Its output is stored like any command's, so a cell's events and
// result survive a restart of spaced and can be read again by its command id. Context
// management runs `space-kernel contexts ...` the same way and relays its JSON.
#include <csignal>

#include "api/http.h"

namespace space::api {

namespace {

constexpr size_t kMaxCodeBytes = 8 << 20;
constexpr size_t kMaxEventsBytes = 64 << 20;  // what a reply aggregates

const char* kKernel = "space-kernel";

bool ValidLanguage(const std::string& l) {
  return l == "python" || l == "javascript" || l == "js" || l == "bash" || l == "sh";
}

bool ValidContextId(const std::string& c) {
  if (c.empty() || c.size() > 128) return false;
  for (char ch : c) {
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' || ch == '.'))
      return false;
  }
  return true;
}

// Folds the cell's events (NDJSON, possibly ending in a partial line) into one execution:
// {results, logs:{stdout,stderr}, error, execution_count, context}.
Json FoldEvents(std::string_view text) {
  Json results = Json::array(), out = Json::array(), err = Json::array();
  Json error = nullptr, count = nullptr, context = nullptr;
  bool ended = false;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) break;  // not yet complete
    auto ev = ParseJson(text.substr(pos, nl - pos));
    pos = nl + 1;
    if (!ev || !ev->is_object()) continue;
    std::string type = JsonStringOr(*ev, "type", "");
    if (type == "stdout" || type == "stderr") {
      (type == "stdout" ? out : err).push_back(JsonStringOr(*ev, "text", ""));
    } else if (type == "result") {
      Json r = *ev;
      r.erase("type");
      results.push_back(std::move(r));
    } else if (type == "error") {
      error = {{"name", JsonStringOr(*ev, "name", "")},
               {"value", JsonStringOr(*ev, "value", "")},
               {"traceback", JsonStringOr(*ev, "traceback", "")}};
    } else if (type == "number_of_executions") {
      if (const Json* c = JsonField(*ev, "execution_count")) count = *c;
    } else if (type == "context") {
      context = {{"id", JsonStringOr(*ev, "id", "")}, {"language", JsonStringOr(*ev, "language", "")}};
    } else if (type == "end_of_execution") {
      ended = true;
    }
  }
  return {{"results", results},
          {"logs", {{"stdout", out}, {"stderr", err}}},
          {"error", error},
          {"execution_count", count},
          {"context", context},
          {"complete", ended}};
}

// The execution of cell `cid` as stored now: its folded events plus the command's state.
Result<Json> Execution(core::Platform* p, const std::string& sb, const std::string& cid) {
  auto info = p->GetCommand(sb, cid);
  if (!info) return tl::unexpected(info.error());
  const Json& spec = info->record.spec;
  const Json* argv = JsonField(spec, "argv");
  if (!argv || !argv->is_array() || argv->size() < 2 || (*argv)[0] != kKernel || (*argv)[1] != "exec")
    return Fail(Errc::kNotFound, cid + " is not a code cell");
  auto text = p->ReadOutput(sb, cid, store::OutputStream::kStdout, 0, kMaxEventsBytes);
  if (!text) return tl::unexpected(text.error());
  Json ex = FoldEvents(*text);
  ex["id"] = cid;
  ex["state"] = info->ended() ? "done" : "running";
  // The runner itself failed (not the cell): say why, from its stderr.
  if (info->ended() && ex["error"].is_null() &&
      (info->record.state != "exited" || info->record.exit_code.value_or(0) != 0 ||
       !ex["complete"].get<bool>())) {
    auto why = p->ReadOutput(sb, cid, store::OutputStream::kStderr, 0, 4096);
    std::string msg = why && !why->empty() ? *why : info->record.reason;
    while (!msg.empty() && (msg.back() == '\n' || msg.back() == '\r')) msg.pop_back();
    if (msg.empty()) msg = "the kernel runner ended with " + info->record.state;
    ex["error"] = {{"name", "RunnerError"}, {"value", msg}, {"traceback", ""}};
  }
  return ex;
}

// Starts `space-kernel ARGS...` in the sandbox, with `input` on its stdin when given.
Result<core::CommandInfo> StartKernel(core::Platform* p, const std::string& sb,
                                      std::vector<std::string> args,
                                      const std::optional<std::string>& input) {
  core::CommandRequest req;
  req.argv.push_back(kKernel);
  for (auto& a : args) req.argv.push_back(std::move(a));
  req.stdin = input.has_value();
  auto info = p->StartCommand(sb, req);
  if (!info) {
    const std::string& m = info.error().message;
    if (m.find("No such file") != std::string::npos || m.find("not found") != std::string::npos)
      return Fail(Errc::kConflict,
                  "this sandbox has no code runner: create it from the code-interpreter template");
    return info;
  }
  if (input) {
    if (auto st = p->WriteStdin(sb, info->record.id, *input, true); !st) return tl::unexpected(st.error());
  }
  return info;
}

// Waits (up to the deadline) for a command to end; returns its last state.
Awaitable<Result<core::CommandInfo>> WaitCommand(Ctx& ctx, const std::string& sb,
                                                 const std::string& cid, int64_t deadline) {
  core::Platform* p = ctx.platform;
  Ctx::Watcher w(ctx, "cmd:" + sb + ":" + cid);
  for (;;) {
    w.Arm();
    auto info = co_await ctx.Blocking([&] { return p->GetCommand(sb, cid); });
    if (!info || info->ended() || MonotonicNanos() >= deadline) co_return info;
    co_await w.Wait(deadline);
  }
}

Errc ErrcOfRunner(const std::string& code) {
  if (code == "invalid_argument") return Errc::kInvalidArgument;
  if (code == "not_found") return Errc::kNotFound;
  if (code == "conflict") return Errc::kConflict;
  if (code == "too_large") return Errc::kTooLarge;
  return Errc::kUnavailable;
}

// Runs `space-kernel contexts ...` and replies with its JSON (or its error).
Awaitable<void> ContextsCall(Ctx& ctx, const std::string& sb, const std::vector<std::string>& args,
                             int ok_status) {
  core::Platform* p = ctx.platform;
  std::vector<std::string> full = {"contexts"};
  for (const auto& a : args) full.push_back(a);
  auto info = co_await ctx.Blocking([&] { return StartKernel(p, sb, full, std::nullopt); });
  if (!info) {
    co_await ctx.ReplyError(info.error());
    co_return;
  }
  const std::string cid = info->record.id;
  auto end = co_await WaitCommand(ctx, sb, cid, MonotonicNanos() + 60'000'000'000ll);
  if (!end) {
    co_await ctx.ReplyError(end.error());
    co_return;
  }
  if (!end->ended()) {
    (void)co_await ctx.Blocking([&] { return p->Signal(sb, cid, SIGKILL); });
    co_await ctx.ReplyError(Error{Errc::kDeadlineExceeded, 0, "the kernel runner did not answer in 60 s"});
    co_return;
  }
  auto out = co_await ctx.Blocking(
      [&] { return p->ReadOutput(sb, cid, store::OutputStream::kStdout, 0, 1 << 20); });
  std::optional<Json> j = out ? ParseJson(*out) : std::nullopt;
  if (!j) {
    auto err = co_await ctx.Blocking(
        [&] { return p->ReadOutput(sb, cid, store::OutputStream::kStderr, 0, 4096); });
    co_await ctx.ReplyError(Error{Errc::kUnavailable, 0,
                                  "the kernel runner failed: " + (err && !err->empty() ? *err : end->record.state)});
    co_return;
  }
  if (const Json* e = JsonField(*j, "error"); e && e->is_object()) {
    co_await ctx.ReplyError(Error{ErrcOfRunner(JsonStringOr(*e, "code", "")), 0,
                                  JsonStringOr(*e, "message", "kernel runner error")});
    co_return;
  }
  if (j->is_array()) j = Json{{"contexts", *j}};
  co_await ctx.Reply(ok_status, *j);
}

// Streams a cell's events as NDJSON from the start of its output, then a last line
// {"type":"execution", ...the folded execution} (the chunked response not yet started).
Awaitable<void> StreamCell(Ctx& ctx, const std::string& sb, const std::string& cid) {
  std::vector<std::pair<std::string, std::string>> headers = {{"Space-Command-Id", cid}};
  co_await ctx.StartChunked(200, "application/x-ndjson", headers);
  OutputEmitFn emit = [&](store::OutputStream s, uint64_t, std::string_view data) -> Awaitable<void> {
    if (s == store::OutputStream::kStdout) co_await ctx.WriteChunk(data);
  };
  OutputFinishFn finish = [&](const core::CommandInfo&) -> Awaitable<void> {
    auto ex = co_await ctx.Blocking([&] { return Execution(ctx.platform, sb, cid); });
    Json last = ex ? *ex : Json{{"error", {{"name", "RunnerError"}, {"value", ex.error().message}}}};
    last["type"] = "execution";
    std::string line = last.dump() + "\n";
    co_await ctx.WriteChunk(line);
  };
  OutputKeepaliveFn keepalive = [&]() -> Awaitable<void> {
    co_await ctx.WriteChunk("{\"type\":\"keepalive\"}\n");
  };
  co_await StreamOutput(ctx, sb, cid, 0, 0, emit, finish, keepalive);
  co_await ctx.EndChunked();
}

bool WantsStream(const Ctx& ctx) { return ctx.Query("stream") == "1" || ctx.Query("stream") == "true"; }

// Waits up to wait_ms for cell `cid` to end, then replies with its execution: 200 once it
// has ended, `running_status` if it still runs.
Awaitable<void> ReplyExecution(Ctx& ctx, const std::string& sb, const std::string& cid,
                               int64_t wait_ms, int running_status) {
  auto end = co_await WaitCommand(ctx, sb, cid, MonotonicNanos() + wait_ms * 1000000);
  if (!end) {
    co_await ctx.ReplyError(end.error());
    co_return;
  }
  auto ex = co_await ctx.Blocking([&] { return Execution(ctx.platform, sb, cid); });
  if (!ex) {
    co_await ctx.ReplyError(ex.error());
    co_return;
  }
  co_await ctx.Reply(end->ended() ? 200 : running_status, *ex);
}

}  // namespace

Awaitable<bool> RouteCode(Ctx& ctx) {
  const auto& s = ctx.segments;
  if (s.size() < 4 || s[1] != "sandboxes" || s[3] != "code") co_return false;
  core::Platform* p = ctx.platform;
  const std::string sb = s[2];

  // Contexts.
  if (s.size() >= 5 && s[4] == "contexts") {
    if (s.size() == 5 && ctx.method == "GET") {
      std::vector<std::string> args = {"list"};
      co_await ContextsCall(ctx, sb, args, 200);
      co_return true;
    }
    if (s.size() == 5 && ctx.method == "POST") {
      auto body = co_await ctx.ReadJson();
      if (!body) {
        co_await ctx.ReplyError(body.error());
        co_return true;
      }
      std::string lang = JsonStringOr(*body, "language", "python");
      std::string cwd = JsonStringOr(*body, "cwd", "");
      if (!ValidLanguage(lang)) {
        co_await ctx.ReplyError(Error{Errc::kInvalidArgument, 0,
                                      "language must be python, javascript or bash"});
        co_return true;
      }
      std::vector<std::string> args = {"create", "--language", lang};
      if (!cwd.empty()) {
        if (cwd[0] != '/' || cwd.find('\0') != std::string::npos) {
          co_await ctx.ReplyError(Error{Errc::kInvalidArgument, 0, "cwd must be an absolute path"});
          co_return true;
        }
        args.push_back("--cwd");
        args.push_back(cwd);
      }
      co_await ContextsCall(ctx, sb, args, 201);
      co_return true;
    }
    if (s.size() >= 6 && !ValidContextId(s[5])) {
      co_await ctx.ReplyError(Error{Errc::kNotFound, 0, "no context " + s[5]});
      co_return true;
    }
    if (s.size() == 7 && s[6] == "restart" && ctx.method == "POST") {
      std::vector<std::string> args = {"restart", s[5]};
      co_await ContextsCall(ctx, sb, args, 200);
      co_return true;
    }
    if (s.size() == 7 && s[6] == "interrupt" && ctx.method == "POST") {
      std::vector<std::string> args = {"interrupt", s[5]};
      co_await ContextsCall(ctx, sb, args, 200);
      co_return true;
    }
    if (s.size() == 6 && ctx.method == "DELETE") {
      std::vector<std::string> args = {"delete", s[5]};
      co_await ContextsCall(ctx, sb, args, 200);
      co_return true;
    }
    co_await ctx.ReplyError(Error{Errc::kInvalidArgument, 0, "method not allowed"});
    co_return true;
  }

  // Run a cell.
  if (s.size() == 4 && ctx.method == "POST") {
    auto body = co_await ctx.ReadJson();
    if (!body) {
      co_await ctx.ReplyError(body.error());
      co_return true;
    }
    const Json* code = JsonField(*body, "code");
    if (!code || !code->is_string()) {
      co_await ctx.ReplyError(Error{Errc::kInvalidArgument, 0, "code (a string) is required"});
      co_return true;
    }
    if (code->get_ref<const std::string&>().size() > kMaxCodeBytes) {
      co_await ctx.ReplyError(Error{Errc::kTooLarge, 0, "code is larger than 8 MiB"});
      co_return true;
    }
    std::string lang = JsonStringOr(*body, "language", "python");
    if (!ValidLanguage(lang)) {
      co_await ctx.ReplyError(Error{Errc::kInvalidArgument, 0, "language must be python, javascript or bash"});
      co_return true;
    }
    std::vector<std::string> args = {"exec", "--language", lang};
    if (const Json* c = JsonField(*body, "context"); c && !c->is_null()) {
      if (!c->is_string() || !ValidContextId(c->get<std::string>())) {
        co_await ctx.ReplyError(Error{Errc::kInvalidArgument, 0,
                                      "context must be a context id ([A-Za-z0-9._-], up to 128)"});
        co_return true;
      }
      args.push_back("--context");
      args.push_back(c->get<std::string>());
    }
    if (const Json* t = JsonField(*body, "timeout_ms"); t && !t->is_null()) {
      if (!t->is_number_integer() || t->get<int64_t>() <= 0) {
        co_await ctx.ReplyError(Error{Errc::kInvalidArgument, 0, "timeout_ms must be a positive integer"});
        co_return true;
      }
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.3f", t->get<int64_t>() / 1000.0);
      args.push_back("--timeout");
      args.push_back(buf);
    }
    if (const Json* env = JsonField(*body, "env"); env && !env->is_null()) {
      if (!env->is_object()) {
        co_await ctx.ReplyError(Error{Errc::kInvalidArgument, 0, "env must be an object of strings"});
        co_return true;
      }
      for (const auto& [k, v] : env->items()) {
        if (!v.is_string() || k.empty() || k.find('=') != std::string::npos ||
            k.find('\0') != std::string::npos) {
          co_await ctx.ReplyError(Error{Errc::kInvalidArgument, 0, "env must be an object of strings"});
          co_return true;
        }
        args.push_back("--env");
        args.push_back(k + "=" + v.get<std::string>());
      }
    }
    std::string text = code->get<std::string>();
    auto info = co_await ctx.Blocking([&] { return StartKernel(p, sb, args, text); });
    if (!info) {
      co_await ctx.ReplyError(info.error());
      co_return true;
    }
    const std::string cid = info->record.id;
    if (WantsStream(ctx) ||
        ctx.Header(http::field::accept).find("application/x-ndjson") != std::string::npos) {
      co_await StreamCell(ctx, sb, cid);
      co_return true;
    }
    int64_t wait_ms = ctx.Query("wait").empty() ? 3'600'000 : WaitMillis(ctx);
    if (wait_ms < 0) wait_ms = 3'600'000;
    co_await ReplyExecution(ctx, sb, cid, wait_ms, 202);
    co_return true;
  }

  // A cell's execution, again (also after a restart of spaced).
  if (s.size() == 5 && ctx.method == "GET") {
    const std::string cid = s[4];
    int64_t wait_ms = WaitMillis(ctx);
    if (wait_ms < 0) {
      co_await ctx.ReplyError(Error{Errc::kInvalidArgument, 0, "bad wait duration"});
      co_return true;
    }
    if (WantsStream(ctx)) {
      auto ex = co_await ctx.Blocking([&] { return Execution(p, sb, cid); });
      if (!ex) {
        co_await ctx.ReplyError(ex.error());
        co_return true;
      }
      co_await StreamCell(ctx, sb, cid);
      co_return true;
    }
    co_await ReplyExecution(ctx, sb, cid, wait_ms, 200);
    co_return true;
  }
  if (s.size() == 6 && s[5] == "interrupt" && ctx.method == "POST") {
    const std::string cid = s[4];
    auto ex = co_await ctx.Blocking([&] { return Execution(p, sb, cid); });
    if (!ex) {
      co_await ctx.ReplyError(ex.error());
      co_return true;
    }
    auto st = co_await ctx.Blocking([&] { return p->Signal(sb, cid, SIGINT); });
    if (!st) {
      co_await ctx.ReplyError(st.error());
      co_return true;
    }
    Json reply = {{"id", cid}, {"interrupted", true}};
    co_await ctx.Reply(202, reply);
    co_return true;
  }
  co_await ctx.ReplyError(Error{Errc::kInvalidArgument, 0, "method not allowed"});
  co_return true;
}

}  // namespace space::api
