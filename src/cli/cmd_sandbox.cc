// space create | ls | get | rm | ops | op | templates
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <memory>

#include "cli/args.h"
#include "cli/commands.h"

namespace space::cli {

using client::Client;
using std::chrono::milliseconds;

namespace {

milliseconds Seconds(double s) {
  return s > 0 ? milliseconds{static_cast<int64_t>(s * 1000)} : milliseconds{0};
}

std::string Age(const Json& object, const char* key) {
  auto created = ParseRfc3339Millis(JsonStringOr(object, key, ""));
  return FormatAge(created, NowUnixMillis());
}

std::string FormatBytes(int64_t n) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  int64_t v = n;
  while (u < 4 && v >= 1024 && v % 1024 == 0) {
    v /= 1024;
    ++u;
  }
  return std::to_string(v) + kUnits[u];
}

// ---- create ----

struct CreateArgs {
  std::string template_ref, snapshot, runtime, memory;
  std::string timeout, on_timeout, idle_timeout;
  std::vector<std::string> env, labels, volumes;
  double cpus = 0;
  int64_t pids = 0;
  bool network = false;
  std::string net_mode;
  std::vector<std::string> allow_out, deny_out, secrets;
  bool public_traffic = false;
  bool auto_resume = false;
  bool async = false;
  double wait_timeout = 0;
  CLI::Option* cpus_opt = nullptr;
  CLI::Option* pids_opt = nullptr;
};

// --net none|internet, --allow-out, --deny-out, --secret NAME=VALUE@HOST[,HOST...],
// --public-traffic (and the older --network = --net internet) as the API's network object;
// null when none of them was given.
Result<Json> NetworkBody(const std::string& mode, bool network_flag,
                         const std::vector<std::string>& allow_out,
                         const std::vector<std::string>& deny_out,
                         const std::vector<std::string>& secrets, bool public_traffic) {
  if (!mode.empty() && mode != "none" && mode != "internet")
    return Fail(Errc::kInvalidArgument, "--net must be none or internet, not \"" + mode + "\"");
  if (network_flag && mode == "none")
    return Fail(Errc::kInvalidArgument, "--network and --net none exclude each other");
  if (mode.empty() && !network_flag && allow_out.empty() && deny_out.empty() && secrets.empty() &&
      !public_traffic)
    return Json(nullptr);
  Json n = Json::object();
  if (network_flag) n["mode"] = "internet";
  if (!mode.empty()) n["mode"] = mode;
  if (!allow_out.empty()) n["allow_out"] = allow_out;
  if (!deny_out.empty()) n["deny_out"] = deny_out;
  if (public_traffic) n["public_traffic"] = true;
  if (!secrets.empty()) {
    Json list = Json::array();
    for (const auto& s : secrets) {
      size_t eq = s.find('='), at = s.rfind('@');
      if (eq == std::string::npos || eq == 0 || at == std::string::npos || at < eq || at + 1 == s.size())
        return Fail(Errc::kInvalidArgument,
                    "--secret wants NAME=VALUE@HOST[,HOST...] (the hosts it may be sent to), not \"" +
                        s.substr(0, eq == std::string::npos ? s.size() : eq) + "=...\"");
      Json hosts = Json::array();
      std::string rest = s.substr(at + 1);
      size_t start = 0;
      while (start <= rest.size()) {
        size_t comma = rest.find(',', start);
        if (comma == std::string::npos) comma = rest.size();
        if (comma > start) hosts.push_back(rest.substr(start, comma - start));
        start = comma + 1;
      }
      list.push_back({{"name", s.substr(0, eq)}, {"value", s.substr(eq + 1, at - eq - 1)}, {"hosts", hosts}});
    }
    n["secrets"] = list;
  }
  return n;
}

int RunCreate(Context& ctx, const CreateArgs& a) {
  Json body = Json::object();
  if (!a.template_ref.empty() && !a.snapshot.empty()) {
    return ReportUsage("create: --template and --from-snapshot exclude each other");
  }
  if (!a.template_ref.empty()) body["template"] = a.template_ref;
  if (!a.snapshot.empty()) body["snapshot"] = a.snapshot;
  if (!a.runtime.empty()) body["runtime"] = a.runtime;
  Json limits = Json::object();
  if (!a.memory.empty()) {
    auto m = ParseByteSize(a.memory);
    if (!m) return ReportUsage("--memory: " + m.error().message);
    limits["memory_bytes"] = *m;
  }
  if (a.cpus_opt->count() > 0) {
    if (!(a.cpus > 0) || !std::isfinite(a.cpus)) return ReportUsage("--cpus must be positive");
    limits["cpus"] = a.cpus;
  }
  if (a.pids_opt->count() > 0) {
    if (a.pids <= 0) return ReportUsage("--pids must be positive");
    limits["pids"] = a.pids;
  }
  if (!limits.empty()) body["limits"] = limits;
  auto env = KeyValuesToObject(a.env);
  if (!env) return ReportUsage("--env: " + env.error().message);
  if (!env->empty()) body["env"] = *env;
  auto labels = KeyValuesToObject(a.labels);
  if (!labels) return ReportUsage("--label: " + labels.error().message);
  if (!labels->empty()) body["metadata"] = *labels;
  {
    auto network = NetworkBody(a.net_mode, a.network, a.allow_out, a.deny_out, a.secrets,
                               a.public_traffic);
    if (!network) return ReportUsage(network.error().message);
    if (!network->is_null()) body["network"] = *network;
  }
  if (!a.volumes.empty()) {
    // NAME:/path[:ro|:rw]
    Json vols = Json::array();
    for (const std::string& v : a.volumes) {
      size_t colon = v.find(':');
      if (colon == std::string::npos || colon == 0 || colon + 1 >= v.size() || v[colon + 1] != '/')
        return ReportUsage("--volume must be NAME:/path[:ro], not \"" + v + "\"");
      std::string path = v.substr(colon + 1);
      bool ro = false;
      if (size_t last = path.rfind(':'); last != std::string::npos) {
        std::string flag = path.substr(last + 1);
        if (flag != "ro" && flag != "rw")
          return ReportUsage("--volume " + v + ": the suffix must be :ro or :rw");
        ro = flag == "ro";
        path = path.substr(0, last);
      }
      vols.push_back({{"name", v.substr(0, colon)}, {"path", path}, {"read_only", ro}});
    }
    body["volumes"] = vols;
  }
  if (!a.timeout.empty()) {
    auto t = ParseSeconds(a.timeout);
    if (!t) return ReportUsage("--timeout: " + t.error().message);
    body["timeout"] = *t;
  }
  if (!a.on_timeout.empty()) {
    if (auto ok = CheckOnTimeout(a.on_timeout); !ok) {
      return ReportUsage("--on-timeout: " + ok.error().message);
    }
    body["on_timeout"] = a.on_timeout;
  }
  if (!a.idle_timeout.empty()) {
    auto t = ParseSeconds(a.idle_timeout);
    if (!t) return ReportUsage("--idle-timeout: " + t.error().message);
    body["idle_timeout"] = *t;
  }
  if (a.auto_resume) body["auto_resume"] = true;
  if (a.wait_timeout < 0) return ReportUsage("--wait-timeout must not be negative");

  auto c = ctx.GetClient();
  if (!c) return ReportError(c.error());
  if (a.async) {
    auto r = (*c)->CreateSandbox(body);
    if (!r) return ReportError(r.error());
    PrintAsync(ctx, *r);
    return 0;
  }
  auto sb = (*c)->CreateSandboxAndWait(body, WaitOptionsFor(a.wait_timeout));
  if (!sb && sb.error().code == Errc::kUnavailable) {
    // A built-in template being built: follow its build, then create.
    const std::string& m = sb.error().message;
    size_t at = m.find("(operation op-");
    if (at != std::string::npos) {
      std::string op = m.substr(at + 11, m.find_first_of(", )", at + 11) - (at + 11));
      std::fprintf(stderr, "space: %s\nspace: waiting for %s (its log: GET /v1/templates/builds/%s/log)\n",
                   m.c_str(), op.c_str(), op.c_str());
      std::string shown;
      for (;;) {
        auto o = (*c)->GetOperation(op, std::chrono::seconds(2));
        if (!o) return ReportError(o.error());
        if (::isatty(STDERR_FILENO)) {
          auto log = (*c)->Request("GET", "/v1/templates/builds/" + op + "/log");
          if (log && log->ok() && log->body.size() > shown.size() &&
              log->body.compare(0, shown.size(), shown) == 0) {
            std::fwrite(log->body.data() + shown.size(), 1, log->body.size() - shown.size(), stderr);
            shown = log->body;
          }
        }
        std::string state = JsonStringOr(*o, "state", "");
        if (state == "failed") {
          const Json* e = JsonField(*o, "error");
          return ReportError(Error{Errc::kUnavailable, 0,
                                   "building the template failed: " +
                                       JsonStringOr(e ? *e : Json(), "message", "see its log")});
        }
        if (state == "succeeded") break;
      }
      sb = (*c)->CreateSandboxAndWait(body, WaitOptionsFor(a.wait_timeout));
    }
  }
  if (!sb) return ReportError(sb.error());
  if (ctx.globals.json) {
    PrintJson(*sb);
  } else {
    PrintText(JsonStringOr(*sb, "id", "") + "\n");
  }
  return 0;
}

// ---- ls ----

struct LsArgs {
  std::vector<std::string> labels;
  std::string state;
};

int RunLs(Context& ctx, const LsArgs& a) {
  auto labels = KeyValuesToPairs(a.labels);
  if (!labels) return ReportUsage("--label: " + labels.error().message);
  auto c = ctx.GetClient();
  if (!c) return ReportError(c.error());
  auto list = (*c)->ListSandboxes(*labels, a.state);
  if (!list) return ReportError(list.error());
  if (ctx.globals.json) {
    PrintJson(*list);
    return 0;
  }
  std::vector<std::vector<std::string>> rows = {
      {"ID", "STATE", "TEMPLATE", "RUNTIME", "AGE", "LABELS"}};
  for (const Json& sb : *list) {
    rows.push_back({Cell(sb, "id"), Cell(sb, "state"), Cell(sb, "template"), Cell(sb, "runtime"),
                    Age(sb, "created_at"),
                    FormatLabels(JsonField(sb, "metadata") ? sb["metadata"] : Json())});
  }
  PrintText(FormatTable(rows));
  return 0;
}

// ---- get ----

std::string NetworkLine(const Json& sb) {
  const Json* n = JsonField(sb, "network");
  if (!n || !n->is_object()) return "none";
  std::string line = JsonStringOr(*n, "mode", "none");
  auto list = [&](const char* key) {
    std::string out;
    if (const Json* l = JsonField(*n, key); l && l->is_array()) {
      for (const auto& e : *l) out += (out.empty() ? "" : ",") + (e.is_string() ? e.get<std::string>() : e.dump());
    }
    return out;
  };
  if (auto a = list("allow_out"); !a.empty()) line += " allow_out=" + a;
  if (auto d = list("deny_out"); !d.empty()) line += " deny_out=" + d;
  if (const Json* s = JsonField(*n, "secrets"); s && s->is_array() && !s->empty()) {
    std::string names;
    for (const auto& e : *s) names += (names.empty() ? "" : ",") + JsonStringOr(e, "name", "?");
    line += " secrets=" + names;
  }
  if (JsonBoolOr(*n, "public_traffic", false)) line += " public_traffic";
  if (auto ip = JsonStringOr(*n, "sandbox_ip", ""); !ip.empty()) line += " ip=" + ip;
  return line;
}

int RunGet(Context& ctx, const std::string& id) {
  auto c = ctx.GetClient();
  if (!c) return ReportError(c.error());
  auto sb = (*c)->GetSandbox(id);
  if (!sb) return ReportError(sb.error());
  if (ctx.globals.json) {
    PrintJson(*sb);
    return 0;
  }
  std::string state = Cell(*sb, "state");
  if (auto reason = JsonStringOr(*sb, "reason", ""); !reason.empty()) state += " (" + reason + ")";
  std::string tmpl = Cell(*sb, "template");
  if (auto d = JsonString(*sb, "template_digest")) tmpl += " (" + *d + ")";
  std::string limits;
  if (const Json* l = JsonField(*sb, "limits"); l && l->is_object()) {
    if (auto m = JsonInt(*l, "memory_bytes")) limits += "memory=" + FormatBytes(*m) + " ";
    if (const Json* cpus = JsonField(*l, "cpus")) limits += "cpus=" + cpus->dump() + " ";
    if (auto p = JsonInt(*l, "pids")) limits += "pids=" + std::to_string(*p) + " ";
  }
  if (!limits.empty()) limits.pop_back();
  std::string labels = FormatLabels(JsonField(*sb, "metadata") ? (*sb)["metadata"] : Json());
  std::string env;
  if (const Json* e = JsonField(*sb, "env"); e && e->is_object()) env = FormatLabels(*e);
  std::vector<std::vector<std::string>> rows = {
      {"ID:", Cell(*sb, "id")},
      {"State:", state},
      {"Template:", tmpl},
      {"Runtime:", Cell(*sb, "runtime")},
      {"Limits:", limits.empty() ? "-" : limits},
      {"Network:", NetworkLine(*sb)},
      {"Env:", env.empty() ? "-" : env},
      {"Labels:", labels.empty() ? "-" : labels},
      {"Created:", Cell(*sb, "created_at") + " (" + Age(*sb, "created_at") + " ago)"},
      {"Updated:", Cell(*sb, "updated_at")},
  };
  PrintText(FormatTable(rows));
  return 0;
}

// ---- network ----

struct NetworkArgs {
  std::string id, mode;
  std::vector<std::string> allow_out, deny_out;
  bool set = false;
};

// Shows a sandbox's policy and recent egress decisions, or (with a rule flag) replaces the
// egress part of its policy.
int RunNetwork(Context& ctx, const NetworkArgs& a) {
  auto c = ctx.GetClient();
  if (!c) return ReportError(c.error());
  const std::string path = "/v1/sandboxes/" + a.id + "/network";
  Result<Json> r = Json();
  if (a.set) {
    Json body = {{"allow_out", a.allow_out}, {"deny_out", a.deny_out}};
    if (!a.mode.empty()) body["mode"] = a.mode;
    r = (*c)->Call("PUT", path, body);
  } else {
    r = (*c)->Call("GET", path);
  }
  if (!r) return ReportError(r.error());
  if (ctx.globals.json || a.set) {
    PrintJson(*r);
    return 0;
  }
  std::string out = "Policy: " + NetworkLine(Json{{"network", *r}}) + "\n";
  std::vector<std::vector<std::string>> rows = {
      {"TIME", "PROTO", "DESTINATION", "PORT", "NAME", "VERDICT", "REASON", "OUT", "IN"}};
  if (const Json* d = JsonField(*r, "decisions"); d && d->is_array()) {
    for (const auto& e : *d) {
      rows.push_back({Cell(e, "time"), Cell(e, "proto"), Cell(e, "destination"), Cell(e, "port"),
                      Cell(e, "name"), Cell(e, "verdict"), Cell(e, "reason"),
                      FormatBytes(JsonIntOr(e, "bytes_out", 0)),
                      FormatBytes(JsonIntOr(e, "bytes_in", 0))});
    }
  }
  PrintText(out + FormatTable(rows));
  return 0;
}

// ---- rm ----

struct RmArgs {
  std::vector<std::string> ids;
  std::vector<std::string> labels;  // K=V: every sandbox they all match (a bulk delete)
  bool async = false;
  double timeout = 0;
};

// One sandbox's finished delete as rm reports it: its id on a line (an entry with --json),
// or the error.
void ReportRemoved(Context& ctx, const std::string& id, Status st, Json* results, int* rc) {
  if (!st) {
    *rc = ReportError(std::move(st).error().Wrap("rm " + id));
  } else if (ctx.globals.json) {
    results->push_back(Json{{"id", id}, {"deleted", true}});
  } else {
    PrintText(id + "\n");
  }
}

// rm --label: one bulk delete, then (unless --async) a wait for each operation it started.
int RunRmByLabel(Context& ctx, client::Client& c, const RmArgs& a) {
  auto labels = KeyValuesToPairs(a.labels);
  if (!labels) return ReportUsage("--label: " + labels.error().message);
  auto r = c.DeleteSandboxesByLabel(*labels);
  if (!r) return ReportError(std::move(r).error().Wrap("rm --label"));
  auto array_of = [&r](const char* key) {
    const Json* f = JsonField(*r, key);
    return f && f->is_array() ? *f : Json::array();
  };
  int rc = 0;
  for (const Json& e : array_of("errors")) {
    // Each entry carries an error as an operation does.
    rc = ReportError(client::Client::OperationError(e).Wrap("rm " + JsonStringOr(e, "sandbox_id", "?")));
  }
  Json results = Json::array();
  for (const Json& op : array_of("operations")) {
    const std::string id = JsonStringOr(op, "target", "");
    if (a.async) {
      if (ctx.globals.json) {
        results.push_back(Json{{"operation", op}});
      } else {
        PrintText(JsonStringOr(op, "id", "") + "\n");
      }
      continue;
    }
    auto done = c.WaitOperation(JsonStringOr(op, "id", ""), WaitOptionsFor(a.timeout).timeout);
    Status st = Ok();
    if (!done) {
      st = tl::unexpected(std::move(done).error());
    } else if (JsonStringOr(*done, "state", "") == "failed") {
      st = tl::unexpected(client::Client::OperationError(*done));
    }
    ReportRemoved(ctx, id, std::move(st), &results, &rc);
  }
  if (ctx.globals.json) PrintJson(results);
  return rc;
}

int RunRm(Context& ctx, const RmArgs& a) {
  if (a.ids.empty() == a.labels.empty())
    return ReportUsage("rm takes sandbox ids or --label KEY=VALUE, one of the two");
  auto c = ctx.GetClient();
  if (!c) return ReportError(c.error());
  if (!a.labels.empty()) return RunRmByLabel(ctx, **c, a);
  int rc = 0;
  Json results = Json::array();
  for (const std::string& id : a.ids) {
    if (a.async) {
      auto r = (*c)->DeleteSandbox(id);
      if (!r) {
        rc = ReportError(std::move(r).error().Wrap("rm " + id));
        continue;
      }
      const Json* op = JsonField(*r, "operation");
      if (ctx.globals.json) {
        results.push_back(*r);
      } else {
        PrintText(JsonStringOr(op ? *op : Json(), "id", "") + "\n");
      }
      continue;
    }
    ReportRemoved(ctx, id, (*c)->DeleteSandboxAndWait(id, WaitOptionsFor(a.timeout)), &results, &rc);
  }
  if (ctx.globals.json) PrintJson(results);
  return rc;
}

// ---- ops / op ----

struct OpsArgs {
  int limit = -1;
  std::string state;
};

std::string OpErrorCell(const Json& op) {
  if (const Json* e = JsonField(op, "error"); e && e->is_object()) {
    return JsonStringOr(*e, "code", "") + ": " + JsonStringOr(*e, "message", "");
  }
  return "";
}

int RunOps(Context& ctx, const OpsArgs& a) {
  auto c = ctx.GetClient();
  if (!c) return ReportError(c.error());
  auto ops = (*c)->ListOperations(a.state, a.limit);
  if (!ops) return ReportError(ops.error());
  if (ctx.globals.json) {
    PrintJson(*ops);
    return 0;
  }
  std::vector<std::vector<std::string>> rows = {{"ID", "KIND", "TARGET", "STATE", "AGE", "ERROR"}};
  for (const Json& op : *ops) {
    rows.push_back({Cell(op, "id"), Cell(op, "kind"), Cell(op, "target"), Cell(op, "state"),
                    Age(op, "created_at"), OpErrorCell(op)});
  }
  PrintText(FormatTable(rows));
  return 0;
}

struct OpArgs {
  std::string id;
  bool wait = false;
  double timeout = 0;
};

int RunOp(Context& ctx, const OpArgs& a) {
  auto c = ctx.GetClient();
  if (!c) return ReportError(c.error());
  auto op = a.wait ? (*c)->WaitOperation(a.id, Seconds(a.timeout)) : (*c)->GetOperation(a.id);
  if (!op) return ReportError(op.error());
  if (ctx.globals.json) {
    PrintJson(*op);
  } else {
    std::vector<std::vector<std::string>> rows = {
        {"ID:", Cell(*op, "id")},
        {"Kind:", Cell(*op, "kind")},
        {"Target:", Cell(*op, "target")},
        {"State:", Cell(*op, "state")},
        {"Created:", Cell(*op, "created_at")},
        {"Updated:", Cell(*op, "updated_at")},
    };
    if (std::string e = OpErrorCell(*op); !e.empty()) rows.push_back({"Error:", e});
    if (const Json* r = JsonField(*op, "result"); r && !(r->is_object() && r->empty())) {
      rows.push_back({"Result:", r->dump(-1, ' ', false, Json::error_handler_t::replace)});
    }
    PrintText(FormatTable(rows));
  }
  if (a.wait && JsonStringOr(*op, "state", "") == "failed") {
    return ReportError(Client::OperationError(*op));
  }
  return 0;
}

// ---- templates ----

int RunTemplates(Context& ctx) {
  auto c = ctx.GetClient();
  if (!c) return ReportError(c.error());
  auto list = (*c)->ListTemplates();
  if (!list) return ReportError(list.error());
  if (ctx.globals.json) {
    PrintJson(*list);
    return 0;
  }
  std::vector<std::vector<std::string>> rows = {{"NAME", "TAG", "DIGEST", "AGE"}};
  for (const Json& t : *list) {
    std::string digest = Cell(t, "digest");
    // Like `docker images`: a digest prefix is enough to tell templates apart.
    if (StartsWith(digest, "sha256:") && digest.size() > 19) digest = digest.substr(0, 19);
    rows.push_back({Cell(t, "name"), Cell(t, "tag"), digest, Age(t, "created_at")});
  }
  PrintText(FormatTable(rows));
  return 0;
}

// `space runtimes [--json]`: --json prints the array as is (a fixed point: objects with at
// least name and available).
int RunRuntimes(Context& ctx) {
  auto c = ctx.GetClient();
  if (!c) return ReportError(c.error());
  auto list = (*c)->ListRuntimes();
  if (!list) return ReportError(list.error());
  if (ctx.globals.json) {
    PrintJson(*list);
    return 0;
  }
  std::vector<std::vector<std::string>> rows = {{"NAME", "KIND", "AVAILABLE", "CAPABILITIES / WHY NOT"}};
  for (const Json& r : *list) {
    bool ok = JsonBoolOr(r, "available", false);
    std::string what;
    if (ok) {
      const Json* caps = JsonField(r, "capabilities");
      for (const char* k : {"pause", "suspend_keeps_processes", "own_disk", "network", "volumes"}) {
        if (caps && JsonBoolOr(*caps, k, false)) what += (what.empty() ? "" : ",") + std::string(k);
      }
      if (caps && JsonField(*caps, "snapshot_kinds")) {
        for (const auto& k : (*caps)["snapshot_kinds"])
          if (k.is_string()) what += (what.empty() ? "snapshot:" : ",snapshot:") + k.get<std::string>();
      }
    } else {
      what = Cell(r, "why_not");
    }
    std::string name = Cell(r, "name") + (JsonBoolOr(r, "default", false) ? " (default)" : "");
    rows.push_back({name, Cell(r, "kind"), ok ? "yes" : "no", what});
  }
  PrintText(FormatTable(rows));
  return 0;
}

}  // namespace

void AddSandboxCommands(CLI::App& app, Context& ctx) {
  {
    auto a = std::make_shared<CreateArgs>();
    CLI::App* cmd = app.add_subcommand(
        "create", "Create a sandbox; prints its id when it is running (--async: the operation id)");
    cmd->add_option("-t,--template", a->template_ref, "Template (name:tag or sha256:digest)");
    cmd->add_option("--from-snapshot", a->snapshot,
                    "Start from this snapshot (snap-...) instead of a template");
    cmd->add_option("--runtime", a->runtime, "Runtime (oci, microvm, or a plugin such as gvisor; see `space runtimes`)");
    cmd->add_option("-e,--env", a->env, "Environment variable K=V (repeatable)")
        ->allow_extra_args(false);
    cmd->add_option("-l,--label", a->labels, "Label K=V (repeatable)")->allow_extra_args(false);
    cmd->add_option("-v,--volume", a->volumes,
                    "Mount a named volume: NAME:/path[:ro] (repeatable; see `space volume`)")
        ->allow_extra_args(false);
    cmd->add_option("-m,--memory", a->memory, "Memory limit: bytes or 512M, 2G");
    a->cpus_opt = cmd->add_option("--cpus", a->cpus, "CPU limit (e.g. 1.5)");
    a->pids_opt = cmd->add_option("--pids", a->pids, "Process limit");
    cmd->add_flag("--network", a->network, "Same as --net internet");
    cmd->add_option("--net", a->net_mode,
                    "Network: none (default: loopback only) or internet (egress by policy)");
    cmd->add_option("--allow-out", a->allow_out,
                    "Allow only these destinations: CIDR, domain, *.domain or a preset "
                    "(pypi, npm, github, debian) (repeatable)")
        ->allow_extra_args(false);
    cmd->add_option("--deny-out", a->deny_out, "Deny these CIDRs (repeatable)")
        ->allow_extra_args(false);
    cmd->add_option("--secret", a->secrets,
                    "NAME=VALUE@HOST[,HOST...]: the sandbox sees a placeholder in $NAME; the "
                    "egress proxy sends VALUE only over TLS to those hosts (repeatable)")
        ->allow_extra_args(false);
    cmd->add_flag("--public-traffic", a->public_traffic,
                  "The sandbox's ports are reachable by URL without a traffic credential");
    cmd->add_option("--timeout", a->timeout,
                    "Sandbox lifetime: SECS (or 30m, 2h) from creation; 0 = none (server "
                    "default 300)");
    cmd->add_option("--on-timeout", a->on_timeout,
                    "What the timeout does: delete (default), pause or suspend");
    cmd->add_option(
        "--idle-timeout", a->idle_timeout,
        "Apply --on-timeout once idle (no command running or started) for SECS; 0 = none");
    cmd->add_flag("--auto-resume", a->auto_resume,
                  "When paused, resume on traffic to one of its port URLs (see space url)");
    cmd->add_flag("--async", a->async, "Do not wait: print the create operation's id");
    cmd->add_option("--wait-timeout", a->wait_timeout,
                    "Give up waiting after SECS (default: no limit)");
    cmd->callback([&ctx, a] { ctx.exit_code = RunCreate(ctx, *a); });
  }
  {
    auto a = std::make_shared<NetworkArgs>();
    CLI::App* cmd = app.add_subcommand(
        "network", "Show a sandbox's network policy and recent egress decisions, or change it");
    cmd->add_option("id", a->id, "Sandbox id")->required();
    cmd->add_option("--net", a->mode, "none or internet");
    cmd->add_option("--allow-out", a->allow_out, "Replace allow_out (repeatable)")->allow_extra_args(false);
    cmd->add_option("--deny-out", a->deny_out, "Replace deny_out (repeatable)")->allow_extra_args(false);
    auto* set = cmd->add_flag("--set", a->set,
                              "Replace the egress rules with the ones given (none given: allow all)");
    (void)set;
    cmd->callback([&ctx, a] {
      NetworkArgs args = *a;
      if (!args.allow_out.empty() || !args.deny_out.empty() || !args.mode.empty()) args.set = true;
      ctx.exit_code = RunNetwork(ctx, args);
    });
  }
  {
    auto a = std::make_shared<LsArgs>();
    CLI::App* cmd = app.add_subcommand("ls", "List sandboxes");
    cmd->alias("list");
    cmd->add_option("-l,--label", a->labels, "Only sandboxes with label K=V (repeatable)")
        ->allow_extra_args(false);
    cmd->add_option("--state", a->state, "Only sandboxes in this state");
    cmd->callback([&ctx, a] { ctx.exit_code = RunLs(ctx, *a); });
  }
  {
    auto id = std::make_shared<std::string>();
    CLI::App* cmd = app.add_subcommand("get", "Show one sandbox");
    cmd->add_option("id", *id, "Sandbox id")->required();
    cmd->callback([&ctx, id] { ctx.exit_code = RunGet(ctx, *id); });
  }
  {
    auto a = std::make_shared<RmArgs>();
    CLI::App* cmd = app.add_subcommand("rm", "Delete sandboxes (waits until they are gone)");
    cmd->add_option("ids", a->ids, "Sandbox ids");
    cmd->add_option("--label", a->labels,
                    "KEY=VALUE (repeatable): instead of ids, every sandbox whose labels all match");
    cmd->add_flag("--async", a->async, "Do not wait: print the delete operations' ids");
    cmd->add_option("--timeout", a->timeout, "Give up waiting after SECS (default: no limit)");
    cmd->callback([&ctx, a] { ctx.exit_code = RunRm(ctx, *a); });
  }
  {
    auto a = std::make_shared<OpsArgs>();
    CLI::App* cmd = app.add_subcommand("ops", "List operations (newest first)");
    cmd->add_option("--limit", a->limit, "At most N operations");
    cmd->add_option("--state", a->state, "Only operations in this state");
    cmd->callback([&ctx, a] { ctx.exit_code = RunOps(ctx, *a); });
  }
  {
    auto a = std::make_shared<OpArgs>();
    CLI::App* cmd = app.add_subcommand("op", "Show one operation");
    cmd->add_option("id", a->id, "Operation id")->required();
    cmd->add_flag("--wait", a->wait, "Wait until it finished (exit 1 if it failed)");
    cmd->add_option("--timeout", a->timeout, "With --wait: give up after SECS");
    cmd->callback([&ctx, a] { ctx.exit_code = RunOp(ctx, *a); });
  }
  {
    CLI::App* cmd = app.add_subcommand("templates", "List templates");
    cmd->callback([&ctx] { ctx.exit_code = RunTemplates(ctx); });
  }
  {
    CLI::App* cmd = app.add_subcommand("runtimes", "List runtimes, their capabilities and availability");
    cmd->callback([&ctx] { ctx.exit_code = RunRuntimes(ctx); });
  }
}

}  // namespace space::cli
