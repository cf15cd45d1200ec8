// Routes: /v1/sandboxes/{id}/commands — start, status, output (raw, long-poll, SSE, mux),
// stdin and signals.
#include <csignal>

#include <boost/beast/core/detail/base64.hpp>

#include "api/http.h"

namespace space::api {

namespace {

using store::OutputStream;

std::string Base64(std::string_view s) {
  namespace b64 = beast::detail::base64;
  std::string out(b64::encoded_size(s.size()), '\0');
  out.resize(b64::encode(out.data(), s.data(), s.size()));
  return out;
}

void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// A mux record holds at most this much (clients such as the Python SDK assemble whole
// records), whether it is read into memory or sent from the page cache.
constexpr size_t kReadChunk = 4 << 20;

using EmitFn = OutputEmitFn;
using FinishFn = OutputFinishFn;
using KeepaliveFn = OutputKeepaliveFn;

}  // namespace

Awaitable<void> StreamOutput(
    Ctx& ctx, std::string sb, std::string cid, uint64_t out_off, uint64_t err_off,
    const EmitFn& emit, const FinishFn& finish, const KeepaliveFn& keepalive,
    const OutputEmitFileFn* emit_file) {
  core::Platform* p = ctx.platform;
  Ctx::Watcher w(ctx, "cmd:" + sb + ":" + cid);
  auto reader = p->OpenOutput(sb, cid);
  if (!reader) co_return;
  bool armed = false;
  for (;;) {
    // Read the state first: if the command had ended, all its output is already stored.
    auto info = p->GetCommand(sb, cid);
    if (!info) co_return;
    bool progressed = false;
    for (OutputStream s : {OutputStream::kStdout, OutputStream::kStderr}) {
      uint64_t& off = s == OutputStream::kStdout ? out_off : err_off;
      // The durable size the record reports is in the file already (written before it is
      // counted): below it there is nothing to look for (nor a file to open, for a stream
      // that has none yet).
      if ((s == OutputStream::kStdout ? info->stdout_size : info->stderr_size) <= off) continue;
      if (emit_file) {
        auto ext = (*reader)->Find(s, off, kReadChunk);
        if (!ext || ext->length == 0) continue;
        co_await (*emit_file)(s, off, ext->fd, ext->length);
        off += ext->length;
        progressed = true;
        continue;
      }
      for (int i = 0; i < 8; ++i) {
        auto data = (*reader)->Read(s, off, kReadChunk);
        if (!data || data->empty()) break;
        co_await emit(s, off, *data);
        off += data->size();
        progressed = true;
        if (data->size() < kReadChunk) break;
      }
    }
    if (progressed) {
      armed = false;  // keep reading while there is output; arm only when caught up
      continue;
    }
    if (info->ended()) {
      co_await finish(*info);
      co_return;
    }
    if (!armed) {
      // Arm, then look again: output stored between the read and the arm is not missed.
      w.Arm();
      armed = true;
      continue;
    }
    armed = false;
    if (!co_await w.Wait(MonotonicNanos() + 15'000'000'000ll)) co_await keepalive();
  }
}

namespace {

// The binary mux stream of a command's output from the given offsets, to its exit record
// (the chunked response is already started); see docs/api.md.
Awaitable<void> StreamMux(Ctx& ctx, std::string sb, std::string cid, uint64_t out_off,
                          uint64_t err_off) {
  auto emit = [&](OutputStream st, uint64_t, std::string_view data) -> Awaitable<void> {
    std::string head(1, static_cast<char>(st));
    PutU32(&head, static_cast<uint32_t>(data.size()));
    co_await ctx.WriteChunk(head, data);
  };
  // The bytes go from the log file's page cache to the socket (sendfile).
  auto emit_file = [&](OutputStream st, uint64_t off, int fd, size_t n) -> Awaitable<void> {
    std::string head(1, static_cast<char>(st));
    PutU32(&head, static_cast<uint32_t>(n));
    co_await ctx.WriteChunkFromFile(head, fd, off, n);
  };
  auto finish = [&](const core::CommandInfo& info) -> Awaitable<void> {
    std::string j = CommandJson(info).dump();
    std::string rec(1, '\3');
    PutU32(&rec, static_cast<uint32_t>(j.size()));
    rec += j;
    co_await ctx.WriteChunk(rec);
  };
  auto keepalive = [&]() -> Awaitable<void> { co_return; };
  // Named std::functions: no closure temporaries inside the co_await (g++ 12).
  EmitFn emit_fn = emit;
  OutputEmitFileFn emit_file_fn = emit_file;
  FinishFn finish_fn = finish;
  KeepaliveFn keepalive_fn = keepalive;
  co_await StreamOutput(ctx, sb, cid, out_off, err_off, emit_fn, finish_fn, keepalive_fn,
                        &emit_file_fn);
  co_await ctx.EndChunked();
}

}  // namespace

Awaitable<bool> RouteCommands(Ctx& ctx) {
  const auto& s = ctx.segments;
  if (s.size() < 4 || s[1] != "sandboxes" || s[3] != "commands") co_return false;
  core::Platform* p = ctx.platform;
  const std::string sb = s[2];

  if (s.size() == 4) {
    if (ctx.method == "POST") {
      auto body = co_await ctx.ReadJson();
      if (!body) {
        co_await ctx.ReplyError(body.error());
        co_return true;
      }
      auto req = ParseCommand(*body);
      if (!req) {
        co_await ctx.ReplyError(req.error());
        co_return true;
      }
      if (const std::string stream = ctx.Query("stream"); !stream.empty() && stream != "mux") {
        co_await ctx.ReplyError(Error{Errc::kInvalidArgument, 0, "stream must be mux"});
        co_return true;
      }
      store::SandboxRecord sb_rec;  // for the attach token's generation
      auto info = co_await ctx.Blocking([&]() -> Result<core::CommandInfo> {
        auto started = p->StartCommand(sb, *req);
        if (!started) return started;
        auto rec = p->GetSandbox(sb);
        if (!rec) return tl::unexpected(rec.error());
        sb_rec = std::move(*rec);
        return started;
      });
      if (!info) {
        co_await ctx.ReplyError(info.error());
        co_return true;
      }
      const auto attach = MintToken(ctx, sb_rec, info->record.id, auth::kAttachScopes);
      if (ctx.Query("stream") == "mux") {
        // Start and stream in one request: the response is the mux stream of the new
        // command (its id and attach token in headers), saving a round trip for
        // run-and-wait clients.
        std::vector<std::pair<std::string, std::string>> headers = {
            {"Space-Command-Id", info->record.id}, {"Space-Attach-Token", attach.first}};
        co_await ctx.StartChunked(201, "application/vnd.space.mux", headers);
        co_await StreamMux(ctx, sb, info->record.id, 0, 0);
        co_return true;
      }
      {
        Json reply_body = {{"id", info->record.id},
                           {"command", CommandJson(*info)},
                           {"attach_token", attach.first}};
        co_await ctx.Reply(201, reply_body);
      }
      co_return true;
    }
    if (ctx.method == "GET") {
      auto list = co_await ctx.Blocking([&] { return p->ListCommands(sb); });
      co_await ReplyList(ctx, "commands", std::move(list), CommandJson);
      co_return true;
    }
    co_await ctx.ReplyError(Error{Errc::kInvalidArgument, 0, "method not allowed"});
    co_return true;
  }

  const std::string cid = s[4];
  if (s.size() == 5 && ctx.method == "GET") {
    int64_t wait_ms = WaitMillis(ctx);
    if (wait_ms < 0) {
      co_await ctx.ReplyError(Error{Errc::kInvalidArgument, 0, "bad wait duration"});
      co_return true;
    }
    int64_t deadline = MonotonicNanos() + wait_ms * 1000000;
    Ctx::Watcher w(ctx, "cmd:" + sb + ":" + cid);
    for (;;) {
      w.Arm();
      auto info = co_await ctx.Blocking([&] { return p->GetCommand(sb, cid); });
      if (!info) {
        co_await ctx.ReplyError(info.error());
        co_return true;
      }
      if (info->ended() || MonotonicNanos() >= deadline) {
        co_await ctx.Reply(200, CommandJson(*info));
        co_return true;
      }
      co_await w.Wait(deadline);
    }
  }

  if (s.size() == 6 && s[5] == "output" && ctx.method == "GET") {
    auto first = co_await ctx.Blocking([&] { return p->GetCommand(sb, cid); });
    if (!first) {
      co_await ctx.ReplyError(first.error());
      co_return true;
    }
    std::string accept = ctx.Header(http::field::accept);
    std::string format = ctx.Query("format");
    if (format == "mux" || format == "sse" || accept.find("text/event-stream") != std::string::npos) {
      auto out_off = ParseOffset(ctx.query, "stdout_offset");
      auto err_off = ParseOffset(ctx.query, "stderr_offset");
      if (!out_off || !err_off) {
        co_await ctx.ReplyError(!out_off ? out_off.error() : err_off.error());
        co_return true;
      }
      if (format == "mux") {
        co_await ctx.StartChunked(200, "application/vnd.space.mux");
        co_await StreamMux(ctx, sb, cid, *out_off, *err_off);
        co_return true;
      }
      co_await ctx.StartChunked(200, "text/event-stream");
      auto emit = [&](OutputStream st, uint64_t off, std::string_view data) -> Awaitable<void> {
        std::string name(store::OutputStreamName(st));
        Json j = {{"offset", off}, {"data", Base64(data)}};
        co_await ctx.WriteChunk("event: " + name + "\nid: " + name + ":" +
                                std::to_string(off + data.size()) + "\ndata: " + j.dump() + "\n\n");
      };
      auto finish = [&](const core::CommandInfo& info) -> Awaitable<void> {
        co_await ctx.WriteChunk("event: exit\ndata: " + CommandJson(info).dump() + "\n\n");
      };
      auto keepalive = [&]() -> Awaitable<void> { co_await ctx.WriteChunk(": keepalive\n\n"); };
      EmitFn emit_fn = emit;
      FinishFn finish_fn = finish;
      KeepaliveFn keepalive_fn = keepalive;
      co_await StreamOutput(ctx, sb, cid, *out_off, *err_off, emit_fn, finish_fn, keepalive_fn);
      co_await ctx.EndChunked();
      co_return true;
    }

    // Plain read, optionally long-polling for new bytes.
    std::string sname = ctx.Query("stream", "stdout");
    if (sname != "stdout" && sname != "stderr") {
      co_await ctx.ReplyError(Error{Errc::kInvalidArgument, 0, "stream must be stdout or stderr"});
      co_return true;
    }
    OutputStream st = sname == "stdout" ? OutputStream::kStdout : OutputStream::kStderr;
    auto off = ParseOffset(ctx.query, "offset");
    if (!off) {
      co_await ctx.ReplyError(off.error());
      co_return true;
    }
    auto parsed_limit = ParseOutputLimit(ctx.query);
    if (!parsed_limit) {
      co_await ctx.ReplyError(parsed_limit.error());
      co_return true;
    }
    size_t limit = *parsed_limit;
    int64_t wait_ms = WaitMillis(ctx);
    if (wait_ms < 0) {
      co_await ctx.ReplyError(Error{Errc::kInvalidArgument, 0, "bad wait duration"});
      co_return true;
    }
    int64_t deadline = MonotonicNanos() + wait_ms * 1000000;
    Ctx::Watcher w(ctx, "cmd:" + sb + ":" + cid);
    for (;;) {
      w.Arm();
      auto info = p->GetCommand(sb, cid);
      if (!info) {
        co_await ctx.ReplyError(info.error());
        co_return true;
      }
      auto data = p->ReadOutput(sb, cid, st, *off, limit);
      if (!data) {
        co_await ctx.ReplyError(data.error());
        co_return true;
      }
      if (!data->empty() || info->ended() || MonotonicNanos() >= deadline) {
        std::vector<std::pair<std::string, std::string>> headers = {
            {"Space-Next-Offset", std::to_string(*off + data->size())},
            {"Space-Command-State", info->record.state}};
        if (info->record.exit_code)
          headers.emplace_back("Space-Exit-Code", std::to_string(*info->record.exit_code));
        if (info->record.signal)
          headers.emplace_back("Space-Signal", std::to_string(*info->record.signal));
        co_await ctx.ReplyBytes(200, std::move(*data), "application/octet-stream", headers);
        co_return true;
      }
      co_await w.Wait(deadline);
    }
  }

  if (s.size() == 6 && s[5] == "output" && ctx.method == "DELETE") {
    // Frees the output's space (and its share of the sandbox's output quota).
    auto st = co_await ctx.Blocking([&] { return p->DeleteOutput(sb, cid); });
    if (!st) {
      co_await ctx.ReplyError(st.error());
    } else {
      co_await ctx.Reply(200, Json::object());
    }
    co_return true;
  }

  if (s.size() == 6 && s[5] == "stdin" && ctx.method == "POST") {
    bool eof = ctx.Query("eof") == "1" || ctx.Query("eof") == "true";
    auto body = co_await ctx.ReadBody(8u << 20);  // the agent buffers at most 8 MiB of stdin
    if (!body) {
      co_await ctx.ReplyError(body.error());
      co_return true;
    }
    auto st = co_await ctx.Blocking([&] { return p->WriteStdin(sb, cid, *body, eof); });
    if (!st) {
      co_await ctx.ReplyError(st.error());
    } else {
      co_await ctx.Reply(200, Json::object());
    }
    co_return true;
  }

  if (s.size() == 6 && s[5] == "resize" && ctx.method == "POST") {
    auto body = co_await ctx.ReadJson();
    if (!body) {
      co_await ctx.ReplyError(body.error());
      co_return true;
    }
    auto size = ParsePtySize(*body);
    if (!size) {
      co_await ctx.ReplyError(size.error());
      co_return true;
    }
    auto st = co_await ctx.Blocking([&] { return p->ResizeCommand(sb, cid, size->cols, size->rows); });
    if (!st) {
      co_await ctx.ReplyError(st.error());
    } else {
      co_await ctx.Reply(200, Json::object());
    }
    co_return true;
  }

  if (s.size() == 6 && s[5] == "signal" && ctx.method == "POST") {
    auto body = co_await ctx.ReadJson();
    if (!body) {
      co_await ctx.ReplyError(body.error());
      co_return true;
    }
    auto sig = ParseSignal(*body);
    if (!sig) {
      co_await ctx.ReplyError(sig.error());
      co_return true;
    }
    auto st = co_await ctx.Blocking([&] { return p->Signal(sb, cid, *sig); });
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
