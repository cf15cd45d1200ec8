// E2B control plane: every sandbox path of E2B's OpenAPI description (e2b-dev/infra
// spec/openapi.yml) that maps onto SPACE — create (/sandboxes and /v2/sandboxes), connect,
// list v1 and v2, info, kill, timeout, refresh, pause and resume, network, metrics — on
// core::Platform's sandboxes and operations; snapshots, fork and logs are in
// routes_e2b_snapshots.cc. E2B's calls are synchronous, so each waits for its operation.
// Errors are E2B's {"code":<http status>,"message"}; a path E2B does not serve, or one that
// does not map onto SPACE, is 404 in that shape (never 405).
#include <sodium.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "api/e2b/control.h"
#include "api/e2b/parse.h"

namespace space::api::e2b {

Awaitable<void> ReplyError(Ctx& ctx, int status, const std::string& message) {
  Json body = {{"code", status}, {"message", message}};
  co_await ctx.Reply(status, body);
}

Awaitable<void> ReplyError(Ctx& ctx, const Error& e) {
  co_await ReplyError(ctx, HttpStatusFor(e.code), e.message);
}

std::string TemplateId(const std::string& ref) {
  // E2B's `base` is SPACE's e2b-base (TemplateRef): shown by the name E2B users gave.
  if (ref == "e2b-base:latest") return "base";
  const std::string suffix = ":latest";
  if (ref.size() > suffix.size() && ref.compare(ref.size() - suffix.size(), suffix.size(), suffix) == 0)
    return ref.substr(0, ref.size() - suffix.size());
  return ref;
}

// SPACE's transitional states map to where they are heading.
std::string E2bState(const std::string& state) {
  if (state == "creating" || state == "running" || state == "waking") return "running";
  if (state == "paused" || state == "suspended" || state == "suspending") return "paused";
  return "";
}

Result<store::SandboxRecord> Visible(core::Platform* p, const std::string& id) {
  auto rec = p->GetSandbox(id);
  if (!rec) return rec;
  if (E2bState(rec->state).empty()) return Fail(Errc::kNotFound, "sandbox " + id + " not found");
  return rec;
}

Awaitable<Status> Finish(Ctx& ctx, const store::OperationRecord& op, int64_t wait_ms) {
  auto done = co_await AwaitOperation(ctx, op.id, wait_ms);
  if (!done) co_return tl::unexpected(done.error());
  if (done->state == "failed")
    co_return Fail(ErrcFromName(done->error_code), done->error_message);
  if (!Finished(*done))
    co_return Fail(Errc::kDeadlineExceeded, "operation " + op.id + " did not finish in time");
  co_return Ok();
}

Json Listed(const store::SandboxRecord& r) {
  const Json* limits = JsonField(r.spec, "limits");
  Json lim = limits ? *limits : Json::object();
  int64_t expires = JsonIntOr(r.spec, "expires_ms", 0);
  double cpus = lim.contains("cpus") && lim["cpus"].is_number() ? lim["cpus"].get<double>() : 1.0;
  Json mounts = Json::array();  // E2B's SandboxVolumeMount: {name, path}
  if (const Json* vs = JsonField(r.spec, "volumes"); vs && vs->is_array()) {
    for (const auto& v : *vs) mounts.push_back({{"name", JsonStringOr(v, "name", "")}, {"path", JsonStringOr(v, "path", "")}});
  }
  return {{"sandboxID", r.id},
          {"volumeMounts", mounts},
          {"templateID", TemplateId(r.template_ref)},
          {"alias", TemplateId(r.template_ref)},
          {"clientID", "space"},
          {"startedAt", FormatRfc3339(r.created_ms)},
          // No timeout means no end: E2B has no word for that, so report the start.
          {"endAt", FormatRfc3339(expires > 0 ? expires : r.created_ms)},
          {"cpuCount", static_cast<int64_t>(std::ceil(std::max(cpus, 0.0)))},
          {"memoryMB", JsonIntOr(lim, "memory_bytes", 0) >> 20},
          {"diskSizeMB", JsonIntOr(lim, "disk_bytes", 0) >> 20},
          {"metadata", r.metadata},
          {"state", E2bState(r.state)},
          {"envdVersion", kEnvdVersion}};
}

Json Created(const Ctx& ctx, const store::SandboxRecord& r) {
  return {{"sandboxID", r.id},
          {"templateID", TemplateId(r.template_ref)},
          {"alias", TemplateId(r.template_ref)},
          {"clientID", "space"},
          {"envdVersion", kEnvdVersion},
          {"envdAccessToken", AccessToken(ctx, r)},
          {"trafficAccessToken", TrafficToken(ctx, r)},
          {"domain", SandboxDomain(ctx)}};
}

namespace {

// One sample of E2B's SandboxMetric from SPACE's figures (unknown ones as 0; memTotal and
// diskTotal are the sandbox's limits, the host's RAM when memory is unlimited).
Json E2bMetric(const core::SandboxUsage& u) {
  auto whole = [](int64_t v) { return v < 0 ? int64_t{0} : v; };
  int64_t mem_total = u.memory_limit_bytes;
  if (mem_total <= 0) mem_total = static_cast<int64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGESIZE);
  return {{"timestamp", FormatRfc3339(u.timestamp_ms)},
          {"timestampUnix", u.timestamp_ms / 1000},
          {"cpuUsedPct", u.cpu_used_pct < 0 ? 0.0 : u.cpu_used_pct},
          {"cpuCount", static_cast<int64_t>(std::ceil(u.cpu_count))},
          {"memUsed", whole(u.memory_bytes)},
          {"memTotal", mem_total},
          {"memCache", whole(u.memory_cache_bytes)},
          {"diskUsed", whole(u.disk_bytes)},
          {"diskTotal", u.disk_limit_bytes}};
}

// The built-in a create's template names, when it is one that is not built yet: the
// create waits for its build (or its import from the shared cache), as E2B's create waits
// for its sandbox. "" otherwise.
std::string MissingBuiltin(core::Platform* p, const std::string& ref) {
  const std::string name = ref.substr(0, ref.find(':'));
  auto names = p->BuiltinTemplateNames();
  if (std::find(names.begin(), names.end(), name + ":latest") == names.end() &&
      std::find(names.begin(), names.end(), name) == names.end())
    return "";
  auto list = p->ListTemplates();
  if (list) {
    for (const auto& t : *list) {
      if (t.name + ":" + t.tag == ref) return "";
    }
  }
  return ref;
}

// A built-in's first build can take minutes (an import from the cache about one).
constexpr int64_t kBuiltinWaitMs = 20 * 60 * 1000;
// The envd token's claimed life: the sandbox's, in practice (deleting it revokes the token).
constexpr int64_t kEnvdTokenLifeS = 10ll * 365 * 86400;

Awaitable<void> Create(Ctx& ctx) {
  core::Platform* p = ctx.platform;
  // Headers before the body: reading it moves the request out of the parser.
  const std::string chosen_id = ctx.Header(kSandboxIdHeader);  // a cluster gateway's pick
  auto body = co_await ctx.ReadJson();
  if (!body) {
    co_await ReplyError(ctx, body.error());
    co_return;
  }
  auto req = ParseCreate(*body);
  if (!req) {
    co_await ReplyError(ctx, req.error());
    co_return;
  }
  // A named snapshot (createSnapshot({name})) restores its newest snapshot.
  {
    const std::string tid = JsonStringOr(*body, "templateID", "");
    std::string named = co_await ctx.Blocking([&] { return SnapshotByName(p, tid); });
    if (!named.empty()) {
      req->snapshot_id = named;
      req->template_ref.clear();
    }
  }
  // A bad volume mount is answered now, not after a built-in template's import.
  if (auto st = co_await ctx.Blocking([&] { return p->CheckVolumeMounts(req->volumes); }); !st) {
    co_await ReplyError(ctx, st.error());
    co_return;
  }
  if (req->snapshot_id.empty()) {
    std::string ref = req->template_ref;
    auto builtin = co_await ctx.Blocking([&] { return MissingBuiltin(p, ref); });
    if (!builtin.empty()) {
      auto op = co_await ctx.Blocking([&] { return p->EnsureBuiltinTemplate(builtin); });
      // No conditional operator around the co_await: g++ 12 destroys such a temporary
      // twice (this once garbled the message below and then crashed spaced).
      Status built = Ok();
      if (op) {
        built = co_await Finish(ctx, *op, kBuiltinWaitMs);
      } else {
        built = tl::unexpected(op.error());
      }
      if (!built) {
        const std::string why =
            "template " + ref + " (a SPACE built-in) could not be prepared: " + built.error().message;
        co_await ReplyError(ctx, 503, why);
        co_return;
      }
    }
  }
  req->id = chosen_id;
  auto created = co_await ctx.Blocking([&] { return p->CreateSandbox(*req); });
  if (!created) {
    co_await ReplyError(ctx, created.error());
    co_return;
  }
  store::OperationRecord op = created->first;
  std::string id = created->second.id;
  auto st = co_await Finish(ctx, op);
  auto rec = co_await ctx.Blocking([&] { return p->GetSandbox(id); });
  if (st && !rec) st = tl::unexpected(rec.error());
  if (!st) {
    co_await ReplyError(ctx, st.error());
    co_return;
  }
  Json reply = Created(ctx, *rec);
  co_await ctx.Reply(201, reply);
}

// GET /sandboxes (v1: running ones, metadata filter, one answer) and GET /v2/sandboxes
// (state, metadata, template and startedAfter filters, order, pages of `limit` with
// X-Next-Token, X-Total-Running).
Awaitable<void> List(Ctx& ctx, bool v2) {
  core::Platform* p = ctx.platform;
  auto q = ParseListQuery([&](const std::string& k) { return ctx.QueryAll(k); }, v2);
  if (!q) {
    co_await ReplyError(ctx, q.error());
    co_return;
  }
  core::SandboxFilter filter;
  filter.labels = q->metadata;
  auto list = co_await ctx.Blocking([&] { return p->ListSandboxes(filter); });
  if (!list) {
    co_await ReplyError(ctx, list.error());
    co_return;
  }
  std::vector<store::SandboxRecord> match;
  for (auto& r : *list) {
    if (!q->states.count(E2bState(r.state))) continue;
    if (q->started_after_ms >= 0 && r.created_ms < q->started_after_ms) continue;
    if (!q->template_ref.empty() && r.template_ref != q->template_ref &&
        TemplateId(r.template_ref) != q->template_ref)
      continue;
    match.push_back(std::move(r));
  }
  int64_t running = 0;
  for (const auto& r : match) running += E2bState(r.state) == "running";
  const bool asc = q->ascending;
  std::sort(match.begin(), match.end(), [asc](const auto& a, const auto& b) {
    return AfterCursor({b.created_ms, b.id}, {a.created_ms, a.id}, asc);
  });
  Json out = Json::array();
  std::vector<std::pair<std::string, std::string>> headers;
  size_t taken = 0;
  for (size_t i = 0; i < match.size(); ++i) {
    const auto& r = match[i];
    if (q->after && !AfterCursor({r.created_ms, r.id}, *q->after, asc)) continue;
    if (q->limit > 0 && taken == q->limit) {
      const auto& last = match[i - 1];
      headers.emplace_back("X-Next-Token", EncodePageToken({last.created_ms, last.id}));
      break;
    }
    out.push_back(Listed(r));
    ++taken;
  }
  if (v2 && q->states.count("running")) headers.emplace_back("X-Total-Running", std::to_string(running));
  co_await ctx.Reply(200, out, headers);
}

Awaitable<void> Kill(Ctx& ctx, const std::string& id) {
  core::Platform* p = ctx.platform;
  auto rec = co_await ctx.Blocking([&] { return Visible(p, id); });
  if (!rec) {
    co_await ReplyError(ctx, rec.error());
    co_return;
  }
  auto op = co_await ctx.Blocking([&] { return p->DeleteSandbox(id); });
  Status st = Ok();
  if (op) {
    st = co_await Finish(ctx, *op);
  } else {
    st = tl::unexpected(op.error());
  }
  if (!st) {
    co_await ReplyError(ctx, st.error());
    co_return;
  }
  co_await ctx.ReplyBytes(204, "", "application/json");
}

// Runs a lifecycle transition to its end.
Awaitable<Status> Transition(Ctx& ctx, const std::string& id, const std::string& kind) {
  core::Platform* p = ctx.platform;
  auto op = co_await ctx.Blocking([&] { return p->Transition(id, kind); });
  if (!op) co_return tl::unexpected(op.error());
  co_return co_await Finish(ctx, *op);
}

Awaitable<void> Pause(Ctx& ctx, const std::string& id) {
  core::Platform* p = ctx.platform;
  auto body = co_await ctx.ReadJson();
  if (!body) {
    co_await ReplyError(ctx, body.error());
    co_return;
  }
  // memory: false (a filesystem-only pause) is SPACE's suspend.
  const Json* memory = JsonField(*body, "memory");
  if (memory && !memory->is_boolean() && !memory->is_null()) {
    co_await ReplyError(ctx, 400, "memory must be a boolean");
    co_return;
  }
  const bool keep_memory = !memory || !memory->is_boolean() || memory->get<bool>();
  auto rec = co_await ctx.Blocking([&] { return Visible(p, id); });
  if (!rec) {
    co_await ReplyError(ctx, rec.error());
    co_return;
  }
  if (E2bState(rec->state) == "paused") {
    co_await ReplyError(ctx, 409, "sandbox " + id + " is already paused");
    co_return;
  }
  auto st = co_await Transition(ctx, id, keep_memory ? "pause" : "suspend");
  if (!st) {
    co_await ReplyError(ctx, st.error());
    co_return;
  }
  co_await ctx.ReplyBytes(204, "", "application/json");
}

// Sets the sandbox to expire `secs` from now, unless it already lives longer (connect and
// refresh only extend; setTimeout, `force`, sets it either way).
Result<store::SandboxRecord> ExtendTimeout(core::Platform* p, const std::string& id, int64_t secs, bool force) {
  auto rec = Visible(p, id);
  if (!rec) return rec;
  if (!force) {
    int64_t expires = JsonIntOr(rec->spec, "expires_ms", 0);
    // No expiry at all, or a later one: nothing to extend.
    if (expires <= 0 || expires >= NowUnixMillis() + secs * 1000) return rec;
  }
  return p->SetTimeout(id, secs, "");
}

// connect (and the older resume): a paused sandbox is resumed, a suspended one woken;
// a running one is answered as it is. The timeout in the body only extends its life.
Awaitable<void> Connect(Ctx& ctx, const std::string& id) {
  core::Platform* p = ctx.platform;
  auto body = co_await ctx.ReadJson();
  if (!body) {
    co_await ReplyError(ctx, body.error());
    co_return;
  }
  auto timeout = TimeoutSeconds(*body);
  if (!timeout) {
    co_await ReplyError(ctx, timeout.error());
    co_return;
  }
  auto rec = co_await ctx.Blocking([&] { return Visible(p, id); });
  if (!rec) {
    co_await ReplyError(ctx, rec.error());
    co_return;
  }
  int status = 200;
  std::string kind = rec->state == "paused" ? "resume" : rec->state == "suspended" ? "wake" : "";
  if (!kind.empty()) {
    auto st = co_await Transition(ctx, id, kind);
    if (!st) {
      co_await ReplyError(ctx, st.error());
      co_return;
    }
    status = 201;
  }
  if (*timeout >= 0) {
    int64_t secs = *timeout;
    auto set = co_await ctx.Blocking([&] { return ExtendTimeout(p, id, secs, false); });
    if (!set) {
      co_await ReplyError(ctx, set.error());
      co_return;
    }
  }
  auto latest = co_await ctx.Blocking([&] { return Visible(p, id); });
  if (!latest) {
    co_await ReplyError(ctx, latest.error());
    co_return;
  }
  Json reply = Created(ctx, *latest);
  co_await ctx.Reply(status, reply);
}

// POST /sandboxes/{id}/timeout {timeout} (sets) and /refreshes {duration} (extends; 15 s
// by default, at most an hour as on E2B).
Awaitable<void> SetTimeout(Ctx& ctx, const std::string& id, bool refresh) {
  core::Platform* p = ctx.platform;
  auto body = co_await ctx.ReadJson();
  Result<int64_t> timeout = tl::unexpected(Error{Errc::kInvalidArgument, 0, ""});
  if (!body) {
    timeout = tl::unexpected(body.error());
  } else if (refresh) {
    const Json* d = JsonField(*body, "duration");
    if (!d || d->is_null()) {
      timeout = 15;
    } else if (!d->is_number_integer() || d->get<int64_t>() < 0 || d->get<int64_t>() > 3600) {
      timeout = Fail(Errc::kInvalidArgument, "duration must be 0 to 3600 seconds");
    } else {
      timeout = d->get<int64_t>();
    }
  } else {
    timeout = TimeoutSeconds(*body);
    if (timeout && *timeout < 0) timeout = Fail(Errc::kInvalidArgument, "timeout is required");
  }
  if (!timeout) {
    co_await ReplyError(ctx, timeout.error());
    co_return;
  }
  int64_t secs = *timeout;
  // E2B's setTimeout(0) ends the sandbox now (its on-timeout action: kill, or pause);
  // SPACE's 0 means no timeout, so it becomes the shortest one, a second.
  if (!refresh && secs == 0) secs = 1;
  auto rec = co_await ctx.Blocking([&] { return ExtendTimeout(p, id, secs, !refresh); });
  if (!rec) {
    co_await ReplyError(ctx, rec.error());
    co_return;
  }
  co_await ctx.ReplyBytes(204, "", "application/json");
}

// PUT /sandboxes/{id}/network: E2B's SandboxNetworkUpdateConfig (allowOut, denyOut) as
// SPACE's egress policy, replacing the current one.
Awaitable<void> UpdateNetwork(Ctx& ctx, const std::string& id) {
  core::Platform* p = ctx.platform;
  auto body = co_await ctx.ReadJson();
  if (!body) {
    co_await ReplyError(ctx, body.error());
    co_return;
  }
  Json net = *body;
  net.erase("allowPublicTraffic");  // fixed at create, as on E2B
  auto policy = NetworkFromE2b(Json{{"allow_internet_access", true}, {"network", net}});
  if (!policy) {
    co_await ReplyError(ctx, policy.error());
    co_return;
  }
  Json egress = Json::object();
  for (const char* k : {"mode", "allow_out", "deny_out"}) {
    if (policy->contains(k)) egress[k] = (*policy)[k];
  }
  auto done = co_await ctx.Blocking([&]() -> Result<Json> {
    auto v = Visible(p, id);
    if (!v) return tl::unexpected(v.error());
    return p->SetNetwork(id, egress);
  });
  if (!done) {
    co_await ReplyError(ctx, done.error());
    co_return;
  }
  co_await ctx.ReplyBytes(204, "", "application/json");
}

Awaitable<void> Info(Ctx& ctx, const std::string& id) {
  core::Platform* p = ctx.platform;
  auto rec = co_await ctx.Blocking([&] { return Visible(p, id); });
  if (!rec) {
    co_await ReplyError(ctx, rec.error());
    co_return;
  }
  Json detail = Listed(*rec);
  detail["envdAccessToken"] = AccessToken(ctx, *rec);
  detail["domain"] = SandboxDomain(ctx);
  detail["allowInternetAccess"] = core::Platform::StoredPolicy(*rec).internet();
  detail["lifecycle"] = {
      {"onTimeout", JsonStringOr(rec->spec, "on_timeout", "delete") == "delete" ? "kill" : "pause"},
      {"autoResume", JsonBoolOr(rec->spec, "auto_resume", false)}};
  co_await ctx.Reply(200, detail);
}

// GET /sandboxes/{id}/metrics: no history is kept, so one sample measured now (the
// figures of GET /v1/sandboxes/{id}/metrics); none while the sandbox has no instance.
Awaitable<void> Metrics(Ctx& ctx, const std::string& id) {
  core::Platform* p = ctx.platform;
  for (const char* k : {"start", "end"}) {
    std::string v = ctx.Query(k);
    if (!v.empty() && (v.size() > 12 || !std::all_of(v.begin(), v.end(), ::isdigit))) {
      co_await ReplyError(ctx, 400, std::string(k) + " must be a unix time in seconds");
      co_return;
    }
  }
  auto rec = co_await ctx.Blocking([&] { return Visible(p, id); });
  if (!rec) {
    co_await ReplyError(ctx, rec.error());
    co_return;
  }
  auto u = co_await ctx.Blocking([&] { return p->Usage(id); });
  // The one sample is "now": answered only when now falls in the asked range (with E2B's
  // 10 s of slack for its collection buckets and second-precision parameters).
  const int64_t now_s = NowUnixMillis() / 1000;
  std::string start = ctx.Query("start"), end = ctx.Query("end");
  const bool in_range = (start.empty() || std::stoll(start) <= now_s + 10) &&
                        (end.empty() || std::stoll(end) + 10 >= now_s);
  Json samples = Json::array();
  if (u && in_range) samples.push_back(E2bMetric(*u));
  co_await ctx.Reply(200, samples);
}

// GET /sandboxes/metrics?sandbox_ids=a,b: the latest sample of each (at most 100).
Awaitable<void> ManyMetrics(Ctx& ctx) {
  core::Platform* p = ctx.platform;
  std::vector<std::string> ids;
  for (const auto& v : ctx.QueryAll("sandbox_ids")) {
    for (size_t pos = 0; pos <= v.size();) {
      size_t comma = v.find(',', pos);
      if (comma == std::string::npos) comma = v.size();
      if (comma > pos) ids.push_back(v.substr(pos, comma - pos));
      pos = comma + 1;
    }
  }
  if (ids.empty() || ids.size() > 100) {
    co_await ReplyError(ctx, 400, "sandbox_ids must name 1 to 100 sandboxes");
    co_return;
  }
  Json out = Json::object();
  for (const auto& id : ids) {
    auto u = co_await ctx.Blocking([&]() -> Result<core::SandboxUsage> {
      auto v = Visible(p, id);
      if (!v) return tl::unexpected(v.error());
      return p->Usage(id);
    });
    if (u) out[id] = E2bMetric(*u);
  }
  Json reply = {{"sandboxes", out}};
  co_await ctx.Reply(200, reply);
}

// Whether a path belongs to E2B's control plane (all of it answers in E2B's shape).
bool IsControlPath(const std::vector<std::string>& s) {
  if (s.empty()) return false;
  if (s[0] == "sandboxes" || s[0] == "snapshots" || s[0] == "templates") return true;
  return s.size() >= 2 && (s[0] == "v2" || s[0] == "v3") && (s[1] == "sandboxes" || s[1] == "templates");
}

}  // namespace

Awaitable<bool> RouteControl(Ctx& ctx) {
  const auto& s = ctx.segments;
  if (!IsControlPath(s)) co_return false;
  if (!ApiKeyValid(ctx)) {
    co_await ReplyError(ctx, 401, "missing or invalid API key (X-API-KEY)");
    co_return true;
  }
  const std::string& m = ctx.method;
  const size_t n = s.size();
  const bool v2 = s[0] == "v2";
  // /sandboxes…, /v2/sandboxes…: the id and verb after the prefix.
  const bool sandboxes = s[0] == "sandboxes" || (v2 && s[1] == "sandboxes");
  const size_t base = s[0] == "sandboxes" ? 1 : 2;
  const std::string id = sandboxes && n > base ? s[base] : "";
  const std::string verb = sandboxes && n == base + 2 ? s[base + 1] : "";
  if (sandboxes && n == base && m == "POST") {
    co_await Create(ctx);
  } else if (sandboxes && n == base && m == "GET") {
    co_await List(ctx, v2);
  } else if (!v2 && n == 2 && s[0] == "sandboxes" && id == "metrics" && m == "GET") {
    co_await ManyMetrics(ctx);
  } else if (!v2 && sandboxes && n == 2 && m == "GET") {
    co_await Info(ctx, id);
  } else if (!v2 && sandboxes && n == 2 && m == "DELETE") {
    co_await Kill(ctx, id);
  } else if (sandboxes && verb == "connect" && m == "POST") {
    co_await Connect(ctx, id);
  } else if (sandboxes && verb == "logs" && m == "GET") {
    co_await Logs(ctx, id, v2);
  } else if (!v2 && verb == "resume" && m == "POST") {
    co_await Connect(ctx, id);
  } else if (!v2 && verb == "pause" && m == "POST") {
    co_await Pause(ctx, id);
  } else if (!v2 && verb == "timeout" && m == "POST") {
    co_await SetTimeout(ctx, id, false);
  } else if (!v2 && verb == "refreshes" && m == "POST") {
    co_await SetTimeout(ctx, id, true);
  } else if (!v2 && verb == "network" && m == "PUT") {
    co_await UpdateNetwork(ctx, id);
  } else if (!v2 && verb == "metrics" && m == "GET") {
    co_await Metrics(ctx, id);
  } else if (!v2 && verb == "snapshots" && m == "POST") {
    co_await CreateSnapshot(ctx, id);
  } else if (!v2 && verb == "fork" && m == "POST") {
    co_await Fork(ctx, id);
  } else if (n == 1 && s[0] == "snapshots" && m == "GET") {
    co_await ListSnapshots(ctx);
  } else if (n == 2 && s[0] == "templates" && m == "DELETE") {
    co_await DeleteTemplate(ctx, s[1]);
  } else {
    co_await ReplyError(ctx, 404, m + " " + ctx.path + " is not served by SPACE's E2B API");
  }
  co_return true;
}

// ---------------------------------------------------------------- shared

bool ApiKeyValid(const Ctx& ctx) {
  if (ctx.opts->no_auth) return true;
  std::string key = HeaderOr(ctx, "X-API-KEY");
  return !key.empty() && ctx.platform->FindApiKey(key).has_value();
}

std::string AccessToken(const Ctx& ctx, const store::SandboxRecord& sb) {
  // SPACE's own sandbox token with every sandbox scope, its claims all fixed by the
  // sandbox (so every create and connect gives the same one, as envd's token is): it dies
  // with the sandbox (its generation) or with the signing key, like any other
  // (docs/security.md). E2B's clients hold it for the sandbox's life: no earlier expiry.
  auth::Claims c;
  c.sandbox_id = sb.id;
  c.generation = sb.created_ms;
  c.scopes = auth::kAllSandboxScopes;
  c.issued_s = sb.created_ms / 1000;
  c.expires_s = c.issued_s + kEnvdTokenLifeS;
  return ctx.opts->signing_keys->Mint(c);
}

Status SignatureValid(const Ctx& ctx, const store::SandboxRecord& sb, std::string_view operation) {
  const std::string sig = ctx.Query("signature");
  if (sig.empty()) return Fail(Errc::kUnauthenticated, "missing or invalid X-Access-Token");
  std::string raw = ctx.Query("path") + ":" + std::string(operation) + ":" + ctx.Query("username") +
                    ":" + AccessToken(ctx, sb);
  if (const std::string exp = ctx.Query("signature_expiration"); !exp.empty()) {
    int64_t at = 0;
    auto [end, ec] = std::from_chars(exp.data(), exp.data() + exp.size(), at);
    if (ec != std::errc() || end != exp.data() + exp.size())
      return Fail(Errc::kUnauthenticated, "invalid signature expiration");
    if (at < NowUnixMillis() / 1000) return Fail(Errc::kUnauthenticated, "signature is already expired");
    raw += ":" + exp;
  }
  unsigned char hash[crypto_hash_sha256_BYTES];
  crypto_hash_sha256(hash, reinterpret_cast<const unsigned char*>(raw.data()), raw.size());
  char b64[sodium_base64_ENCODED_LEN(crypto_hash_sha256_BYTES, sodium_base64_VARIANT_ORIGINAL_NO_PADDING)];
  sodium_bin2base64(b64, sizeof b64, hash, sizeof hash, sodium_base64_VARIANT_ORIGINAL_NO_PADDING);
  if (!auth::SecretEquals(sig, std::string("v1_") + b64))
    return Fail(Errc::kUnauthenticated, "invalid signature");
  return Ok();
}

Json TrafficToken(const Ctx& ctx, const store::SandboxRecord& sb) {
  if (core::Platform::StoredPolicy(sb).public_traffic) return nullptr;
  // Every port, for the sandbox's life (revoked with it, or with its signing key).
  auth::TrafficClaims c;
  c.sandbox_id = sb.id;
  c.generation = sb.created_ms;
  return ctx.opts->signing_keys->MintTraffic(c);
}

std::string SandboxDomain(const Ctx& ctx) {
  // The SDK's getHost(port) is "{port}-{id}.{domain}": with spaced's port in the domain,
  // that is a host:port a browser or curl reaches (the SDK says https://, which spaced
  // serves on the same port with a certificate; docs/tls.md).
  int port = ctx.conn.local.port();
  const int default_port = ctx.opts->tls ? 443 : 80;
  return ctx.opts->sandbox_domain + (port == default_port ? "" : ":" + std::to_string(port));
}

bool AccessTokenValid(const Ctx& ctx, const std::string& sandbox_id, std::string_view token) {
  if (ctx.opts->no_auth) return true;
  if (!auth::LooksLikeToken(token)) return false;
  auto claims = ctx.opts->signing_keys->Verify(token, NowUnixMillis() / 1000);
  // Every sandbox scope (those minted before the "ports" scope existed lack only it).
  if (!claims || claims->sandbox_id != sandbox_id || !claims->command_id.empty() ||
      (claims->scopes | auth::kPorts) != auth::kAllSandboxScopes)
    return false;
  // Revoked with its sandbox (and not valid for a later sandbox reusing the id).
  auto sb = ctx.platform->GetSandbox(sandbox_id);
  return sb && sb->state != "deleting" && sb->state != "deleted" &&
         sb->created_ms == claims->generation;
}

std::string HeaderOr(const Ctx& ctx, std::string_view name) {
  auto it = ctx.req().find(beast::string_view(name.data(), name.size()));
  return it == ctx.req().end() ? "" : std::string(it->value());
}

}  // namespace space::api::e2b
