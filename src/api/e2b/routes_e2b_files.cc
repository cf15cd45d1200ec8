// envd's /files for E2B clients: downloads (GET) and uploads (POST) through the sandbox's
// agent, like SPACE's own /files routes, with gzip either way as envd has it: a download
// asked for with `Accept-Encoding: gzip` is compressed as it is read, an upload sent with
// `Content-Encoding: gzip` is decompressed as it arrives (docs/e2b-compat.md).
#include <optional>

#include "api/e2b/e2b.h"
#include "api/e2b/parse.h"
#include "api/gzip.h"

namespace space::api::e2b {

namespace {

constexpr char kSupported[] = "supported: [identity, gzip]";

// Writes one uploaded file piece by piece: truncate on the first piece, then append.
class FileSink {
 public:
  FileSink(core::Platform* platform, std::string sandbox, std::string file, std::string owner,
           const core::FileAttrs* metadata)
      : p(platform), sb(std::move(sandbox)), path(std::move(file)), user(std::move(owner)), attrs(metadata) {}
  core::Platform* p;
  std::string sb, path, user;
  const core::FileAttrs* attrs;

  // Buffers bytes, writing every full chunk (one agent round trip each).
  Status Add(std::string_view bytes) {
    pending.append(bytes);
    size_t done = 0;
    while (pending.size() - done >= core::kFileChunkBytes) {
      SPACE_TRY(Write(std::string_view(pending).substr(done, core::kFileChunkBytes)));
      done += core::kFileChunkBytes;
    }
    pending.erase(0, done);
    return Ok();
  }
  // Writes what is buffered (an empty file when nothing was written yet).
  Status Flush() {
    SPACE_TRY(Write(pending));
    pending.clear();
    return Ok();
  }

 private:
  Status Write(std::string_view bytes) {
    SPACE_TRY(p->WriteFileChunk(sb, path, offset, bytes, /*truncate=*/!started, 0644, user, attrs));
    started = true;
    offset += bytes.size();
    return Ok();
  }
  uint64_t offset = 0;
  bool started = false;
  std::string pending;
};

Json WriteInfo(const std::string& path, const core::FileAttrs& attrs) {
  Json info = {{"name", path.substr(path.rfind('/') + 1)}, {"type", "file"}, {"path", path}};
  if (!attrs.set.empty()) {
    Json metadata = Json::object();
    for (const auto& [name, value] : attrs.set) metadata[name.substr(attrs.prefix.size())] = value;
    info["metadata"] = std::move(metadata);
  }
  return info;
}

// An upload's metadata: its X-Metadata-<key> headers (keys in lower case, as header names
// are case-blind), as the user.e2b.* attributes of every file it writes. Each upload
// replaces the file's metadata: one without any leaves it none.
Result<core::FileAttrs> UploadMetadata(const Ctx& ctx) {
  constexpr std::string_view kHeader = "x-metadata-";
  core::FileAttrs attrs;
  attrs.prefix = kMetadataXattrPrefix;
  for (const auto& field : ctx.req()) {
    std::string name(field.name_string());
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (!StartsWith(name, kHeader)) continue;
    std::string key = name.substr(kHeader.size());
    std::string_view value(field.value().data(), field.value().size());
    if (key.empty()) return Fail(Errc::kInvalidArgument, "metadata: an empty key (X-Metadata- alone)");
    if (key.size() + attrs.prefix.size() > 255)
      return Fail(Errc::kInvalidArgument, "metadata: the key '" + key + "' is too long");
    for (char c : value) {
      if (c < 0x20 || c > 0x7e)
        return Fail(Errc::kInvalidArgument, "metadata: the value of '" + key + "' must be printable US-ASCII");
    }
    if (value.size() > 4096)
      return Fail(Errc::kInvalidArgument, "metadata: the value of '" + key + "' is longer than 4096 bytes");
    attrs.set[attrs.prefix + key] = std::string(value);
  }
  if (attrs.set.size() > 64) return Fail(Errc::kInvalidArgument, "metadata: at most 64 keys");
  return attrs;
}

}  // namespace

// GET /files?path=: the file's bytes, streamed in agent-sized chunks (compressed on the way
// when the client accepts gzip; 406 when it accepts neither gzip nor identity).
Awaitable<void> EnvdFilesGet(Ctx& ctx, const std::string& sb) {
  core::Platform* p = ctx.platform;
  std::string path = ctx.Query("path");
  if (path.empty()) {
    co_await ReplyRestError(ctx, 400, "path is required");
    co_return;
  }
  const std::string coding = ChooseEncoding(ctx.Header(http::field::accept_encoding));
  if (coding.empty()) {
    co_await ReplyRestError(ctx, 406, std::string("no acceptable encoding found, ") + kSupported);
    co_return;
  }
  const bool gzip = coding == "gzip";
  std::vector<std::pair<std::string, std::string>> headers = {{"Vary", "Accept-Encoding"}};
  if (gzip) headers.emplace_back("Content-Encoding", "gzip");
  const std::string requested = ctx.Query("username");
  const std::string base = co_await ctx.Blocking([&] { return RelativeBase(p, sb, requested); });
  path = AbsPath(path, base);
  bool eof = false;
  uint64_t size = 0;
  auto first = co_await ctx.Blocking(
      [&] { return p->ReadFileChunk(sb, path, 0, core::kFileChunkBytes, &eof, &size); });
  if (!first) {
    co_await ReplyRestError(ctx, first.error());
    co_return;
  }
  // zlib's state (a few hundred KiB) only for a response that is compressed.
  std::optional<GzipDeflater> deflater;
  if (gzip) deflater.emplace();
  if (eof) {
    std::string body = std::move(*first);
    if (gzip) {
      body = deflater->Feed(body);  // two statements: the order of a + b's operands is unspecified
      body += deflater->Finish();
    }
    co_await ctx.ReplyBytes(200, std::move(body), "application/octet-stream", headers);
    co_return;
  }
  co_await ctx.StartChunked(200, "application/octet-stream", headers);
  uint64_t off = first->size();
  std::string out = gzip ? deflater->Feed(*first) : std::move(*first);
  if (!out.empty()) co_await ctx.WriteChunk(out);
  while (!eof) {
    auto chunk = co_await ctx.Blocking(
        [&] { return p->ReadFileChunk(sb, path, off, core::kFileChunkBytes, &eof, &size); });
    // Mid-stream the status is sent: cutting the body short is the only way to fail.
    if (!chunk) throw std::runtime_error("read " + path + ": " + chunk.error().message);
    off += chunk->size();
    const bool ended = chunk->empty();
    out = gzip ? deflater->Feed(*chunk) : std::move(*chunk);
    if (!out.empty()) co_await ctx.WriteChunk(out);
    if (ended) break;
  }
  if (gzip) {
    out = deflater->Finish();
    if (!out.empty()) co_await ctx.WriteChunk(out);
  }
  co_await ctx.EndChunked();
}

// POST /files: multipart/form-data (one or more "file" parts) or application/octet-stream
// (one file at ?path=), either of them gzip-compressed as a whole when Content-Encoding says
// so. Answers [{name, type, path}...].
Awaitable<void> EnvdFilesPost(Ctx& ctx, const std::string& sb) {
  core::Platform* p = ctx.platform;
  const int64_t max_bytes = p->config().max_file_bytes;
  std::string query_path = ctx.Query("path");
  std::string encoding = ctx.Header(http::field::content_encoding);
  for (char& c : encoding) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (!encoding.empty() && encoding != "identity" && encoding != "gzip" && encoding != "x-gzip") {
    co_await ReplyRestError(ctx, 415, "unsupported Content-Encoding '" + encoding + "', " + kSupported);
    co_return;
  }
  const bool gzip = encoding == "gzip" || encoding == "x-gzip";
  // The files (and the directories made for them) belong to the user envd writes as.
  const std::string requested = ctx.Query("username");
  const std::string base = co_await ctx.Blocking([&] { return RelativeBase(p, sb, requested); });
  const std::string user = co_await ctx.Blocking([&] { return FileUser(p, sb, requested); });
  auto metadata = UploadMetadata(ctx);
  if (!metadata) {
    co_await ReplyRestError(ctx, metadata.error());
    co_return;
  }
  const core::FileAttrs* attrs = &*metadata;
  std::string ct_full = ctx.Header(http::field::content_type);
  std::string ct = EnvdContentType(ctx);
  // A multipart body may exceed the file limit by its part headers and boundaries.
  const size_t limit = static_cast<size_t>(max_bytes) + (ct == "multipart/form-data" ? (1u << 20) : 0);
  // The body as it arrives, decompressed first when it is gzip (the limit then holds for
  // the decompressed bytes too); `to` gets the bytes.
  std::optional<GzipInflater> inflater;
  if (gzip) inflater.emplace(limit);
  auto decoded = [&](std::string_view data, const std::function<Status(std::string_view)>& to) {
    return inflater ? inflater->Feed(data, to) : to(data);
  };
  auto finish = [&]() -> Status { return inflater ? inflater->Finish() : Ok(); };
  // Where the decoded bytes go: the multipart parser, or the one file.
  std::function<Status(std::string_view)> to;
  std::function<Awaitable<Status>(std::string_view)> feed =
      [&](std::string_view data) -> Awaitable<Status> {
    std::string copy(data);
    co_return co_await ctx.Blocking([&] { return decoded(copy, to); });
  };
  Json written = Json::array();
  Status st = Ok();
  if (ct == "multipart/form-data") {
    std::string boundary = MultipartBoundary(ct_full);
    if (boundary.empty()) {
      co_await ReplyRestError(ctx, 400, "multipart body without a boundary");
      co_return;
    }
    Multipart mp(boundary);
    std::optional<FileSink> sink;
    mp.on_part = [&](const std::string& filename) -> Status {
      std::string path = !query_path.empty() ? query_path : filename;
      if (path.empty()) return Fail(Errc::kInvalidArgument, "a file part has no path (filename)");
      sink.emplace(p, sb, AbsPath(path, base), user, attrs);
      return Ok();
    };
    // The callbacks run inside Feed, on the blocking pool (they talk to the agent).
    mp.on_data = [&](std::string_view bytes) -> Status { return sink->Add(bytes); };
    mp.on_end = [&]() -> Status {
      SPACE_TRY(sink->Flush());
      written.push_back(WriteInfo(sink->path, *attrs));
      sink.reset();
      return Ok();
    };
    to = [&](std::string_view b) { return mp.Feed(b); };
    st = co_await ctx.ReadBodyStream(limit, feed);
    if (st) st = finish();
    if (st && !mp.done()) st = Fail(Errc::kInvalidArgument, "multipart body ends before its final boundary");
  } else if (ct == "application/octet-stream") {
    if (query_path.empty()) {
      co_await ReplyRestError(ctx, 400, "path is required for an octet-stream upload");
      co_return;
    }
    FileSink sink(p, sb, AbsPath(query_path, base), user, attrs);
    to = [&](std::string_view b) { return sink.Add(b); };
    st = co_await ctx.ReadBodyStream(limit, feed);
    if (st) st = finish();
    if (st) st = co_await ctx.Blocking([&] { return sink.Flush(); });
    if (st) written.push_back(WriteInfo(sink.path, *attrs));
  } else {
    co_await ReplyRestError(ctx, 400, "Content-Type must be multipart/form-data or application/octet-stream");
    co_return;
  }
  if (!st) {
    co_await ReplyRestError(ctx, st.error());
    co_return;
  }
  co_await ctx.Reply(200, written);
}

}  // namespace space::api::e2b
