// Routes: /v1/sandboxes/{id}/files[:list|:stat|:mkdir|:rename] — file access through the agent.
#include "api/http.h"

namespace space::api {

Awaitable<bool> RouteFiles(Ctx& ctx) {
  const auto& s = ctx.segments;
  if (s.size() != 4 || s[1] != "sandboxes" || !StartsWith(s[3], "files")) co_return false;
  core::Platform* p = ctx.platform;
  const std::string sb = s[2];
  const std::string& verb = s[3];
  std::string path = ctx.Query("path");

  if (verb == "files" && ctx.method == "GET") {
    bool eof = false;
    uint64_t size = 0;
    auto first = co_await ctx.Blocking(
        [&] { return p->ReadFileChunk(sb, path, 0, core::kFileChunkBytes, &eof, &size); });
    if (!first) {
      co_await ctx.ReplyError(first.error());
      co_return true;
    }
    // (Header lists are built outside co_await expressions: g++ 12 miscompiles braced
    // initializer lists inside them, "array used as initializer".)
    std::vector<std::pair<std::string, std::string>> headers;
    if (eof) {
      headers.emplace_back("Space-File-Size", std::to_string(first->size()));
      co_await ctx.ReplyBytes(200, std::move(*first), "application/octet-stream", headers);
      co_return true;
    }
    headers.emplace_back("Space-File-Size", std::to_string(size));
    co_await ctx.StartChunked(200, "application/octet-stream", headers);
    uint64_t off = first->size();
    co_await ctx.WriteChunk(*first);
    while (!eof) {
      auto chunk = co_await ctx.Blocking(
          [&] { return p->ReadFileChunk(sb, path, off, core::kFileChunkBytes, &eof, nullptr); });
      if (!chunk) {
        // Headers are gone: the only honest signal left is to break the stream.
        ctx.keep_alive = false;
        co_return true;
      }
      if (chunk->empty()) break;
      off += chunk->size();
      co_await ctx.WriteChunk(*chunk);
    }
    co_await ctx.EndChunked();
    co_return true;
  }

  if (verb == "files" && ctx.method == "PUT") {
    auto parsed_mode = ParseFileMode(ctx.query);
    if (!parsed_mode) {
      co_await ctx.ReplyError(parsed_mode.error());
      co_return true;
    }
    const int mode = *parsed_mode;
    if (auto st = core::ValidateSandboxPath(path); !st) {
      co_await ctx.ReplyError(st.error());
      co_return true;
    }
    uint64_t off = 0;
    bool wrote = false;
    std::function<Awaitable<Status>(std::string_view)> sink =
        [&](std::string_view piece) -> Awaitable<Status> {
          // Pieces can be larger than one agent message: split them.
          while (!piece.empty() || !wrote) {
            size_t n = std::min<size_t>(piece.size(), core::kFileChunkBytes);
            std::string_view part = piece.substr(0, n);
            bool truncate = off == 0;
            auto r = co_await ctx.Blocking(
                [&] { return p->WriteFileChunk(sb, path, off, part, truncate, mode); });
            if (!r) co_return r;
            wrote = true;
            off += n;
            piece.remove_prefix(n);
          }
          co_return Ok();
        };
    // (The sink is a named variable: no closure temporaries inside co_await, g++ 12.)
    auto st = co_await ctx.ReadBodyStream(static_cast<size_t>(p->config().max_file_bytes), sink);
    if (st && !wrote) {
      st = co_await ctx.Blocking([&] { return p->WriteFileChunk(sb, path, 0, {}, true, mode); });
    }
    if (!st) {
      co_await ctx.ReplyError(st.error());
    } else {
      {
        Json reply_body = {{"path", path}, {"size", off}};
        co_await ctx.Reply(200, reply_body);
      }
    }
    co_return true;
  }

  if (verb == "files" && ctx.method == "DELETE") {
    bool recursive = Truthy(ctx.Query("recursive"));
    auto st = co_await ctx.Blocking([&] { return p->RemoveFile(sb, path, recursive); });
    if (!st) {
      co_await ctx.ReplyError(st.error());
    } else {
      co_await ctx.Reply(200, Json::object());
    }
    co_return true;
  }

  if (verb == "files:list" && ctx.method == "GET") {
    auto parsed_depth = ParseListDepth(ctx.query);
    if (!parsed_depth) {
      co_await ctx.ReplyError(parsed_depth.error());
      co_return true;
    }
    const int depth = *parsed_depth;
    if (path.empty()) path = "/";
    auto entries = co_await ctx.Blocking([&] { return p->ListFiles(sb, path, depth); });
    if (!entries) {
      co_await ctx.ReplyError(entries.error());
    } else {
      {
        Json reply_body = {{"entries", *entries}};
        co_await ctx.Reply(200, reply_body);
      }
    }
    co_return true;
  }

  if (verb == "files:stat" && ctx.method == "GET") {
    auto entry = co_await ctx.Blocking([&] { return p->StatFile(sb, path); });
    if (!entry) {
      co_await ctx.ReplyError(entry.error());
    } else {
      co_await ctx.Reply(200, *entry);
    }
    co_return true;
  }

  if (verb == "files:mkdir" && ctx.method == "POST") {
    auto st = co_await ctx.Blocking([&] { return p->MakeDir(sb, path); });
    if (!st) {
      co_await ctx.ReplyError(st.error());
    } else {
      co_await ctx.Reply(200, Json::object());
    }
    co_return true;
  }

  if (verb == "files:rename" && ctx.method == "POST") {
    auto body = co_await ctx.ReadJson();
    if (!body) {
      co_await ctx.ReplyError(body.error());
      co_return true;
    }
    auto names = ParseRename(*body);
    if (!names) {
      co_await ctx.ReplyError(names.error());
      co_return true;
    }
    const std::string from = names->first, to = names->second;
    auto st = co_await ctx.Blocking([&] { return p->RenameFile(sb, from, to); });
    if (!st) {
      co_await ctx.ReplyError(st.error());
    } else {
      co_await ctx.Reply(200, Json::object());
    }
    co_return true;
  }
  co_await ctx.ReplyError(Error{Errc::kNotFound, 0, "no route " + ctx.method + " " + ctx.path});
  co_return true;
}

}  // namespace space::api
