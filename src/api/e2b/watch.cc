// api/e2b/watch: see watch.h.
#include "api/e2b/watch.h"

#include <chrono>
#include <mutex>

#include "api/e2b/connect.h"
#include "api/e2b/e2b.h"
#include "api/e2b/parse.h"

namespace space::api::e2b {

namespace {

namespace rpc = connect;

constexpr auto kPollEvery = std::chrono::milliseconds(250);
constexpr int64_t kKeepaliveMs = 10'000;
constexpr int64_t kWatcherIdleMs = 30 * 60 * 1000;  // an unpolled watcher is dropped
constexpr size_t kMaxWatchers = 256;
constexpr int kRecursiveDepth = 16;  // the deepest listing the agent gives

struct Target {
  std::string path;
  int depth = 1;
  bool include_entry = false;  // events carry the entry's info (envd 0.6.3)
};

// The watched directory, checked: kNotFound when missing, kInvalidArgument when not a dir.
Result<Target> WatchTarget(core::Platform* p, const std::string& sb, const Json& req) {
  const Json* tc = nullptr;
  auto rec = p->GetSandbox(sb);
  if (rec) tc = JsonField(rec->spec, "template_config");
  std::string wd = tc ? JsonStringOr(*tc, "workdir", "") : "";
  auto path = PathField(req, "path", !wd.empty() && wd[0] == '/' ? wd : "/");
  if (!path) return tl::unexpected(path.error());
  auto st = p->StatFile(sb, *path);
  if (!st) return tl::unexpected(st.error());
  if (JsonStringOr(*st, "type", "") != "dir")
    return Fail(Errc::kInvalidArgument, "path " + *path + " is not a directory");
  // allowNetworkMounts (envd 0.6.4) lifts envd's refusal to put inotify on a network
  // filesystem; a polled listing works on any, so it changes nothing here.
  Target t;
  t.path = *path;
  t.depth = JsonBoolOr(req, "recursive", false) ? kRecursiveDepth : 1;
  t.include_entry = JsonBoolOr(req, "includeEntry", JsonBoolOr(req, "include_entry", false));
  return t;
}

Result<WatchState> Poll(core::Platform* p, const std::string& sb, const Target& t) {
  auto list = p->ListFiles(sb, t.path, t.depth, t.include_entry ? kMetadataXattrPrefix : "");
  if (!list) return tl::unexpected(list.error());
  return WatchStateOf(*list, t.path, t.include_entry);
}

// A FilesystemEvent; with include_entry, the entry's info where it still exists (`now`).
Json EventJson(const std::pair<std::string, std::string>& ev, const Target& t, const WatchState& now) {
  Json out = {{"name", ev.first}, {"type", ev.second}};
  if (t.include_entry) {
    auto it = now.find(ev.first);
    if (it != now.end() && it->second.entry.is_object()) out["entry"] = EntryInfo(it->second.entry);
  }
  return out;
}

struct Watcher {
  std::string sandbox_id;
  Target target;
  WatchState state;
  int64_t used_ms = 0;
};

std::mutex g_mu;
std::map<std::string, Watcher>& Watchers() {
  static std::map<std::string, Watcher> w;
  return w;
}

}  // namespace

Awaitable<void> WatchDir(Ctx& ctx, const std::string& sb, const Json& req) {
  core::Platform* p = ctx.platform;
  auto first = co_await ctx.Blocking([&]() -> Result<std::pair<Target, WatchState>> {
    auto t = WatchTarget(p, sb, req);
    if (!t) return tl::unexpected(t.error());
    auto s = Poll(p, sb, *t);
    if (!s) return tl::unexpected(s.error());
    return std::make_pair(*t, std::move(*s));
  });
  if (!first) {
    std::string end = rpc::EndStream(rpc::ErrorJson(rpc::CodeFor(first.error().code), first.error().message));
    co_await ctx.ReplyBytes(200, std::move(end), "application/connect+json");
    co_return;
  }
  const Target target = first->first;
  WatchState state = std::move(first->second);
  co_await ctx.StartChunked(200, "application/connect+json");
  // WatchDirResponse's oneof is the message itself: {"start":{}}, {"filesystem":{…}}.
  std::string start = rpc::Envelope(0, R"({"start":{}})");
  co_await ctx.WriteChunk(start);
  int64_t last_write = NowUnixMillis();
  asio::steady_timer timer(co_await asio::this_coro::executor);
  // Ends when a write fails (the client went) or the directory cannot be listed.
  for (;;) {
    timer.expires_after(kPollEvery);
    beast::error_code ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    auto now = co_await ctx.Blocking([&] { return Poll(p, sb, target); });
    if (!now) {
      std::string end = rpc::EndStream(rpc::ErrorJson(rpc::CodeFor(now.error().code), now.error().message));
      co_await ctx.WriteChunk(end);
      break;
    }
    std::string out;
    for (const auto& ev : DiffWatch(state, *now)) {
      Json msg = {{"filesystem", EventJson(ev, target, *now)}};
      out += rpc::Envelope(0, msg.dump());
    }
    state = std::move(*now);
    if (out.empty() && NowUnixMillis() - last_write >= kKeepaliveMs)
      out = rpc::Envelope(0, R"({"keepalive":{}})");
    if (!out.empty()) {
      co_await ctx.WriteChunk(out);
      last_write = NowUnixMillis();
    }
  }
  co_await ctx.EndChunked();
}

Result<Json> WatcherUnary(core::Platform* p, const std::string& sb, const std::string& method,
                          const Json& req) {
  const int64_t now = NowUnixMillis();
  if (method == "CreateWatcher") {
    auto t = WatchTarget(p, sb, req);
    if (!t) return tl::unexpected(t.error());
    auto s = Poll(p, sb, *t);
    if (!s) return tl::unexpected(s.error());
    std::lock_guard lock(g_mu);
    auto& all = Watchers();
    for (auto it = all.begin(); it != all.end();) {
      it = now - it->second.used_ms > kWatcherIdleMs ? all.erase(it) : std::next(it);
    }
    if (all.size() >= kMaxWatchers)
      return Fail(Errc::kResourceExhausted, "too many directory watchers; remove some first");
    std::string id = NewId("watch");
    all[id] = Watcher{sb, *t, std::move(*s), now};
    return Json{{"watcherId", id}};
  }
  const Json* idf = JsonField(req, "watcherId");
  if (!idf || !idf->is_string()) return Fail(Errc::kInvalidArgument, "watcherId is required");
  const std::string id = idf->get<std::string>();
  Watcher w;
  {
    std::lock_guard lock(g_mu);
    auto it = Watchers().find(id);
    if (it == Watchers().end() || it->second.sandbox_id != sb)
      return Fail(Errc::kNotFound, "watcher " + id + " not found");
    if (method == "RemoveWatcher") {
      Watchers().erase(it);
      return Json::object();
    }
    w = it->second;
  }
  if (method != "GetWatcherEvents") return Fail(Errc::kNotFound, "no method filesystem.Filesystem/" + method);
  // Listed outside the lock (an agent round trip); concurrent polls of one watcher are
  // the client's race, as with envd.
  auto s = Poll(p, sb, w.target);
  if (!s) return tl::unexpected(s.error());
  Json events = Json::array();
  for (const auto& ev : DiffWatch(w.state, *s)) events.push_back(EventJson(ev, w.target, *s));
  std::lock_guard lock(g_mu);
  auto it = Watchers().find(id);
  if (it != Watchers().end()) {
    it->second.state = std::move(*s);
    it->second.used_ms = now;
  }
  return Json{{"events", events}};
}

}  // namespace space::api::e2b
