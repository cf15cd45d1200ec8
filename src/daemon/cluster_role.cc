#include "daemon/cluster_role.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <thread>

#include "api/api.h"
#include "cluster/peer.h"
#include "gateway/gateway.h"
#include "sys/sys.h"

namespace space::daemon {

namespace {

int64_t MemAvailable() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit) {
    if (key == "MemAvailable:") return kb * 1024;
  }
  return 0;
}

std::string HostName() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "node";
  std::string n;
  for (char c : std::string(buf)) {
    if (c == '.') break;
    n += (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
  }
  return n;
}

// A header of a peer's answer (FetchToFile keeps their names in lower case).
std::string HeaderOf(const cluster::PeerFile& answer, std::string_view name) {
  std::string key(name);
  for (char& c : key) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  auto it = answer.headers.find(key);
  return it == answer.headers.end() ? "" : it->second;
}

}  // namespace

Status ValidateClusterFlags(ClusterFlags& f, const std::string& listen) {
  if (f.role != "single" && f.role != "node" && f.role != "gateway")
    return Fail(Errc::kInvalidArgument, "--role must be single, node or gateway, not " + f.role);
  if (f.role == "single") {
    if (!f.etcd.empty()) return Fail(Errc::kInvalidArgument, "--etcd needs --role node or gateway");
    return Ok();
  }
  if (f.etcd.empty()) return Fail(Errc::kInvalidArgument, "--role " + f.role + " needs --etcd ENDPOINT[,ENDPOINT...]");
  if (f.prefix.empty() || f.prefix.front() != '/' || f.prefix.back() != '/')
    return Fail(Errc::kInvalidArgument, "--cluster-prefix must start and end with '/'");
  if (f.role == "node") {
    if (f.node_name.empty()) f.node_name = HostName();
    SPACE_TRY_WRAP(cluster::CheckNodeName(f.node_name), "--node-name");
    if (f.advertise.empty()) f.advertise = listen;
    auto colon = f.advertise.rfind(':');
    std::string host = colon == std::string::npos ? "" : f.advertise.substr(0, colon);
    if (host.empty() || host == "0.0.0.0" || host == "[::]" || host == "::")
      return Fail(Errc::kInvalidArgument,
                  "--advertise must be an address:port the gateways can dial (listening on " + listen + ")");
    for (const auto& l : f.node_labels)
      if (l.find('=') == std::string::npos || l.front() == '=')
        return Fail(Errc::kInvalidArgument, "--node-label wants key=value, not " + l);
    if (f.lease_ttl_s < 2 || f.lease_ttl_s > 300)
      return Fail(Errc::kInvalidArgument, "--lease-ttl must be 2..300 seconds");
  }
  if (f.lost_after_s < 1) return Fail(Errc::kInvalidArgument, "--lost-after must be at least 1 second");
  return Ok();
}

NodeRole::~NodeRole() {
  stop_ = true;
  if (joiner_.joinable()) joiner_.join();
  keys_->Attach(nullptr);
  sessions_->Attach(nullptr);
  access_.reset();
  live_ = nullptr;
  agent_.reset();  // leaves at once: its routes go, its sandboxes keep running
}

void NodeRole::Hook(core::Config& config, std::string peer_key) {
  peer_key_ = std::move(peer_key);
  data_dir_ = config.data_dir;
  config.fetch_template = [this](const std::string& ref) { return FetchTemplate(ref); };
  config.fetch_snapshot = [this](const std::string& id) { return FetchSnapshot(id); };
  for (const auto& l : flags_.node_labels) {
    auto eq = l.find('=');
    labels_[l.substr(0, eq)] = l.substr(eq + 1);
  }
  config.admit_sandbox = [this](const store::SandboxRecord& rec) -> Status {
    cluster::NodeAgent* a = live_.load();
    if (!a) return Fail(Errc::kUnavailable, "this node has not joined its cluster yet");
    Json summary = {{"template", rec.template_ref},
                    {"runtime", rec.runtime},
                    {"created_ms", rec.created_ms},
                    {"metadata", rec.metadata}};
    return a->Admit(rec.id, summary);
  };
  config.sandbox_gone = [this](const std::string& id) {
    if (cluster::NodeAgent* a = live_.load()) a->Gone(id);
  };
  config.shared_keys = keys_;
}

// What placement reads (cluster/placement.h), in terms of what is committed rather than
// used: memory as limits against spaced's commit ceiling (RAM x 1.5, as core's memory
// admission), CPU as limits against the cores x 4 (idle sandboxes share them). Usage
// would be noise: on one machine every node would see the same load average.
Json NodeRole::Describe() {
  Json runtimes = Json::array();
  if (platform_) {
    for (const auto& r : platform_->ListRuntimes())
      if (JsonBoolOr(r, "available", false)) runtimes.push_back(JsonStringOr(r, "name", ""));
  }
  struct sysinfo si {};
  ::sysinfo(&si);
  const int64_t cpus = std::max(1u, std::thread::hardware_concurrency());
  const int64_t ram = static_cast<int64_t>(si.totalram) * si.mem_unit;
  const int64_t memory_capacity = ram / 2 * 3;
  const int64_t cpu_capacity = cpus * 1000 * 4;
  int64_t count = 0, memory = 0, cpu = 0;
  if (platform_) {
    if (auto l = platform_->ListSandboxes({})) {
      for (const auto& r : *l) {
        if (r.spec.contains("pool") || r.state == "deleted") continue;
        ++count;
        const Json* lim = JsonField(r.spec, "limits");
        memory += lim ? JsonIntOr(*lim, "memory_bytes", 0) : 0;
        if (const Json* c = lim ? JsonField(*lim, "cpus") : nullptr; c && c->is_number())
          cpu += static_cast<int64_t>(c->get<double>() * 1000);
      }
    }
  }
  // The templates here, so a node lacking one knows where to pull it from.
  Json templates = Json::object();
  if (platform_) {
    if (auto ts = platform_->ListTemplates()) {
      for (const auto& t : *ts)
        templates[t.name + ":" + t.tag] = {{"digest", t.digest}, {"created_ms", t.created_ms}};
    }
  }
  // The volumes here (name: id): a gateway sends their requests, and the sandboxes that
  // mount them, to this node.
  Json volumes = Json::object();
  if (platform_) {
    if (auto vs = platform_->ListVolumes()) {
      for (const auto& v : *vs) volumes[v.name] = v.id;
    }
  }
  cluster::NodeAgent* a = live_.load();
  return {{"address", flags_.advertise},
          {"templates", templates},
          {"volumes", volumes},
          {"runtimes", runtimes},
          {"labels", labels_},
          {"cpus", cpus},
          {"total_memory", memory_capacity},
          {"free_memory", std::max<int64_t>(0, memory_capacity - memory)},
          {"total_cpu_millis", cpu_capacity},
          {"free_cpu_millis", std::max<int64_t>(0, cpu_capacity - cpu)},
          {"available_memory", MemAvailable()},
          {"sandboxes", count},
          {"accepting", a ? !a->fenced() : true},
          {"load_seq", ++load_seq_}};
}

std::string NodeRole::NotReady() const {
  cluster::NodeAgent* a = live_.load();
  if (!a) return "node " + flags_.node_name + " has not joined its cluster yet (etcd " + flags_.etcd.front() + ")";
  if (a->fenced()) return "node " + flags_.node_name + " is cut off from the cluster's etcd";
  return "";
}

Status NodeRole::StartJoining(core::Platform* platform) {
  platform_ = platform;
  cluster::EtcdOptions eo;
  eo.endpoints = flags_.etcd;
  auto st = cluster::OpenEtcd(eo);
  if (!st) return tl::unexpected(st.error());
  store_ = std::move(*st);
  cluster::NodeAgentOptions o;
  o.membership.prefix = flags_.prefix;
  o.membership.name = flags_.node_name;
  o.membership.lease_ttl_s = flags_.lease_ttl_s;
  o.membership.describe = [this] { return Describe(); };
  o.local_sandboxes = [this] {
    std::vector<std::string> ids;
    if (auto l = platform_->ListSandboxes({})) {
      for (const auto& r : *l) {
        if (r.spec.contains("pool") || r.state == "deleting" || r.state == "deleted") continue;
        ids.push_back(r.id);
      }
    }
    return ids;
  };
  o.kill = [this](const std::vector<std::string>& ids) {
    for (const auto& id : ids) {
      auto op = platform_->DeleteSandbox(id);
      if (!op) spdlog::warn("cluster: deleting given-up sandbox {}: {}", id, op.error().message);
    }
  };
  joiner_ = std::thread([this, o] {
    for (int attempt = 0; !stop_; ++attempt) {
      auto agent = cluster::NodeAgent::Start(*store_, o);
      if (agent) {
        agent_ = std::move(*agent);
        live_ = agent_.get();
        spdlog::info("cluster: node {} joined (etcd {}, advertising {})", flags_.node_name,
                     flags_.etcd.front(), flags_.advertise);
        OpenAccess();
        return;
      }
      if (attempt % 10 == 0) spdlog::warn("cluster: node {} cannot join yet: {}", flags_.node_name, agent.error().message);
      for (int i = 0; i < 10 && !stop_; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  return Ok();
}

// A template this node lacks, from the live nodes' records: the newest build of name:tag
// (or the one with that digest), pulled from the first holder that hands it over. Creates
// that need the same digest meanwhile wait for the one pull.
Status NodeRole::FetchTemplate(const std::string& ref) {
  if (!live_.load()) return Fail(Errc::kUnavailable, "this node has not joined its cluster yet");
  auto nodes = store_->List(flags_.prefix + "nodes/");
  if (!nodes) return tl::unexpected(nodes.error().Wrap("find template " + ref + " in the cluster"));
  struct Holder {
    std::string node, address, ref;
    int64_t created_ms;
  };
  std::map<std::string, std::vector<Holder>> by_digest;
  std::string newest;
  int64_t newest_ms = -1;
  for (const auto& kv : *nodes) {
    auto rec = ParseJson(kv.value);
    if (!rec || !rec->is_object()) continue;
    const std::string name = JsonStringOr(*rec, "name", "");
    const Json* ts = JsonField(*rec, "templates");
    if (name == flags_.node_name || !ts || !ts->is_object()) continue;
    for (const auto& [tref, info] : ts->items()) {
      const std::string digest = JsonStringOr(info, "digest", "");
      const bool match = StartsWith(ref, "sha256:") ? digest == ref : tref == ref;
      if (!match || digest.empty()) continue;
      const int64_t ms = JsonIntOr(info, "created_ms", 0);
      by_digest[digest].push_back({name, JsonStringOr(*rec, "address", ""), tref, ms});
      if (ms > newest_ms) newest_ms = ms, newest = digest;
    }
  }
  if (newest.empty()) return Fail(Errc::kNotFound, "no node of the cluster has template " + ref);

  return Once("template:" + newest, [&]() -> Status {
    Status st = Fail(Errc::kUnavailable, "template " + ref + ": no holder handed it over");
    for (const Holder& h : by_digest[newest]) {
      st = PullFrom(h.node, h.address, h.ref, newest);
      if (st) break;
      spdlog::warn("cluster: pulling template {} from {}: {}", h.ref, h.node, st.error().message);
    }
    return st;
  });
}

// GETs `what` from the node at `address` with the nodes' shared key, into a file under
// DATA/tmp that goes with the returned object.
Result<std::unique_ptr<NodeRole::PulledArchive>> NodeRole::Pull(const std::string& address, const std::string& what,
                                                                int64_t max_bytes, int64_t timeout_ms) {
  SPACE_TRY(sys::MkdirAll(data_dir_ + "/tmp", 0700));
  auto out = std::make_unique<PulledArchive>();
  out->path = data_dir_ + "/tmp/pull-" + NewId("x") + ".tar.zst";
  auto got = cluster::FetchToFile("http://" + address + what, peer_key_, out->path, max_bytes, timeout_ms);
  if (!got) return tl::unexpected(got.error());
  out->answer = std::move(*got);
  return out;
}

NodeRole::PulledArchive::~PulledArchive() {
  if (!path.empty()) (void)::unlink(path.c_str());
}

Status NodeRole::Once(const std::string& key, const std::function<Status()>& fn) {
  std::promise<Status> mine;
  std::shared_future<Status> theirs;
  {
    std::lock_guard l(pulls_mu_);
    auto it = pulls_.find(key);
    if (it != pulls_.end()) theirs = it->second;
    else pulls_[key] = mine.get_future().share();
  }
  if (theirs.valid()) return theirs.get();
  Status st = fn();
  mine.set_value(st);
  std::lock_guard l(pulls_mu_);
  pulls_.erase(key);
  return st;
}

// A snapshot this node lacks: the first live node that hands over its archive.
Status NodeRole::FetchSnapshot(const std::string& id) {
  if (!live_.load()) return Fail(Errc::kUnavailable, "this node has not joined its cluster yet");
  if (id.empty() || id.find('/') != std::string::npos) return Fail(Errc::kNotFound, "unknown snapshot " + id);
  auto nodes = store_->List(flags_.prefix + "nodes/");
  if (!nodes) return tl::unexpected(nodes.error().Wrap("find snapshot " + id + " in the cluster"));
  return Once("snapshot:" + id, [&]() -> Status {
    Status last = Fail(Errc::kNotFound, "no node of the cluster has snapshot " + id);
    for (const auto& kv : *nodes) {
      auto rec = ParseJson(kv.value);
      if (!rec || !rec->is_object() || JsonStringOr(*rec, "name", "") == flags_.node_name) continue;
      const std::string node = JsonStringOr(*rec, "name", ""), address = JsonStringOr(*rec, "address", "");
      const int64_t t0 = MonotonicNanos();
      auto got = Pull(address, "/v1/snapshots/" + id + "/archive", int64_t{256} << 30, 60 * 60 * 1000);
      if (!got) {
        last = tl::unexpected(got.error());
        continue;
      }
      const cluster::PeerFile& answer = (*got)->answer;
      if (answer.status == 404) continue;
      if (answer.status != 200) {
        // 409: a full snapshot, which only its own node restores.
        std::string why = answer.error_body;
        if (auto err = ParseJson(answer.error_body); err && err->is_object())
          if (const Json* e = JsonField(*err, "error")) why = JsonStringOr(*e, "message", why);
        return Fail(answer.status == 409 ? Errc::kConflict : Errc::kUnavailable, "node " + node + ": " + why);
      }
      auto meta = ParseJson(HeaderOf(answer, api::kSnapshotHeader));
      const std::string sha = HeaderOf(answer, api::kArchiveSha256Header);
      if (!meta || !meta->is_object() || sha.empty() || JsonStringOr(*meta, "id", "") != id)
        return Fail(Errc::kInternal, "node " + node + " sent a snapshot archive without its record");
      store::SnapshotRecord snap;
      snap.id = id;
      snap.sandbox_id = JsonStringOr(*meta, "sandbox_id", "");
      snap.kind = JsonStringOr(*meta, "kind", "");
      snap.state = "ready";
      snap.size = JsonIntOr(*meta, "size", 0);
      snap.created_ms = JsonIntOr(*meta, "created_ms", 0);
      if (const Json* src = JsonField(*meta, "source"); src && src->is_object()) snap.source = *src;
      SPACE_TRY(platform_->ImportSnapshot(snap, (*got)->path, sha));
      spdlog::info("cluster: snapshot {} shipped from {}: {} MiB in {} ms", id, node, answer.size >> 20,
                   (MonotonicNanos() - t0) / 1000000);
      return Ok();
    }
    return last;
  });
}

Status NodeRole::PullFrom(const std::string& node, const std::string& address, const std::string& ref,
                          const std::string& digest) {
  const int64_t t0 = MonotonicNanos();
  auto got = Pull(address, "/v1/templates/" + ref + "/archive", int64_t{64} << 30, 30 * 60 * 1000);
  if (!got) return tl::unexpected(got.error());
  const cluster::PeerFile& answer = (*got)->answer;
  if (answer.status != 200) {
    return Fail(answer.status == 404 ? Errc::kNotFound : Errc::kUnavailable,
                "node " + node + " answered " + std::to_string(answer.status) + ": " + answer.error_body);
  }
  auto meta = ParseJson(HeaderOf(answer, api::kTemplateHeader));
  const std::string sha = HeaderOf(answer, api::kArchiveSha256Header);
  if (!meta || !meta->is_object() || sha.empty())
    return Fail(Errc::kInternal, "node " + node + " sent a template archive without its record");
  store::TemplateRecord rec;
  rec.name = JsonStringOr(*meta, "name", "");
  rec.tag = JsonStringOr(*meta, "tag", "");
  rec.digest = JsonStringOr(*meta, "digest", "");
  rec.created_ms = JsonIntOr(*meta, "created_ms", NowUnixMillis());
  if (const Json* c = JsonField(*meta, "config"); c && c->is_object()) rec.config = *c;
  if (rec.digest != digest)
    return Fail(Errc::kConflict, "node " + node + " holds " + ref + " as " + rec.digest + " now, not " + digest);
  SPACE_TRY(platform_->ImportTemplate(rec, (*got)->path, sha));
  spdlog::info("cluster: template {} ({}) pulled from {}: {} MiB in {} ms", ref, digest, node, answer.size >> 20,
               (MonotonicNanos() - t0) / 1000000);
  return Ok();
}

// The cluster's keys and console sessions, once etcd answers.
void NodeRole::OpenAccess() {
  for (int attempt = 0; !stop_; ++attempt) {
    auto d = cluster::Directory::Open(*store_, flags_.prefix + "access/");
    if (d) {
      access_ = std::move(*d);
      keys_->Attach(access_.get());
      sessions_->Attach(access_.get());
      return;
    }
    if (attempt % 10 == 0) spdlog::warn("cluster: the cluster's keys are out of reach yet: {}", d.error().message);
    for (int i = 0; i < 10 && !stop_; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

int RunGateway(const ClusterFlags& flags, const std::string& address, int port,
               const std::string& sandbox_domain, sigset_t* stop) {
  cluster::EtcdOptions eo;
  eo.endpoints = flags.etcd;
  auto store = cluster::OpenEtcd(eo);
  if (!store) {
    std::fprintf(stderr, "spaced: --etcd: %s\n", store.error().message.c_str());
    return 1;
  }
  gateway::Options go;
  go.address = address;
  go.port = static_cast<uint16_t>(port);
  go.store = store->get();
  go.prefix = flags.prefix;
  go.sandbox_domain = sandbox_domain;
  go.lost_after_s = flags.lost_after_s;
  Result<std::unique_ptr<gateway::Gateway>> gw = Fail(Errc::kUnavailable, "");
  for (int attempt = 0;; ++attempt) {
    gw = gateway::Gateway::Start(go);
    if (gw || gw.error().code == Errc::kInvalidArgument) break;
    if (attempt % 10 == 0) spdlog::warn("gateway: cannot start yet: {}", gw.error().message);
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  if (!gw) {
    std::fprintf(stderr, "spaced: gateway: %s\n", gw.error().message.c_str());
    return 1;
  }
  std::string host = address.find(':') != std::string::npos ? "[" + address + "]" : address;
  std::string url = "http://" + host + ":" + std::to_string((*gw)->port());
  spdlog::info("spaced gateway listening on {} (etcd {})", url, flags.etcd.front());
  std::printf("\nSPACE gateway is running at %s\n  export SPACE_URL=%s SPACE_API_KEY=<the nodes' operator key>\n\n",
              url.c_str(), url.c_str());
  std::fflush(stdout);
  int sig = 0;
  sigwait(stop, &sig);
  spdlog::info("signal {}: gateway shutting down", sig);
  (*gw)->Stop();
  return 0;
}

}  // namespace space::daemon
