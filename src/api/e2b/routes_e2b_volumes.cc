// E2B volumes (e2b-dev/infra spec/openapi.yml; the SDKs' `Volume`), on SPACE's named
// volumes (docs/volumes.md):
//   /volumes, /volumes/{volumeID}              X-API-KEY (an operator key)
//   /volumecontent/{volumeID}/dir|path|file    Authorization: Bearer <the volume's token>
// E2B's volumeID is SPACE's volume id; a name is accepted as well. The volume's `token` is
// the operator key that asked (the caller has it already): E2B's content API takes the
// token as a bearer, and SPACE checks it as an operator key. Errors are E2B's
// {"code","message"}.
#include "api/e2b/e2b.h"

namespace space::api::e2b {

namespace {

Awaitable<void> ReplyVolumeError(Ctx& ctx, int status, const std::string& message) {
  Json body = {{"code", status}, {"message", message}};
  co_await ctx.Reply(status, body);
}

Awaitable<void> ReplyVolumeError(Ctx& ctx, const Error& e) {
  co_await ReplyVolumeError(ctx, HttpStatusFor(e.code), e.message);
}

std::string BearerOf(const Ctx& ctx) {
  std::string auth = HeaderOr(ctx, "Authorization");
  const std::string prefix = "Bearer ";
  return StartsWith(auth, prefix) ? auth.substr(prefix.size()) : "";
}

bool ContentAuthorized(const Ctx& ctx) {
  if (ctx.opts->no_auth) return true;
  std::string key = BearerOf(ctx);
  if (key.empty()) key = HeaderOr(ctx, "X-API-KEY");
  return !key.empty() && ctx.platform->FindApiKey(key).has_value();
}

std::string TokenFor(const Ctx& ctx) {
  std::string key = HeaderOr(ctx, "X-API-KEY");
  return key.empty() ? BearerOf(ctx) : key;
}

Json VolumeAndToken(const std::string& token, const store::VolumeRecord& v) {
  return {{"volumeID", v.id}, {"name", v.name}, {"token", token}};
}

// SPACE's ENTRY (docs/agent-protocol.md) as E2B's VolumeEntryStat.
Json EntryStat(const Json& e) {
  std::string type = JsonStringOr(e, "type", "other");
  if (type == "dir") type = "directory";
  if (type != "file" && type != "directory" && type != "symlink") type = "unknown";
  const std::string when = FormatRfc3339(JsonIntOr(e, "mtime_ms", 0));
  Json out = {{"name", JsonStringOr(e, "name", "")},
              {"path", JsonStringOr(e, "path", "")},
              {"type", type},
              {"size", JsonIntOr(e, "size", 0)},
              {"mode", JsonIntOr(e, "mode", 0) & 07777},
              {"uid", JsonIntOr(e, "uid", 0)},
              {"gid", JsonIntOr(e, "gid", 0)},
              {"atime", when},
              {"mtime", when},
              {"ctime", when}};
  if (e.contains("link_target")) out["target"] = e["link_target"];
  return out;
}

// A file op whose answer is the entry at `path` afterwards (E2B answers write and mkdir
// with the new entry's stat).
Awaitable<void> ReplyStat(Ctx& ctx, const std::string& vol, const std::string& path, int status = 200) {
  core::Platform* p = ctx.platform;
  Json req = {{"path", path}};
  auto st = co_await ctx.Blocking([&] { return p->VolumeFileOp(vol, "stat", req); });
  if (!st) {
    co_await ReplyVolumeError(ctx, st.error());
    co_return;
  }
  Json entry = EntryStat(st->first.value("entry", Json::object()));
  co_await ctx.Reply(status, entry);
}

Awaitable<void> ServeContent(Ctx& ctx, const std::string& vol, const std::string& what) {
  core::Platform* p = ctx.platform;
  const std::string path = ctx.Query("path", "/");
  if (auto ok = core::ValidateSandboxPath(path); !ok) {
    co_await ReplyVolumeError(ctx, ok.error());
    co_return;
  }
  int mode = -1;
  if (std::string m = ctx.Query("mode"); !m.empty()) {
    char* end = nullptr;
    long v = std::strtol(m.c_str(), &end, 10);
    if (!end || *end || v < 0 || v > 07777) {
      co_await ReplyVolumeError(ctx, 400, "mode must be a number 0..4095");
      co_return;
    }
    mode = static_cast<int>(v);
  }
  if (what == "dir" && ctx.method == "GET") {
    int depth = 1;
    if (std::string d = ctx.Query("depth"); !d.empty()) depth = std::atoi(d.c_str());
    if (depth < 1 || depth > 16) {
      co_await ReplyVolumeError(ctx, 400, "depth must be 1..16");
      co_return;
    }
    Json req = {{"path", path}, {"depth", depth}};
    auto r = co_await ctx.Blocking([&] { return p->VolumeFileOp(vol, "list", req); });
    if (!r) {
      co_await ReplyVolumeError(ctx, r.error());
      co_return;
    }
    Json out = Json::array();
    for (const auto& e : r->first.value("entries", Json::array())) out.push_back(EntryStat(e));
    co_await ctx.Reply(200, out);
    co_return;
  }
  if (what == "dir" && ctx.method == "POST") {
    Json req = {{"path", path}, {"parents", true}, {"mode", mode < 0 ? 0755 : mode}};
    auto r = co_await ctx.Blocking([&] { return p->VolumeFileOp(vol, "mkdir", req); });
    if (!r) {
      co_await ReplyVolumeError(ctx, r.error());
      co_return;
    }
    co_await ReplyStat(ctx, vol, path, 201);
    co_return;
  }
  if (what == "path" && ctx.method == "GET") {
    co_await ReplyStat(ctx, vol, path);
    co_return;
  }
  if (what == "path" && ctx.method == "DELETE") {
    Json req = {{"path", path}, {"recursive", true}};
    auto r = co_await ctx.Blocking([&] { return p->VolumeFileOp(vol, "remove", req); });
    if (!r) {
      co_await ReplyVolumeError(ctx, r.error());
      co_return;
    }
    co_await ctx.ReplyBytes(204, "", "application/json");
    co_return;
  }
  if (what == "path" && ctx.method == "PATCH") {
    co_await ReplyVolumeError(ctx, 400, "changing uid, gid or mode is not supported by SPACE volumes");
    co_return;
  }
  if (what == "file" && ctx.method == "GET") {
    std::string out;
    for (int64_t off = 0;;) {
      Json req = {{"path", path}, {"offset", off}, {"length", core::kFileChunkBytes}};
      auto r = co_await ctx.Blocking([&] { return p->VolumeFileOp(vol, "read", req); });
      if (!r) {
        co_await ReplyVolumeError(ctx, r.error());
        co_return;
      }
      off += static_cast<int64_t>(r->second.size());
      out += r->second;
      if (r->first.value("eof", true) || r->second.empty()) break;
      if (out.size() > static_cast<size_t>(p->config().max_file_bytes)) {
        co_await ReplyVolumeError(ctx, 413, "file larger than the largest file spaced serves");
        co_return;
      }
    }
    co_await ctx.ReplyBytes(200, std::move(out), "application/octet-stream");
    co_return;
  }
  if (what == "file" && ctx.method == "PUT") {
    auto written = co_await WriteVolumeFileFromBody(ctx, vol, path, mode < 0 ? 0644 : mode, true);
    if (!written) {
      co_await ReplyVolumeError(ctx, written.error());
      co_return;
    }
    co_await ReplyStat(ctx, vol, path, 201);
    co_return;
  }
  co_await ReplyVolumeError(ctx, 404, "no route " + ctx.method + " " + ctx.path);
}

}  // namespace

Awaitable<bool> RouteVolumes(Ctx& ctx) {
  const auto& s = ctx.segments;
  if (s.empty() || (s[0] != "volumes" && s[0] != "volumecontent")) co_return false;
  core::Platform* p = ctx.platform;
  if (s[0] == "volumecontent") {
    if (s.size() != 3) co_return false;
    if (!ContentAuthorized(ctx)) {
      co_await ReplyVolumeError(ctx, 401, "missing or invalid volume token (Authorization: Bearer)");
      co_return true;
    }
    co_await ServeContent(ctx, s[1], s[2]);
    co_return true;
  }
  if (!ApiKeyValid(ctx)) {
    co_await ReplyVolumeError(ctx, 401, "missing or invalid API key (X-API-KEY)");
    co_return true;
  }
  // Taken before any body is read: reading it moves the request's headers away.
  const std::string token = TokenFor(ctx);
  if (s.size() == 1 && ctx.method == "POST") {
    auto body = co_await ctx.ReadJson();
    if (!body) {
      co_await ReplyVolumeError(ctx, body.error());
      co_return true;
    }
    const Json* n = JsonField(*body, "name");
    if (!n || !n->is_string()) {
      co_await ReplyVolumeError(ctx, 400, "name is required");
      co_return true;
    }
    const std::string name = n->get<std::string>();
    auto v = co_await ctx.Blocking([&] { return p->CreateVolume(name, 0); });
    if (!v) {
      co_await ReplyVolumeError(ctx, v.error());
      co_return true;
    }
    co_await ctx.Reply(201, VolumeAndToken(token, *v));
    co_return true;
  }
  if (s.size() == 1 && ctx.method == "GET") {
    auto list = co_await ctx.Blocking([&] { return p->ListVolumes(); });
    if (!list) {
      co_await ReplyVolumeError(ctx, list.error());
      co_return true;
    }
    Json out = Json::array();
    for (const auto& v : *list) out.push_back({{"volumeID", v.id}, {"name", v.name}});
    co_await ctx.Reply(200, out);
    co_return true;
  }
  if (s.size() != 2) co_return false;
  const std::string vol = s[1];
  if (ctx.method == "GET") {
    auto v = co_await ctx.Blocking([&] { return p->GetVolume(vol); });
    if (!v) {
      co_await ReplyVolumeError(ctx, v.error());
      co_return true;
    }
    co_await ctx.Reply(200, VolumeAndToken(token, *v));
    co_return true;
  }
  if (ctx.method == "DELETE") {
    auto st = co_await ctx.Blocking([&] { return p->DeleteVolume(vol); });
    if (!st) {
      co_await ReplyVolumeError(ctx, st.error());
      co_return true;
    }
    co_await ctx.ReplyBytes(204, "", "application/json");
    co_return true;
  }
  co_return false;
}

}  // namespace space::api::e2b
