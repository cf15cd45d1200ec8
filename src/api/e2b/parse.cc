// api/e2b/parse: see parse.h. Moved verbatim out of routes_e2b_control.cc and
// routes_e2b_envd.cc.
#include "api/e2b/parse.h"

#include <algorithm>
#include <cctype>
#include <csignal>

#include "api/e2b/connect.h"
#include "api/parse.h"

namespace space::api::e2b {

namespace rpc = connect;

// ---------------------------------------------------------------- control plane

std::string TemplateRef(const std::string& e2b_template) {
  // E2B's code-interpreter SDKs create from their template's name: ours is the built-in.
  if (e2b_template == "code-interpreter-v1" || e2b_template == "code-interpreter-v1:latest")
    return "code-interpreter:latest";
  // E2B's `base` (bash, python3, node, git, curl, a `user` account): SPACE's e2b-base built-in.
  if (e2b_template == "base") return "e2b-base:latest";
  if (e2b_template.find(':') != std::string::npos) return e2b_template;
  return e2b_template + ":latest";
}


Result<int64_t> TimeoutSeconds(const Json& body) {
  const Json* t = JsonField(body, "timeout");
  if (!t || t->is_null()) return -1;
  if (!t->is_number_integer() || t->get<int64_t>() < 0 || t->get<int64_t>() > 366ll * 24 * 3600)
    return Fail(Errc::kInvalidArgument, "timeout must be a non-negative number of seconds");
  return t->get<int64_t>();
}

Result<Json> NetworkFromE2b(const Json& body) {
  // E2B: allow_internet_access (default true) and network {allowOut, denyOut,
  // allowPublicTraffic}. Its rules: allowOut entries are exceptions to denyOut, and a domain
  // allowlist is written as allowOut + denyOut ["0.0.0.0/0"]. SPACE's allow_out means "only
  // these", so that form maps onto it; a partial denyOut maps onto deny_out.
  const Json* a = JsonField(body, "allow_internet_access");
  if (a && !a->is_boolean() && !a->is_null())
    return Fail(Errc::kInvalidArgument, "allow_internet_access must be a boolean");
  const Json* n = JsonField(body, "network");
  if (n && !n->is_null() && !n->is_object()) return Fail(Errc::kInvalidArgument, "network must be an object");
  bool internet = a && a->is_boolean() && a->get<bool>();
  // As on E2B, a sandbox's port URLs are public unless allowPublicTraffic is false
  // (docs/ports.md#e2b).
  Json out = {{"mode", internet ? "internet" : "none"}, {"public_traffic", true}};
  if (!n || n->is_null()) return out;
  for (const auto& [k, v] : n->items()) {
    if (k != "allowOut" && k != "denyOut" && k != "allowPublicTraffic" && k != "maskRequestHost")
      return Fail(Errc::kInvalidArgument, "network." + k + " is not supported by SPACE");
  }
  auto list = [&](const char* key) -> Result<std::vector<std::string>> {
    std::vector<std::string> v;
    const Json* f = JsonField(*n, key);
    if (!f || f->is_null()) return v;
    if (!f->is_array()) return Fail(Errc::kInvalidArgument, std::string("network.") + key + " must be an array");
    for (const auto& e : *f) {
      if (!e.is_string()) return Fail(Errc::kInvalidArgument, std::string("network.") + key + " entries must be strings");
      v.push_back(e.get<std::string>());
    }
    return v;
  };
  auto allow = list("allowOut");
  if (!allow) return tl::unexpected(allow.error());
  auto deny = list("denyOut");
  if (!deny) return tl::unexpected(deny.error());
  if (!allow->empty() || !deny->empty()) out["mode"] = "internet";
  bool deny_all = std::find(deny->begin(), deny->end(), "0.0.0.0/0") != deny->end();
  if (deny_all && allow->empty()) {
    out["mode"] = "none";  // E2B's allowInternetAccess: false
  } else if (deny_all) {
    out["allow_out"] = *allow;
    Json rest = Json::array();
    for (const auto& d : *deny) {
      if (d != "0.0.0.0/0") rest.push_back(d);
    }
    out["deny_out"] = rest;
  } else {
    if (!allow->empty())
      return Fail(Errc::kInvalidArgument,
                  "network.allowOut without denyOut [\"0.0.0.0/0\"] is not supported by SPACE "
                  "(SPACE's allow list means \"only these\"; add denyOut [\"0.0.0.0/0\"])");
    out["deny_out"] = *deny;
  }
  if (const Json* p = JsonField(*n, "allowPublicTraffic"); p && p->is_boolean())
    out["public_traffic"] = p->get<bool>();
  // The Host header the sandbox's services see (SPACE checks its shape).
  if (const Json* m = JsonField(*n, "maskRequestHost"); m && !m->is_null()) out["mask_request_host"] = *m;
  return out;
}

Result<core::CreateSandboxRequest> ParseCreate(const Json& body) {
  core::CreateSandboxRequest req;
  const Json* t = JsonField(body, "templateID");
  if (!t || !t->is_string() || t->get<std::string>().empty())
    return Fail(Errc::kInvalidArgument, "templateID is required");
  // A snapshot's E2B id is its SPACE id (optionally with E2B's ":default" tag).
  const std::string tid = t->get<std::string>();
  if (StartsWith(tid, "snap-")) {
    req.snapshot_id = tid.substr(0, tid.find(':'));
  } else {
    req.template_ref = TemplateRef(tid);
  }
  auto meta = ParseStringMap(body, "metadata", /*null_is_empty=*/true);
  if (!meta) return tl::unexpected(meta.error());
  req.metadata = std::move(*meta);
  auto env = ParseStringMap(body, "envVars", /*null_is_empty=*/true);
  if (!env) return tl::unexpected(env.error());
  req.env = std::move(*env);
  auto timeout = TimeoutSeconds(body);
  if (!timeout) return tl::unexpected(timeout.error());
  req.timeout_s = *timeout;
  // autoPause with autoPauseMemory false (the SDKs' onTimeout {action: 'pause', keepMemory:
  // false}) keeps the filesystem alone: SPACE's suspend, whose wake restarts the processes.
  const Json* memory = JsonField(body, "autoPauseMemory");
  if (memory && !memory->is_null() && !memory->is_boolean())
    return Fail(Errc::kInvalidArgument, "autoPauseMemory must be a boolean");
  const bool keep_memory = !memory || memory->is_null() || memory->get<bool>();
  req.on_timeout = !JsonBoolOr(body, "autoPause", false) ? "delete" : keep_memory ? "pause" : "suspend";
  auto network = NetworkFromE2b(body);
  if (!network) return tl::unexpected(network.error());
  req.network = std::move(*network);
  // volumeMounts [{name, path}]: SPACE's named volumes (docs/volumes.md).
  if (const Json* vm = JsonField(body, "volumeMounts"); vm && !vm->is_null()) {
    if (!vm->is_array()) return Fail(Errc::kInvalidArgument, "volumeMounts must be an array of {name, path}");
    for (const auto& m : *vm) {
      if (!m.is_object() || !JsonField(m, "name") || !m["name"].is_string() || !JsonField(m, "path") ||
          !m["path"].is_string())
        return Fail(Errc::kInvalidArgument, "volumeMounts[] must be {name, path}");
      req.volumes.push_back({m["name"].get<std::string>(), m["path"].get<std::string>(), false});
    }
  }
  // autoResume {enabled}: a paused sandbox resumes when traffic reaches its ports. Only
  // for a pause that keeps memory, as E2B has it.
  if (const Json* ar = JsonField(body, "autoResume"); ar && !ar->is_null()) {
    if (ar->is_boolean()) {
      req.auto_resume = ar->get<bool>();
    } else if (ar->is_object()) {
      const Json* en = JsonField(*ar, "enabled");
      if (en && !en->is_null() && !en->is_boolean())
        return Fail(Errc::kInvalidArgument, "autoResume.enabled must be a boolean");
      req.auto_resume = en && en->is_boolean() && en->get<bool>();
    } else {
      return Fail(Errc::kInvalidArgument, "autoResume must be {\"enabled\": boolean}");
    }
    if (req.auto_resume && req.on_timeout != "pause")
      return Fail(Errc::kInvalidArgument,
                  req.on_timeout == "suspend"
                      ? "autoResume cannot be combined with autoPauseMemory: false: a filesystem-only "
                        "pause is resumed with connect"
                      : "autoResume needs autoPause: true");
  }
  // What SPACE has no equivalent for is refused rather than silently ignored.
  for (const char* key : {"mcp", "iam"}) {
    const Json* f = JsonField(body, key);
    bool empty = !f || f->is_null() || (f->is_object() && f->empty()) || (f->is_array() && f->empty());
    if (!empty) return Fail(Errc::kInvalidArgument, std::string(key) + " is not supported by SPACE");
  }
  return req;
}

Result<std::map<std::string, std::string>> ParseMetadataFilter(const std::string& query) {
  std::map<std::string, std::string> out;
  // Clients that encode the whole string once more than the query decodes: decode it.
  std::string q = query;
  if (q.find('=') == std::string::npos && q.find('%') != std::string::npos) q = PercentDecode(q);
  size_t pos = 0;
  while (pos <= q.size()) {
    size_t amp = q.find('&', pos);
    if (amp == std::string::npos) amp = q.size();
    std::string kv = q.substr(pos, amp - pos);
    if (!kv.empty()) {
      size_t eq = kv.find('=');
      if (eq == std::string::npos || eq == 0)
        return Fail(Errc::kInvalidArgument,
                    "metadata filter must be key=value pairs joined by &, not \"" + kv + "\"");
      // The SDK encodes keys and values, then the whole string.
      std::string k = PercentDecode(PercentDecode(kv.substr(0, eq)));
      if (k.empty()) return Fail(Errc::kInvalidArgument, "metadata filter has an empty key");
      out[k] = PercentDecode(PercentDecode(kv.substr(eq + 1)));
    }
    pos = amp + 1;
  }
  return out;
}

Result<int64_t> ParseRfc3339(const std::string& s) {
  auto bad = [&] { return Fail(Errc::kInvalidArgument, "not an RFC 3339 date-time: \"" + s + "\""); };
  // YYYY-MM-DDTHH:MM:SS[.frac](Z|+HH:MM|-HH:MM)
  if (s.size() < 20) return bad();
  auto digits = [&](size_t at, size_t n, int* v) {
    if (at + n > s.size()) return false;
    *v = 0;
    for (size_t i = at; i < at + n; ++i) {
      if (s[i] < '0' || s[i] > '9') return false;
      *v = *v * 10 + (s[i] - '0');
    }
    return true;
  };
  int y, mo, d, h, mi, se;
  if (!digits(0, 4, &y) || s[4] != '-' || !digits(5, 2, &mo) || s[7] != '-' || !digits(8, 2, &d) ||
      (s[10] != 'T' && s[10] != 't' && s[10] != ' ') || !digits(11, 2, &h) || s[13] != ':' ||
      !digits(14, 2, &mi) || s[16] != ':' || !digits(17, 2, &se))
    return bad();
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || se > 60) return bad();
  size_t at = 19;
  int64_t ms = 0;
  if (at < s.size() && s[at] == '.') {
    ++at;
    size_t start = at;
    int64_t scale = 100;
    while (at < s.size() && s[at] >= '0' && s[at] <= '9') {
      ms += (s[at] - '0') * scale;
      scale /= 10;
      ++at;
    }
    if (at == start) return bad();
  }
  int64_t offset_s = 0;
  if (at < s.size() && (s[at] == 'Z' || s[at] == 'z')) {
    ++at;
  } else if (at < s.size() && (s[at] == '+' || s[at] == '-')) {
    int oh, om;
    if (!digits(at + 1, 2, &oh) || at + 3 >= s.size() || s[at + 3] != ':' || !digits(at + 4, 2, &om) ||
        oh > 23 || om > 59)
      return bad();
    offset_s = (oh * 3600 + om * 60) * (s[at] == '+' ? 1 : -1);
    at += 6;
  } else {
    return bad();
  }
  if (at != s.size()) return bad();
  // Days from the civil date (Howard Hinnant's algorithm), no time zone involved.
  int yy = y - (mo <= 2);
  int era = (yy >= 0 ? yy : yy - 399) / 400;
  unsigned yoe = static_cast<unsigned>(yy - era * 400);
  unsigned doy = (153 * (mo + (mo > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  int64_t days = static_cast<int64_t>(era) * 146097 + doe - 719468;
  int64_t secs = days * 86400 + h * 3600 + mi * 60 + se - offset_s;
  return secs * 1000 + ms;
}

std::string EncodePageToken(const PageCursor& c) { return std::to_string(c.created_ms) + "." + c.id; }

Result<PageCursor> DecodePageToken(const std::string& token) {
  auto bad = [&] { return Fail(Errc::kInvalidArgument, "invalid nextToken \"" + token + "\""); };
  size_t dot = token.find('.');
  if (dot == std::string::npos || dot == 0 || dot > 15 || dot + 1 >= token.size()) return bad();
  PageCursor c;
  for (size_t i = 0; i < dot; ++i) {
    if (token[i] < '0' || token[i] > '9') return bad();
    c.created_ms = c.created_ms * 10 + (token[i] - '0');
  }
  c.id = token.substr(dot + 1);
  if (c.id.size() > 128) return bad();
  for (char ch : c.id) {
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '_') return bad();
  }
  return c;
}

Result<size_t> ParsePageLimit(const std::string& limit) {
  if (limit.empty()) return size_t{100};
  if (limit.size() > 3 || !std::all_of(limit.begin(), limit.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return Fail(Errc::kInvalidArgument, "limit must be a whole number from 1 to 100, not \"" + limit + "\"");
  size_t n = std::stoul(limit);
  if (n < 1 || n > 100) return Fail(Errc::kInvalidArgument, "limit must be from 1 to 100");
  return n;
}

bool AfterCursor(const PageCursor& c, const PageCursor& after, bool ascending) {
  if (c.created_ms != after.created_ms)
    return ascending ? c.created_ms > after.created_ms : c.created_ms < after.created_ms;
  return ascending ? c.id > after.id : c.id < after.id;
}

Result<ListQuery> ParseListQuery(const std::function<std::vector<std::string>(const std::string&)>& get,
                                 bool v2) {
  ListQuery q;
  auto one = [&](const std::string& key) -> Result<std::string> {
    auto v = get(key);
    if (v.size() > 1) return Fail(Errc::kInvalidArgument, key + " is given more than once");
    return v.empty() ? std::string() : v[0];
  };
  auto meta = one("metadata");
  if (!meta) return tl::unexpected(meta.error());
  auto labels = ParseMetadataFilter(*meta);
  if (!labels) return tl::unexpected(labels.error());
  q.metadata = std::move(*labels);
  if (!v2) {
    q.states = {"running"};
    return q;
  }
  // state: repeated (explode) or comma-separated; default both.
  for (const auto& v : get("state")) {
    for (size_t pos = 0; pos <= v.size();) {
      size_t comma = v.find(',', pos);
      if (comma == std::string::npos) comma = v.size();
      std::string st = v.substr(pos, comma - pos);
      if (st == "running" || st == "paused") {
        q.states.insert(st);
      } else if (!st.empty()) {
        return Fail(Errc::kInvalidArgument, "state must be running or paused, not \"" + st + "\"");
      }
      pos = comma + 1;
    }
  }
  if (q.states.empty()) q.states = {"running", "paused"};
  auto order = one("order");
  if (!order) return tl::unexpected(order.error());
  if (*order == "asc") {
    q.ascending = true;
  } else if (!order->empty() && *order != "desc") {
    return Fail(Errc::kInvalidArgument, "order must be asc or desc, not \"" + *order + "\"");
  }
  auto after = one("startedAfter");
  if (!after) return tl::unexpected(after.error());
  if (!after->empty()) {
    auto ms = ParseRfc3339(*after);
    if (!ms) return Fail(Errc::kInvalidArgument, "startedAfter: " + ms.error().message);
    q.started_after_ms = *ms;
  }
  auto tmpl = one("template");
  if (!tmpl) return tl::unexpected(tmpl.error());
  if (!tmpl->empty()) q.template_ref = TemplateRef(*tmpl);
  auto limit = one("limit");
  if (!limit) return tl::unexpected(limit.error());
  auto n = ParsePageLimit(*limit);
  if (!n) return tl::unexpected(n.error());
  q.limit = *n;
  auto token = one("nextToken");
  if (!token) return tl::unexpected(token.error());
  if (!token->empty()) {
    auto c = DecodePageToken(*token);
    if (!c) return tl::unexpected(c.error());
    q.after = *c;
  }
  return q;
}

// ---------------------------------------------------------------- watching

WatchState WatchStateOf(const Json& entries, const std::string& dir, bool keep_entries) {
  WatchState out;
  if (!entries.is_array()) return out;
  const std::string prefix = dir.empty() || dir.back() == '/' ? dir : dir + "/";
  for (const auto& e : entries) {
    std::string path = JsonStringOr(e, "path", "");
    if (!StartsWith(path, prefix) || path.size() == prefix.size()) continue;
    WatchEntry w;
    w.type = JsonStringOr(e, "type", "other");
    w.size = JsonIntOr(e, "size", 0);
    w.mtime_ms = JsonIntOr(e, "mtime_ms", 0);
    w.mode = JsonIntOr(e, "mode", 0);
    if (keep_entries) w.entry = e;
    out[path.substr(prefix.size())] = std::move(w);
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> DiffWatch(const WatchState& before, const WatchState& after) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [name, now] : after) {
    auto it = before.find(name);
    if (it == before.end() || it->second.type != now.type) {
      if (it != before.end()) out.emplace_back(name, "EVENT_TYPE_REMOVE");
      out.emplace_back(name, "EVENT_TYPE_CREATE");
      if (now.type == "file" && now.size > 0) out.emplace_back(name, "EVENT_TYPE_WRITE");
      continue;
    }
    const WatchEntry& was = it->second;
    // A directory's size and mtime change with its entries: those are reported themselves.
    if (now.type != "dir" && (was.size != now.size || was.mtime_ms != now.mtime_ms))
      out.emplace_back(name, "EVENT_TYPE_WRITE");
    if (was.mode != now.mode) out.emplace_back(name, "EVENT_TYPE_CHMOD");
  }
  for (const auto& [name, was] : before) {
    if (!after.count(name)) out.emplace_back(name, "EVENT_TYPE_REMOVE");
  }
  return out;
}

// ---------------------------------------------------------------- envd helpers

std::string AbsPath(const std::string& path, const std::string& base) {
  if (!path.empty() && path[0] == '/') return path;
  std::string b = base.empty() || base[0] != '/' ? "/" : base;
  if (b.back() != '/') b += '/';
  if (path.empty() || path == ".") return b.size() > 1 ? b.substr(0, b.size() - 1) : b;
  if (StartsWith(path, "./")) return b + path.substr(2);
  return b + path;
}

std::string BasicUser(const std::string& auth) {
  const std::string prefix = "Basic ";
  if (!StartsWith(auth, prefix)) return "";
  auto decoded = rpc::Base64Decode(auth.substr(prefix.size()));
  if (!decoded) return "";
  return decoded->substr(0, decoded->find(':'));
}

std::string MediaType(std::string ct) {
  if (size_t semi = ct.find(';'); semi != std::string::npos) ct.resize(semi);
  while (!ct.empty() && ct.back() == ' ') ct.pop_back();
  return ct;
}

std::string MultipartBoundary(const std::string& ct_full) {
  size_t b = ct_full.find("boundary=");
  std::string boundary = b == std::string::npos ? "" : ct_full.substr(b + 9);
  if (!boundary.empty() && boundary.front() == '"') boundary = boundary.substr(1, boundary.find('"', 1) - 1);
  if (size_t semi = boundary.find(';'); semi != std::string::npos) boundary.resize(semi);
  return boundary;
}

// ---------------------------------------------------------------- process.Process

Result<core::CommandRequest> ParseStart(const Json& req) {
  core::CommandRequest out;
  const Json* proc = rpc::Field(req, "process");
  if (!proc || !proc->is_object()) return Fail(Errc::kInvalidArgument, "process is required");
  const Json* cmd = rpc::Field(*proc, "cmd");
  if (!cmd || !cmd->is_string() || cmd->get<std::string>().empty())
    return Fail(Errc::kInvalidArgument, "process.cmd is required");
  out.argv.push_back(cmd->get<std::string>());
  if (const Json* args = rpc::Field(*proc, "args")) {
    if (!args->is_array()) return Fail(Errc::kInvalidArgument, "process.args must be a list");
    for (const auto& a : *args) {
      if (!a.is_string()) return Fail(Errc::kInvalidArgument, "process.args must hold strings");
      out.argv.push_back(a.get<std::string>());
    }
  }
  if (const Json* envs = rpc::Field(*proc, "envs")) {
    if (!envs->is_object()) return Fail(Errc::kInvalidArgument, "process.envs must be a map");
    for (const auto& [k, v] : envs->items()) {
      if (!v.is_string()) return Fail(Errc::kInvalidArgument, "process.envs values must be strings");
      out.env[k] = v.get<std::string>();
    }
  }
  if (const Json* cwd = rpc::Field(*proc, "cwd")) {
    if (!cwd->is_string()) return Fail(Errc::kInvalidArgument, "process.cwd must be a string");
    // A relative cwd is left so: the route makes it absolute from the user's home.
    if (!cwd->get<std::string>().empty()) out.cwd = cwd->get<std::string>();
  }
  if (const Json* in = rpc::Field(req, "stdin")) out.stdin = in->is_boolean() && in->get<bool>();
  if (const Json* pty = rpc::Field(req, "pty")) {
    const Json* size = rpc::Field(*pty, "size");
    Json dims = size ? *size : Json::object();
    auto parsed = ParsePtySize(dims);
    if (!parsed) return tl::unexpected(parsed.error());
    out.pty = *parsed;
  }
  return out;
}

Result<int64_t> SelectedPid(const Json& req) {
  const Json* sel = rpc::Field(req, "process");
  if (!sel || !sel->is_object()) return Fail(Errc::kInvalidArgument, "process selector is required");
  if (rpc::Field(*sel, "tag")) return Fail(Errc::kNotFound, "no process with that tag");
  const Json* pid = rpc::Field(*sel, "pid");
  if (!pid || !pid->is_number_unsigned()) return Fail(Errc::kInvalidArgument, "process.pid is required");
  return pid->get<int64_t>();
}

Result<std::string> ParseSendInput(const Json& req) {
  const Json* input = rpc::Field(req, "input");
  const Json* data = input ? rpc::Field(*input, "stdin") : nullptr;
  if (!data && input) data = rpc::Field(*input, "pty");
  if (!data || !data->is_string()) return Fail(Errc::kInvalidArgument, "input.stdin or input.pty is required");
  return rpc::Base64Decode(data->get<std::string>());
}

Result<int> ParseSendSignal(const Json& req) {
  const Json* sig = rpc::Field(req, "signal");
  int n = 0;
  // Compared as int64: get<int>() truncated, so 2^32 + 9 was SIGKILL.
  if (sig && sig->is_number_integer()) n = sig->get<int64_t>() == SIGKILL ? SIGKILL
                                         : sig->get<int64_t>() == SIGTERM ? SIGTERM : 0;
  if (sig && sig->is_string()) {
    std::string name = sig->get<std::string>();
    n = name == "SIGNAL_SIGKILL" ? SIGKILL : name == "SIGNAL_SIGTERM" ? SIGTERM : 0;
  }
  if (n != SIGKILL && n != SIGTERM)
    return Fail(Errc::kInvalidArgument, "signal must be SIGNAL_SIGKILL or SIGNAL_SIGTERM");
  return n;
}

Result<core::CommandRequest::PtySize> ParseUpdate(const Json& req) {
  const Json* pty = rpc::Field(req, "pty");
  const Json* size = pty ? rpc::Field(*pty, "size") : nullptr;
  if (!size) return Fail(Errc::kInvalidArgument, "pty.size is required");
  return ParsePtySize(*size);
}

// ---------------------------------------------------------------- filesystem.Filesystem

Result<std::string> PathField(const Json& req, const char* name, const std::string& base) {
  const Json* f = rpc::Field(req, name);
  if (!f || !f->is_string() || f->get<std::string>().empty())
    return Fail(Errc::kInvalidArgument, std::string(name) + " is required");
  return AbsPath(f->get<std::string>(), base);
}

int ListDirDepth(const Json& req) {
  int64_t depth = 1;
  if (const Json* d = rpc::Field(req, "depth"); d && d->is_number_integer())
    depth = d->get<int64_t>();
  if (depth < 1) depth = 1;
  return static_cast<int>(std::min<int64_t>(depth, 16));
}

// ---------------------------------------------------------------- multipart

Status Multipart::Feed(std::string_view data) {
  buf_.append(data);
  for (;;) {
    if (state_ == kPreamble) {
      // The first boundary has no leading CRLF: match it with one prepended.
      std::string probe = "\r\n" + buf_;
      size_t at = probe.find(delim_);
      if (at == std::string::npos) {
        if (buf_.size() > 4096) return Fail(Errc::kInvalidArgument, "multipart: no boundary");
        return Ok();
      }
      buf_.erase(0, at + delim_.size() - 2);
      state_ = kAfterBoundary;
    } else if (state_ == kAfterBoundary) {
      if (buf_.size() < 2) return Ok();
      if (buf_.compare(0, 2, "--") == 0) {
        state_ = kDone;
        return Ok();
      }
      size_t eol = buf_.find("\r\n");
      if (eol == std::string::npos) return buf_.size() > 1024 ? Fail(Errc::kInvalidArgument, "multipart: bad boundary line") : Ok();
      buf_.erase(0, eol + 2);
      state_ = kHeaders;
    } else if (state_ == kHeaders) {
      size_t end = buf_.find("\r\n\r\n");
      if (end == std::string::npos) {
        if (buf_.size() > 16384) return Fail(Errc::kInvalidArgument, "multipart: headers too long");
        return Ok();
      }
      std::string headers = buf_.substr(0, end);
      buf_.erase(0, end + 4);
      SPACE_TRY(on_part(Filename(headers)));
      state_ = kBody;
    } else if (state_ == kBody) {
      size_t at = buf_.find(delim_);
      if (at == std::string::npos) {
        // Keep what could be the start of a delimiter split across pieces.
        if (buf_.size() >= delim_.size()) {
          size_t emit = buf_.size() - (delim_.size() - 1);
          SPACE_TRY(on_data(std::string_view(buf_).substr(0, emit)));
          buf_.erase(0, emit);
        }
        return Ok();
      }
      SPACE_TRY(on_data(std::string_view(buf_).substr(0, at)));
      SPACE_TRY(on_end());
      buf_.erase(0, at + delim_.size());
      state_ = kAfterBoundary;
    } else {
      return Ok();  // the epilogue is ignored
    }
  }
}

std::string Multipart::Filename(const std::string& headers) {
  // Content-Disposition: form-data; name="file"; filename="/path"
  size_t at = headers.find("filename=\"");
  if (at == std::string::npos) return "";
  at += 10;
  std::string out;
  for (size_t i = at; i < headers.size() && headers[i] != '"'; ++i) {
    if (headers[i] == '\\' && i + 1 < headers.size()) ++i;
    out.push_back(headers[i]);
  }
  return out;
}

}  // namespace space::api::e2b
