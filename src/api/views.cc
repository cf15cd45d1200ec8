#include "api/views.h"

namespace space::api {

namespace {
Json TimeOrNull(int64_t ms) { return ms > 0 ? Json(FormatRfc3339(ms)) : Json(nullptr); }
}  // namespace

Json NetworkJson(const store::SandboxRecord& r) {
  Json n = core::Platform::StoredPolicy(r).ToJson(/*with_secret_values=*/false);
  if (const Json* a = JsonField(r.spec, "net")) {
    n["sandbox_ip"] = JsonStringOr(*a, "sandbox_ip", "");
    n["gateway_ip"] = JsonStringOr(*a, "gateway_ip", "");
  }
  return n;
}

Json SandboxJson(const store::SandboxRecord& r) {
  const Json* limits = JsonField(r.spec, "limits");
  const Json* env = JsonField(r.spec, "env");
  Json volumes = Json::array();
  if (const Json* vs = JsonField(r.spec, "volumes"); vs && vs->is_array()) {
    for (const auto& v : *vs)
      volumes.push_back({{"name", JsonStringOr(v, "name", "")},
                         {"id", JsonStringOr(v, "id", "")},
                         {"path", JsonStringOr(v, "path", "")},
                         {"read_only", JsonBoolOr(v, "read_only", false)}});
  }
  return {{"id", r.id},
          {"volumes", volumes},
          {"state", r.state},
          {"reason", r.reason},
          {"template", r.template_ref},
          {"template_digest", r.template_digest},
          {"runtime", r.runtime},
          {"limits", limits ? *limits : Json::object()},
          {"env", env ? *env : Json::object()},
          {"metadata", r.metadata},
          {"network", NetworkJson(r)},
          {"timeout", JsonIntOr(r.spec, "timeout_s", 0)},
          {"on_timeout", JsonStringOr(r.spec, "on_timeout", "delete")},
          {"auto_resume", JsonBoolOr(r.spec, "auto_resume", false)},
          {"idle_timeout", JsonIntOr(r.spec, "idle_timeout_s", 0)},
          {"expires_at", TimeOrNull(JsonIntOr(r.spec, "expires_ms", 0))},
          {"created_at", TimeOrNull(r.created_ms)},
          {"updated_at", TimeOrNull(r.updated_ms)}};
}

Json OperationJson(const store::OperationRecord& r) {
  Json err = nullptr;
  if (r.state == "failed") err = {{"code", r.error_code}, {"message", r.error_message}};
  return {{"id", r.id},
          {"kind", r.kind},
          {"target", r.target},
          {"state", r.state},
          {"done", r.state == "succeeded" || r.state == "failed"},
          {"result", r.result},
          {"error", err},
          {"created_at", TimeOrNull(r.created_ms)},
          {"updated_at", TimeOrNull(r.updated_ms)}};
}

Json CommandJson(const core::CommandInfo& c) {
  const auto& r = c.record;
  const Json* argv = JsonField(r.spec, "argv");
  const Json* cmd = JsonField(r.spec, "cmd");
  return {{"id", r.id},
          {"sandbox_id", r.sandbox_id},
          {"argv", argv ? *argv : Json(nullptr)},
          {"cmd", cmd ? *cmd : Json(nullptr)},
          {"state", r.state},
          {"exit_code", r.exit_code ? Json(*r.exit_code) : Json(nullptr)},
          {"signal", r.signal ? Json(*r.signal) : Json(nullptr)},
          {"timed_out", r.timed_out},
          {"reason", r.reason},
          {"oom_killed", r.reason == "oom_killed"},
          {"pid", r.pid},
          {"pty", r.spec.contains("pty") ? r.spec["pty"] : Json(nullptr)},
          {"stdout_size", c.stdout_size},
          {"stderr_size", c.stderr_size},
          {"started_at", TimeOrNull(r.started_ms)},
          {"ended_at", TimeOrNull(r.ended_ms)}};
}

Json TemplateJson(const store::TemplateRecord& t) {
  return {{"name", t.name},
          {"tag", t.tag},
          {"ref", t.name + ":" + t.tag},
          {"digest", t.digest},
          {"config", t.config},
          {"created_at", TimeOrNull(t.created_ms)}};
}

Json SnapshotJson(const store::SnapshotRecord& s) {
  return {{"id", s.id},
          {"sandbox_id", s.sandbox_id},
          {"kind", s.kind},
          {"state", s.state},
          {"template", JsonStringOr(s.source, "template", "")},
          {"runtime", JsonStringOr(s.source, "runtime", "")},
          {"size", s.size},
          {"created_at", TimeOrNull(s.created_ms)}};
}

std::string SseEvent(std::string_view name, const Json& data) {
  std::string out = "event: ";
  out += name;
  out += "\ndata: ";
  out += data.dump(-1, ' ', false, Json::error_handler_t::replace);
  out += "\n\n";
  return out;
}

Json ErrorBody(const Error& e) {
  return {{"error",
           {{"code", std::string(ErrcName(e.code))}, {"message", e.message}, {"details", Json::object()}}}};
}

int HttpStatusFor(Errc code) {
  switch (code) {
    case Errc::kInvalidArgument: return 400;
    case Errc::kUnauthenticated: return 401;
    case Errc::kPermissionDenied: return 403;
    case Errc::kNotFound: return 404;
    case Errc::kConflict: return 409;
    case Errc::kTooLarge: return 413;
    case Errc::kResourceExhausted: return 429;
    case Errc::kUnavailable: return 503;
    case Errc::kDeadlineExceeded: return 504;
    case Errc::kInternal: return 500;
    case Errc::kInsufficientStorage: return 507;
  }
  return 500;
}

}  // namespace space::api
