// GET /v1/sandboxes/{id}/commands/{command_id}/terminal: a WebSocket to a command's
// terminal (docs/console.md, "Terminal protocol").
//
// Subprotocol "space-terminal.v1" (required; a credential may ride beside it as
// "space-auth.<key or token>", since browsers cannot set headers on a WebSocket; the
// console's session cookie works too). Binary frames: terminal bytes, both ways. Text
// frames: JSON control, {"v":1,"type":"resize","cols","rows"} | "keepalive" | "close" from
// the client; {"v":1,"type":"ready","offset"} | "keepalive" | "error" | "exit" from spaced.
// Output is the command's durable stdout from ?offset= (default 0), so a client that lost
// its connection reconnects with the count of bytes it got and misses nothing. A drop
// leaves the command running; "close" hangs it up (SIGHUP) and ends the socket once it
// exits. Two coroutines on the connection's strand: this one writes, a reader feeds stdin.
#include <boost/beast/websocket.hpp>

#include "api/http.h"

namespace space::api {

namespace websocket = beast::websocket;

namespace {

constexpr std::string_view kSubprotocol = "space-terminal.v1";
constexpr size_t kFrameBytes = 64 << 10;
constexpr int64_t kKeepaliveNs = 20'000'000'000;

struct TermState {
  std::shared_ptr<asio::steady_timer> wake;  // cancelled when there is news
  bool reader_done = false;
  bool client_closed = false;   // the socket is gone or sent a close frame
  bool hangup = false;          // the client asked to end the command
  std::vector<std::string> errors;  // to tell the client
};

bool OffersSubprotocol(const std::string& header) {
  size_t pos = 0;
  while (pos <= header.size()) {
    size_t end = header.find(',', pos);
    if (end == std::string::npos) end = header.size();
    std::string_view item(header.data() + pos, end - pos);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item == kSubprotocol) return true;
    pos = end + 1;
  }
  return false;
}

std::string Control(Json j) {
  j["v"] = 1;
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

using Ws = websocket::stream<beast::tcp_stream&>;

// One frame; the message lives in this coroutine's frame until it is written.
Awaitable<void> Send(Ws& ws, bool text, std::string msg, beast::error_code& ec) {
  ws.text(text);
  co_await ws.async_write(asio::buffer(msg), asio::redirect_error(asio::use_awaitable, ec));
}

// Reads the client's frames until the socket ends; wakes the writer on anything it must do.
Awaitable<void> ReadFrames(Ctx& ctx, Ws& ws,
                           std::shared_ptr<TermState> st, std::string sb, std::string cid) {
  core::Platform* p = ctx.platform;
  auto wake = [&] { st->wake->cancel(); };
  for (;;) {
    beast::flat_buffer buf;
    beast::error_code ec;
    co_await ws.async_read(buf, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) break;
    std::string data = beast::buffers_to_string(buf.data());
    if (!ws.got_text()) {
      auto w = co_await ctx.Blocking([&] { return p->WriteStdin(sb, cid, data, false); });
      if (!w) {
        st->errors.push_back(w.error().message);
        wake();
      }
      continue;
    }
    auto msg = ParseJson(data);
    std::string type = msg && msg->is_object() ? JsonStringOr(*msg, "type", "") : "";
    if (type == "resize") {
      auto size = ParsePtySize(*msg);
      if (!size) {
        st->errors.push_back("resize: " + size.error().message);
        wake();
        continue;
      }
      const int cols = size->cols, rows = size->rows;
      auto r = co_await ctx.Blocking([&] { return p->ResizeCommand(sb, cid, cols, rows); });
      if (!r) {
        st->errors.push_back("resize: " + r.error().message);
        wake();
      }
    } else if (type == "keepalive") {
      // Nothing to do: its arrival keeps the socket's idle timer from firing.
    } else if (type == "close") {
      st->hangup = true;
      (void)co_await ctx.Blocking([&] { return p->Signal(sb, cid, 1); });
      wake();
    } else {
      st->errors.push_back("unknown control frame (want JSON with type resize, keepalive or close)");
      wake();
    }
  }
  st->reader_done = true;
  st->client_closed = true;
  wake();
}

}  // namespace

Awaitable<bool> RouteTerminal(Ctx& ctx) {
  const auto& s = ctx.segments;
  if (!(s.size() == 6 && s[0] == "v1" && s[1] == "sandboxes" && s[3] == "commands" &&
        s[5] == "terminal" && ctx.method == "GET"))
    co_return false;
  core::Platform* p = ctx.platform;
  const std::string sb = s[2], cid = s[4];
  if (!websocket::is_upgrade(ctx.req())) {
    const Json body = ErrorBody(Error{Errc::kInvalidArgument, 0,
                                      "this is a WebSocket: connect with Upgrade: websocket and "
                                      "subprotocol space-terminal.v1"});
    const std::vector<std::pair<std::string, std::string>> headers = {{"Upgrade", "websocket"}};
    co_await ctx.Reply(426, body, headers);
    co_return true;
  }
  if (!OffersSubprotocol(ctx.Header(http::field::sec_websocket_protocol))) {
    co_await ctx.ReplyError(Error{Errc::kInvalidArgument, 0, "subprotocol space-terminal.v1 is required"});
    co_return true;
  }
  auto offset = ParseOffset(ctx.query, "offset");
  if (!offset) {
    co_await ctx.ReplyError(offset.error());
    co_return true;
  }
  auto info = co_await ctx.Blocking([&] { return p->GetCommand(sb, cid); });
  if (!info) {
    co_await ctx.ReplyError(info.error());
    co_return true;
  }
  if (*offset > info->stdout_size) {
    co_await ctx.ReplyError(Error{Errc::kInvalidArgument, 0,
                                  "offset " + std::to_string(*offset) + " is past the output (" +
                                      std::to_string(info->stdout_size) + " bytes)"});
    co_return true;
  }

  Ws ws(*ctx.stream);
  ctx.stream->expires_never();  // the WebSocket's own timeouts rule from here
  websocket::stream_base::timeout to = websocket::stream_base::timeout::suggested(beast::role_type::server);
  to.idle_timeout = std::chrono::seconds(60);
  to.keep_alive_pings = true;
  ws.set_option(to);
  ws.set_option(websocket::stream_base::decorator([](websocket::response_type& res) {
    res.set(http::field::server, "spaced");
    res.set(http::field::sec_websocket_protocol, std::string(kSubprotocol));
  }));
  ws.read_message_max(1 << 20);
  ctx.keep_alive = false;  // after the socket, the connection is over
  beast::error_code ec;
  co_await ws.async_accept(ctx.req(), asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return true;
  ctx.status = 101;

  auto st = std::make_shared<TermState>();
  auto ex = ctx.stream->get_executor();
  st->wake = std::make_shared<asio::steady_timer>(ex);
  uint64_t off = *offset;
  const Json* pty = JsonField(info->record.spec, "pty");
  Json ready = {{"type", "ready"}, {"command_id", cid}, {"offset", off}};
  if (pty) ready["pty"] = *pty;
  co_await Send(ws, true, Control(ready), ec);
  if (ec) co_return true;
  asio::co_spawn(ex, ReadFrames(ctx, ws, st, sb, cid), asio::detached);

  const std::string key = "cmd:" + sb + ":" + cid;
  int64_t last_write = MonotonicNanos();
  bool exited = false;
  while (!st->client_closed && !ec) {
    // Armed before the look: output or an exit after it wakes the wait below.
    auto handle = p->notifier().Watch(key, [ex, w = st->wake] { asio::post(ex, [w] { w->cancel(); }); });
    std::vector<std::string> errors;
    errors.swap(st->errors);
    for (const auto& e : errors) {
      Json msg = {{"type", "error"}, {"message", e}};
      co_await Send(ws, true, Control(msg), ec);
      if (ec) break;
    }
    if (ec) break;
    auto cmd = co_await ctx.Blocking([&] { return p->GetCommand(sb, cid); });
    auto data = co_await ctx.Blocking(
        [&] { return p->ReadOutput(sb, cid, store::OutputStream::kStdout, off, kFrameBytes); });
    if (data && !data->empty()) {
      off += data->size();
      co_await Send(ws, false, std::move(*data), ec);
      last_write = MonotonicNanos();
      continue;
    }
    if (!cmd || !data) {
      const std::string why = !cmd ? cmd.error().message : data.error().message;
      Json msg = {{"type", "error"}, {"message", why}};
      co_await Send(ws, true, Control(msg), ec);
      break;
    }
    if (cmd->ended() && off >= cmd->stdout_size) {
      const auto& r = cmd->record;
      Json exit = {{"type", "exit"}, {"state", r.state}, {"offset", off},
                   {"exit_code", r.exit_code ? Json(*r.exit_code) : Json(nullptr)},
                   {"signal", r.signal ? Json(*r.signal) : Json(nullptr)}};
      co_await Send(ws, true, Control(exit), ec);
      exited = true;
      break;
    }
    int64_t wait = last_write + kKeepaliveNs - MonotonicNanos();
    if (wait <= 0) {
      Json msg = {{"type", "keepalive"}, {"offset", off}};
      co_await Send(ws, true, Control(msg), ec);
      last_write = MonotonicNanos();
      continue;
    }
    st->wake->expires_after(std::chrono::nanoseconds(wait));
    beast::error_code wec;
    co_await st->wake->async_wait(asio::redirect_error(asio::use_awaitable, wec));
  }
  (void)exited;
  if (!st->client_closed) {
    beast::error_code cec;
    co_await ws.async_close(websocket::close_code::normal, asio::redirect_error(asio::use_awaitable, cec));
  }
  // The reader holds references to ws and ctx: wait for it to see the socket end.
  while (!st->reader_done) {
    st->wake->expires_after(std::chrono::seconds(5));
    beast::error_code wec;
    co_await st->wake->async_wait(asio::redirect_error(asio::use_awaitable, wec));
    if (!wec && !st->reader_done) {
      beast::error_code cec;
      ctx.stream->socket().close(cec);
    }
  }
  co_return true;
}

}  // namespace space::api
