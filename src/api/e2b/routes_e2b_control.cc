// E2B control plane: /v2/sandboxes, /sandboxes/{id}/… and /v2/sandboxes/{id}/connect,
// mapped onto core::Platform's sandboxes and operations. E2B's calls are synchronous, so
// each waits for its operation. Errors are E2B's {"code":<http status>,"message"}.
#include <sodium.h>
#include <unistd.h>

#include <cmath>

#include "api/e2b/e2b.h"
#include "api/e2b/parse.h"

namespace space::api::e2b {

namespace {

// How long a synchronous E2B call waits for its SPACE operation.
constexpr int64_t kOperationWaitMs = 5 * 60 * 1000;

Awaitable<void> ReplyError(Ctx& ctx, int status, const std::string& message) {
  Json body = {{"code", status}, {"message", message}};
  co_await ctx.Reply(status, body);
}

Awaitable<void> ReplyError(Ctx& ctx, const Error& e) {
  co_await ReplyError(ctx, HttpStatusFor(e.code), e.message);
}

std::string TemplateId(const std::string& ref) {
  const std::string suffix = ":latest";
  if (ref.size() > suffix.size() && ref.compare(ref.size() - suffix.size(), suffix.size(), suffix) == 0)
    return ref.substr(0, ref.size() - suffix.size());
  return ref;
}

// E2B knows two states; SPACE's transitional ones map to where they are heading.
// "" = not an E2B-visible sandbox (deleting, deleted, error).
std::string E2bState(const std::string& state) {
  if (state == "creating" || state == "running" || state == "waking") return "running";
  if (state == "paused" || state == "suspended" || state == "suspending") return "paused";
  return "";
}

bool Gone(const store::SandboxRecord& r) { return E2bState(r.state).empty(); }

// The fields every E2B sandbox rendering shares (ListedSandbox, SandboxDetail).
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

Json Listed(const store::SandboxRecord& r) {
  const Json* limits = JsonField(r.spec, "limits");
  Json lim = limits ? *limits : Json::object();
  int64_t expires = JsonIntOr(r.spec, "expires_ms", 0);
  double cpus = lim.contains("cpus") && lim["cpus"].is_number() ? lim["cpus"].get<double>() : 1.0;
  return {{"sandboxID", r.id},
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

// The answer to create and connect (E2B's `Sandbox`).
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

// The sandbox as E2B may see it: kNotFound for unknown or deleted ones.
Result<store::SandboxRecord> Visible(core::Platform* p, const std::string& id) {
  auto rec = p->GetSandbox(id);
  if (!rec) return rec;
  if (Gone(*rec)) return Fail(Errc::kNotFound, "sandbox " + id + " not found");
  return rec;
}

// Waits for an operation; its failure (or not finishing in time) becomes the error.
Awaitable<Status> Finish(Ctx& ctx, const store::OperationRecord& op) {
  auto done = co_await AwaitOperation(ctx, op.id, kOperationWaitMs);
  if (!done) co_return tl::unexpected(done.error());
  if (done->state == "failed")
    co_return Fail(ErrcFromName(done->error_code), done->error_message);
  if (!Finished(*done))
    co_return Fail(Errc::kDeadlineExceeded, "operation " + op.id + " did not finish in time");
  co_return Ok();
}

Awaitable<void> Create(Ctx& ctx) {
  core::Platform* p = ctx.platform;
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

Awaitable<void> List(Ctx& ctx, bool v2) {
  core::Platform* p = ctx.platform;
  core::SandboxFilter filter;
  filter.labels = ParseMetadataQuery(ctx.Query("metadata"));
  std::set<std::string> states;
  std::string st;
  for (const auto& v : ctx.QueryAll("state")) st += (st.empty() ? "" : ",") + v;
  if (st.empty()) st = v2 ? "running,paused" : "running";
  for (size_t pos = 0; pos <= st.size();) {
    size_t comma = st.find(',', pos);
    if (comma == std::string::npos) comma = st.size();
    std::string one = st.substr(pos, comma - pos);
    if (one == "running" || one == "paused") {
      states.insert(one);
    } else if (!one.empty()) {
      co_await ReplyError(ctx, 400, "state must be running or paused, not \"" + one + "\"");
      co_return;
    }
    pos = comma + 1;
  }
  auto list = co_await ctx.Blocking([&] { return p->ListSandboxes(filter); });
  if (!list) {
    co_await ReplyError(ctx, list.error());
    co_return;
  }
  Json out = Json::array();
  for (const auto& r : *list) {
    if (states.count(E2bState(r.state))) out.push_back(Listed(r));
  }
  co_await ctx.Reply(200, out);
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
  auto rec = co_await ctx.Blocking([&] { return Visible(p, id); });
  if (!rec) {
    co_await ReplyError(ctx, rec.error());
    co_return;
  }
  if (E2bState(rec->state) == "paused") {
    co_await ReplyError(ctx, 409, "sandbox " + id + " is already paused");
    co_return;
  }
  auto st = co_await Transition(ctx, id, "pause");
  if (!st) {
    co_await ReplyError(ctx, st.error());
    co_return;
  }
  co_await ctx.ReplyBytes(204, "", "application/json");
}

// connect (and the older resume): a paused sandbox is resumed, a suspended one woken;
// a running one is answered as it is. A timeout in the body is applied afterwards.
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
    auto set = co_await ctx.Blocking([&] { return p->SetTimeout(id, secs, ""); });
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

Awaitable<void> SetTimeout(Ctx& ctx, const std::string& id) {
  core::Platform* p = ctx.platform;
  auto body = co_await ctx.ReadJson();
  auto timeout = body ? TimeoutSeconds(*body) : Result<int64_t>(tl::unexpected(body.error()));
  if (timeout && *timeout < 0) timeout = Fail(Errc::kInvalidArgument, "timeout is required");
  if (!timeout) {
    co_await ReplyError(ctx, timeout.error());
    co_return;
  }
  int64_t secs = *timeout;
  auto rec = co_await ctx.Blocking([&]() -> Result<store::SandboxRecord> {
    auto v = Visible(p, id);
    if (!v) return v;
    return p->SetTimeout(id, secs, "");
  });
  if (!rec) {
    co_await ReplyError(ctx, rec.error());
    co_return;
  }
  co_await ctx.ReplyBytes(204, "", "application/json");
}

}  // namespace

Awaitable<bool> RouteControl(Ctx& ctx) {
  const auto& s = ctx.segments;
  // /sandboxes[/{id}[/verb]] and /v2/sandboxes[/{id}/connect]
  size_t base = !s.empty() && s[0] == "sandboxes" ? 1 : (s.size() >= 2 && s[0] == "v2" && s[1] == "sandboxes") ? 2 : 0;
  if (base == 0) co_return false;
  if (!ApiKeyValid(ctx)) {
    co_await ReplyError(ctx, 401, "missing or invalid API key (X-API-KEY)");
    co_return true;
  }
  const bool v2 = base == 2;
  const std::string& m = ctx.method;
  if (s.size() == base) {
    if (m == "POST" && v2) {
      co_await Create(ctx);
    } else if (m == "GET") {
      co_await List(ctx, v2);
    } else {
      co_await ReplyError(ctx, 405, "method not allowed");
    }
    co_return true;
  }
  const std::string id = s[base];
  const std::string verb = s.size() == base + 2 ? s[base + 1] : "";
  if (s.size() > base + 2) {
    co_await ReplyError(ctx, 404, "no route " + m + " " + ctx.path);
  } else if (s.size() == base + 1 && !v2 && m == "GET") {
    core::Platform* p = ctx.platform;
    auto rec = co_await ctx.Blocking([&] { return Visible(p, id); });
    if (!rec) {
      co_await ReplyError(ctx, rec.error());
      co_return true;
    }
    Json detail = Listed(*rec);
    detail["envdAccessToken"] = AccessToken(ctx, *rec);
    detail["domain"] = SandboxDomain(ctx);
    detail["allowInternetAccess"] = core::Platform::StoredPolicy(*rec).internet();
    detail["lifecycle"] = {
        {"onTimeout", JsonStringOr(rec->spec, "on_timeout", "delete") == "delete" ? "kill" : "pause"},
        {"autoResume", false}};
    co_await ctx.Reply(200, detail);
  } else if (s.size() == base + 1 && !v2 && m == "DELETE") {
    co_await Kill(ctx, id);
  } else if (m == "POST" && verb == "connect" && v2) {
    co_await Connect(ctx, id);
  } else if (m == "POST" && verb == "resume" && !v2) {
    co_await Connect(ctx, id);
  } else if (m == "POST" && verb == "pause" && !v2) {
    co_await Pause(ctx, id);
  } else if (m == "POST" && verb == "timeout" && !v2) {
    co_await SetTimeout(ctx, id);
  } else if (m == "GET" && verb == "metrics" && !v2) {
    // No history is kept: one sample, measured now (the figures of
    // GET /v1/sandboxes/{id}/metrics); none while the sandbox has no instance.
    core::Platform* p = ctx.platform;
    auto rec = co_await ctx.Blocking([&] { return Visible(p, id); });
    if (!rec) {
      co_await ReplyError(ctx, rec.error());
    } else {
      auto u = co_await ctx.Blocking([&] { return p->Usage(id); });
      Json samples = Json::array();
      if (u) samples.push_back(E2bMetric(*u));
      co_await ctx.Reply(200, samples);
    }
  } else {
    co_await ReplyError(ctx, 404, m + " " + ctx.path + " is not supported by SPACE");
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
  // SPACE's own sandbox token with every sandbox scope: it expires, and dies with the
  // sandbox, like any other (docs/security.md).
  return MintToken(ctx, sb, "", auth::kAllSandboxScopes).first;
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
  // that is a host:port a browser or curl reaches over http.
  beast::error_code ec;
  int port = ctx.stream->socket().local_endpoint(ec).port();
  return ctx.opts->sandbox_domain + (ec || port == 80 ? "" : ":" + std::to_string(port));
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
