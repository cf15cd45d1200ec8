// Routes: /v1/templates — list, build (an operation), build logs, and names (tags): PUT
// /v1/templates/{name:tag} {"from": REF} gives REF's build that name, DELETE removes it.
#include "api/http.h"

namespace space::api {

Awaitable<bool> RouteTemplates(Ctx& ctx) {
  const auto& s = ctx.segments;
  core::Platform* p = ctx.platform;
  if (s.size() < 2 || s[1] != "templates") co_return false;

  if (s.size() == 2 && ctx.method == "GET") {
    auto ts = co_await ctx.Blocking([&] { return p->ListTemplates(); });
    if (!ts) {
      co_await ctx.ReplyError(ts.error());
      co_return true;
    }
    Json arr = Json::array();
    for (const auto& t : *ts) arr.push_back(TemplateJson(t));
    // Built-ins not built yet, so that users learn they can ask for them.
    Json builtins = Json::array();
    for (const auto& b : p->BuiltinTemplateNames()) builtins.push_back(b);
    Json reply_body = {{"templates", arr}, {"builtins", builtins}};
    co_await ctx.Reply(200, reply_body);
    co_return true;
  }

  if (s.size() == 2 && ctx.method == "POST") {
    int64_t wait_ms = WaitMillis(ctx);
    if (wait_ms < 0) {
      co_await ctx.ReplyError(
          Error{Errc::kInvalidArgument, 0, "bad wait duration \"" + ctx.Query("wait") + "\""});
      co_return true;
    }
    auto text = co_await ctx.ReadBody(kMaxBuildBody);
    if (!text) {
      co_await ctx.ReplyError(text.error());
      co_return true;
    }
    auto body = ParseJson(*text);
    if (!body || !body->is_object()) {
      co_await ctx.ReplyError(Error{Errc::kInvalidArgument, 0, "request body must be a JSON object"});
      co_return true;
    }
    // {"builtin":"python"}: build (or import from the cache) a built-in template.
    const Json* builtin = JsonField(*body, "builtin");
    if (builtin && (!builtin->is_string() || body->size() != 1)) {
      co_await ctx.ReplyError(Error{Errc::kInvalidArgument, 0,
                                    "builtin is the name of a built-in template, alone"});
      co_return true;
    }
    Result<core::TemplateBuildRequest> req = core::TemplateBuildRequest{};
    if (!builtin) req = ParseBuild(*body);
    if (!req) {
      co_await ctx.ReplyError(req.error());
      co_return true;
    }
    std::string builtin_ref = builtin ? builtin->get<std::string>() : "";
    auto started = co_await ctx.Blocking([&] {
      return builtin ? p->EnsureBuiltinTemplate(builtin_ref) : p->BuildTemplate(*req);
    });
    if (!started) {
      co_await ctx.ReplyError(started.error());
      co_return true;
    }
    store::OperationRecord op = *started;
    if (wait_ms > 0) {
      auto done = co_await AwaitOperation(ctx, op.id, wait_ms);
      if (done) op = *done;
      if (op.state == "failed") {
        Json err = ErrorBody(Error{ErrcFromName(op.error_code), 0, op.error_message});
        err["operation"] = OperationJson(op);
        co_await ctx.Reply(HttpStatusFor(ErrcFromName(op.error_code)), err);
        co_return true;
      }
      if (op.state == "succeeded") {
        Json reply_body = {{"operation", OperationJson(op)}};
        co_await ctx.Reply(201, reply_body);
        co_return true;
      }
    }
    {
      Json reply_body = {{"operation", OperationJson(op)}};
      co_await ctx.Reply(202, reply_body);
    }
    co_return true;
  }

  if (s.size() == 3 && s[2] != "builds" && ctx.method == "PUT") {
    const std::string name_tag = s[2];
    auto body = co_await ctx.ReadJson();
    if (!body) {
      co_await ctx.ReplyError(body.error());
      co_return true;
    }
    const Json* from = body->is_object() && body->contains("from") ? &(*body)["from"] : nullptr;
    if (!from || !from->is_string() || from->get<std::string>().empty()) {
      co_await ctx.ReplyError(Error{Errc::kInvalidArgument, 0,
                                    "want {\"from\": \"name:tag\" or \"sha256:...\"}: the build to name " +
                                        name_tag});
      co_return true;
    }
    const std::string target = from->get<std::string>();
    auto t = co_await ctx.Blocking([&] { return p->TagTemplate(target, name_tag); });
    if (!t) {
      co_await ctx.ReplyError(t.error());
      co_return true;
    }
    co_await ctx.Reply(200, TemplateJson(*t));
    co_return true;
  }

  if (s.size() == 3 && s[2] != "builds" && ctx.method == "DELETE") {
    const std::string name_tag = s[2];
    auto st = co_await ctx.Blocking([&] { return p->UntagTemplate(name_tag); });
    if (!st) {
      co_await ctx.ReplyError(st.error());
      co_return true;
    }
    co_await ctx.Reply(200, Json::object());
    co_return true;
  }

  if (s.size() == 5 && s[2] == "builds" && s[4] == "log" && ctx.method == "GET") {
    std::string id = s[3];
    auto log = co_await ctx.Blocking([&] { return p->TemplateBuildLog(id); });
    if (!log) {
      co_await ctx.ReplyError(log.error());
      co_return true;
    }
    co_await ctx.ReplyBytes(200, std::move(*log), "text/plain; charset=utf-8");
    co_return true;
  }
  co_return false;
}

}  // namespace space::api
