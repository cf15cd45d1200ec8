// The adapter: a space-runtime/v1 plugin as a Runtime. See plugin.h.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <set>

#include "runtime/plugin/plugin.h"
#include "sys/sys.h"

namespace space::runtime {
namespace {

constexpr size_t kMaxHandleBytes = 64 << 10;

// Default per-verb timeouts; a plugin's `info` may set its own (timeouts_ms).
int64_t DefaultTimeoutMs(const std::string& verb) {
  static const std::map<std::string, int64_t> kDefaults = {
      {"version", 10000}, {"info", 15000},     {"start", 120000},   {"wake", 120000},
      {"snapshot", 300000}, {"suspend", 300000}, {"destroy", 60000}, {"delete-snapshot", 60000},
  };
  auto it = kDefaults.find(verb);
  return it == kDefaults.end() ? 30000 : it->second;
}

bool ValidId(std::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  for (size_t i = 0; i < id.size(); ++i) {
    char c = id[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || (i > 0 && (c == '-' || c == '.'));
    if (!ok) return false;
  }
  return true;
}

Json SpecToJson(const InstanceSpec& s) {
  Json files = Json::object();
  for (const auto& [path, content] : s.files) files[path] = content;
  return Json{{"id", s.id},
              {"rootfs", s.rootfs},
              {"env", s.env},
              {"hostname", s.hostname.empty() ? s.id : s.hostname},
              {"limits",
               {{"memory_bytes", s.limits.memory_bytes},
                {"pids", s.limits.pids},
                {"cpus", s.limits.cpus},
                {"disk_bytes", s.limits.disk_bytes},
                {"nofile", s.limits.nofile}}},
              {"network", s.network},
              {"netns_path", s.netns_path},
              {"resolv_conf", s.resolv_conf},
              {"files", files},
              {"template_dir", s.template_dir},
              {"template_digest", s.template_digest},
              {"snapshot_id", s.snapshot_id}};
}

InstanceState StateFromName(const std::string& s, bool* ok) {
  *ok = true;
  if (s == "running") return InstanceState::kRunning;
  if (s == "paused") return InstanceState::kPaused;
  if (s == "stopped") return InstanceState::kStopped;
  if (s == "missing") return InstanceState::kMissing;
  *ok = false;
  return InstanceState::kMissing;
}

class PluginRuntime final : public Runtime {
 public:
  explicit PluginRuntime(PluginOptions o) : o_(std::move(o)) {}

  void Probe();

  std::string_view Name() const override { return o_.name; }
  Capabilities Caps() const override { return caps_; }
  RuntimeDescription Describe() const override { return desc_; }

  Status Start(const InstanceSpec& spec) override;
  Status Pause(const std::string& id) override { return Simple("pause", id); }
  Status Resume(const std::string& id) override { return Simple("resume", id); }
  Status Destroy(const std::string& id) override;
  Result<InstanceState> Inspect(const std::string& id) override;
  Result<std::vector<std::string>> List() override;
  std::string AgentSocketPath(const std::string& id) const override;

  Status Snapshot(const std::string& id, const std::string& snapshot_id) override;
  Status DeleteSnapshot(const std::string& snapshot_id) override;
  bool HasSnapshot(const std::string& snapshot_id) const override;
  std::vector<std::string> ListSnapshots() const override;
  Result<int64_t> SnapshotSize(const std::string& snapshot_id) const override;
  Status Suspend(const std::string& id) override;
  Status Wake(const InstanceSpec& spec) override;

 private:
  Result<Json> Call(const std::string& verb, Json req) const {
    req["state_dir"] = o_.state_dir;
    req["agent_binary"] = o_.agent_binary;
    req["uid_shift"] = o_.uid_shift;
    PluginCallOptions co;
    co.name = o_.name;
    co.cwd = o_.state_dir;
    co.timeout_ms = TimeoutMs(verb);
    co.max_reply_bytes = o_.max_reply_bytes;
    return CallPlugin(o_.executable, verb, std::move(req), co);
  }
  int64_t TimeoutMs(const std::string& verb) const {
    int64_t t = DefaultTimeoutMs(verb);
    if (const Json* tm = JsonField(info_, "timeouts_ms")) t = JsonIntOr(*tm, verb.c_str(), t);
    return std::clamp<int64_t>(t, 100, o_.max_timeout_ms);
  }
  std::string HandlePath(const std::string& id) const { return o_.handle_dir + "/handles/" + id + ".json"; }
  std::string StartingPath(const std::string& id) const { return o_.handle_dir + "/handles/" + id + ".starting"; }
  // The stored handle record ({"handle", "agent_socket"}), or null.
  Json LoadHandle(const std::string& id) const;
  Status StoreHandle(const std::string& id, const Json& reply);
  Json Request(const std::string& id) const {
    Json req{{"id", id}};
    Json h = LoadHandle(id);
    req["handle"] = h.is_object() && h.contains("handle") ? h["handle"] : Json();
    return req;
  }
  Status Simple(const std::string& verb, const std::string& id) {
    if (!ValidId(id)) return Fail(Errc::kInvalidArgument, o_.name + ": bad instance id '" + id + "'");
    auto r = Call(verb, Request(id));
    if (!r) return tl::unexpected(r.error());
    return Ok();
  }
  Status NeedOwnDisk(const char* what) const {
    if (caps_.own_disk) return Ok();
    return Fail(Errc::kInvalidArgument, "runtime " + o_.name + " does not support " + what);
  }

  PluginOptions o_;
  Json info_ = Json::object();
  Capabilities caps_;
  RuntimeDescription desc_;
  mutable std::mutex mu_;                              // guards sockets_
  mutable std::map<std::string, std::string> sockets_;  // id -> agent socket (cache)
};

void PluginRuntime::Probe() {
  desc_.kind = "plugin";
  desc_.path = o_.executable;
  caps_.pause = false;
  caps_.pause_keeps_memory = false;
  caps_.snapshot_kinds = {"filesystem"};
  auto fail = [&](std::string why) {
    desc_.available = false;
    desc_.why_not = std::move(why);
    spdlog::warn("runtime plugin {} ({}) is not usable: {}", o_.name, o_.executable, desc_.why_not);
  };
  struct stat st;
  if (::stat(o_.executable.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
    return fail(o_.executable + " is not a regular file");
  if (::access(o_.executable.c_str(), X_OK) != 0) return fail(o_.executable + " is not executable");
  auto ver = Call("version", Json::object());
  if (!ver) return fail(ver.error().message);
  bool speaks = false;
  std::string offered;
  if (const Json* sv = JsonField(*ver, "supported_versions"); sv && sv->is_array()) {
    for (const auto& v : *sv) {
      if (!v.is_string()) continue;
      offered += (offered.empty() ? "" : ", ") + v.get<std::string>();
      speaks = speaks || v == kPluginContract;
    }
  }
  if (!speaks)
    return fail("it speaks " + (offered.empty() ? std::string("no known contract version") : offered) +
                "; spaced speaks " + kPluginContract);
  auto info = Call("info", Json::object());
  if (!info) return fail(info.error().message);
  info_ = *info;
  caps_ = CapabilitiesFromJson(JsonField(info_, "capabilities") ? info_["capabilities"] : Json::object());
  if (const Json* l = JsonField(info_, "limitations"); l && l->is_array()) {
    for (const auto& v : *l) {
      if (v.is_string()) desc_.limitations.push_back(v.get<std::string>());
    }
  }
  if (!JsonBoolOr(info_, "available", true))
    return fail(JsonStringOr(info_, "why_not", "its info says it is unavailable on this host"));
  spdlog::info("runtime plugin {}: {}", o_.name, o_.executable);
}

Json PluginRuntime::LoadHandle(const std::string& id) const {
  auto text = sys::ReadFile(HandlePath(id));
  if (!text) return nullptr;
  auto j = ParseJson(*text);
  return j && j->is_object() ? *j : Json();
}

Status PluginRuntime::StoreHandle(const std::string& id, const Json& reply) {
  Json rec{{"handle", reply.contains("handle") ? reply["handle"] : Json()},
           {"agent_socket", JsonStringOr(reply, "agent_socket", "")}};
  std::string text = rec.dump();
  if (text.size() > kMaxHandleBytes)
    return Fail(Errc::kInternal, "runtime plugin " + o_.name + ": handle of " + id + " is larger than " +
                                     std::to_string(kMaxHandleBytes) + " bytes");
  SPACE_TRY(sys::WriteFileAtomic(HandlePath(id), text, 0600));
  std::lock_guard l(mu_);
  sockets_.erase(id);
  return Ok();
}

Status PluginRuntime::Start(const InstanceSpec& spec) {
  const std::string& id = spec.id;
  if (!ValidId(id)) return Fail(Errc::kInvalidArgument, o_.name + ": bad instance id '" + id + "'");
  if (!desc_.available)
    return Fail(Errc::kUnavailable, "runtime " + o_.name + " is not available: " + desc_.why_not);
  if (!caps_.own_disk && (spec.rootfs.empty() || spec.rootfs[0] != '/'))
    return Fail(Errc::kInvalidArgument, o_.name + ": rootfs must be an absolute path");
  if (sys::Exists(HandlePath(id)) || sys::Exists(StartingPath(id)))
    return Fail(Errc::kConflict, o_.name + ": instance " + id + " already exists");
  // The marker first: a crash from here on leaves an id that List() reports until Destroy.
  SPACE_TRY(sys::WriteFileAtomic(StartingPath(id), Json{{"id", id}}.dump(), 0600));
  auto r = Call("start", SpecToJson(spec));
  Status st = r ? StoreHandle(id, *r) : Status(tl::unexpected(r.error()));
  if (!st) {
    if (auto d = Destroy(id); !d)
      spdlog::warn("runtime plugin {}: cleaning up failed start of {}: {}", o_.name, id, d.error().message);
    return st;
  }
  (void)sys::RemoveAll(StartingPath(id));
  return Ok();
}

Status PluginRuntime::Destroy(const std::string& id) {
  if (!ValidId(id)) return Fail(Errc::kInvalidArgument, o_.name + ": bad instance id '" + id + "'");
  auto r = Call("destroy", Request(id));
  if (!r) return tl::unexpected(r.error());
  SPACE_TRY(sys::RemoveAll(HandlePath(id)));
  SPACE_TRY(sys::RemoveAll(StartingPath(id)));
  std::lock_guard l(mu_);
  sockets_.erase(id);
  return Ok();
}

Result<InstanceState> PluginRuntime::Inspect(const std::string& id) {
  if (!ValidId(id)) return Fail(Errc::kInvalidArgument, o_.name + ": bad instance id '" + id + "'");
  auto r = Call("inspect", Request(id));
  if (!r) return tl::unexpected(r.error());
  bool ok;
  std::string s = JsonStringOr(*r, "state", "");
  InstanceState state = StateFromName(s, &ok);
  if (!ok) return Fail(Errc::kInternal, "runtime plugin " + o_.name + " inspect: unknown state \"" + s + "\"");
  // An interrupted start holds host resources until destroyed.
  if (state == InstanceState::kMissing && sys::Exists(StartingPath(id))) return InstanceState::kStopped;
  return state;
}

Result<std::vector<std::string>> PluginRuntime::List() {
  std::set<std::string> ids;
  if (DIR* d = ::opendir((o_.handle_dir + "/handles").c_str())) {
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      for (const char* suffix : {".json", ".starting"}) {
        size_t sl = std::strlen(suffix);
        if (n.size() > sl && n.compare(n.size() - sl, sl, suffix) == 0 && ValidId(n.substr(0, n.size() - sl)))
          ids.insert(n.substr(0, n.size() - sl));
      }
    }
    ::closedir(d);
  }
  if (::access(o_.executable.c_str(), X_OK) == 0) {
    auto r = Call("list", Json::object());
    if (!r) return tl::unexpected(r.error());
    if (const Json* l = JsonField(*r, "ids"); l && l->is_array()) {
      for (const auto& v : *l) {
        if (v.is_string() && ValidId(v.get<std::string>())) ids.insert(v.get<std::string>());
      }
    }
  }
  return std::vector<std::string>(ids.begin(), ids.end());
}

std::string PluginRuntime::AgentSocketPath(const std::string& id) const {
  {
    std::lock_guard l(mu_);
    if (auto it = sockets_.find(id); it != sockets_.end()) return it->second;
  }
  std::string sock = JsonStringOr(LoadHandle(id), "agent_socket", "");
  if (sock.empty()) {
    auto r = Call("agent-endpoint", Request(id));
    if (r) sock = JsonStringOr(*r, "socket", "");
    else spdlog::warn("{}", r.error().message);
  }
  if (sock.empty() || sock[0] != '/') return "";
  std::lock_guard l(mu_);
  sockets_[id] = sock;
  return sock;
}

Status PluginRuntime::Snapshot(const std::string& id, const std::string& snapshot_id) {
  SPACE_TRY(NeedOwnDisk("full snapshots"));
  if (!ValidId(snapshot_id)) return Fail(Errc::kInvalidArgument, "bad snapshot id");
  Json req = Request(id);
  req["snapshot_id"] = snapshot_id;
  auto r = Call("snapshot", req);
  if (!r) return tl::unexpected(r.error());
  return Ok();
}

Status PluginRuntime::DeleteSnapshot(const std::string& snapshot_id) {
  if (!caps_.own_disk) return Ok();
  if (!ValidId(snapshot_id)) return Fail(Errc::kInvalidArgument, "bad snapshot id");
  auto r = Call("delete-snapshot", Json{{"snapshot_id", snapshot_id}});
  if (!r) return tl::unexpected(r.error());
  return Ok();
}

std::vector<std::string> PluginRuntime::ListSnapshots() const {
  std::vector<std::string> out;
  if (!caps_.own_disk) return out;
  auto r = Call("list-snapshots", Json::object());
  if (!r) return out;
  if (const Json* l = JsonField(*r, "snapshots"); l && l->is_array()) {
    for (const auto& s : *l) {
      std::string id = JsonStringOr(s, "id", "");
      if (ValidId(id)) out.push_back(id);
    }
  }
  return out;
}

bool PluginRuntime::HasSnapshot(const std::string& snapshot_id) const {
  auto all = ListSnapshots();
  return std::find(all.begin(), all.end(), snapshot_id) != all.end();
}

Result<int64_t> PluginRuntime::SnapshotSize(const std::string& snapshot_id) const {
  if (caps_.own_disk) {
    auto r = Call("list-snapshots", Json::object());
    if (!r) return tl::unexpected(r.error());
    if (const Json* l = JsonField(*r, "snapshots"); l && l->is_array()) {
      for (const auto& s : *l) {
        if (JsonStringOr(s, "id", "") == snapshot_id) return JsonIntOr(s, "size", 0);
      }
    }
  }
  return Fail(Errc::kNotFound, "no snapshot " + snapshot_id);
}

Status PluginRuntime::Suspend(const std::string& id) {
  // Own disk without kept processes: suspend stops the instance but keeps its disk.
  if (!caps_.suspend_keeps_processes && !caps_.own_disk) return Runtime::Suspend(id);
  if (!ValidId(id)) return Fail(Errc::kInvalidArgument, o_.name + ": bad instance id '" + id + "'");
  auto r = Call("suspend", Request(id));
  if (!r) return tl::unexpected(r.error());
  if (r->contains("handle")) {
    Json old = LoadHandle(id);
    Json rec = *r;
    if (!rec.contains("agent_socket") && old.is_object()) rec["agent_socket"] = old.value("agent_socket", "");
    SPACE_TRY(StoreHandle(id, rec));
  }
  return Ok();
}

Status PluginRuntime::Wake(const InstanceSpec& spec) {
  if (!caps_.suspend_keeps_processes && !caps_.own_disk) return Runtime::Wake(spec);
  if (!ValidId(spec.id)) return Fail(Errc::kInvalidArgument, o_.name + ": bad instance id '" + spec.id + "'");
  if (!desc_.available)
    return Fail(Errc::kUnavailable, "runtime " + o_.name + " is not available: " + desc_.why_not);
  Json req = SpecToJson(spec);
  Json h = LoadHandle(spec.id);
  req["handle"] = h.is_object() && h.contains("handle") ? h["handle"] : Json();
  auto r = Call("wake", req);
  if (!r) return tl::unexpected(r.error());
  Json rec = *r;
  if (!rec.contains("handle") && h.is_object()) rec["handle"] = h["handle"];
  if (JsonStringOr(rec, "agent_socket", "").empty() && h.is_object())
    rec["agent_socket"] = h.value("agent_socket", "");
  return StoreHandle(spec.id, rec);
}

}  // namespace

Result<std::unique_ptr<Runtime>> CreatePluginRuntime(const PluginOptions& in) {
  PluginOptions o = in;
  if (o.name.empty() || o.executable.empty() || o.executable[0] != '/')
    return Fail(Errc::kInvalidArgument, "runtime plugin: name and an absolute executable path are needed");
  if (o.state_dir.empty() || o.state_dir[0] != '/' || o.handle_dir.empty() || o.handle_dir[0] != '/')
    return Fail(Errc::kInvalidArgument, "runtime plugin " + o.name + ": state and handle dirs must be absolute");
  SPACE_TRY_WRAP(sys::MkdirAll(o.state_dir, 0711), "runtime plugin " + o.name);
  SPACE_TRY_WRAP(sys::MkdirAll(o.handle_dir + "/handles", 0700), "runtime plugin " + o.name);
  // For tools that clean up after spaced (scripts/space-down.sh): which executable and
  // state dir the handles belong to.
  (void)sys::WriteFileAtomic(o.handle_dir + "/plugin.json",
                             Json{{"executable", o.executable}, {"state_dir", o.state_dir}}.dump() + "\n", 0600);
  auto rt = std::make_unique<PluginRuntime>(std::move(o));
  rt->Probe();
  return std::unique_ptr<Runtime>(std::move(rt));
}

}  // namespace space::runtime
