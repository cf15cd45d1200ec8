// gateway/ internals: the server's state and the pieces its files share.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "api/http.h"
#include "cluster/membership.h"
#include "cluster/placement.h"
#include "gateway/gateway.h"

namespace space::gateway {

namespace asio = api::asio;
namespace beast = api::beast;
namespace http = api::http;
using tcp = api::tcp;
using api::Awaitable;
using api::Ctx;

// Which surface a request belongs to, for the shape of the errors the gateway answers.
enum class Surface { kV1, kE2b, kText };

// A node's answer read whole (creates, lists, lookups: small JSON bodies).
struct Answer {
  Answer() {}
  int status = 0;               // 0: no answer (error says why)
  std::string error;
  http::response<http::string_body> res;
};

struct Gateway::Impl {
  explicit Impl(Options o) : opts(std::move(o)), placer(opts.placement_k), acceptor(ioc) {}

  Options opts;
  api::ServerOptions server_opts;  // what a Ctx reads (body limits)
  std::unique_ptr<cluster::ClusterView> view;
  cluster::Placer placer;
  asio::io_context ioc;
  asio::thread_pool pool{4};       // blocking etcd calls
  tcp::acceptor acceptor;
  std::vector<std::thread> threads;

  // etcd health, from a probe every second: monotonic ms of the last answer.
  std::atomic<int64_t> store_ok_ms{0};
  // Records seen live without a route: since when (monotonic ms), for the lost grace.
  std::mutex mu;
  std::map<std::string, int64_t> missing_since;
  // Volumes this gateway made (name and id -> node, monotonic ms), until records say so.
  std::map<std::string, std::pair<std::string, int64_t>> recent_volumes;
  std::condition_variable cv;
  bool stopping = false;
  std::thread upkeep;

  void Upkeep();
  Awaitable<void> Accept();
  Awaitable<void> Serve(tcp::socket socket);
  Awaitable<void> Dispatch(Ctx& ctx);

  // ---- forward.cc
  bool StoreFresh(int64_t within_ms) const;
  std::optional<tcp::endpoint> NodeEndpoint(const std::string& node) const;
  std::vector<std::string> LiveNodes() const;
  Awaitable<std::optional<std::string>> RouteNode(Ctx& ctx, const std::string& id);
  // The sandbox's requests, relayed to its node (or answered: unavailable, not found).
  Awaitable<void> ToSandbox(Ctx& ctx, Surface form, const std::string& id);
  // GET /v1/sandboxes/{id}: the node's answer with "node" added, or the record's view.
  Awaitable<void> GetSandbox(Ctx& ctx, const std::string& id);
  Awaitable<void> Create(Ctx& ctx, Surface form);
  Awaitable<void> List(Ctx& ctx, Surface form);
  // GET /v1/events: every live node's stream, merged (events.cc).
  Awaitable<void> Events(Ctx& ctx);
  // ---- volumes.cc
  Awaitable<void> Volumes(Ctx& ctx, Surface form);
  // The node holding volume `ref` (name or id) by the nodes' records and what this gateway
  // made lately; FindVolume asks the nodes too.
  std::optional<std::string> VolumeNode(const std::string& ref);
  Awaitable<std::optional<std::string>> FindVolume(Ctx& ctx, const std::string& ref);
  void RememberVolume(const std::string& node, const Json& answer);
  // A GET of something whose node is not known (an operation, a snapshot): the first
  // node that has it answers.
  Awaitable<void> Find(Ctx& ctx, Surface form);
  // Anything else: one live node answers.
  Awaitable<void> ToAnyNode(Ctx& ctx, Surface form);
  Awaitable<void> RelayTo(Ctx& ctx, Surface form, const std::string& node);
  Awaitable<void> RelayToFirst(Ctx& ctx, Surface form, const std::vector<std::string>& nodes);
  Awaitable<Answer> Exchange(const std::string& node, const http::request<http::string_body>& req,
                             std::chrono::seconds timeout);
  // The client's request asked of every live node in turn: the 200 answers by node, or the
  // first other answer (a refused credential, a bad filter: the same everywhere) in
  // `refused`. Nodes that do not answer are left out.
  struct Gathered {
    std::vector<std::pair<std::string, Answer>> answers;
    std::optional<Answer> refused;
  };
  Awaitable<Gathered> AskEveryNode(Ctx& ctx, std::chrono::seconds timeout);
};

Awaitable<void> ReplyFail(Ctx& ctx, Surface form, int status, const std::string& message);
// A node's answer as it came, and its headers that go on (hop-by-hop ones and
// Content-Type aside).
Awaitable<void> ReplyAnswer(Ctx& ctx, const Answer& a);
std::vector<std::pair<std::string, std::string>> PassedHeaders(const Answer& a);
// Whether a live node accepts the request's credential for sandbox `id` ("" = any): 200,
// or the status to answer (401, 403; 503 when no node answers).
Awaitable<int> Authenticate(Gateway::Impl& g, Ctx& ctx, const std::string& id);
// The client's request with `body`, as it goes to a node (one request per connection).
http::request<http::string_body> Outgoing(const Ctx& ctx, std::string body);
// What the gateway says of a sandbox from its cluster record alone (its node is gone):
// state "unavailable", or "lost" after the grace period.
Json RecordView(const std::string& id, const Json& rec, bool lost);
// The sandbox id inside a SPACE token (st1./tt1.), unverified: only to route by.
std::string TokenSandbox(std::string_view token);

}  // namespace space::gateway
