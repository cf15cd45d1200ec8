#include "cluster/placement.h"

#include <algorithm>

namespace space::cluster {

NodeLoad NodeLoad::FromRecord(const std::string& name, const Json& rec) {
  NodeLoad n;
  n.name = name;
  n.free_memory = JsonIntOr(rec, "free_memory", 0);
  n.total_memory = std::max(n.free_memory, JsonIntOr(rec, "total_memory", 0));
  n.free_cpu_millis = JsonIntOr(rec, "free_cpu_millis", 0);
  n.cpus = std::max<int64_t>(1, JsonIntOr(rec, "cpus", 1));
  n.total_cpu_millis = std::max<int64_t>(1, JsonIntOr(rec, "total_cpu_millis", n.cpus * 1000));
  n.sandboxes = std::max<int64_t>(0, JsonIntOr(rec, "sandboxes", 0));
  n.max_sandboxes = std::max<int64_t>(1, JsonIntOr(rec, "max_sandboxes", 1000));
  n.accepting = JsonBoolOr(rec, "accepting", true);
  n.load_seq = JsonIntOr(rec, "load_seq", 0);
  if (const Json* r = JsonField(rec, "runtimes"); r && r->is_array()) {
    for (const Json& x : *r)
      if (x.is_string()) n.runtimes.push_back(x.get<std::string>());
  }
  if (const Json* l = JsonField(rec, "labels"); l && l->is_object()) {
    for (const auto& [k, v] : l->items())
      if (v.is_string()) n.labels[k] = v.get<std::string>();
  }
  if (const Json* t = JsonField(rec, "templates"); t && t->is_object()) {
    for (const auto& [ref, info] : t->items()) {
      n.templates.insert(ref);
      if (std::string d = JsonStringOr(info, "digest", ""); !d.empty()) n.templates.insert(d);
    }
  }
  return n;
}

bool NodeLoad::HasTemplate(const std::string& ref) const {
  if (ref.empty()) return true;
  if (templates.count(ref)) return true;
  return ref.find(':') == std::string::npos && templates.count(ref + ":latest");
}

std::vector<std::string> Placer::Candidates(const std::vector<NodeLoad>& nodes,
                                            const PlacementRequest& req, std::string* why) {
  std::lock_guard l(mu_);
  struct Fit {
    std::string name;
    double load;  // the share of the node's memory and CPU in use after this request
    bool has_template;
  };
  std::vector<Fit> fits;
  bool any_runtime = false, any_labels = false, any_accepting = false;
  for (const NodeLoad& n : nodes) {
    if (!n.accepting) continue;
    any_accepting = true;
    if (!req.runtime.empty() &&
        std::find(n.runtimes.begin(), n.runtimes.end(), req.runtime) == n.runtimes.end())
      continue;
    any_runtime = true;
    bool labels = true;
    for (const auto& [k, v] : req.labels) {
      auto it = n.labels.find(k);
      labels = labels && it != n.labels.end() && it->second == v;
    }
    if (!labels) continue;
    any_labels = true;
    int64_t mem = n.free_memory, cpu = n.free_cpu_millis, count = n.sandboxes;
    if (auto r = reserved_.find(n.name); r != reserved_.end()) {
      if (r->second.load_seq >= n.load_seq) {
        mem -= r->second.memory;
        cpu -= r->second.cpu;
        count += r->second.sandboxes;
      } else {
        reserved_.erase(r);  // the node's newer figures include what was placed there
      }
    }
    // Memory is a limit nodes enforce (their commit ceiling); CPU is shared by time and
    // only weighs in the load below.
    if (mem < req.memory_bytes) continue;
    const double total_cpu = static_cast<double>(n.total_cpu_millis > 0 ? n.total_cpu_millis : n.cpus * 1000);
    const double cpu_used = std::min(1.0, 1.0 - static_cast<double>(cpu - req.cpu_millis) / total_cpu);
    const double mem_used =
        n.total_memory > 0 ? 1.0 - static_cast<double>(mem - req.memory_bytes) / static_cast<double>(n.total_memory) : 0.0;
    const double slots_used = static_cast<double>(count + 1) / static_cast<double>(n.max_sandboxes);
    const bool has = n.HasTemplate(req.template_ref);
    fits.push_back({n.name, (cpu_used + mem_used + slots_used) / 3 + (has ? 0.0 : kPullPenalty), has});
  }
  if (fits.empty()) {
    if (why) {
      *why = !any_accepting ? "no node is accepting sandboxes"
             : !any_runtime ? "no node runs the " + req.runtime + " runtime"
             : !any_labels  ? "no node has the labels asked for"
                            : "no node has room for the memory asked for";
    }
    return {};
  }
  std::shuffle(fits.begin(), fits.end(), rng_);
  if (static_cast<int>(fits.size()) > k_) {
    // The least loaded node that has the template joins the sample if chance left it out.
    auto holder = fits.end();
    for (auto it = fits.begin(); it != fits.end(); ++it)
      if (it->has_template && (holder == fits.end() || it->load < holder->load)) holder = it;
    const auto kept = fits.begin() + k_;
    if (holder != fits.end() && holder >= kept) std::iter_swap(kept - 1, holder);
    fits.resize(static_cast<size_t>(k_));
  }
  std::stable_sort(fits.begin(), fits.end(), [](const Fit& a, const Fit& b) { return a.load < b.load; });
  std::vector<std::string> out;
  for (auto& f : fits) out.push_back(std::move(f.name));
  return out;
}

void Placer::Reserve(const std::string& node, int64_t load_seq, const PlacementRequest& req) {
  std::lock_guard l(mu_);
  Reserved& r = reserved_[node];
  if (r.load_seq < load_seq) r = Reserved{load_seq, 0, 0};
  r.memory += req.memory_bytes;
  r.cpu += req.cpu_millis;
  r.sandboxes += 1;
}

void Placer::Release(const std::string& node, const PlacementRequest& req) {
  std::lock_guard l(mu_);
  auto it = reserved_.find(node);
  if (it == reserved_.end()) return;
  it->second.memory = std::max<int64_t>(0, it->second.memory - req.memory_bytes);
  it->second.cpu = std::max<int64_t>(0, it->second.cpu - req.cpu_millis);
  it->second.sandboxes = std::max<int64_t>(0, it->second.sandboxes - 1);
}

}  // namespace space::cluster
