// Routes: /v1/sandboxes (lifecycle), /v1/operations (templates: routes_templates.cc).
#include "api/http.h"

namespace space::api {

namespace {

Result<std::map<std::string, std::string>> StringMap(const Json& body, const char* key) {
  std::map<std::string, std::string> out;
  const Json* f = JsonField(body, key);
  if (!f) return out;
  if (!f->is_object()) return Fail(Errc::kInvalidArgument, std::string(key) + " must be an object");
  for (const auto& [k, v] : f->items()) {
    if (!v.is_string())
      return Fail(Errc::kInvalidArgument, std::string(key) + "." + k + " must be a string");
    out[k] = v.get<std::string>();
  }
  return out;
}

Result<core::CreateSandboxRequest> ParseCreate(const Json& body) {
  core::CreateSandboxRequest req;
  for (const auto& [k, v] : body.items()) {
    static const std::set<std::string> kKnown = {
        "template", "snapshot",   "runtime",      "limits",         "env",      "metadata",
        "network",  "timeout",    "on_timeout",   "idle_timeout",   "snapshot_every",
        "keep_last"};
    if (!kKnown.count(k)) return Fail(Errc::kInvalidArgument, "unknown field \"" + k + "\"");
  }
  if (const Json* t = JsonField(body, "template")) {
    if (!t->is_string()) return Fail(Errc::kInvalidArgument, "template must be a string");
    req.template_ref = t->get<std::string>();
  }
  if (const Json* sn = JsonField(body, "snapshot")) {
    if (!sn->is_string()) return Fail(Errc::kInvalidArgument, "snapshot must be a snapshot id");
    req.snapshot_id = sn->get<std::string>();
    if (JsonField(body, "template"))
      return Fail(Errc::kInvalidArgument, "give a template or a snapshot, not both");
  }
  if (const Json* r = JsonField(body, "runtime")) {
    if (!r->is_string()) return Fail(Errc::kInvalidArgument, "runtime must be a string");
    req.runtime = r->get<std::string>();
  }
  if (const Json* l = JsonField(body, "limits")) {
    if (!l->is_object()) return Fail(Errc::kInvalidArgument, "limits must be an object");
    for (const auto& [k, v] : l->items()) {
      if (k == "cpus") {
        if (!v.is_number()) return Fail(Errc::kInvalidArgument, "limits.cpus must be a number");
        req.limits.cpus = v.get<double>();
        continue;
      }
      if (!v.is_number_integer() || v.get<int64_t>() < 0)
        return Fail(Errc::kInvalidArgument, "limits." + k + " must be a non-negative integer");
      int64_t n = v.get<int64_t>();
      if (k == "memory_bytes") {
        req.limits.memory_bytes = n;
      } else if (k == "pids") {
        req.limits.pids = n;
      } else if (k == "disk_bytes") {
        req.limits.disk_bytes = n;
      } else if (k == "nofile") {
        req.limits.nofile = n;
      } else {
        return Fail(Errc::kInvalidArgument, "unknown limit \"" + k + "\"");
      }
    }
  }
  auto env = StringMap(body, "env");
  if (!env) return tl::unexpected(env.error());
  req.env = std::move(*env);
  auto meta = StringMap(body, "metadata");
  if (!meta) return tl::unexpected(meta.error());
  req.metadata = std::move(*meta);
  if (const Json* n = JsonField(body, "network")) {
    if (!n->is_boolean()) return Fail(Errc::kInvalidArgument, "network must be a boolean");
    req.network = n->get<bool>();
  }
  for (const char* key : {"snapshot_every", "keep_last"}) {
    if (const Json* t = JsonField(body, key)) {
      if (!t->is_number_integer() || t->get<int64_t>() < 0)
        return Fail(Errc::kInvalidArgument, std::string(key) + " must be a non-negative integer");
      (std::string(key) == "keep_last" ? req.keep_last : req.snapshot_every_s) = t->get<int64_t>();
    }
  }
  for (const char* key : {"timeout", "idle_timeout"}) {
    if (const Json* t = JsonField(body, key)) {
      if (!t->is_number() || t->get<double>() < 0 || t->get<double>() > 366.0 * 24 * 3600)
        return Fail(Errc::kInvalidArgument, std::string(key) + " must be seconds (0 = none)");
      int64_t secs = static_cast<int64_t>(t->get<double>());
      if (std::string(key) == "timeout") {
        req.timeout_s = secs;
      } else {
        req.idle_timeout_s = secs;
      }
    }
  }
  if (const Json* o = JsonField(body, "on_timeout")) {
    if (!o->is_string()) return Fail(Errc::kInvalidArgument, "on_timeout must be a string");
    req.on_timeout = o->get<std::string>();
  }
  return req;
}

}  // namespace

Awaitable<bool> RouteSandboxes(Ctx& ctx) {
  const auto& s = ctx.segments;
  core::Platform* p = ctx.platform;
  int64_t wait_ms = WaitMillis(ctx);  // validated by the routes that take it
  const bool bad_wait = wait_ms < 0;
  const Error wait_error(Errc::kInvalidArgument, 0, "bad wait duration \"" + ctx.Query("wait") + "\"");

  if (s.size() == 2 && s[1] == "sandboxes") {
    if (ctx.method == "POST") {
      if (bad_wait) {
        co_await ctx.ReplyError(wait_error);
        co_return true;
      }
      auto body = co_await ctx.ReadJson();
      if (!body) {
        co_await ctx.ReplyError(body.error());
        co_return true;
      }
      auto req = ParseCreate(*body);
      if (!req) {
        co_await ctx.ReplyError(req.error());
        co_return true;
      }
      auto created = co_await ctx.Blocking([&] { return p->CreateSandbox(*req); });
      if (!created) {
        co_await ctx.ReplyError(created.error());
        co_return true;
      }
      // (No structured bindings here: g++ 12 destroys them twice inside coroutines.)
      store::OperationRecord op = created->first;
      store::SandboxRecord sb = created->second;
      // The sandbox's own token: every sandbox scope, for handing to whoever uses it.
      const auto token = MintToken(ctx, sb, "", auth::kAllSandboxScopes);
      const Json token_fields = {{"token", token.first},
                                 {"token_expires_at", FormatRfc3339(token.second * 1000)}};
      if (wait_ms > 0) {
        // A warm-pool claim is over already, with its sandbox as answered: no lookups.
        if (!Finished(op)) {
          auto done = co_await AwaitOperation(ctx, op.id, wait_ms);
          if (done) op = *done;
          auto latest = co_await ctx.Blocking([&] { return p->GetSandbox(sb.id); });
          if (latest) sb = *latest;
        }
        if (op.state == "failed") {
          co_await ctx.ReplyError(Error{ErrcFromName(op.error_code), 0, op.error_message});
          co_return true;
        }
        if (op.state == "succeeded") {
          {
            Json reply_body = {{"operation", OperationJson(op)}, {"sandbox", SandboxJson(sb)}};
            reply_body.update(token_fields);
            co_await ctx.Reply(201, reply_body);
          }
          co_return true;
        }
      }
      {
        Json reply_body = {{"operation", OperationJson(op)}, {"sandbox", SandboxJson(sb)}};
        reply_body.update(token_fields);
        co_await ctx.Reply(202, reply_body);
      }
      co_return true;
    }
    if (ctx.method == "GET") {
      core::SandboxFilter f;
      f.state = ctx.Query("state");
      for (const auto& l : ctx.QueryAll("label")) {
        size_t eq = l.find('=');
        if (eq == std::string::npos || eq == 0) {
          co_await ctx.ReplyError(Error{Errc::kInvalidArgument, 0, "label filter must be key=value"});
          co_return true;
        }
        f.labels[l.substr(0, eq)] = l.substr(eq + 1);
      }
      auto list = co_await ctx.Blocking([&] { return p->ListSandboxes(f); });
      co_await ReplyList(ctx, "sandboxes", std::move(list), SandboxJson);
      co_return true;
    }
    co_await ctx.ReplyError(Error{Errc::kInvalidArgument, 0, "method not allowed"});
    co_return true;
  }

  if (s.size() == 3 && s[1] == "sandboxes") {
    const std::string& id = s[2];
    if (ctx.method == "GET") {
      auto sb = co_await ctx.Blocking([&] { return p->GetSandbox(id); });
      if (!sb) {
        co_await ctx.ReplyError(sb.error());
        co_return true;
      }
      Json body = SandboxJson(*sb);
      if (auto caps = p->CapabilitiesOf(id)) {
        body["capabilities"] = {{"pause", caps->pause},
                                {"pause_keeps_memory", caps->pause_keeps_memory},
                                {"suspend_keeps_processes", caps->suspend_keeps_processes},
                                {"snapshot_kinds", caps->snapshot_kinds}};
      }
      co_await ctx.Reply(200, body);
      co_return true;
    }
    if (ctx.method == "DELETE") {
      if (bad_wait) {
        co_await ctx.ReplyError(wait_error);
        co_return true;
      }
      std::string ds = ctx.Query("delete_snapshots");
      bool delete_snapshots = ds == "1" || ds == "true";
      auto op = co_await ctx.Blocking([&] { return p->DeleteSandbox(id, delete_snapshots); });
      if (!op) {
        co_await ctx.ReplyError(op.error());
        co_return true;
      }
      if (co_await AwaitOrFail(ctx, &*op, wait_ms)) co_return true;
      if (wait_ms > 0) {
        if (op->state == "succeeded") {
          {
            Json reply_body = {{"operation", OperationJson(*op)}};
            co_await ctx.Reply(200, reply_body);
          }
          co_return true;
        }
      }
      {
        Json reply_body = {{"operation", OperationJson(*op)}};
        co_await ctx.Reply(202, reply_body);
      }
      co_return true;
    }
    co_await ctx.ReplyError(Error{Errc::kInvalidArgument, 0, "method not allowed"});
    co_return true;
  }

  if (s.size() == 4 && s[1] == "sandboxes" && s[3] == "snapshots") {
    const std::string id = s[2];
    if (ctx.method == "GET") {
      auto snaps = co_await ctx.Blocking([&] { return p->ListSnapshots(id); });
      co_await ReplyList(ctx, "snapshots", std::move(snaps), SnapshotJson);
      co_return true;
    }
    if (ctx.method != "POST") {
      co_await ctx.ReplyError(Error{Errc::kInvalidArgument, 0, "method not allowed"});
      co_return true;
    }
    if (bad_wait) {
      co_await ctx.ReplyError(wait_error);
      co_return true;
    }
    auto op = co_await ctx.Blocking([&] { return p->SnapshotSandbox(id); });
    if (!op) {
      co_await ctx.ReplyError(op.error());
      co_return true;
    }
    if (co_await AwaitOrFail(ctx, &*op, wait_ms)) co_return true;
    if (wait_ms > 0) {
      if (op->state == "succeeded") {
        std::string sid = JsonStringOr(op->result, "snapshot_id", "");
        auto snap = co_await ctx.Blocking([&] { return p->GetSnapshot(sid); });
        Json body = {{"operation", OperationJson(*op)}};
        if (snap) body["snapshot"] = SnapshotJson(*snap);
        co_await ctx.Reply(201, body);
        co_return true;
      }
    }
    Json body = {{"operation", OperationJson(*op)}};
    co_await ctx.Reply(202, body);
    co_return true;
  }

  if (s.size() == 4 && s[1] == "sandboxes" && s[3] == "fork") {
    if (ctx.method != "POST") {
      co_await ctx.ReplyError(Error{Errc::kInvalidArgument, 0, "method not allowed"});
      co_return true;
    }
    if (bad_wait) {
      co_await ctx.ReplyError(wait_error);
      co_return true;
    }
    auto body = co_await ctx.ReadJson();
    if (!body) {
      co_await ctx.ReplyError(body.error());
      co_return true;
    }
    const Json* cnt = JsonField(*body, "count");
    int64_t count = 1;
    if (cnt) {
      if (!cnt->is_number_integer()) {
        co_await ctx.ReplyError(Error{Errc::kInvalidArgument, 0, "count must be an integer"});
        co_return true;
      }
      count = cnt->get<int64_t>();
    }
    if (count < 1 || count > 1000000) count = count < 1 ? 0 : 1000000;  // core reports the range
    const std::string id = s[2];
    auto forked = co_await ctx.Blocking([&] { return p->Fork(id, static_cast<int>(count)); });
    if (!forked) {
      co_await ctx.ReplyError(forked.error());
      co_return true;
    }
    store::OperationRecord op = forked->first;
    if (wait_ms > 0) {
      auto done = co_await AwaitOperation(ctx, op.id, wait_ms);
      if (done) op = *done;
    }
    Json arr = Json::array();
    for (const auto& r : forked->second) {
      auto latest = co_await ctx.Blocking([&] { return p->GetSandbox(r.id); });
      arr.push_back(SandboxJson(latest ? *latest : r));
    }
    Json reply = {{"operation", OperationJson(op)}, {"sandboxes", arr}};
    co_await ctx.Reply(Finished(op) ? 200 : 202, reply);
    co_return true;
  }

  if (s.size() >= 2 && s[1] == "snapshots") {
    if (s.size() == 2 && ctx.method == "GET") {
      auto snaps = co_await ctx.Blocking([&] { return p->ListSnapshots(""); });
      co_await ReplyList(ctx, "snapshots", std::move(snaps), SnapshotJson);
      co_return true;
    }
    if (s.size() == 3 && ctx.method == "GET") {
      const std::string sid = s[2];
      auto snap = co_await ctx.Blocking([&] { return p->GetSnapshot(sid); });
      if (!snap) {
        co_await ctx.ReplyError(snap.error());
      } else {
        co_await ctx.Reply(200, SnapshotJson(*snap));
      }
      co_return true;
    }
    if (s.size() == 3 && ctx.method == "DELETE") {
      const std::string sid = s[2];
      auto st = co_await ctx.Blocking([&] { return p->DeleteSnapshot(sid); });
      if (!st) {
        co_await ctx.ReplyError(st.error());
      } else {
        co_await ctx.Reply(200, Json::object());
      }
      co_return true;
    }
    co_return false;
  }

  if (s.size() == 4 && s[1] == "sandboxes" && s[3] == "timeout") {
    if (ctx.method != "POST") {
      co_await ctx.ReplyError(Error{Errc::kInvalidArgument, 0, "method not allowed"});
      co_return true;
    }
    auto body = co_await ctx.ReadJson();
    if (!body) {
      co_await ctx.ReplyError(body.error());
      co_return true;
    }
    const Json* t = JsonField(*body, "timeout");
    if (!t || !t->is_number() || t->get<double>() < 0) {
      co_await ctx.ReplyError(Error{Errc::kInvalidArgument, 0, "timeout (seconds, 0 = none) is required"});
      co_return true;
    }
    int64_t secs = static_cast<int64_t>(t->get<double>());
    std::string on_timeout = JsonStringOr(*body, "on_timeout", "");
    const std::string id = s[2];
    auto rec = co_await ctx.Blocking([&] { return p->SetTimeout(id, secs, on_timeout); });
    if (!rec) {
      co_await ctx.ReplyError(rec.error());
    } else {
      co_await ctx.Reply(200, SandboxJson(*rec));
    }
    co_return true;
  }

  if (s.size() == 4 && s[1] == "sandboxes" &&
      (s[3] == "pause" || s[3] == "resume" || s[3] == "suspend" || s[3] == "wake")) {
    if (ctx.method != "POST") {
      co_await ctx.ReplyError(Error{Errc::kInvalidArgument, 0, "method not allowed"});
      co_return true;
    }
    if (bad_wait) {
      co_await ctx.ReplyError(wait_error);
      co_return true;
    }
    const std::string id = s[2], kind = s[3];
    auto op = co_await ctx.Blocking([&] { return p->Transition(id, kind); });
    if (!op) {
      co_await ctx.ReplyError(op.error());
      co_return true;
    }
    if (co_await AwaitOrFail(ctx, &*op, wait_ms)) co_return true;
    auto sb = co_await ctx.Blocking([&] { return p->GetSandbox(id); });
    Json body = {{"operation", OperationJson(*op)}};
    if (sb) body["sandbox"] = SandboxJson(*sb);
    co_await ctx.Reply(Finished(*op) ? 200 : 202, body);
    co_return true;
  }

  if (s.size() == 2 && s[1] == "operations" && ctx.method == "GET") {
    int64_t limit = 100;
    if (auto l = ctx.Query("limit"); !l.empty()) {
      char* end = nullptr;
      limit = std::strtoll(l.c_str(), &end, 10);
      if (*end || limit < 0) {
        co_await ctx.ReplyError(Error{Errc::kInvalidArgument, 0, "limit must be a number"});
        co_return true;
      }
    }
    std::string state = ctx.Query("state");
    auto ops = co_await ctx.Blocking([&] { return p->ListOperations(limit, state); });
    co_await ReplyList(ctx, "operations", std::move(ops), OperationJson);
    co_return true;
  }

  if (s.size() == 3 && s[1] == "operations" && ctx.method == "GET") {
    if (bad_wait) {
      co_await ctx.ReplyError(wait_error);
      co_return true;
    }
    auto op = co_await AwaitOperation(ctx, s[2], wait_ms);
    if (!op) {
      co_await ctx.ReplyError(op.error());
    } else {
      co_await ctx.Reply(200, OperationJson(*op));
    }
    co_return true;
  }

  co_return false;
}

}  // namespace space::api
