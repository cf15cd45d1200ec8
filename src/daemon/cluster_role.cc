#include "daemon/cluster_role.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <thread>

#include "gateway/gateway.h"

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

void NodeRole::Hook(core::Config& config) {
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
  cluster::NodeAgent* a = live_.load();
  return {{"address", flags_.advertise},
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
