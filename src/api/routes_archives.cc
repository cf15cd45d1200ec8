// Routes: GET /v1/templates/{ref}/archive and GET /v1/snapshots/{id}/archive — a template's
// or a filesystem snapshot's tree as a zstd tarball, what a cluster's nodes pull them by
// (docs/cluster.md). The record and the body's sha256 ride in headers. Operators only.
#include <fcntl.h>
#include <unistd.h>

#include "api/http.h"
#include "sys/sys.h"

namespace space::api {

namespace {

// Streams the file at `path` (removed afterwards, whatever happens) as the body.
Awaitable<void> ReplyArchive(Ctx& ctx, const std::string& path, std::string_view record_header,
                             const Json& record, const std::string& sha256, int64_t size) {
  struct Remove {
    std::string path;
    ~Remove() { (void)::unlink(path.c_str()); }
  } remove{path};
  auto fd = sys::Open(path, O_RDONLY);
  if (!fd) {
    co_await ctx.ReplyError(fd.error());
    co_return;
  }
  const std::vector<std::pair<std::string, std::string>> headers = {
      {std::string(record_header), record.dump()},
      {std::string(kArchiveSha256Header), sha256},
      {"X-Space-Archive-Size", std::to_string(size)}};
  co_await ctx.StartChunked(200, "application/zstd", headers);
  std::string buf(1 << 20, '\0');
  for (;;) {
    const int raw = fd->get();
    ssize_t n = co_await ctx.Blocking([&] { return ::read(raw, buf.data(), buf.size()); });
    if (n <= 0) break;  // a read error ends the body short: the sha256 tells the puller
    co_await ctx.WriteChunk(std::string_view(buf.data(), static_cast<size_t>(n)));
  }
  co_await ctx.EndChunked();
}

}  // namespace

Awaitable<bool> RouteArchives(Ctx& ctx) {
  const auto& s = ctx.segments;
  core::Platform* p = ctx.platform;
  if (s.size() != 4 || s[3] != "archive" || ctx.method != "GET") co_return false;
  if (s[1] == "templates") {
    std::string ref = s[2];
    auto ar = co_await ctx.Blocking([&] { return p->ExportTemplate(ref); });
    if (!ar) {
      co_await ctx.ReplyError(ar.error());
      co_return true;
    }
    const Json meta = {{"name", ar->record.name},
                       {"tag", ar->record.tag},
                       {"digest", ar->record.digest},
                       {"config", ar->record.config},
                       {"created_ms", ar->record.created_ms}};
    co_await ReplyArchive(ctx, ar->path, kTemplateHeader, meta, ar->sha256, ar->size);
    co_return true;
  }
  if (s[1] == "snapshots") {
    std::string id = s[2];
    auto ar = co_await ctx.Blocking([&] { return p->ExportSnapshot(id); });
    if (!ar) {
      co_await ctx.ReplyError(ar.error());
      co_return true;
    }
    const Json meta = {{"id", ar->record.id},
                       {"sandbox_id", ar->record.sandbox_id},
                       {"kind", ar->record.kind},
                       {"source", ar->record.source},
                       {"size", ar->record.size},
                       {"created_ms", ar->record.created_ms}};
    co_await ReplyArchive(ctx, ar->path, kSnapshotHeader, meta, ar->sha256, ar->size);
    co_return true;
  }
  co_return false;
}

}  // namespace space::api
