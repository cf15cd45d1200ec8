// Routes: /v1/volumes[/{name}] and /v1/volumes/{name}/files[:list|:stat|:mkdir|:rename] —
// named volumes and their files without a sandbox (docs/volumes.md). The file routes have
// the shape of the sandbox file routes (routes_files.cc); core resolves every path inside
// the volume (openat2 RESOLVE_IN_ROOT).
#include "api/http.h"

namespace space::api {

namespace {

Json VolumeView(const store::VolumeRecord& v) {
  return {{"id", v.id},
          {"name", v.name},
          {"size_bytes", v.size_bytes},
          {"state", v.state},
          {"created_at", FormatRfc3339(v.created_ms)}};
}

// Runs a file op and replies with its JSON (or the error). Returns the reply JSON.
Awaitable<void> ReplyFileOp(Ctx& ctx, const std::string& vol, const std::string& op, Json req) {
  core::Platform* p = ctx.platform;
  auto r = co_await ctx.Blocking([&] { return p->VolumeFileOp(vol, op, req); });
  if (!r) {
    co_await ctx.ReplyError(r.error());
    co_return;
  }
  co_await ctx.Reply(200, r->first);
}

Awaitable<void> ServeVolumeFiles(Ctx& ctx, const std::string& vol, const std::string& verb) {
  core::Platform* p = ctx.platform;
  std::string path = ctx.Query("path");
  if (verb == "files:list" && path.empty()) path = "/";
  if (auto st = verb == "files:rename" ? Status(Ok()) : core::ValidateSandboxPath(path); !st) {
    co_await ctx.ReplyError(st.error());
    co_return;
  }
  if (verb == "files" && ctx.method == "GET") {
    Json req = {{"path", path}, {"offset", 0}, {"length", core::kFileChunkBytes}};
    auto first = co_await ctx.Blocking([&] { return p->VolumeFileOp(vol, "read", req); });
    if (!first) {
      co_await ctx.ReplyError(first.error());
      co_return;
    }
    const bool eof = first->first.value("eof", true);
    const int64_t size = first->first.value("size", int64_t{0});
    std::vector<std::pair<std::string, std::string>> headers;
    if (eof) {
      headers.emplace_back("Space-File-Size", std::to_string(first->second.size()));
      co_await ctx.ReplyBytes(200, std::move(first->second), "application/octet-stream", headers);
      co_return;
    }
    headers.emplace_back("Space-File-Size", std::to_string(size));
    co_await ctx.StartChunked(200, "application/octet-stream", headers);
    int64_t off = static_cast<int64_t>(first->second.size());
    co_await ctx.WriteChunk(first->second);
    for (bool done = false; !done;) {
      Json next = {{"path", path}, {"offset", off}, {"length", core::kFileChunkBytes}};
      auto chunk = co_await ctx.Blocking([&] { return p->VolumeFileOp(vol, "read", next); });
      if (!chunk) {
        ctx.keep_alive = false;  // headers are gone: break the stream
        co_return;
      }
      done = chunk->first.value("eof", true) || chunk->second.empty();
      off += static_cast<int64_t>(chunk->second.size());
      if (!chunk->second.empty()) co_await ctx.WriteChunk(chunk->second);
    }
    co_await ctx.EndChunked();
    co_return;
  }
  if (verb == "files" && ctx.method == "PUT") {
    auto parsed_mode = ParseFileMode(ctx.query);
    if (!parsed_mode) {
      co_await ctx.ReplyError(parsed_mode.error());
      co_return;
    }
    const int mode = *parsed_mode;
    const bool parents = Truthy(ctx.Query("create_parents", "true"));
    auto written = co_await WriteVolumeFileFromBody(ctx, vol, path, mode, parents);
    if (!written) {
      co_await ctx.ReplyError(written.error());
      co_return;
    }
    Json reply_body = {{"path", path}, {"size", *written}};
    co_await ctx.Reply(200, reply_body);
    co_return;
  }
  if (verb == "files" && ctx.method == "DELETE") {
    Json req = {{"path", path}, {"recursive", Truthy(ctx.Query("recursive"))}};
    co_await ReplyFileOp(ctx, vol, "remove", req);
    co_return;
  }
  if (verb == "files:list" && ctx.method == "GET") {
    auto depth = ParseListDepth(ctx.query);
    if (!depth) {
      co_await ctx.ReplyError(depth.error());
      co_return;
    }
    Json req = {{"path", path}, {"depth", *depth}};
    co_await ReplyFileOp(ctx, vol, "list", req);
    co_return;
  }
  if (verb == "files:stat" && ctx.method == "GET") {
    Json req = {{"path", path}};
    auto r = co_await ctx.Blocking([&] { return p->VolumeFileOp(vol, "stat", req); });
    if (!r) {
      co_await ctx.ReplyError(r.error());
      co_return;
    }
    Json entry = r->first.value("entry", Json::object());
    co_await ctx.Reply(200, entry);
    co_return;
  }
  if (verb == "files:mkdir" && ctx.method == "POST") {
    Json req = {{"path", path}, {"parents", true}};
    co_await ReplyFileOp(ctx, vol, "mkdir", req);
    co_return;
  }
  if (verb == "files:rename" && ctx.method == "POST") {
    auto body = co_await ctx.ReadJson();
    if (!body) {
      co_await ctx.ReplyError(body.error());
      co_return;
    }
    auto names = ParseRename(*body);
    if (!names) {
      co_await ctx.ReplyError(names.error());
      co_return;
    }
    Json req = {{"from", names->first}, {"to", names->second}};
    co_await ReplyFileOp(ctx, vol, "rename", req);
    co_return;
  }
  co_await ctx.ReplyError(Error{Errc::kNotFound, 0, "no route " + ctx.method + " " + ctx.path});
}

}  // namespace

Awaitable<Result<uint64_t>> WriteVolumeFileFromBody(Ctx& ctx, const std::string& vol,
                                                    const std::string& path, int mode,
                                                    bool create_parents) {
  core::Platform* p = ctx.platform;
  uint64_t off = 0;
  bool wrote = false;
  std::function<Awaitable<Status>(std::string_view)> sink =
      [&](std::string_view piece) -> Awaitable<Status> {
    while (!piece.empty() || !wrote) {
      size_t n = std::min<size_t>(piece.size(), core::kFileChunkBytes);
      std::string part(piece.substr(0, n));
      Json req = {{"path", path}, {"offset", off}, {"truncate", off == 0}, {"mode", mode},
                  {"create_parents", create_parents}};
      auto r = co_await ctx.Blocking([&] { return p->VolumeFileOp(vol, "write", req, part); });
      if (!r) co_return tl::unexpected(r.error());
      wrote = true;
      off += n;
      piece.remove_prefix(n);
    }
    co_return Ok();
  };
  auto st = co_await ctx.ReadBodyStream(static_cast<size_t>(p->config().max_file_bytes), sink);
  if (st && !wrote) st = co_await sink(std::string_view());
  if (!st) co_return tl::unexpected(st.error());
  co_return off;
}

Awaitable<bool> RouteVolumes(Ctx& ctx) {
  const auto& s = ctx.segments;
  if (s.size() < 2 || s[0] != "v1" || s[1] != "volumes") co_return false;
  core::Platform* p = ctx.platform;
  if (s.size() == 2 && ctx.method == "POST") {
    auto body = co_await ctx.ReadJson();
    if (!body) {
      co_await ctx.ReplyError(body.error());
      co_return true;
    }
    auto req = ParseVolumeCreate(*body);
    if (!req) {
      co_await ctx.ReplyError(req.error());
      co_return true;
    }
    const std::string name = req->first;
    const int64_t size = req->second;
    auto v = co_await ctx.Blocking([&] { return p->CreateVolume(name, size); });
    if (!v) {
      co_await ctx.ReplyError(v.error());
      co_return true;
    }
    co_await ctx.Reply(201, VolumeView(*v));
    co_return true;
  }
  if (s.size() == 2 && ctx.method == "GET") {
    auto list = co_await ctx.Blocking([&] { return p->ListVolumes(); });
    co_await ReplyList(ctx, "volumes", std::move(list), VolumeView);
    co_return true;
  }
  if (s.size() < 3) co_return false;
  const std::string vol = s[2];
  if (s.size() == 3 && ctx.method == "GET") {
    auto v = co_await ctx.Blocking([&] { return p->GetVolume(vol); });
    if (!v) {
      co_await ctx.ReplyError(v.error());
      co_return true;
    }
    Json view = VolumeView(*v);
    auto usage = co_await ctx.Blocking([&] { return p->VolumeUsage(vol); });
    if (usage) {
      for (const char* k : {"used_bytes", "free_bytes", "sandboxes"})
        if (usage->contains(k)) view[k] = (*usage)[k];
    }
    co_await ctx.Reply(200, view);
    co_return true;
  }
  if (s.size() == 3 && ctx.method == "DELETE") {
    auto v = co_await ctx.Blocking([&] { return p->GetVolume(vol); });
    if (!v) {
      co_await ctx.ReplyError(v.error());
      co_return true;
    }
    auto st = co_await ctx.Blocking([&] { return p->DeleteVolume(vol); });
    if (!st) {
      co_await ctx.ReplyError(st.error());
      co_return true;
    }
    Json view = VolumeView(*v);
    view["state"] = "deleted";
    co_await ctx.Reply(200, view);
    co_return true;
  }
  if (s.size() == 4 && StartsWith(s[3], "files")) {
    co_await ServeVolumeFiles(ctx, vol, s[3]);
    co_return true;
  }
  co_return false;
}

}  // namespace space::api
