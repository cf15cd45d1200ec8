// api/parse: see parse.h. Moved verbatim out of server.cc and the routes_*.cc files.
#include "api/parse.h"

#include <cctype>
#include <charconv>
#include <csignal>
#include <cstdlib>
#include <limits>
#include <set>

#include <boost/beast/core/detail/base64.hpp>

namespace space::api {

// ---------------------------------------------------------------- target and query

namespace {

// A query value that is all digits of `base`: no sign, spaces or NUL (strtoull skipped
// spaces, wrapped " -5" to 2^64-5 and stopped at a decoded %00). Values beyond uint64
// saturate with `overflow` set.
struct Number {
  bool ok = false;
  bool overflow = false;
  uint64_t value = 0;
};

Number Digits(std::string_view v, int base) {
  Number n;
  if (v.empty()) return n;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n.value, base);
  if (end != v.data() + v.size()) return n;
  if (ec == std::errc::result_out_of_range) {
    n.overflow = true;
    n.value = std::numeric_limits<uint64_t>::max();
  } else if (ec != std::errc()) {
    return n;
  }
  n.ok = true;
  return n;
}

}  // namespace

Target ParseTarget(std::string_view target) {
  Target t;
  size_t q = target.find('?');
  std::string_view path = target.substr(0, q);
  t.path = PercentDecode(path);
  size_t pos = 0;
  while (pos < path.size()) {
    size_t next = path.find('/', pos);
    if (next == std::string_view::npos) next = path.size();
    if (next > pos) t.segments.push_back(PercentDecode(path.substr(pos, next - pos)));
    pos = next + 1;
  }
  if (q == std::string_view::npos) return t;
  std::string_view qs = target.substr(q + 1);
  pos = 0;
  while (pos <= qs.size()) {
    size_t amp = qs.find('&', pos);
    if (amp == std::string_view::npos) amp = qs.size();
    std::string_view kv = qs.substr(pos, amp - pos);
    if (!kv.empty()) {
      size_t eq = kv.find('=');
      std::string k = PercentDecode(kv.substr(0, eq));
      std::string v = eq == std::string_view::npos ? "" : PercentDecode(kv.substr(eq + 1));
      t.query.emplace(std::move(k), std::move(v));
    }
    pos = amp + 1;
  }
  return t;
}

std::string PercentDecode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out += static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16));
      i += 2;
    } else if (s[i] == '+') {
      out += ' ';
    } else {
      out += s[i];
    }
  }
  return out;
}

std::string QueryValue(const Query& q, const std::string& key, const std::string& def) {
  auto it = q.find(key);
  return it == q.end() ? def : it->second;
}

int64_t WaitMillis(const Query& q) {
  std::string w = QueryValue(q, "wait");
  if (w.empty()) return 0;
  int64_t ms = ParseDurationMillis(w);
  if (ms < 0) return -1;
  return std::min<int64_t>(ms, 5 * 60 * 1000);
}

Result<Json> ParseJsonBody(std::string_view body) {
  if (body.empty()) return Json::object();
  auto j = ParseJson(body);
  if (!j) return Fail(Errc::kInvalidArgument, "request body is not valid JSON");
  if (!j->is_object()) return Fail(Errc::kInvalidArgument, "request body must be a JSON object");
  return std::move(*j);
}

// ---------------------------------------------------------------- sandboxes

Result<std::map<std::string, std::string>> ParseStringMap(const Json& body, const char* key,
                                                          bool null_is_empty) {
  std::map<std::string, std::string> out;
  const Json* f = JsonField(body, key);
  if (!f || (null_is_empty && f->is_null())) return out;
  if (!f->is_object()) return Fail(Errc::kInvalidArgument, std::string(key) + " must be an object");
  for (const auto& [k, v] : f->items()) {
    if (!v.is_string())
      return Fail(Errc::kInvalidArgument, std::string(key) + "." + k + " must be a string");
    out[k] = v.get<std::string>();
  }
  return out;
}

Result<std::vector<core::VolumeMount>> ParseVolumeMounts(const Json& v) {
  if (!v.is_array()) return Fail(Errc::kInvalidArgument, "volumes must be an array of {name, path, read_only}");
  std::vector<core::VolumeMount> out;
  for (const auto& m : v) {
    if (!m.is_object()) return Fail(Errc::kInvalidArgument, "volumes[] must be objects {name, path, read_only}");
    core::VolumeMount vm;
    for (const auto& [k, x] : m.items()) {
      if (k == "name" && x.is_string()) {
        vm.volume = x.get<std::string>();
      } else if (k == "path" && x.is_string()) {
        vm.path = x.get<std::string>();
      } else if (k == "read_only" && x.is_boolean()) {
        vm.read_only = x.get<bool>();
      } else {
        return Fail(Errc::kInvalidArgument, "volumes[]." + k + ": unknown or of the wrong type"
                                            " (name: string, path: string, read_only: boolean)");
      }
    }
    if (vm.volume.empty() || vm.path.empty())
      return Fail(Errc::kInvalidArgument, "volumes[] need a name and a path");
    out.push_back(std::move(vm));
  }
  return out;
}

Result<std::pair<std::string, int64_t>> ParseVolumeCreate(const Json& body) {
  std::string name;
  int64_t size = 0;
  for (const auto& [k, v] : body.items()) {
    if (k == "name") {
      if (!v.is_string()) return Fail(Errc::kInvalidArgument, "name must be a string");
      name = v.get<std::string>();
    } else if (k == "size_bytes") {
      if (!v.is_number_integer() || v.get<int64_t>() <= 0)
        return Fail(Errc::kInvalidArgument, "size_bytes must be a positive integer");
      size = v.get<int64_t>();
    } else {
      return Fail(Errc::kInvalidArgument, "unknown field \"" + k + "\" (name, size_bytes)");
    }
  }
  if (name.empty()) return Fail(Errc::kInvalidArgument, "a volume needs a name");
  return std::make_pair(name, size);
}

Result<core::CreateSandboxRequest> ParseCreate(const Json& body) {
  core::CreateSandboxRequest req;
  for (const auto& [k, v] : body.items()) {
    static const std::set<std::string> kKnown = {
        "template", "snapshot",   "runtime",      "limits",         "env",      "metadata",
        "network",  "timeout",    "on_timeout",   "idle_timeout",   "snapshot_every",
        "keep_last", "volumes", "auto_resume"};
    if (!kKnown.count(k)) return Fail(Errc::kInvalidArgument, "unknown field \"" + k + "\"");
  }
  if (const Json* t = JsonField(body, "template")) {
    if (!t->is_string()) return Fail(Errc::kInvalidArgument, "template must be a string");
    req.template_ref = t->get<std::string>();
  }
  if (const Json* sn = JsonField(body, "snapshot")) {
    if (!sn->is_string()) return Fail(Errc::kInvalidArgument, "snapshot must be a snapshot id");
    req.snapshot_id = sn->get<std::string>();
    if (JsonField(body, "template"))
      return Fail(Errc::kInvalidArgument, "give a template or a snapshot, not both");
  }
  if (const Json* r = JsonField(body, "runtime")) {
    if (!r->is_string()) return Fail(Errc::kInvalidArgument, "runtime must be a string");
    req.runtime = r->get<std::string>();
  }
  if (const Json* l = JsonField(body, "limits")) {
    if (!l->is_object()) return Fail(Errc::kInvalidArgument, "limits must be an object");
    for (const auto& [k, v] : l->items()) {
      if (k == "cpus") {
        if (!v.is_number()) return Fail(Errc::kInvalidArgument, "limits.cpus must be a number");
        req.limits.cpus = v.get<double>();
        continue;
      }
      if (!v.is_number_integer() || v.get<int64_t>() < 0)
        return Fail(Errc::kInvalidArgument, "limits." + k + " must be a non-negative integer");
      int64_t n = v.get<int64_t>();
      if (k == "memory_bytes") {
        req.limits.memory_bytes = n;
      } else if (k == "pids") {
        req.limits.pids = n;
      } else if (k == "disk_bytes") {
        req.limits.disk_bytes = n;
      } else if (k == "nofile") {
        req.limits.nofile = n;
      } else if (k == "output_bytes") {
        req.output_bytes = n;
      } else {
        return Fail(Errc::kInvalidArgument, "unknown limit \"" + k + "\"");
      }
    }
  }
  auto env = ParseStringMap(body, "env");
  if (!env) return tl::unexpected(env.error());
  req.env = std::move(*env);
  auto meta = ParseStringMap(body, "metadata");
  if (!meta) return tl::unexpected(meta.error());
  req.metadata = std::move(*meta);
  if (const Json* n = JsonField(body, "network")) {
    // Checked by core against this daemon's presets (net::ParsePolicy).
    if (!n->is_boolean() && !n->is_object() && !n->is_null())
      return Fail(Errc::kInvalidArgument,
                  "network must be an object {mode, allow_out, deny_out, public_traffic, secrets}");
    req.network = *n;
  }
  if (const Json* v = JsonField(body, "volumes")) {
    auto mounts = ParseVolumeMounts(*v);
    if (!mounts) return tl::unexpected(mounts.error());
    req.volumes = std::move(*mounts);
  }
  for (const char* key : {"snapshot_every", "keep_last"}) {
    if (const Json* t = JsonField(body, key)) {
      if (!t->is_number_integer() || t->get<int64_t>() < 0)
        return Fail(Errc::kInvalidArgument, std::string(key) + " must be a non-negative integer");
      (std::string(key) == "keep_last" ? req.keep_last : req.snapshot_every_s) = t->get<int64_t>();
    }
  }
  for (const char* key : {"timeout", "idle_timeout"}) {
    if (const Json* t = JsonField(body, key)) {
      if (!t->is_number() || t->get<double>() < 0 || t->get<double>() > 366.0 * 24 * 3600)
        return Fail(Errc::kInvalidArgument, std::string(key) + " must be seconds (0 = none)");
      int64_t secs = static_cast<int64_t>(t->get<double>());
      if (std::string(key) == "timeout") {
        req.timeout_s = secs;
      } else {
        req.idle_timeout_s = secs;
      }
    }
  }
  if (const Json* o = JsonField(body, "on_timeout")) {
    if (!o->is_string()) return Fail(Errc::kInvalidArgument, "on_timeout must be a string");
    req.on_timeout = o->get<std::string>();
  }
  if (const Json* a = JsonField(body, "auto_resume")) {
    if (!a->is_boolean()) return Fail(Errc::kInvalidArgument, "auto_resume must be true or false");
    req.auto_resume = a->get<bool>();
  }
  return req;
}

Result<core::SandboxFilter> ParseSandboxFilter(const Query& q) {
  core::SandboxFilter f;
  f.state = QueryValue(q, "state");
  auto [b, e] = q.equal_range("label");
  for (auto it = b; it != e; ++it) {
    const std::string& l = it->second;
    size_t eq = l.find('=');
    if (eq == std::string::npos || eq == 0)
      return Fail(Errc::kInvalidArgument, "label filter must be key=value");
    f.labels[l.substr(0, eq)] = l.substr(eq + 1);
  }
  return f;
}

Result<int64_t> ParseForkCount(const Json& body) {
  const Json* cnt = JsonField(body, "count");
  int64_t count = 1;
  if (cnt) {
    if (!cnt->is_number_integer()) return Fail(Errc::kInvalidArgument, "count must be an integer");
    count = cnt->get<int64_t>();
  }
  if (count < 1 || count > 1000000) count = count < 1 ? 0 : 1000000;  // core reports the range
  return count;
}

Result<TimeoutRequest> ParseTimeout(const Json& body) {
  const Json* t = JsonField(body, "timeout");
  if (!t || !t->is_number() || t->get<double>() < 0)
    return Fail(Errc::kInvalidArgument, "timeout (seconds, 0 = none) is required");
  // Bounded before the conversion: a double beyond int64 does not convert (UB).
  if (t->get<double>() > 366.0 * 24 * 3600)
    return Fail(Errc::kInvalidArgument, "timeout must be 0 (none) .. one year, in seconds");
  TimeoutRequest out;
  out.seconds = static_cast<int64_t>(t->get<double>());
  out.on_timeout = JsonStringOr(body, "on_timeout", "");
  return out;
}

Result<int64_t> ParseOperationsLimit(const Query& q) {
  int64_t limit = 100;
  if (auto l = QueryValue(q, "limit"); !l.empty()) {
    Number n = Digits(l, 10);
    if (!n.ok) return Fail(Errc::kInvalidArgument, "limit must be a number");
    limit = static_cast<int64_t>(std::min<uint64_t>(n.value, std::numeric_limits<int64_t>::max()));
  }
  return limit;
}

// ---------------------------------------------------------------- commands

Result<core::CommandRequest> ParseCommand(const Json& body) {
  core::CommandRequest req;
  for (const auto& [k, v] : body.items()) {
    static const std::set<std::string> kKnown = {"argv", "cmd", "env", "cwd", "user", "stdin", "timeout",
                                                 "pty"};
    if (!kKnown.count(k)) return Fail(Errc::kInvalidArgument, "unknown field \"" + k + "\"");
  }
  if (const Json* a = JsonField(body, "argv")) {
    if (!a->is_array()) return Fail(Errc::kInvalidArgument, "argv must be an array of strings");
    for (const auto& e : *a) {
      if (!e.is_string()) return Fail(Errc::kInvalidArgument, "argv must be an array of strings");
      req.argv.push_back(e.get<std::string>());
    }
    if (req.argv.empty()) return Fail(Errc::kInvalidArgument, "argv must not be empty");
  }
  if (const Json* c = JsonField(body, "cmd")) {
    if (!c->is_string()) return Fail(Errc::kInvalidArgument, "cmd must be a string");
    req.shell = c->get<std::string>();
    if (req.shell.empty()) return Fail(Errc::kInvalidArgument, "cmd must not be empty");
  }
  if (const Json* e = JsonField(body, "env")) {
    if (!e->is_object()) return Fail(Errc::kInvalidArgument, "env must be an object");
    for (const auto& [k, v] : e->items()) {
      if (!v.is_string()) return Fail(Errc::kInvalidArgument, "env." + k + " must be a string");
      req.env[k] = v.get<std::string>();
    }
  }
  if (const Json* c = JsonField(body, "cwd")) {
    if (!c->is_string()) return Fail(Errc::kInvalidArgument, "cwd must be a string");
    req.cwd = c->get<std::string>();
  }
  if (const Json* u = JsonField(body, "user")) {
    if (u->is_string()) {
      req.user = u->get<std::string>();
    } else if (u->is_number_unsigned()) {
      req.user = std::to_string(u->get<uint64_t>());
    } else {
      return Fail(Errc::kInvalidArgument, "user must be a name or a uid");
    }
  }
  if (const Json* s = JsonField(body, "stdin")) {
    if (!s->is_boolean()) return Fail(Errc::kInvalidArgument, "stdin must be a boolean");
    req.stdin = s->get<bool>();
  }
  if (const Json* t = JsonField(body, "timeout")) {
    if (!t->is_number() || t->get<double>() < 0 || t->get<double>() > 1e7)
      return Fail(Errc::kInvalidArgument, "timeout must be a number of seconds (0 = none)");
    req.timeout_ms = static_cast<int64_t>(t->get<double>() * 1000);
  }
  if (const Json* t = JsonField(body, "pty"); t && !t->is_null()) {
    auto size = ParsePtySize(*t);
    if (!size) return tl::unexpected(size.error());
    req.pty = *size;
  }
  if (req.argv.empty() == req.shell.empty())
    return Fail(Errc::kInvalidArgument, "give exactly one of argv or cmd");
  return req;
}

Result<core::CommandRequest::PtySize> ParsePtySize(const Json& j) {
  if (!j.is_object()) return Fail(Errc::kInvalidArgument, "pty must be an object {cols, rows}");
  core::CommandRequest::PtySize size;
  for (auto [key, field] : {std::pair{"cols", &size.cols}, std::pair{"rows", &size.rows}}) {
    const Json* v = JsonField(j, key);
    if (!v || !v->is_number_integer() || v->get<int64_t>() < 1 || v->get<int64_t>() > 4096)
      return Fail(Errc::kInvalidArgument, std::string("pty.") + key + " must be 1..4096");
    *field = static_cast<int>(v->get<int64_t>());
  }
  return size;
}

Result<int> ParseSignal(const Json& body) {
  const Json* s = JsonField(body, "signal");
  if (!s) return Fail(Errc::kInvalidArgument, "signal is required");
  if (s->is_number_integer()) {
    int64_t n = s->get<int64_t>();
    if (n < 1 || n > 64) return Fail(Errc::kInvalidArgument, "signal must be 1..64");
    return static_cast<int>(n);
  }
  if (!s->is_string()) return Fail(Errc::kInvalidArgument, "signal must be a name or a number");
  std::string name = s->get<std::string>();
  if (StartsWith(name, "SIG")) name = name.substr(3);
  static const std::map<std::string, int> kNames = {
      {"HUP", SIGHUP},   {"INT", SIGINT},   {"QUIT", SIGQUIT}, {"KILL", SIGKILL},
      {"TERM", SIGTERM}, {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"STOP", SIGSTOP},
      {"CONT", SIGCONT}, {"ALRM", SIGALRM}, {"PIPE", SIGPIPE}, {"WINCH", SIGWINCH}};
  auto it = kNames.find(name);
  if (it == kNames.end()) return Fail(Errc::kInvalidArgument, "unknown signal \"" + name + "\"");
  return it->second;
}

Result<uint64_t> ParseOffset(const Query& q, const std::string& key) {
  Number n = Digits(QueryValue(q, key, "0"), 10);
  if (!n.ok || n.overflow) return Fail(Errc::kInvalidArgument, key + " must be a non-negative integer");
  return n.value;
}

Result<size_t> ParseOutputLimit(const Query& q) {
  size_t limit = 8u << 20;
  if (auto l = QueryValue(q, "limit"); !l.empty()) {
    Number n = Digits(l, 10);
    if (!n.ok || n.value == 0) return Fail(Errc::kInvalidArgument, "limit must be a positive integer");
    limit = static_cast<size_t>(std::min<uint64_t>(n.value, 64u << 20));
  }
  return limit;
}

// ---------------------------------------------------------------- files

bool Truthy(const std::string& v) { return v == "1" || v == "true" || v == "yes"; }

Result<int> ParseFileMode(const Query& q) {
  int mode = 0644;
  if (auto m = QueryValue(q, "mode"); !m.empty()) {
    Number n = Digits(m, 8);
    if (!n.ok || n.value > 07777) return Fail(Errc::kInvalidArgument, "mode must be octal, e.g. 0644");
    mode = static_cast<int>(n.value);
  }
  return mode;
}

Result<int> ParseListDepth(const Query& q) {
  int depth = 1;
  if (auto d = QueryValue(q, "depth"); !d.empty()) {
    Number n = Digits(d, 10);
    if (!n.ok || n.value < 1 || n.value > 16) return Fail(Errc::kInvalidArgument, "depth must be 1..16");
    depth = static_cast<int>(n.value);
  }
  return depth;
}

Result<std::pair<std::string, std::string>> ParseRename(const Json& body) {
  auto from = JsonString(body, "from");
  auto to = JsonString(body, "to");
  if (!from || !to) return Fail(Errc::kInvalidArgument, "from and to (strings) are required");
  return std::pair{std::move(*from), std::move(*to)};
}

// ---------------------------------------------------------------- templates

namespace {

Result<std::string> DecodeBase64(const std::string& in, const std::string& what) {
  namespace b64 = boost::beast::detail::base64;
  std::string out(b64::decoded_size(in.size()), '\0');
  // decode() stops at the first character outside the alphabet; only padding may follow.
  size_t body = in.size();
  while (body > 0 && in.size() - body < 2 && in[body - 1] == '=') --body;
  if (in.size() % 4 != 0) return Fail(Errc::kInvalidArgument, what + " is not valid base64");
  auto [written, read] = b64::decode(out.data(), in.data(), body);
  if (read != body) return Fail(Errc::kInvalidArgument, what + " is not valid base64");
  out.resize(written);
  return out;
}

Result<std::string> StringField(const Json& body, const char* key) {
  const Json* f = JsonField(body, key);
  if (!f) return std::string();
  if (!f->is_string()) return Fail(Errc::kInvalidArgument, std::string(key) + " must be a string");
  return f->get<std::string>();
}

}  // namespace

Result<core::TemplateBuildRequest> ParseBuild(const Json& body) {
  static const std::set<std::string> kKnown = {"name",      "tag",           "spec",
                                               "context",   "tarball_path",  "oci_archive_path",
                                               "directory", "build_args",    "network"};
  for (const auto& [k, v] : body.items()) {
    if (!kKnown.count(k)) return Fail(Errc::kInvalidArgument, "unknown field \"" + k + "\"");
  }
  core::TemplateBuildRequest req;
  auto get = [&](const char* key, std::string* out) -> Status {
    auto v = StringField(body, key);
    if (!v) return tl::unexpected(v.error());
    *out = std::move(*v);
    return Ok();
  };
  SPACE_TRY(get("name", &req.name));
  SPACE_TRY(get("tag", &req.tag));
  SPACE_TRY(get("spec", &req.spec));
  SPACE_TRY(get("tarball_path", &req.tarball_path));
  SPACE_TRY(get("oci_archive_path", &req.oci_archive_path));
  SPACE_TRY(get("directory", &req.directory));
  if (const Json* c = JsonField(body, "context")) {
    if (!c->is_object())
      return Fail(Errc::kInvalidArgument, "context must be an object of path -> base64 content");
    uint64_t total = 0;
    for (const auto& [path, v] : c->items()) {
      if (!v.is_string()) return Fail(Errc::kInvalidArgument, "context." + path + " must be a string");
      auto data = DecodeBase64(v.get<std::string>(), "context." + path);
      if (!data) return tl::unexpected(data.error());
      total += data->size();
      if (total > core::kMaxBuildContextBytes)
        return Fail(Errc::kTooLarge, "build context larger than 16 MiB");
      req.context[path] = std::move(*data);
    }
  }
  if (const Json* a = JsonField(body, "build_args")) {
    if (!a->is_object()) return Fail(Errc::kInvalidArgument, "build_args must be an object");
    for (const auto& [k, v] : a->items()) {
      if (!v.is_string()) return Fail(Errc::kInvalidArgument, "build_args." + k + " must be a string");
      req.build_args[k] = v.get<std::string>();
    }
  }
  if (const Json* n = JsonField(body, "network")) {
    if (!n->is_boolean()) return Fail(Errc::kInvalidArgument, "network must be a boolean");
    req.network = n->get<bool>();
  }
  return req;
}

// ---------------------------------------------------------------- access

Result<auth::Claims> ParseMint(const Principal& who, const Json& body) {
  for (const auto& [k, v] : body.items()) {
    static const std::set<std::string> kKnown = {"scopes", "ttl_s", "command_id"};
    if (!kKnown.count(k)) return Fail(Errc::kInvalidArgument, "unknown field \"" + k + "\"");
  }
  auth::Claims c;
  c.scopes = who.is_token() ? who.claims.scopes : auth::kAllSandboxScopes;
  c.command_id = who.is_token() ? who.claims.command_id : "";
  if (const Json* s = JsonField(body, "scopes")) {
    if (!s->is_array()) return Fail(Errc::kInvalidArgument, "scopes must be an array of strings");
    std::vector<std::string> names;
    for (const Json& n : *s) {
      if (!n.is_string()) return Fail(Errc::kInvalidArgument, "scopes must be an array of strings");
      names.push_back(n.get<std::string>());
    }
    auto parsed = auth::ParseScopes(names);
    if (!parsed) return tl::unexpected(parsed.error());
    if (*parsed == 0) return Fail(Errc::kInvalidArgument, "scopes must not be empty");
    c.scopes = *parsed;
  }
  if (const Json* cmd = JsonField(body, "command_id")) {
    if (!cmd->is_string() || !IsValidId(cmd->get<std::string>(), "cmd"))
      return Fail(Errc::kInvalidArgument, "command_id must be a command id");
    c.command_id = cmd->get<std::string>();
  }
  if (const Json* t = JsonField(body, "ttl_s")) {
    if (!t->is_number_integer() || t->get<int64_t>() <= 0)
      return Fail(Errc::kInvalidArgument, "ttl_s must be a positive integer");
    c.expires_s = t->get<int64_t>();  // a TTL until MintToken applies it
  }
  if (who.is_token()) {
    if (c.scopes & ~who.claims.scopes)
      return Fail(Errc::kPermissionDenied, "cannot mint a token broader than your own");
    if (!who.claims.command_id.empty() && c.command_id != who.claims.command_id)
      return Fail(Errc::kPermissionDenied, "your token is bound to command " + who.claims.command_id);
  }
  if (!c.command_id.empty() && (c.scopes & ~auth::kAttachScopes))
    return Fail(Errc::kInvalidArgument,
                "a token bound to a command carries only commands:read and commands:write");
  return c;
}

}  // namespace space::api
