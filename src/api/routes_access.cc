// Routes: /v1/keys (operator API keys), /v1/sandboxes/{id}/tokens (mint a narrower token),
// /v1/whoami. Who may call them is decided in access.cc like every other route.
#include "api/http.h"

namespace space::api {

namespace {

Json KeyJson(const store::ApiKeyRecord& k) {
  Json j = {{"id", k.id},
            {"name", k.name},
            {"hint", k.hint},
            {"created_at", FormatRfc3339(k.created_ms)}};
  if (!k.scope.empty()) j["scope"] = k.scope;  // a cluster's node: "node" or "cluster"
  return j;
}

Json TokenJson(const std::string& token, const auth::Claims& c) {
  Json j = {{"token", token},
            {"sandbox_id", c.sandbox_id},
            {"scopes", auth::ScopeNames(c.scopes)},
            {"expires_at", FormatRfc3339(c.expires_s * 1000)}};
  if (!c.command_id.empty()) j["command_id"] = c.command_id;
  return j;
}

}  // namespace

Awaitable<bool> RouteAccess(Ctx& ctx) {
  const auto& s = ctx.segments;
  core::Platform* p = ctx.platform;

  if (s.size() == 2 && s[1] == "whoami" && ctx.method == "GET") {
    const Principal& who = ctx.principal;
    Json body = Json::object();
    if (who.is_operator()) {
      body["kind"] = "operator";
      body["key_name"] = who.key_name;
    } else {
      body = TokenJson("", who.claims);
      body.erase("token");
      body["kind"] = "token";
    }
    co_await ctx.Reply(200, body);
    co_return true;
  }

  if (s.size() >= 2 && s[1] == "keys") {
    if (s.size() == 2 && ctx.method == "POST") {
      auto body = co_await ctx.ReadJson();
      if (!body) {
        co_await ctx.ReplyError(body.error());
        co_return true;
      }
      std::string name = JsonStringOr(*body, "name", "");
      // format: "space" (sk-…, the default) or "e2b" (e2b_…, which E2B's SDKs accept).
      const Json* format = JsonField(*body, "format");
      if (format && !(format->is_string() && (*format == "space" || *format == "e2b"))) {
        co_await ctx.ReplyError(Error{Errc::kInvalidArgument, 0, "format must be \"space\" or \"e2b\""});
        co_return true;
      }
      const bool e2b = format && *format == "e2b";
      auto created = co_await ctx.Blocking([&] { return p->CreateApiKey(name, e2b); });
      if (!created) {
        co_await ctx.ReplyError(created.error());
        co_return true;
      }
      Json reply_body = KeyJson(created->record);
      reply_body["key"] = created->key;
      co_await ctx.Reply(201, reply_body);
      co_return true;
    }
    if (s.size() == 2 && ctx.method == "GET") {
      auto keys = co_await ctx.Blocking([&] { return p->ListApiKeys(); });
      co_await ReplyList(ctx, "keys", std::move(keys), KeyJson);
      co_return true;
    }
    if (s.size() == 3 && ctx.method == "DELETE") {
      std::string id = s[2];
      auto gone = co_await ctx.Blocking([&] { return p->DeleteApiKey(id); });
      if (!gone) {
        co_await ctx.ReplyError(gone.error());
      } else {
        co_await ctx.Reply(200, KeyJson(*gone));
      }
      co_return true;
    }
    co_await ctx.ReplyError(Error{Errc::kNotFound, 0, "no route " + ctx.method + " " + ctx.path});
    co_return true;
  }

  if (s.size() == 4 && s[1] == "sandboxes" && s[3] == "tokens") {
    if (ctx.method != "POST") {
      co_await ctx.ReplyError(Error{Errc::kInvalidArgument, 0, "method not allowed"});
      co_return true;
    }
    auto body = co_await ctx.ReadJson();
    if (!body) {
      co_await ctx.ReplyError(body.error());
      co_return true;
    }
    auto want = ParseMint(ctx.principal, *body);
    if (!want) {
      co_await ctx.ReplyError(want.error());
      co_return true;
    }
    const std::string id = s[2];
    auto sb = co_await ctx.Blocking([&] { return p->GetSandbox(id); });
    if (!sb) {
      co_await ctx.ReplyError(sb.error());
      co_return true;
    }
    if (!want->command_id.empty()) {
      std::string cid = want->command_id;
      auto cmd = co_await ctx.Blocking([&] { return p->GetCommand(id, cid); });
      if (!cmd) {
        co_await ctx.ReplyError(cmd.error());
        co_return true;
      }
    }
    auto minted = MintToken(ctx, *sb, want->command_id, want->scopes, want->expires_s);
    auth::Claims c = *want;
    c.sandbox_id = id;
    c.expires_s = minted.second;
    Json reply_body = TokenJson(minted.first, c);
    co_await ctx.Reply(201, reply_body);
    co_return true;
  }
  co_return false;
}

}  // namespace space::api
