// E2B control plane, second half: snapshots (POST /sandboxes/{id}/snapshots, GET /snapshots,
// DELETE /templates/{snapshotID}) as SPACE snapshots, fork as SPACE's fork, and sandbox
// logs (GET /sandboxes/{id}/logs, /v2/…/logs) as the sandbox's lifecycle operations. A
// snapshot's E2B id is its SPACE id (`snap-…`); creating a sandbox with it as the template
// restores it (parse.cc, ParseCreate).
#include <algorithm>

#include "api/e2b/control.h"
#include "api/e2b/parse.h"
#include "core/templates.h"
#include "sys/sys.h"

namespace space::api::e2b {

namespace {

// Named snapshots (createSnapshot({name})): the name of each, "name:tag", kept beside the
// data dir's other E2B state as DATA/e2b-snapshots/{snap-id}.name. A name may be given to
// several snapshots; it then restores (and lists first) the newest.
std::string NamesDir(core::Platform* p) { return p->config().data_dir + "/e2b-snapshots"; }

// "name" -> "name:latest"; E2B's ":default" tag is SPACE's "latest".
std::string NormalName(const std::string& name) {
  size_t colon = name.find(':');
  if (colon == std::string::npos) return name + ":latest";
  if (name.substr(colon + 1) == "default") return name.substr(0, colon) + ":latest";
  return name;
}

std::string NameOf(core::Platform* p, const std::string& snap_id) {
  auto n = sys::ReadFile(NamesDir(p) + "/" + snap_id + ".name");
  return n ? *n : "";
}

Json SnapshotInfo(core::Platform* p, const store::SnapshotRecord& s) {
  Json names = Json::array({s.id});
  if (std::string n = NameOf(p, s.id); !n.empty()) names.push_back(n);
  return {{"snapshotID", s.id}, {"names", names}};
}

}  // namespace

std::string SnapshotByName(core::Platform* p, const std::string& name) {
  if (name.empty() || !sys::Exists(NamesDir(p))) return "";
  const std::string want = NormalName(name);
  auto snaps = p->ListSnapshots("");
  if (!snaps) return "";
  const store::SnapshotRecord* best = nullptr;
  for (const auto& s : *snaps) {
    if (s.state != "ready" || NameOf(p, s.id) != want) continue;
    if (!best || AfterCursor({best->created_ms, best->id}, {s.created_ms, s.id}, false)) best = &s;
  }
  return best ? best->id : "";
}

Awaitable<void> CreateSnapshot(Ctx& ctx, const std::string& sandbox_id) {
  core::Platform* p = ctx.platform;
  auto body = co_await ctx.ReadJson();
  if (!body) {
    co_await ReplyError(ctx, body.error());
    co_return;
  }
  std::string name;
  if (const Json* n = JsonField(*body, "name"); n && !n->is_null()) {
    if (!n->is_string()) {
      co_await ReplyError(ctx, 400, "name must be a string");
      co_return;
    }
    name = n->get<std::string>();
  }
  if (!name.empty()) {
    name = NormalName(name);
    auto ok = core::ParseTemplateRef(name);
    if (!ok) {
      co_await ReplyError(ctx, 400, "snapshot name: " + ok.error().message);
      co_return;
    }
  }
  auto rec = co_await ctx.Blocking([&] { return Visible(p, sandbox_id); });
  if (!rec) {
    co_await ReplyError(ctx, rec.error());
    co_return;
  }
  auto op = co_await ctx.Blocking([&] { return p->SnapshotSandbox(sandbox_id); });
  if (!op) {
    co_await ReplyError(ctx, op.error());
    co_return;
  }
  auto st = co_await Finish(ctx, *op);
  if (!st) {
    co_await ReplyError(ctx, st.error());
    co_return;
  }
  std::string snap_id = JsonStringOr(op->request, "snapshot_id", "");
  auto snap = co_await ctx.Blocking([&] { return p->GetSnapshot(snap_id); });
  if (!snap) {
    co_await ReplyError(ctx, snap.error());
    co_return;
  }
  if (!name.empty()) {
    auto named = co_await ctx.Blocking([&]() -> Status {
      SPACE_TRY(sys::MkdirAll(NamesDir(p), 0700));
      return sys::WriteFileAtomic(NamesDir(p) + "/" + snap_id + ".name", name, 0600);
    });
    if (!named) {
      co_await ReplyError(ctx, named.error());
      co_return;
    }
  }
  Json reply = SnapshotInfo(p, *snap);
  co_await ctx.Reply(201, reply);
}

// GET /snapshots?sandboxID=&name=&limit=&nextToken=: ready snapshots, newest first.
Awaitable<void> ListSnapshots(Ctx& ctx) {
  core::Platform* p = ctx.platform;
  auto limit = ParsePageLimit(ctx.Query("limit"));
  Result<std::optional<PageCursor>> after = std::optional<PageCursor>();
  if (std::string t = ctx.Query("nextToken"); !t.empty()) {
    auto c = DecodePageToken(t);
    after = c ? Result<std::optional<PageCursor>>(*c) : tl::unexpected(c.error());
  }
  if (!limit || !after) {
    const Error e = !limit ? limit.error() : after.error();  // named: no temporary in co_await
    co_await ReplyError(ctx, e);
    co_return;
  }
  const std::string sandbox_id = ctx.Query("sandboxID");
  // A name is a snapshot's id (optionally with E2B's ":default" tag) or its given name.
  const std::string name = ctx.Query("name");
  const std::string as_id = name.substr(0, name.find(':'));
  const std::string as_name = name.empty() ? "" : NormalName(name);
  auto snaps = co_await ctx.Blocking([&] { return p->ListSnapshots(sandbox_id); });
  if (!snaps) {
    co_await ReplyError(ctx, snaps.error());
    co_return;
  }
  std::vector<store::SnapshotRecord> match;
  for (auto& s : *snaps) {
    if (s.state != "ready" || (!name.empty() && s.id != as_id && NameOf(p, s.id) != as_name)) continue;
    if (*after && !AfterCursor({s.created_ms, s.id}, **after, false)) continue;
    match.push_back(std::move(s));
  }
  std::sort(match.begin(), match.end(), [](const auto& a, const auto& b) {
    return AfterCursor({b.created_ms, b.id}, {a.created_ms, a.id}, false);
  });
  Json out = Json::array();
  std::vector<std::pair<std::string, std::string>> headers;
  for (size_t i = 0; i < match.size(); ++i) {
    if (i == *limit) {
      headers.emplace_back("X-Next-Token", EncodePageToken({match[i - 1].created_ms, match[i - 1].id}));
      break;
    }
    out.push_back(SnapshotInfo(p, match[i]));
  }
  co_await ctx.Reply(200, out, headers);
}

Awaitable<void> DeleteTemplate(Ctx& ctx, const std::string& id) {
  core::Platform* p = ctx.platform;
  std::string snap_id = id.substr(0, id.find(':'));
  if (!StartsWith(snap_id, "snap-")) {
    co_await ReplyError(ctx, 404, "template " + id + " not found (SPACE templates are managed through /v1/templates)");
    co_return;
  }
  auto st = co_await ctx.Blocking([&]() -> Status {
    auto s = p->GetSnapshot(snap_id);
    if (!s) return tl::unexpected(s.error());
    if (s->state == "deleting") return Fail(Errc::kNotFound, "snapshot " + snap_id + " not found");
    SPACE_TRY(p->DeleteSnapshot(snap_id));
    (void)::unlink((NamesDir(p) + "/" + snap_id + ".name").c_str());
    return Ok();
  });
  if (!st) {
    co_await ReplyError(ctx, st.error());
    co_return;
  }
  co_await ctx.ReplyBytes(204, "", "application/json");
}

// POST /sandboxes/{id}/fork {timeout, count}: SPACE's fork; one result per fork.
Awaitable<void> Fork(Ctx& ctx, const std::string& sandbox_id) {
  core::Platform* p = ctx.platform;
  auto body = co_await ctx.ReadJson();
  if (!body) {
    co_await ReplyError(ctx, body.error());
    co_return;
  }
  int64_t count = 1;
  if (const Json* c = JsonField(*body, "count"); c && !c->is_null()) {
    if (!c->is_number_integer() || c->get<int64_t>() < 1 || c->get<int64_t>() > 100) {
      co_await ReplyError(ctx, 400, "count must be 1 to 100");
      co_return;
    }
    count = c->get<int64_t>();
  }
  auto timeout = TimeoutSeconds(*body);
  if (!timeout) {
    co_await ReplyError(ctx, timeout.error());
    co_return;
  }
  const int64_t secs = *timeout < 0 ? 15 : *timeout;
  auto rec = co_await ctx.Blocking([&] { return Visible(p, sandbox_id); });
  if (!rec) {
    co_await ReplyError(ctx, rec.error());
    co_return;
  }
  auto forked = co_await ctx.Blocking([&] { return p->Fork(sandbox_id, static_cast<int>(count)); });
  if (!forked) {
    co_await ReplyError(ctx, forked.error());
    co_return;
  }
  // Each fork succeeds or fails on its own: the operation's failure is not the answer's.
  (void)co_await Finish(ctx, forked->first);
  Json out = Json::array();
  for (const auto& r : forked->second) {
    std::string fid = r.id;
    auto latest = co_await ctx.Blocking([&]() -> Result<store::SandboxRecord> {
      auto v = p->GetSandbox(fid);
      if (!v) return v;
      if (v->state != "running")
        return Fail(Errc::kUnavailable, "fork " + fid + " is " + v->state + (v->reason.empty() ? "" : ": " + v->reason));
      return p->SetTimeout(fid, secs, "");
    });
    if (latest) {
      out.push_back({{"sandbox", Created(ctx, *latest)}});
    } else {
      out.push_back({{"error", {{"code", HttpStatusFor(latest.error().code)}, {"message", latest.error().message}}}});
    }
  }
  co_await ctx.Reply(201, out);
}

// The sandbox's log: its lifecycle operations (create, pause, resume, snapshot, …), one
// entry each, oldest first (v2: `direction` backward for newest first).
Awaitable<void> Logs(Ctx& ctx, const std::string& sandbox_id, bool v2) {
  core::Platform* p = ctx.platform;
  auto num = [&](const char* key, int64_t def, int64_t max) -> Result<int64_t> {
    std::string v = ctx.Query(key);
    if (v.empty()) return def;
    if (v.size() > 15 || !std::all_of(v.begin(), v.end(), ::isdigit) || std::stoll(v) > max)
      return Fail(Errc::kInvalidArgument, std::string(key) + " must be a whole number up to " + std::to_string(max));
    return std::stoll(v);
  };
  auto start = num(v2 ? "cursor" : "start", 0, int64_t{1} << 52);
  auto limit = num("limit", 1000, v2 ? 1000 : int64_t{1} << 31);
  std::string direction = ctx.Query("direction", "forward");
  std::string level = ctx.Query("level");
  static const std::vector<std::string> kLevels = {"debug", "info", "warn", "error"};
  Status bad = Ok();
  if (!start) bad = tl::unexpected(start.error());
  if (!limit) bad = tl::unexpected(limit.error());
  if (direction != "forward" && direction != "backward")
    bad = Fail(Errc::kInvalidArgument, "direction must be forward or backward");
  if (!level.empty() && std::find(kLevels.begin(), kLevels.end(), level) == kLevels.end())
    bad = Fail(Errc::kInvalidArgument, "level must be debug, info, warn or error");
  if (!bad) {
    co_await ReplyError(ctx, bad.error());
    co_return;
  }
  const std::string search = ctx.Query("search");
  auto ops = co_await ctx.Blocking([&]() -> Result<std::vector<store::OperationRecord>> {
    auto v = Visible(p, sandbox_id);
    if (!v) return tl::unexpected(v.error());
    return p->ListOperations(0, "");
  });
  if (!ops) {
    co_await ReplyError(ctx, ops.error());
    co_return;
  }
  const int64_t min_level = level.empty() ? 0 : std::find(kLevels.begin(), kLevels.end(), level) - kLevels.begin();
  std::vector<Json> entries;
  for (auto it = ops->rbegin(); it != ops->rend(); ++it) {  // oldest first
    const auto& op = *it;
    if (op.target != sandbox_id || op.updated_ms < *start) continue;
    const bool failed = op.state == "failed";
    if ((failed ? 3 : 1) < min_level) continue;
    std::string msg = op.kind + " " + op.state + (failed ? ": " + op.error_message : "");
    if (!search.empty() && msg.find(search) == std::string::npos) continue;
    entries.push_back({{"timestamp", FormatRfc3339(op.updated_ms)},
                       {"level", failed ? "error" : "info"},
                       {"message", msg},
                       {"fields", {{"operation", op.id}, {"kind", op.kind}, {"state", op.state}}}});
  }
  if (direction == "backward") std::reverse(entries.begin(), entries.end());
  if (entries.size() > static_cast<size_t>(*limit)) entries.resize(static_cast<size_t>(*limit));
  Json structured = Json::array();
  Json lines = Json::array();
  for (auto& e : entries) {
    lines.push_back({{"timestamp", e["timestamp"]}, {"line", e["message"]}});
    structured.push_back(std::move(e));
  }
  Json reply = v2 ? Json{{"logs", structured}} : Json{{"logs", lines}, {"logEntries", structured}};
  co_await ctx.Reply(200, reply);
}

}  // namespace space::api::e2b
