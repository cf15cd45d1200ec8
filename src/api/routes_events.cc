// GET /v1/events: a server-sent event stream of sandbox and operation changes (docs/console.md).
//
// Fed by core's notifier (Notifier::Subscribe): each "sb:<id>" or "op:<id>" key it fires
// is queued (deduplicated) for this connection, and the connection's coroutine looks the
// record up and tells what changed since what it last sent. No thread per subscriber: the
// callback only queues the key and wakes the coroutine on its strand. The queue is bounded;
// past its bound the keys are dropped and the stream resynchronises by comparing the whole
// list with what it last sent (so a slow reader loses no change, only its granularity).
#include <set>
#include <unordered_map>

#include "api/http.h"

namespace space::api {

namespace {

constexpr size_t kMaxQueuedKeys = 1024;
constexpr int64_t kKeepaliveNs = 15'000'000'000;
constexpr std::string_view kKeepalive = ": keepalive\n\n";

struct EventQueue {
  std::mutex mu;
  std::set<std::string> keys;
  bool overflow = false;
  std::shared_ptr<asio::steady_timer> wake;
};

// What this connection last told about each sandbox.
struct Seen {
  std::string state;
  int64_t updated_ms = 0;
};

// The event (empty: none) that brings `seen` up to date with `rec` (null: gone).
std::string Diff(std::unordered_map<std::string, Seen>& seen, const std::string& id,
                 const store::SandboxRecord* rec) {
  auto it = seen.find(id);
  const bool gone = !rec || rec->state == "deleted";
  if (gone) {
    if (it == seen.end()) return "";
    seen.erase(it);
    return SseEvent("sandbox.deleted", Json{{"type", "sandbox.deleted"}, {"id", id}});
  }
  if (it == seen.end()) {
    seen[id] = Seen{rec->state, rec->updated_ms};
    return SseEvent("sandbox.created", Json{{"type", "sandbox.created"}, {"sandbox", SandboxJson(*rec)}});
  }
  if (it->second.state != rec->state) {
    Json ev = {{"type", "sandbox.state"}, {"from", it->second.state}, {"to", rec->state},
               {"sandbox", SandboxJson(*rec)}};
    it->second = Seen{rec->state, rec->updated_ms};
    return SseEvent("sandbox.state", ev);
  }
  if (it->second.updated_ms != rec->updated_ms) {
    it->second.updated_ms = rec->updated_ms;
    return SseEvent("sandbox.updated", Json{{"type", "sandbox.updated"}, {"sandbox", SandboxJson(*rec)}});
  }
  return "";
}

}  // namespace

Awaitable<bool> RouteEvents(Ctx& ctx) {
  const auto& s = ctx.segments;
  if (!(s.size() == 2 && s[0] == "v1" && s[1] == "events" && ctx.method == "GET")) co_return false;
  core::Platform* p = ctx.platform;
  // ?duration=30s ends the stream by itself (tests, polling clients); absent: until the
  // client goes.
  int64_t end_ns = 0;
  if (std::string d = ctx.Query("duration"); !d.empty()) {
    int64_t ms = ParseDurationMillis(d);
    if (ms <= 0) {
      co_await ctx.ReplyError(Error{Errc::kInvalidArgument, 0, "bad duration \"" + d + "\""});
      co_return true;
    }
    end_ns = MonotonicNanos() + ms * 1'000'000;
  }

  auto q = std::make_shared<EventQueue>();
  auto ex = ctx.stream->get_executor();
  q->wake = std::make_shared<asio::steady_timer>(ex);
  std::weak_ptr<EventQueue> weak = q;
  // Subscribed before the first listing: a change made while it is read is told after.
  auto sub = p->notifier().Subscribe([weak, ex](const std::string& key) {
    if (key.rfind("sb:", 0) != 0 && key.rfind("op:", 0) != 0) return;
    auto q = weak.lock();
    if (!q) return;
    {
      std::lock_guard lock(q->mu);
      if (q->overflow) return;
      if (q->keys.size() >= kMaxQueuedKeys) {
        q->overflow = true;
        q->keys.clear();
      } else if (!q->keys.insert(key).second) {
        return;  // already queued, and its wake-up with it
      }
    }
    asio::post(ex, [q] { q->wake->cancel(); });
  });

  // (Braced lists stay out of co_await expressions: g++ 12 miscompiles their arrays.)
  const std::vector<std::pair<std::string, std::string>> sse_headers = {{"X-Accel-Buffering", "no"}};
  co_await ctx.StartChunked(200, "text/event-stream", sse_headers);
  std::unordered_map<std::string, Seen> seen;
  // The first event: every sandbox now. Later ones are changes to it.
  bool resync = true, first = true;
  for (;;) {
    if (resync) {
      auto list = co_await ctx.Blocking([&] { return p->ListSandboxes(core::SandboxFilter{}); });
      if (!list) {
        co_await ctx.WriteChunk(SseEvent("error", ErrorBody(list.error())));
        break;
      }
      if (first) {
        Json arr = Json::array();
        for (const auto& rec : *list) {
          seen[rec.id] = Seen{rec.state, rec.updated_ms};
          arr.push_back(SandboxJson(rec));
        }
        Json snapshot = {{"type", "snapshot"}, {"sandboxes", arr}};
        const std::string first_events = "retry: 2000\n\n" + SseEvent("snapshot", snapshot);
        co_await ctx.WriteChunk(first_events);
        first = false;
      } else {
        std::string out;
        std::set<std::string> listed;
        for (const auto& rec : *list) {
          listed.insert(rec.id);
          out += Diff(seen, rec.id, &rec);
        }
        std::vector<std::string> gone;
        for (const auto& [id, _] : seen) {
          if (!listed.count(id)) gone.push_back(id);
        }
        for (const auto& id : gone) out += Diff(seen, id, nullptr);
        co_await ctx.WriteChunk(out);
      }
      resync = false;
    }
    std::set<std::string> keys;
    {
      std::lock_guard lock(q->mu);
      keys.swap(q->keys);
      resync = q->overflow;
      q->overflow = false;
    }
    if (resync) continue;
    if (keys.empty()) {
      const int64_t now = MonotonicNanos();
      if (end_ns && now >= end_ns) break;
      int64_t wait = kKeepaliveNs;
      if (end_ns) wait = std::min(wait, end_ns - now);
      q->wake->expires_after(std::chrono::nanoseconds(wait));
      beast::error_code ec;
      co_await q->wake->async_wait(asio::redirect_error(asio::use_awaitable, ec));
      // Timed out with nothing to tell (and the stream goes on): a comment keeps it open.
      if (!ec && !(end_ns && MonotonicNanos() >= end_ns)) co_await ctx.WriteChunk(kKeepalive);
      continue;
    }
    std::string out;
    std::set<std::string> sandboxes;
    for (const auto& key : keys) {
      if (key.rfind("sb:", 0) == 0) {
        sandboxes.insert(key.substr(3));
        continue;
      }
      std::string id = key.substr(3);
      auto op = co_await ctx.Blocking([&] { return p->GetOperation(id); });
      if (!op) continue;
      out += SseEvent("operation", Json{{"type", "operation"}, {"operation", OperationJson(*op)}});
      if (op->kind != "template_build" && !op->target.empty()) sandboxes.insert(op->target);
      if (const Json* ids = JsonField(op->result, "sandbox_ids"); ids && ids->is_array()) {
        for (const auto& v : *ids) {
          if (v.is_string()) sandboxes.insert(v.get<std::string>());
        }
      }
    }
    for (const auto& id : sandboxes) {
      auto rec = co_await ctx.Blocking([&] { return p->GetSandbox(id); });
      if (!rec && rec.error().code != Errc::kNotFound) continue;
      out += Diff(seen, id, rec ? &*rec : nullptr);
    }
    co_await ctx.WriteChunk(out);
  }
  sub.reset();
  co_await ctx.EndChunked();
  co_return true;
}

}  // namespace space::api
