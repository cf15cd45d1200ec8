// gateway (gateway.h): creates placed on a node, lists merged from every node, and what
// a sandbox whose node is gone looks like (its durable record: unavailable, then lost).
#include <spdlog/spdlog.h>

#include <algorithm>

#include "api/e2b/parse.h"
#include "api/parse.h"
#include "api/views.h"

#include "gateway/internal.h"

namespace space::gateway {

namespace {

constexpr auto kCreateTimeout = std::chrono::minutes(6);  // ?wait= is capped at 5 minutes
constexpr auto kListTimeout = std::chrono::seconds(30);

bool Refusal(int status) { return status == 429 || status == 503 || status == 507; }

Awaitable<void> ReplyJson(Ctx& ctx, const Answer& a, const Json& body) {
  auto headers = PassedHeaders(a);
  co_await ctx.Reply(static_cast<int>(a.res.result_int()), body, headers);
}

bool MatchesFilter(const Json& view, const core::SandboxFilter& f) {
  if (!f.state.empty() && JsonStringOr(view, "state", "") != f.state) return false;
  const Json* meta = JsonField(view, "metadata");
  for (const auto& [k, v] : f.labels) {
    if (!meta || JsonStringOr(*meta, k.c_str(), "\x01") != v) return false;
  }
  return true;
}

// E2B's GET /v2/sandboxes through a gateway: each node answered one page after the
// client's cursor (start time, then id: an order every node shares), so the merged page
// is the first `limit` of their union in that order, and the next token is the cursor of
// its last item whenever anything is left on any node.
void PageE2b(const Ctx& ctx, Json& merged, bool more, std::vector<std::pair<std::string, std::string>>* headers) {
  auto q = api::e2b::ParseListQuery([&](const std::string& k) { return ctx.QueryAll(k); }, true);
  if (!q) return;  // every node accepted it
  auto cursor = [](const Json& item) {
    api::e2b::PageCursor c;
    c.id = JsonStringOr(item, "sandboxID", "");
    auto ms = api::e2b::ParseRfc3339(JsonStringOr(item, "startedAt", ""));
    c.created_ms = ms ? *ms : 0;
    return c;
  };
  const bool asc = q->ascending;
  std::stable_sort(merged.begin(), merged.end(), [&](const Json& a, const Json& b) {
    return api::e2b::AfterCursor(cursor(b), cursor(a), asc);
  });
  if (q->limit > 0 && merged.size() > q->limit) {
    more = true;
    merged.erase(merged.begin() + static_cast<std::ptrdiff_t>(q->limit), merged.end());
  }
  if (more && !merged.empty()) headers->emplace_back("X-Next-Token", api::e2b::EncodePageToken(cursor(merged.back())));
}

}  // namespace

// What the gateway says of a sandbox from its record alone (its node is gone).
Json RecordView(const std::string& id, const Json& rec, bool lost) {
  const std::string node = JsonStringOr(rec, "node", "");
  Json meta = rec.contains("metadata") && rec["metadata"].is_object() ? rec["metadata"] : Json::object();
  return {{"id", id},
          {"node", node},
          {"state", lost ? "lost" : "unavailable"},
          {"reason", lost ? "its node " + node + " was gone for longer than the grace period"
                          : "node unavailable: its node " + node + " is not answering"},
          {"template", JsonStringOr(rec, "template", "")},
          {"runtime", JsonStringOr(rec, "runtime", "")},
          {"metadata", meta},
          {"created_at", JsonIntOr(rec, "created_ms", 0) > 0 ? Json(FormatRfc3339(JsonIntOr(rec, "created_ms", 0))) : Json(nullptr)}};
}

// Who is asking, as a live node sees the credential (the gateway checks none itself).
Awaitable<int> Authenticate(Gateway::Impl& g, Ctx& ctx, const std::string& id) {
  auto nodes = g.LiveNodes();
  http::request<http::string_body> req{http::verb::get, "/v1/whoami", 11};
  for (const char* h : {"Authorization", "X-API-Key", "Cookie"}) {
    std::string v = ctx.Header(std::string_view(h));
    if (!v.empty()) req.set(h, v);
  }
  req.set(http::field::host, ctx.Header(http::field::host));
  req.keep_alive(false);
  req.prepare_payload();
  for (const auto& node : nodes) {
    Answer a = co_await g.Exchange(node, req, std::chrono::seconds(10));
    if (a.status == 0) continue;
    if (a.status != 200) co_return a.status;
    auto j = ParseJson(a.res.body());
    if (!j) co_return 502;
    if (JsonStringOr(*j, "kind", "") == "operator") co_return 200;
    co_return !id.empty() && JsonStringOr(*j, "sandbox_id", "") == id ? 200 : 403;
  }
  co_return 503;
}

Awaitable<void> Gateway::Impl::GetSandbox(Ctx& ctx, const std::string& id) {
  std::optional<std::string> node = co_await RouteNode(ctx, id);
  if (node) {
    auto req = Outgoing(ctx, "");
    Answer a = co_await Exchange(*node, req, kListTimeout);
    if (a.status == 200) {
      auto j = ParseJson(a.res.body());
      if (j && j->is_object()) {
        (*j)["node"] = *node;
        co_await ReplyJson(ctx, a, *j);
        co_return;
      }
    }
    if (a.status != 0) {
      co_await ReplyAnswer(ctx, a);
      co_return;
    }
    // The node does not answer: as if it were gone.
  }
  cluster::Store* st = opts.store;
  const std::string key = opts.prefix + "sandboxes/" + id;
  auto rec = co_await ctx.Blocking([&] { return st->Get(key); });
  if (!rec) {
    co_await ReplyFail(ctx, Surface::kV1, 503, "the cluster store (etcd) is unavailable: " + rec.error().message);
    co_return;
  }
  if (!*rec) {
    co_await ReplyFail(ctx, Surface::kV1, 404, "no sandbox " + id);
    co_return;
  }
  int who = co_await Authenticate(*this, ctx, id);
  if (who != 200) {
    co_await ReplyFail(ctx, Surface::kV1, who,
                       who == 503 ? "no node of the cluster can check the credential"
                                  : "the credential does not cover sandbox " + id);
    co_return;
  }
  auto j = ParseJson((*rec)->value);
  if (!j) {
    co_await ReplyFail(ctx, Surface::kV1, 500, "sandbox " + id + ": unreadable cluster record");
    co_return;
  }
  co_await ctx.Reply(200, RecordView(id, *j, JsonStringOr(*j, "state", "") == "lost"));
}

// Placement: best-of-K over the live nodes, the node having the last word. The gateway
// picks the id (or takes the client's X-Space-Sandbox-Id), so a create retried on
// another node after a refusal or a lost answer cannot make two sandboxes.
Awaitable<void> Gateway::Impl::Create(Ctx& ctx, Surface form) {
  // The request's header, before reading the body moves it out of the parser.
  const http::request<http::string_body> head = Outgoing(ctx, "");
  std::string id = ctx.Header(api::kSandboxIdHeader);
  auto raw = co_await ctx.ReadBody(server_opts.max_json_body);
  if (!raw) {
    co_await ReplyFail(ctx, form, api::HttpStatusFor(raw.error().code), raw.error().message);
    co_return;
  }
  if (!StoreFresh(3000)) {
    co_await ReplyFail(ctx, form, 503, "the cluster store (etcd) is unavailable: creates are refused until it answers");
    co_return;
  }
  std::string body = *raw;
  cluster::PlacementRequest want;
  std::string only_node;
  if (auto j = ParseJson(body.empty() ? "{}" : body); j && j->is_object()) {
    if (std::string t = JsonStringOr(*j, "templateID", ""); form == Surface::kE2b && !t.empty())
      want.template_ref = api::e2b::TemplateRef(t);
    if (form == Surface::kV1) {
      want.runtime = JsonStringOr(*j, "runtime", "");
      want.template_ref = JsonStringOr(*j, "template", "");
      if (const Json* l = JsonField(*j, "limits"); l && l->is_object()) {
        want.memory_bytes = JsonIntOr(*l, "memory_bytes", 0);
        if (const Json* c = JsonField(*l, "cpus"); c && c->is_number())
          want.cpu_millis = static_cast<int64_t>(c->get<double>() * 1000);
      }
      if (const Json* sel = JsonField(*j, "node_selector")) {
        if (!sel->is_object()) {
          co_await ReplyFail(ctx, form, 400, "node_selector must be an object of label: value");
          co_return;
        }
        for (const auto& [k, v] : sel->items()) {
          if (!v.is_string()) {
            co_await ReplyFail(ctx, form, 400, "node_selector." + k + " must be a string");
            co_return;
          }
          want.labels[k] = v.get<std::string>();
        }
        j->erase("node_selector");  // the gateway's; nodes do not know it
        body = j->dump();
      }
      // A restore runs where the snapshot is if that node can take it; else elsewhere,
      // where the node ships the snapshot in first (docs/cluster.md).
      if (std::string snap = JsonStringOr(*j, "snapshot", ""); !snap.empty()) {
        http::request<http::string_body> look = head;
        look.method(http::verb::get);
        look.target("/v1/snapshots/" + snap);
        look.body().clear();
        look.prepare_payload();
        for (const std::string& n : LiveNodes()) {
          Answer a = co_await Exchange(n, look, kListTimeout);
          if (a.status == 200) {
            only_node = n;
            break;
          }
          if (a.status == 401 || a.status == 403) {
            co_await ReplyAnswer(ctx, a);
            co_return;
          }
        }
        if (only_node.empty()) {
          co_await ReplyFail(ctx, form, 404, "no live node has snapshot " + snap);
          co_return;
        }
      }
    }
  }
  // Volumes stay on their node: a sandbox mounting some goes there, or nowhere.
  std::string pinned;
  if (auto j = ParseJson(body.empty() ? "{}" : body); j && j->is_object()) {
    const Json* mounts = JsonField(*j, form == Surface::kV1 ? "volumes" : "volumeMounts");
    if (mounts && mounts->is_array()) {
      std::string first;
      for (const Json& m : *mounts) {
        std::string vol = JsonStringOr(m, "name", "");
        if (vol.empty()) continue;
        std::optional<std::string> holder = co_await FindVolume(ctx, vol);
        if (!holder) continue;  // the node says what is wrong with it
        if (!pinned.empty() && *holder != pinned) {
          co_await ReplyFail(ctx, form, 409, "volumes " + first + " and " + vol + " are on different nodes (" +
                                                 pinned + ", " + *holder + "): a sandbox mounts volumes of one node");
          co_return;
        }
        pinned = *holder;
        first = vol;
      }
    }
  }
  // What a node gives a sandbox that names no limits (core's defaults), so that
  // reservations count it.
  if (want.memory_bytes <= 0) want.memory_bytes = 512ll << 20;
  if (want.cpu_millis <= 0) want.cpu_millis = 1000;
  std::vector<cluster::NodeLoad> loads;
  for (const auto& [name, rec] : view->Nodes()) loads.push_back(cluster::NodeLoad::FromRecord(name, rec));
  std::string why;
  std::vector<std::string> candidates = placer.Candidates(loads, want, &why);
  if (!only_node.empty()) {
    // The snapshot's own node first, when it fits the request at all.
    std::vector<cluster::NodeLoad> holder;
    for (const auto& l : loads)
      if (l.name == only_node) holder.push_back(l);
    std::string unused;
    candidates.erase(std::remove(candidates.begin(), candidates.end(), only_node), candidates.end());
    if (!placer.Candidates(holder, want, &unused).empty()) candidates.insert(candidates.begin(), only_node);
  }
  if (!pinned.empty()) {
    std::vector<cluster::NodeLoad> holder;
    for (const auto& l : loads)
      if (l.name == pinned) holder.push_back(l);
    std::string held_why;
    candidates = placer.Candidates(holder, want, &held_why);
    if (candidates.empty()) {
      // (The message is made outside the co_await: g++ 12 mishandles conditional
      // temporaries inside one.)
      if (held_why.empty()) held_why = "it is not live";
      const std::string message = "node " + pinned + ", which holds the sandbox's volumes, cannot take it: " + held_why;
      co_await ReplyFail(ctx, form, 503, message);
      co_return;
    }
  }
  if (candidates.empty()) {
    std::string message = "no node can take this sandbox: " + (why.empty() ? std::string("no live node") : why);
    co_await ReplyFail(ctx, form, 503, message);
    co_return;
  }
  if (id.empty()) id = NewId("sb");
  std::optional<Answer> last;
  std::string last_error;
  for (const std::string& node : candidates) {
    int64_t seq = 0;
    for (const auto& l : loads)
      if (l.name == node) seq = l.load_seq;
    placer.Reserve(node, seq, want);
    http::request<http::string_body> req = head;
    req.body() = body;
    req.set(api::kSandboxIdHeader, id);
    req.prepare_payload();
    Answer a = co_await Exchange(node, req, kCreateTimeout);
    if (a.status == 0 || Refusal(a.status)) {
      placer.Release(node, want);
      if (a.status == 0) last_error = a.error;
      else last = std::move(a);
      spdlog::info("gateway: node {} refused sandbox {} ({}); trying the next", node, id,
                   last_error.empty() ? std::to_string(last ? last->status : 0) : last_error);
      continue;
    }
    if (a.status >= 400) placer.Release(node, want);
    if (form == Surface::kV1 && a.status < 300) {
      auto j = ParseJson(a.res.body());
      if (j && j->is_object() && j->contains("sandbox") && (*j)["sandbox"].is_object()) {
        (*j)["sandbox"]["node"] = node;
        co_await ReplyJson(ctx, a, *j);
        co_return;
      }
    }
    co_await ReplyAnswer(ctx, a);
    co_return;
  }
  if (last) {
    co_await ReplyAnswer(ctx, *last);
    co_return;
  }
  co_await ReplyFail(ctx, form, 503, "no node took the sandbox: " + last_error);
}

// Every live node's list, merged, each sandbox with its node; then the sandboxes whose
// node is gone, from their records (state unavailable or lost).
Awaitable<void> Gateway::Impl::List(Ctx& ctx, Surface form) {
  core::SandboxFilter filter;
  if (form == Surface::kV1) {
    auto f = api::ParseSandboxFilter(ctx.query);
    if (!f) {
      co_await ReplyFail(ctx, form, 400, f.error().message);
      co_return;
    }
    filter = std::move(*f);
  }
  Json merged = Json::array();
  std::set<std::string> seen, answered;
  bool more = false;                 // a node had another page
  std::optional<int64_t> running;    // E2B v2's X-Total-Running, summed
  Gathered all = co_await AskEveryNode(ctx, kListTimeout);
  if (all.refused) {
    co_await ReplyAnswer(ctx, *all.refused);
    co_return;
  }
  for (const auto& [node, a] : all.answers) {
    auto j = ParseJson(a.res.body());
    const Json* items = nullptr;
    if (j && form == Surface::kV1) items = JsonField(*j, "sandboxes");
    if (j && form == Surface::kE2b) items = &*j;
    if (!items || !items->is_array()) continue;
    answered.insert(node);
    if (!a.res["X-Next-Token"].empty()) more = true;
    if (auto r = a.res["X-Total-Running"]; !r.empty()) running = running.value_or(0) + std::atoll(std::string(r).c_str());
    for (Json item : *items) {
      if (!item.is_object()) continue;
      std::string id = JsonStringOr(item, form == Surface::kV1 ? "id" : "sandboxID", "");
      seen.insert(id);
      if (form == Surface::kV1) item["node"] = node;
      merged.push_back(std::move(item));
    }
  }
  if (form == Surface::kV1) {
    if (answered.empty() && LiveNodes().empty() == false) {
      co_await ReplyFail(ctx, form, 503, "no node of the cluster answered");
      co_return;
    }
    cluster::Store* st = opts.store;
    const std::string prefix = opts.prefix + "sandboxes/";
    auto recs = co_await ctx.Blocking([&] { return st->List(prefix); });
    if (recs) {
      bool checked = false;
      for (const auto& kv : *recs) {
        const std::string id = kv.key.substr(prefix.size());
        if (seen.count(id)) continue;
        auto j = ParseJson(kv.value);
        if (!j) continue;
        const std::string node = JsonStringOr(*j, "node", "");
        if (answered.count(node)) continue;  // its node answered without it: being deleted
        if (!checked) {
          // Records alone say nothing of who may read them: a live node checks the caller.
          const std::string any;
          int who = co_await Authenticate(*this, ctx, any);
          if (who != 200) break;  // a token's list shows only what its nodes showed
          checked = true;
        }
        Json v = RecordView(id, *j, JsonStringOr(*j, "state", "") == "lost");
        if (MatchesFilter(v, filter)) merged.push_back(std::move(v));
      }
    }
    Json out = {{"sandboxes", merged}};
    co_await ctx.Reply(200, out);
    co_return;
  }
  std::vector<std::pair<std::string, std::string>> headers;
  if (!ctx.segments.empty() && ctx.segments[0] == "v2") PageE2b(ctx, merged, more, &headers);
  if (running) headers.emplace_back("X-Total-Running", std::to_string(*running));
  co_await ctx.Reply(200, merged, headers);
}

}  // namespace space::gateway
