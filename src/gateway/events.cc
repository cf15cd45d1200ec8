// gateway (gateway.h): GET /v1/events through a gateway — every node's stream, merged.
//
// The gateway opens GET /v1/events on each live node with the client's credential and
// keeps, per node, the last view of each of its sandboxes. The client gets one snapshot
// of the whole cluster (every answering node's sandboxes, each with its "node", and the
// sandboxes whose node is gone, from their cluster records), then the changes: a node's
// events pass on with "node" added; a node whose stream ends (it died, was cut off, left
// the cluster) has its sandboxes told "unavailable"; a node that (re)joins is subscribed
// within a second and its snapshot is told as the changes against what the client saw.
// Every event is re-derived from the per-node view, so a reconnect loses no change.
//
// Everything runs on the client connection's strand: the node readers push into a queue
// and wake the writer, which is the only one to touch the views and the client socket.
#include <spdlog/spdlog.h>

#include <deque>

#include "api/parse.h"
#include "api/views.h"
#include "gateway/internal.h"

namespace space::gateway {

namespace {

constexpr auto kConnectTimeout = std::chrono::seconds(5);
constexpr auto kHeaderTimeout = std::chrono::seconds(10);
// Nodes send a keepalive every 15 s: a stream silent for this long is from a node cut off.
constexpr auto kNodeIdle = std::chrono::seconds(40);
// How long the first snapshot waits for slow nodes (they join the stream later).
constexpr int64_t kFirstSnapshotWaitMs = 5000;
constexpr int64_t kTickMs = 1000;           // new nodes, gone nodes, retries
constexpr int64_t kKeepaliveMs = 15000;
constexpr size_t kMaxEventBytes = 8u << 20;  // a node's event larger than this ends its stream

int64_t MonoMs() { return MonotonicNanos() / 1000000; }

// What a node's reader hands the writer.
struct Msg {
  enum Kind { kEvent, kEnd, kRefused };
  Kind kind = kEvent;
  std::string node;
  std::string name;  // kEvent: the event's name
  Json data;         // kEvent: its data
  int status = 0;    // kRefused: the node's answer
  std::string body, content_type, why;
};

struct Fanin {
  explicit Fanin(asio::any_io_executor ex) : wake(ex) {}
  asio::steady_timer wake;
  std::deque<Msg> queue;
  bool stopped = false;
  void Push(Msg m) {
    if (stopped) return;
    queue.push_back(std::move(m));
    wake.cancel();
  }
};

// One node's stream, read event by event until it ends.
Awaitable<void> ReadNode(std::shared_ptr<Fanin> fan, std::shared_ptr<beast::tcp_stream> s,
                         tcp::endpoint ep, http::request<http::string_body> req, std::string node) {
  beast::error_code ec;
  s->expires_after(kConnectTimeout);
  co_await s->async_connect(ep, asio::redirect_error(asio::use_awaitable, ec));
  if (!ec) {
    s->socket().set_option(tcp::no_delay(true), ec);
    s->expires_after(kHeaderTimeout);
    co_await http::async_write(*s, req, asio::redirect_error(asio::use_awaitable, ec));
  }
  beast::flat_buffer buf;
  http::response_parser<http::buffer_body> p;
  p.body_limit(std::numeric_limits<uint64_t>::max());
  if (!ec) co_await http::async_read_header(*s, buf, p, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    Msg m;
    m.kind = Msg::kEnd;
    m.node = node;
    m.why = ec.message();
    fan->Push(std::move(m));
    co_return;
  }
  const int status = static_cast<int>(p.get().result_int());
  std::vector<char> chunk(16 * 1024);
  std::string pending;
  while (!p.is_done() && !fan->stopped) {
    p.get().body().data = chunk.data();
    p.get().body().size = chunk.size();
    s->expires_after(kNodeIdle);
    co_await http::async_read_some(*s, buf, p, asio::redirect_error(asio::use_awaitable, ec));
    if (ec == http::error::need_buffer) ec = {};
    if (ec) break;
    pending.append(chunk.data(), chunk.size() - p.get().body().size);
    if (status != 200) {
      if (pending.size() > 64 * 1024) break;
      continue;
    }
    for (size_t end; (end = pending.find("\n\n")) != std::string::npos;) {
      std::string_view block(pending.data(), end);
      std::string name = "message", data;
      while (!block.empty()) {
        size_t nl = block.find('\n');
        std::string_view line = block.substr(0, nl);
        block = nl == std::string_view::npos ? std::string_view() : block.substr(nl + 1);
        if (StartsWith(line, "event: ")) name = std::string(line.substr(7));
        else if (StartsWith(line, "data: ")) data += line.substr(6);
      }
      pending.erase(0, end + 2);
      if (data.empty()) continue;  // a comment (keepalive) or retry:
      auto j = ParseJson(data);
      if (!j || !j->is_object()) continue;
      Msg m;
      m.node = node;
      m.name = std::move(name);
      m.data = std::move(*j);
      fan->Push(std::move(m));
    }
    if (pending.size() > kMaxEventBytes) {
      ec = asio::error::message_size;
      break;
    }
  }
  Msg m;
  m.node = node;
  if (status != 200) {
    m.kind = Msg::kRefused;
    m.status = status;
    m.body = std::move(pending);
    m.content_type = std::string(p.get()[http::field::content_type]);
  } else {
    m.kind = Msg::kEnd;
    m.why = ec ? ec.message() : "the node ended the stream";
  }
  fan->Push(std::move(m));
  s->socket().close(ec);
}

// What the client has been told of one node's sandboxes.
struct NodeFeed {
  std::shared_ptr<beast::tcp_stream> stream;  // while a reader runs
  bool answered = false;                      // its snapshot came (or it refused, or ended)
  bool has_view = false;                      // `sandboxes` is the node's (not records')
  int64_t retry_ms = 0;
  std::map<std::string, Json> sandboxes;  // id -> its last view, "node" included
};

// The event that brings the client's view of `id` on `node` to `now` (null: gone).
std::string Tell(NodeFeed& feed, const std::string& node, const std::string& id, const Json* now) {
  auto it = feed.sandboxes.find(id);
  if (!now) {
    if (it == feed.sandboxes.end()) return "";
    feed.sandboxes.erase(it);
    Json ev = {{"type", "sandbox.deleted"}, {"id", id}, {"node", node}};
    return api::SseEvent("sandbox.deleted", ev);
  }
  Json sb = *now;
  sb["node"] = node;
  if (it == feed.sandboxes.end()) {
    feed.sandboxes.emplace(id, sb);
    Json ev = {{"type", "sandbox.created"}, {"sandbox", sb}};
    return api::SseEvent("sandbox.created", ev);
  }
  const std::string from = JsonStringOr(it->second, "state", "");
  const std::string to = JsonStringOr(sb, "state", "");
  std::string out;
  if (from != to) {
    Json ev = {{"type", "sandbox.state"}, {"from", from}, {"to", to}, {"sandbox", sb}};
    out = api::SseEvent("sandbox.state", ev);
  } else if (it->second != sb) {
    Json ev = {{"type", "sandbox.updated"}, {"sandbox", sb}};
    out = api::SseEvent("sandbox.updated", ev);
  }
  it->second = std::move(sb);
  return out;
}

// The client's view of a node's sandboxes brought to the node's snapshot.
std::string TellSnapshot(NodeFeed& feed, const std::string& node, const Json& list) {
  std::string out;
  std::set<std::string> listed;
  if (list.is_array()) {
    for (const Json& sb : list) {
      std::string id = JsonStringOr(sb, "id", "");
      if (id.empty()) continue;
      listed.insert(id);
      out += Tell(feed, node, id, &sb);
    }
  }
  std::vector<std::string> gone;
  for (const auto& [id, _] : feed.sandboxes)
    if (!listed.count(id)) gone.push_back(id);
  for (const auto& id : gone) out += Tell(feed, node, id, nullptr);
  feed.has_view = true;
  return out;
}

// The node's sandboxes, told unavailable (its stream ended).
std::string TellUnavailable(NodeFeed& feed, const std::string& node) {
  std::string out;
  if (!feed.has_view) return out;
  std::vector<std::string> ids;
  for (const auto& [id, _] : feed.sandboxes) ids.push_back(id);
  for (const auto& id : ids) {
    Json sb = feed.sandboxes[id];
    if (JsonStringOr(sb, "state", "") == "lost") continue;
    sb["state"] = "unavailable";
    sb["reason"] = "node unavailable: its node " + node + " is not answering";
    out += Tell(feed, node, id, &sb);
  }
  return out;
}

// A node's event, applied to its view; what the client is told of it.
std::string Apply(NodeFeed& feed, const Msg& m) {
  const std::string& name = m.name;
  if (name == "snapshot") {
    feed.answered = true;
    return TellSnapshot(feed, m.node, m.data.value("sandboxes", Json::array()));
  }
  if (name == "sandbox.created" || name == "sandbox.state" || name == "sandbox.updated") {
    const Json* sb = JsonField(m.data, "sandbox");
    std::string id = sb ? JsonStringOr(*sb, "id", "") : "";
    return id.empty() ? std::string() : Tell(feed, m.node, id, sb);
  }
  if (name == "sandbox.deleted") {
    std::string id = JsonStringOr(m.data, "id", "");
    return id.empty() ? std::string() : Tell(feed, m.node, id, nullptr);
  }
  Json data = m.data;
  if (name == "operation" && data.contains("operation") && data["operation"].is_object())
    data["operation"]["node"] = m.node;
  else
    data["node"] = m.node;
  return api::SseEvent(name, data);
}

// Ends the node readers when the client's stream is over, however it ends.
struct StopReaders {
  std::shared_ptr<Fanin> fan;
  std::map<std::string, NodeFeed>* feeds;
  ~StopReaders() {
    fan->stopped = true;
    beast::error_code ec;
    for (auto& [_, f] : *feeds)
      if (f.stream) f.stream->socket().close(ec);
  }
};

}  // namespace

Awaitable<void> Gateway::Impl::Events(Ctx& ctx) {
  int64_t end_ms = 0;
  if (std::string d = api::QueryValue(ctx.query, "duration"); !d.empty()) {
    int64_t ms = ParseDurationMillis(d);
    if (ms <= 0) {
      co_await ReplyFail(ctx, Surface::kV1, 400, "bad duration \"" + d + "\"");
      co_return;
    }
    end_ms = MonoMs() + ms;
  }
  // The nodes' streams run until the gateway ends them (no ?duration): a node ending its
  // own would read as that node going away.
  http::request<http::string_body> req = Outgoing(ctx, "");
  req.target("/v1/events");
  auto ex = ctx.stream->get_executor();
  auto fan = std::make_shared<Fanin>(ex);
  std::map<std::string, NodeFeed> feeds;
  StopReaders stop_readers{fan, &feeds};
  auto subscribe = [&](const std::string& node) {
    NodeFeed& f = feeds[node];
    f.retry_ms = MonoMs() + kTickMs;
    auto ep = NodeEndpoint(node);
    if (!ep) {
      f.answered = true;
      return;
    }
    f.answered = false;
    f.stream = std::make_shared<beast::tcp_stream>(ex);
    asio::co_spawn(ex, ReadNode(fan, f.stream, *ep, req, node), asio::detached);
  };
  std::vector<std::string> live = LiveNodes();
  if (live.empty()) {
    co_await ReplyFail(ctx, Surface::kV1, 503, "node unavailable: no node is live in the cluster");
    co_return;
  }
  for (const auto& node : live) subscribe(node);

  // The first snapshot: every node's (slow ones join later), or the first refusal.
  std::optional<Msg> refused;
  const int64_t first_by = MonoMs() + kFirstSnapshotWaitMs;
  for (;;) {
    while (!fan->queue.empty()) {
      Msg m = std::move(fan->queue.front());
      fan->queue.pop_front();
      NodeFeed& f = feeds[m.node];
      if (m.kind == Msg::kEvent) {
        (void)Apply(f, m);
        continue;
      }
      f.answered = true;
      f.stream.reset();
      if (m.kind == Msg::kRefused && !refused) refused = std::move(m);
    }
    bool all = true;
    for (const auto& [_, f] : feeds) all = all && f.answered;
    if (all || refused || MonoMs() >= first_by) break;
    fan->wake.expires_after(std::chrono::milliseconds(std::max<int64_t>(1, first_by - MonoMs())));
    beast::error_code ec;
    co_await fan->wake.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  if (refused) {
    // A credential refused by one node is refused by all (they share keys and sessions).
    std::string type = refused->content_type.empty() ? "application/json" : refused->content_type;
    std::string body = refused->body;
    co_await ctx.ReplyBytes(refused->status, std::move(body), type);
    co_return;
  }
  bool any = false;
  for (const auto& [_, f] : feeds) any = any || f.has_view;
  if (!any) {
    co_await ReplyFail(ctx, Surface::kV1, 503, "node unavailable: no node of the cluster answered");
    co_return;
  }
  // Sandboxes whose node is gone (or did not answer in time), from their records.
  cluster::Store* st = opts.store;
  const std::string prefix = opts.prefix + "sandboxes/";
  auto recs = co_await ctx.Blocking([&] { return st->List(prefix); });
  if (recs) {
    for (const auto& kv : *recs) {
      auto j = ParseJson(kv.value);
      if (!j) continue;
      const std::string node = JsonStringOr(*j, "node", "");
      const std::string id = kv.key.substr(prefix.size());
      NodeFeed& f = feeds[node];
      if (f.has_view || f.sandboxes.count(id)) continue;
      f.sandboxes.emplace(id, RecordView(id, *j, JsonStringOr(*j, "state", "") == "lost"));
    }
  }
  Json all = Json::array();
  for (const auto& [_, f] : feeds)
    for (const auto& [id, sb] : f.sandboxes) all.push_back(sb);
  Json snapshot = {{"type", "snapshot"}, {"sandboxes", all}};
  const std::vector<std::pair<std::string, std::string>> sse_headers = {{"X-Accel-Buffering", "no"}};
  co_await ctx.StartChunked(200, "text/event-stream", sse_headers);
  const std::string first = "retry: 2000\n\n" + api::SseEvent("snapshot", snapshot);
  co_await ctx.WriteChunk(first);

  int64_t wrote_ms = MonoMs(), tick_ms = MonoMs() + kTickMs;
  for (;;) {
    std::string out;
    bool refused_now = false;
    while (!fan->queue.empty()) {
      Msg m = std::move(fan->queue.front());
      fan->queue.pop_front();
      NodeFeed& f = feeds[m.node];
      if (m.kind == Msg::kEvent) {
        out += Apply(f, m);
        continue;
      }
      f.stream.reset();
      f.answered = true;
      f.retry_ms = MonoMs() + kTickMs;
      if (m.kind == Msg::kRefused && (m.status == 401 || m.status == 403)) {
        // The credential was revoked meanwhile: the stream is over.
        auto why = ParseJson(m.body);
        Json ev = {{"type", "error"}, {"node", m.node}, {"status", m.status},
                   {"error", why ? *why : Json(m.body)}};
        out += api::SseEvent("error", ev);
        refused_now = true;
        break;
      }
      spdlog::debug("gateway events: node {} stream ended ({})", m.node,
                    m.kind == Msg::kEnd ? m.why : std::to_string(m.status));
      out += TellUnavailable(f, m.node);
    }
    const int64_t now = MonoMs();
    if (!refused_now && now >= tick_ms) {
      tick_ms = now + kTickMs;
      std::vector<std::string> nodes = LiveNodes();
      std::set<std::string> live_set(nodes.begin(), nodes.end());
      for (const auto& node : nodes) {
        auto it = feeds.find(node);
        if (it == feeds.end() || (!it->second.stream && now >= it->second.retry_ms)) subscribe(node);
      }
      // A node that left the cluster: its reader ends, and its sandboxes are told unavailable.
      beast::error_code ec;
      for (auto& [node, f] : feeds)
        if (f.stream && !live_set.count(node)) f.stream->socket().close(ec);
    }
    if (!out.empty()) {
      co_await ctx.WriteChunk(out);
      wrote_ms = MonoMs();
    }
    if (refused_now || (end_ms && MonoMs() >= end_ms)) break;
    if (!fan->queue.empty()) continue;
    if (MonoMs() - wrote_ms >= kKeepaliveMs) {
      co_await ctx.WriteChunk(": keepalive\n\n");
      wrote_ms = MonoMs();
    }
    int64_t wait = std::min(tick_ms, wrote_ms + kKeepaliveMs);
    if (end_ms) wait = std::min(wait, end_ms);
    fan->wake.expires_after(std::chrono::milliseconds(std::max<int64_t>(1, wait - MonoMs())));
    beast::error_code ec;
    co_await fan->wake.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  co_await ctx.EndChunked();
}

}  // namespace space::gateway
