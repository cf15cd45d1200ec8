// Routes: /v1/templates — list, build (an operation) and build logs.
#include <boost/beast/core/detail/base64.hpp>

#include "api/http.h"

namespace space::api {

namespace {

// A spec plus a base64 context of up to 16 MiB: larger than ordinary JSON bodies.
constexpr size_t kMaxBuildBody = 24u << 20;

Result<std::string> DecodeBase64(const std::string& in, const std::string& what) {
  namespace b64 = beast::detail::base64;
  std::string out(b64::decoded_size(in.size()), '\0');
  // decode() stops at the first character outside the alphabet; only padding may follow.
  size_t body = in.size();
  while (body > 0 && in.size() - body < 2 && in[body - 1] == '=') --body;
  if (in.size() % 4 != 0) return Fail(Errc::kInvalidArgument, what + " is not valid base64");
  auto [written, read] = b64::decode(out.data(), in.data(), body);
  if (read != body) return Fail(Errc::kInvalidArgument, what + " is not valid base64");
  out.resize(written);
  return out;
}

Result<std::string> StringField(const Json& body, const char* key) {
  const Json* f = JsonField(body, key);
  if (!f) return std::string();
  if (!f->is_string()) return Fail(Errc::kInvalidArgument, std::string(key) + " must be a string");
  return f->get<std::string>();
}

Result<core::TemplateBuildRequest> ParseBuild(const Json& body) {
  static const std::set<std::string> kKnown = {"name",      "tag",           "spec",
                                               "context",   "tarball_path",  "oci_archive_path",
                                               "directory", "build_args",    "network"};
  for (const auto& [k, v] : body.items()) {
    if (!kKnown.count(k)) return Fail(Errc::kInvalidArgument, "unknown field \"" + k + "\"");
  }
  core::TemplateBuildRequest req;
  auto get = [&](const char* key, std::string* out) -> Status {
    auto v = StringField(body, key);
    if (!v) return tl::unexpected(v.error());
    *out = std::move(*v);
    return Ok();
  };
  SPACE_TRY(get("name", &req.name));
  SPACE_TRY(get("tag", &req.tag));
  SPACE_TRY(get("spec", &req.spec));
  SPACE_TRY(get("tarball_path", &req.tarball_path));
  SPACE_TRY(get("oci_archive_path", &req.oci_archive_path));
  SPACE_TRY(get("directory", &req.directory));
  if (const Json* c = JsonField(body, "context")) {
    if (!c->is_object())
      return Fail(Errc::kInvalidArgument, "context must be an object of path -> base64 content");
    uint64_t total = 0;
    for (const auto& [path, v] : c->items()) {
      if (!v.is_string()) return Fail(Errc::kInvalidArgument, "context." + path + " must be a string");
      auto data = DecodeBase64(v.get<std::string>(), "context." + path);
      if (!data) return tl::unexpected(data.error());
      total += data->size();
      if (total > core::kMaxBuildContextBytes)
        return Fail(Errc::kTooLarge, "build context larger than 16 MiB");
      req.context[path] = std::move(*data);
    }
  }
  if (const Json* a = JsonField(body, "build_args")) {
    if (!a->is_object()) return Fail(Errc::kInvalidArgument, "build_args must be an object");
    for (const auto& [k, v] : a->items()) {
      if (!v.is_string()) return Fail(Errc::kInvalidArgument, "build_args." + k + " must be a string");
      req.build_args[k] = v.get<std::string>();
    }
  }
  if (const Json* n = JsonField(body, "network")) {
    if (!n->is_boolean()) return Fail(Errc::kInvalidArgument, "network must be a boolean");
    req.network = n->get<bool>();
  }
  return req;
}

}  // namespace

Awaitable<bool> RouteTemplates(Ctx& ctx) {
  const auto& s = ctx.segments;
  core::Platform* p = ctx.platform;
  if (s.size() < 2 || s[1] != "templates") co_return false;

  if (s.size() == 2 && ctx.method == "GET") {
    auto ts = co_await ctx.Blocking([&] { return p->ListTemplates(); });
    co_await ReplyList(ctx, "templates", std::move(ts), TemplateJson);
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
    auto req = ParseBuild(*body);
    if (!req) {
      co_await ctx.ReplyError(req.error());
      co_return true;
    }
    auto started = co_await ctx.Blocking([&] { return p->BuildTemplate(*req); });
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
