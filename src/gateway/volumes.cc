// gateway (gateway.h): named volumes in a cluster (docs/cluster.md, "Volumes").
//
// A volume lives on the node that made it. Nodes publish theirs in their records
// (`"volumes": {name: id}`, every 2 s), so the gateway sends a volume's requests (SPACE's
// /v1/volumes/{name}/…, E2B's /volumes/{id} and /volumecontent/{id}/…) to its node,
// lists every node's, refuses a name some node has already, and places a sandbox that
// mounts volumes on their node. What this gateway created in the last seconds, before the
// node's record says so, it remembers itself; otherwise it asks the nodes.
#include <spdlog/spdlog.h>

#include "api/parse.h"
#include "gateway/internal.h"

namespace space::gateway {

namespace {

constexpr int64_t kRecentMs = 10'000;  // longer than a node's record takes to say so
constexpr auto kVolumeTimeout = std::chrono::seconds(60);

int64_t MonoMs() { return MonotonicNanos() / 1000000; }

}  // namespace

std::optional<std::string> Gateway::Impl::VolumeNode(const std::string& ref) {
  for (const auto& [node, rec] : view->Nodes()) {
    const Json* vs = JsonField(rec, "volumes");
    if (!vs || !vs->is_object()) continue;
    if (vs->contains(ref)) return node;
    for (const auto& [name, id] : vs->items())
      if (id.is_string() && id.get<std::string>() == ref) return node;
  }
  std::lock_guard l(mu);
  auto it = recent_volumes.find(ref);
  if (it != recent_volumes.end() && MonoMs() - it->second.second < kRecentMs && NodeEndpoint(it->second.first))
    return it->second.first;
  return std::nullopt;
}

Awaitable<std::optional<std::string>> Gateway::Impl::FindVolume(Ctx& ctx, const std::string& ref) {
  std::optional<std::string> node = VolumeNode(ref);
  if (node) co_return node;
  // Not published yet (made through another gateway a moment ago): the nodes say, to a
  // caller whose credential they take.
  http::request<http::string_body> look = Outgoing(ctx, "");
  look.method(http::verb::get);
  look.target("/v1/volumes/" + ref);
  look.body().clear();
  look.prepare_payload();
  for (const std::string& n : LiveNodes()) {
    Answer a = co_await Exchange(n, look, std::chrono::seconds(10));
    if (a.status == 200) {
      node = n;
      break;
    }
  }
  co_return node;
}

void Gateway::Impl::RememberVolume(const std::string& node, const Json& answer) {
  std::lock_guard l(mu);
  const int64_t now = MonoMs();
  for (auto it = recent_volumes.begin(); it != recent_volumes.end();)
    it = now - it->second.second >= kRecentMs ? recent_volumes.erase(it) : std::next(it);
  for (const char* k : {"name", "id", "volumeID"})
    if (std::string v = JsonStringOr(answer, k, ""); !v.empty()) recent_volumes[v] = {node, now};
}

// /v1/volumes… (form kV1) and E2B's /volumes…, /volumecontent/{id}/… (form kE2b).
Awaitable<void> Gateway::Impl::Volumes(Ctx& ctx, Surface form) {
  const auto& s = ctx.segments;
  const size_t base = form == Surface::kV1 ? 1 : 0;  // index of "volumes"
  const bool collection = s.size() == base + 1 && s[base] == "volumes";
  if (collection && ctx.method == "GET") {
    // Every live node's, each (v1) with its node.
    Json merged = Json::array();
    bool answered = false;
    Gathered all = co_await AskEveryNode(ctx, kVolumeTimeout);
    if (all.refused) {
      co_await ReplyAnswer(ctx, *all.refused);
      co_return;
    }
    for (const auto& [node, a] : all.answers) {
      auto j = ParseJson(a.res.body());
      const Json* items = j && form == Surface::kV1 ? JsonField(*j, "volumes") : (j ? &*j : nullptr);
      if (!items || !items->is_array()) continue;
      answered = true;
      for (Json item : *items) {
        if (form == Surface::kV1 && item.is_object()) item["node"] = node;
        merged.push_back(std::move(item));
      }
    }
    if (!answered) {
      co_await ReplyFail(ctx, form, 503, "node unavailable: no node of the cluster answered");
      co_return;
    }
    if (form == Surface::kV1) {
      Json out = {{"volumes", merged}};
      co_await ctx.Reply(200, out);
    } else {
      co_await ctx.Reply(200, merged);
    }
    co_return;
  }
  if (collection && ctx.method == "POST") {
    const http::request<http::string_body> head = Outgoing(ctx, "");
    auto raw = co_await ctx.ReadBody(server_opts.max_json_body);
    if (!raw) {
      co_await ReplyFail(ctx, form, api::HttpStatusFor(raw.error().code), raw.error().message);
      co_return;
    }
    auto j = ParseJson(raw->empty() ? "{}" : *raw);
    const std::string name = j && j->is_object() ? JsonStringOr(*j, "name", "") : "";
    if (!name.empty()) {
      std::optional<std::string> holder = co_await FindVolume(ctx, name);
      if (holder) {
        co_await ReplyFail(ctx, form, 409, "volume " + name + " exists (on node " + *holder + ")");
        co_return;
      }
    }
    // The least loaded of K sampled nodes makes it; a node that does not answer is skipped.
    std::vector<cluster::NodeLoad> loads;
    for (const auto& [n, rec] : view->Nodes()) loads.push_back(cluster::NodeLoad::FromRecord(n, rec));
    std::string why;
    cluster::PlacementRequest none;
    std::vector<std::string> candidates = placer.Candidates(loads, none, &why);
    std::string last_error = "no node can take a volume: " + (why.empty() ? std::string("no live node") : why);
    for (const std::string& node : candidates) {
      http::request<http::string_body> req = head;
      req.body() = *raw;
      req.prepare_payload();
      Answer a = co_await Exchange(node, req, kVolumeTimeout);
      if (a.status == 0 || a.status == 503) {
        last_error = a.status ? "node " + node + " refused" : a.error;
        continue;
      }
      if (a.status < 300) {
        if (auto out = ParseJson(a.res.body()); out && out->is_object()) {
          RememberVolume(node, *out);
          if (form == Surface::kV1) {
            (*out)["node"] = node;
            auto headers = PassedHeaders(a);
            co_await ctx.Reply(static_cast<int>(a.res.result_int()), *out, headers);
            co_return;
          }
        }
      }
      co_await ReplyAnswer(ctx, a);
      co_return;
    }
    co_await ReplyFail(ctx, form, 503, last_error);
    co_return;
  }
  // One volume's requests: to its node, relayed as they come (file bodies both ways).
  const std::string ref = s.size() > base + 1 ? s[base + 1] : "";
  std::optional<std::string> node;
  if (!ref.empty()) node = co_await FindVolume(ctx, ref);
  if (!node) {
    co_await ReplyFail(ctx, form, 404, "no volume " + ref + " on any live node");
    co_return;
  }
  co_await RelayTo(ctx, form, *node);
}

}  // namespace space::gateway
