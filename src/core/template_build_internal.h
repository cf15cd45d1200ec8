// core/template_build_internal: what the template build's files share (template_build.cc:
// operations and imports; template_steps.cc: spec steps; builtin_templates.cc: the templates
// that ship with SPACE). Not part of core's public interface.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <algorithm>
#include <map>

#include "core/internal.h"
#include "sys/sys.h"
#include "template/template.h"

namespace space::core::build {

inline constexpr const char* kDefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
inline constexpr size_t kLogTailBytes = 2048;

inline std::string Hex(const std::string& digest) {
  return StartsWith(digest, "sha256:") ? digest.substr(7) : digest;
}

inline std::string LogPath(const Config& c, const std::string& op_id) {
  return c.data_dir + "/logs/templates/" + op_id + ".log";
}

// The build's accumulated image config: env (ordered as first set), workdir, user.
struct ImageConfig {
  std::vector<std::pair<std::string, std::string>> env;
  std::string workdir = "/";
  std::string user = "root";
  std::vector<std::string> start_cmd, ready_cmd;  // CMD, HEALTHCHECK CMD (inherited)
  bool allow_setuid = false;  // LABEL space.allow-setuid (inherited): no no_new_privs

  void SetEnv(const std::string& kv) {
    size_t eq = kv.find('=');
    std::string k = kv.substr(0, eq), v = eq == std::string::npos ? "" : kv.substr(eq + 1);
    for (auto& e : env) {
      if (e.first == k) {
        e.second = v;
        return;
      }
    }
    env.emplace_back(k, v);
  }
  bool HasEnv(const std::string& k) const {
    return std::any_of(env.begin(), env.end(), [&](const auto& e) { return e.first == k; });
  }
  static ImageConfig FromJson(const Json& j) {
    ImageConfig c;
    if (const Json* e = JsonField(j, "env"); e && e->is_array()) {
      for (const auto& kv : *e) {
        if (kv.is_string()) c.SetEnv(kv.get<std::string>());
      }
    }
    c.workdir = JsonStringOr(j, "workdir", "/");
    if (c.workdir.empty()) c.workdir = "/";
    c.user = JsonStringOr(j, "user", "root");
    if (c.user.empty()) c.user = "root";
    for (auto [key, out] : {std::pair{"start_cmd", &c.start_cmd}, std::pair{"ready_cmd", &c.ready_cmd}}) {
      if (const Json* a = JsonField(j, key); a && a->is_array()) {
        for (const auto& x : *a) {
          if (x.is_string()) out->push_back(x.get<std::string>());
        }
      }
    }
    c.allow_setuid = JsonBoolOr(j, "allow_setuid", false);
    return c;
  }
  Json ToJson() const {
    Json env_arr = Json::array();
    for (const auto& [k, v] : env) env_arr.push_back(k + "=" + v);
    Json j = {{"env", env_arr}, {"workdir", workdir}, {"user", user}};
    if (!start_cmd.empty()) j["start_cmd"] = start_cmd;
    if (!ready_cmd.empty()) j["ready_cmd"] = ready_cmd;
    if (allow_setuid) j["allow_setuid"] = true;
    return j;
  }
};

// The build log file plus the tail kept for the operation record. Thread-safe (RUN output
// arrives on an agent hub thread).
class BuildLog {
 public:
  static Result<std::unique_ptr<BuildLog>> Open(const std::string& path) {
    auto fd = sys::Open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (!fd) return tl::unexpected(fd.error());
    auto l = std::unique_ptr<BuildLog>(new BuildLog());
    l->fd_ = std::move(*fd);
    return l;
  }
  void Write(std::string_view s) {
    std::lock_guard l(mu_);
    (void)sys::WriteAll(fd_.get(), s);
    tail_.append(s);
    if (tail_.size() > kLogTailBytes) tail_.erase(0, tail_.size() - kLogTailBytes);
  }
  void Line(const std::string& s) { Write(s + "\n"); }
  std::string Tail() {
    std::lock_guard l(mu_);
    return tail_;
  }

 private:
  BuildLog() = default;
  std::mutex mu_;
  sys::UniqueFd fd_;
  std::string tail_;
};


struct Build {
  Platform::Impl* impl = nullptr;
  store::OperationRecord op;
  TemplateBuildRequest req;
  std::unique_ptr<BuildLog> log;
  int steps = 0;

  void Progress(int step) {
    op.result = {{"step", step}, {"steps", steps}, {"log_tail", log->Tail()}};
    impl->SaveOperation(op);
  }
};

// Executes a spec build (b.req.spec) step by step; returns {"digest","config"}.
Result<Json> BuildFromSpec(Build& b);
// The digest of the context files a COPY step reads; kInvalidArgument if one is missing.
Result<std::string> CopyDigest(const std::map<std::string, std::string>& context,
                               const tmpl::Step& step);
tmpl::ParseOptions ParseOptionsFor(const TemplateBuildRequest& req, const Json& base_config);

}  // namespace space::core::build
