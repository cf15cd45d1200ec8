// Routes: /v1/sandboxes (lifecycle), /v1/operations (templates: routes_templates.cc).
#include "api/http.h"

namespace space::api {

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
      // Headers before the body: reading it moves the request out of the parser.
      const std::string chosen_id = ctx.Header(kSandboxIdHeader);  // a cluster gateway's pick
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
      req->id = chosen_id;
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
      auto filter = ParseSandboxFilter(ctx.query);
      if (!filter) {
        co_await ctx.ReplyError(filter.error());
        co_return true;
      }
      core::SandboxFilter f = std::move(*filter);
      auto list = co_await ctx.Blocking([&] { return p->ListSandboxes(f); });
      co_await ReplyList(ctx, "sandboxes", std::move(list), SandboxJson);
      co_return true;
    }
    if (ctx.method == "DELETE") {
      // Bulk delete: every sandbox the label filter (and `state`, if given) matches, each as
      // its own delete operation. Never all sandboxes by accident: a label is required.
      if (bad_wait) {
        co_await ctx.ReplyError(wait_error);
        co_return true;
      }
      auto filter = ParseSandboxFilter(ctx.query);
      if (filter && filter->labels.empty())
        filter = Fail(Errc::kInvalidArgument, "a bulk delete needs at least one label=key=value filter");
      if (!filter) {
        co_await ctx.ReplyError(filter.error());
        co_return true;
      }
      core::SandboxFilter f = std::move(*filter);
      const std::string ds = ctx.Query("delete_snapshots");
      const bool delete_snapshots = ds == "1" || ds == "true";
      struct Outcome {
        std::string id;
        Result<store::OperationRecord> op;
      };
      auto outcomes = co_await ctx.Blocking([&]() -> Result<std::vector<Outcome>> {
        auto list = p->ListSandboxes(f);
        if (!list) return tl::unexpected(list.error());
        std::vector<Outcome> out;
        for (const auto& sb : *list) out.push_back({sb.id, p->DeleteSandbox(sb.id, delete_snapshots)});
        return out;
      });
      if (!outcomes) {
        co_await ctx.ReplyError(outcomes.error());
        co_return true;
      }
      const int64_t deadline = MonotonicNanos() + wait_ms * 1000000;
      Json ops = Json::array(), errors = Json::array();
      bool all_done = true;
      for (auto& o : *outcomes) {
        if (!o.op) {
          // Gone meanwhile, or busy: said per sandbox; the others go on.
          errors.push_back({{"sandbox_id", o.id}, {"error", ErrorBody(o.op.error())["error"]}});
          continue;
        }
        store::OperationRecord op = *o.op;
        const int64_t left_ms = (deadline - MonotonicNanos()) / 1000000;
        if (wait_ms > 0 && !Finished(op) && left_ms > 0) {
          auto done = co_await AwaitOperation(ctx, op.id, left_ms);
          if (done) op = *done;
        }
        all_done = all_done && Finished(op);
        ops.push_back(OperationJson(op));
      }
      Json reply_body = {{"operations", ops}, {"count", ops.size()}, {"errors", errors}};
      co_await ctx.Reply(wait_ms > 0 && all_done ? 200 : 202, reply_body);
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
      if (auto caps = p->CapabilitiesOf(*sb)) {
        body["capabilities"] = runtime::CapabilitiesToJson(*caps);
      }
      co_await ctx.Reply(200, body);
      co_return true;
    }
    if (ctx.method == "PATCH") {
      // {"limits":{"output_bytes":N}}: the one limit a live sandbox can change.
      auto body = co_await ctx.ReadJson();
      if (!body) {
        co_await ctx.ReplyError(body.error());
        co_return true;
      }
      const Json* limits = JsonField(*body, "limits");
      if (!body->is_object() || !limits || body->size() != 1) {
        co_await ctx.ReplyError(Error{Errc::kInvalidArgument, 0, "want {\"limits\":{...}}"});
        co_return true;
      }
      Json want = *limits;
      auto sb = co_await ctx.Blocking([&] { return p->SetLimits(id, want); });
      if (!sb) {
        co_await ctx.ReplyError(sb.error());
        co_return true;
      }
      co_await ctx.Reply(200, SandboxJson(*sb));
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
    auto parsed_count = ParseForkCount(*body);
    if (!parsed_count) {
      co_await ctx.ReplyError(parsed_count.error());
      co_return true;
    }
    const int64_t count = *parsed_count;
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

  if (s.size() == 4 && s[1] == "sandboxes" && s[3] == "network") {
    const std::string id = s[2];
    if (ctx.method == "GET") {
      auto n = co_await ctx.Blocking([&] { return p->GetNetwork(id); });
      if (!n) {
        co_await ctx.ReplyError(n.error());
      } else {
        co_await ctx.Reply(200, *n);
      }
      co_return true;
    }
    if (ctx.method != "PUT") {
      co_await ctx.ReplyError(Error{Errc::kInvalidArgument, 0, "method not allowed"});
      co_return true;
    }
    auto body = co_await ctx.ReadJson();
    if (!body) {
      co_await ctx.ReplyError(body.error());
      co_return true;
    }
    Json b = std::move(*body);
    auto n = co_await ctx.Blocking([&] { return p->SetNetwork(id, b); });
    if (!n) {
      co_await ctx.ReplyError(n.error());
    } else {
      co_await ctx.Reply(200, *n);
    }
    co_return true;
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
    auto timeout = ParseTimeout(*body);
    if (!timeout) {
      co_await ctx.ReplyError(timeout.error());
      co_return true;
    }
    int64_t secs = timeout->seconds;
    std::string on_timeout = timeout->on_timeout;
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
    auto parsed_limit = ParseOperationsLimit(ctx.query);
    if (!parsed_limit) {
      co_await ctx.ReplyError(parsed_limit.error());
      co_return true;
    }
    int64_t limit = *parsed_limit;
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
