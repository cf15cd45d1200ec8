// E2B's template tags, Template.assignTags/removeTags/getTags, on SPACE's template names:
//   POST   /templates/tags {target: "name:tag", tags: [...]}  -> 201 {buildID, tags}
//   DELETE /templates/tags {name, tags: [...]}                -> 204
//   GET    /templates/{templateID}/tags                       -> [{tag, buildID, createdAt}]
// A tag is a SPACE name:tag for the same build; E2B's buildID of a tag is a UUID made from
// the build's digest (tags of one build share it). docs/e2b-compat.md.
#include "api/e2b/control.h"
#include "api/e2b/e2b.h"
#include "api/e2b/parse.h"
#include "core/templates.h"

namespace space::api::e2b {

namespace {

// E2B's buildID of a tag is a UUID (the Python SDK parses it as one): here one made from the
// first 16 bytes of the template's digest, so every tag of the same content names the
// same build.
std::string BuildIdOf(const store::TemplateRecord& t) {
  std::string hex = StartsWith(t.digest, "sha256:") ? t.digest.substr(7) : t.digest;
  unsigned char raw[16] = {};
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return 0;
  };
  for (size_t i = 0; i < 16 && 2 * i + 1 < hex.size(); ++i)
    raw[i] = static_cast<unsigned char>(nibble(hex[2 * i]) << 4 | nibble(hex[2 * i + 1]));
  return UuidText(raw);
}

// The request's "tags": a non-empty array of strings (at most 32).
Result<std::vector<std::string>> TagsOf(const Json& body) {
  const Json* t = JsonField(body, "tags");
  if (!t || !t->is_array() || t->empty() || t->size() > 32)
    return Fail(Errc::kInvalidArgument, "tags must be an array of 1 to 32 strings");
  std::vector<std::string> out;
  for (const auto& x : *t) {
    if (!x.is_string() || x.get<std::string>().empty())
      return Fail(Errc::kInvalidArgument, "tags must be an array of 1 to 32 strings");
    out.push_back(x.get<std::string>());
  }
  return out;
}

std::string NameOf(const std::string& ref) { return ref.substr(0, ref.find(':')); }

Awaitable<void> Assign(Ctx& ctx) {
  core::Platform* p = ctx.platform;
  auto body = co_await ctx.ReadJson();
  if (!body) {
    co_await ReplyError(ctx, body.error());
    co_return;
  }
  const std::string target = JsonStringOr(*body, "target", "");
  auto tags = TagsOf(*body);
  if (target.empty() || !tags) {
    // (Named first: g++ 12 destroys a conditional's temporary twice inside co_await.)
    const std::string why = target.empty() ? "target (name:tag) is required" : tags.error().message;
    co_await ReplyError(ctx, 400, why);
    co_return;
  }
  const std::string ref = TemplateRef(target);
  // Every tag is checked before any is made: a bad one changes nothing.
  for (const auto& t : *tags) {
    if (auto ok = core::ParseTemplateRef(NameOf(ref) + ":" + t); !ok) {
      co_await ReplyError(ctx, 400, ok.error().message);
      co_return;
    }
  }
  auto made = co_await ctx.Blocking([&]() -> Result<store::TemplateRecord> {
    Result<store::TemplateRecord> last = Fail(Errc::kInternal, "no tags");
    for (const auto& t : *tags) {
      last = p->TagTemplate(ref, NameOf(ref) + ":" + t);
      if (!last) return last;
    }
    return last;
  });
  if (!made) {
    co_await ReplyError(ctx, made.error());
    co_return;
  }
  Json reply = {{"buildID", BuildIdOf(*made)}, {"tags", *tags}};
  co_await ctx.Reply(201, reply);
}

Awaitable<void> Remove(Ctx& ctx) {
  core::Platform* p = ctx.platform;
  auto body = co_await ctx.ReadJson();
  if (!body) {
    co_await ReplyError(ctx, body.error());
    co_return;
  }
  const std::string name = JsonStringOr(*body, "name", "");
  auto tags = TagsOf(*body);
  if (name.empty() || !tags) {
    const std::string why = name.empty() ? "name is required" : tags.error().message;
    co_await ReplyError(ctx, 400, why);
    co_return;
  }
  const std::string base = NameOf(TemplateRef(name));
  auto st = co_await ctx.Blocking([&]() -> Status {
    for (const auto& t : *tags) SPACE_TRY(p->UntagTemplate(base + ":" + t));
    return Ok();
  });
  if (!st) {
    co_await ReplyError(ctx, st.error());
    co_return;
  }
  co_await ctx.ReplyBytes(204, "", "application/json");
}

Awaitable<void> List(Ctx& ctx, const std::string& template_id) {
  core::Platform* p = ctx.platform;
  const std::string base = NameOf(TemplateRef(template_id));
  auto all = co_await ctx.Blocking([&] { return p->ListTemplates(); });
  if (!all) {
    co_await ReplyError(ctx, all.error());
    co_return;
  }
  Json out = Json::array();
  for (const auto& t : *all) {
    if (t.name != base) continue;
    out.push_back({{"tag", t.tag}, {"buildID", BuildIdOf(t)}, {"createdAt", FormatRfc3339(t.created_ms)}});
  }
  if (out.empty()) {
    co_await ReplyError(ctx, 404, "template " + template_id + " not found");
    co_return;
  }
  co_await ctx.Reply(200, out);
}

}  // namespace

Awaitable<bool> RouteTemplateTags(Ctx& ctx) {
  const auto& s = ctx.segments;
  const bool tags_root = s.size() == 2 && s[0] == "templates" && s[1] == "tags" &&
                         (ctx.method == "POST" || ctx.method == "DELETE");
  const bool of_one = s.size() == 3 && s[0] == "templates" && s[2] == "tags" && ctx.method == "GET";
  if (!tags_root && !of_one) co_return false;
  if (!ApiKeyValid(ctx)) {
    co_await ReplyError(ctx, 401, "missing or invalid API key (X-API-KEY)");
    co_return true;
  }
  if (of_one) co_await List(ctx, s[1]);
  else if (ctx.method == "POST") co_await Assign(ctx);
  else co_await Remove(ctx);
  co_return true;
}

}  // namespace space::api::e2b
