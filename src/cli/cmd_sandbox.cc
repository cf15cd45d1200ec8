// space create | ls | get | rm | ops | op | templates
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
  std::vector<std::string> env, labels;
  double cpus = 0;
  int64_t pids = 0;
  bool network = false;
  bool public_traffic = false;
  bool async = false;
  double wait_timeout = 0;
  CLI::Option* cpus_opt = nullptr;
  CLI::Option* pids_opt = nullptr;
};

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
  if (a.network) body["network"] = true;
  if (a.public_traffic) {
    // network.public_traffic; the boolean form of `network` turns into the object then.
    Json net = Json::object();
    net["public_traffic"] = true;
    if (a.network) net["mode"] = "internet";
    body["network"] = net;
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
      {"Network:", Cell(*sb, "network")},
      {"Env:", env.empty() ? "-" : env},
      {"Labels:", labels.empty() ? "-" : labels},
      {"Created:", Cell(*sb, "created_at") + " (" + Age(*sb, "created_at") + " ago)"},
      {"Updated:", Cell(*sb, "updated_at")},
  };
  PrintText(FormatTable(rows));
  return 0;
}

// ---- rm ----

struct RmArgs {
  std::vector<std::string> ids;
  bool async = false;
  double timeout = 0;
};

int RunRm(Context& ctx, const RmArgs& a) {
  auto c = ctx.GetClient();
  if (!c) return ReportError(c.error());
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
    auto r = (*c)->DeleteSandboxAndWait(id, WaitOptionsFor(a.timeout));
    if (!r) {
      rc = ReportError(std::move(r).error().Wrap("rm " + id));
      continue;
    }
    if (ctx.globals.json) {
      results.push_back(Json{{"id", id}, {"deleted", true}});
    } else {
      PrintText(id + "\n");
    }
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

}  // namespace

void AddSandboxCommands(CLI::App& app, Context& ctx) {
  {
    auto a = std::make_shared<CreateArgs>();
    CLI::App* cmd = app.add_subcommand(
        "create", "Create a sandbox; prints its id when it is running (--async: the operation id)");
    cmd->add_option("-t,--template", a->template_ref, "Template (name:tag or sha256:digest)");
    cmd->add_option("--from-snapshot", a->snapshot,
                    "Start from this snapshot (snap-...) instead of a template");
    cmd->add_option("--runtime", a->runtime, "Runtime (oci, microvm)");
    cmd->add_option("-e,--env", a->env, "Environment variable K=V (repeatable)")
        ->allow_extra_args(false);
    cmd->add_option("-l,--label", a->labels, "Label K=V (repeatable)")->allow_extra_args(false);
    cmd->add_option("-m,--memory", a->memory, "Memory limit: bytes or 512M, 2G");
    a->cpus_opt = cmd->add_option("--cpus", a->cpus, "CPU limit (e.g. 1.5)");
    a->pids_opt = cmd->add_option("--pids", a->pids, "Process limit");
    cmd->add_flag("--network", a->network, "Give the sandbox network access");
    cmd->add_flag("--public-traffic", a->public_traffic,
                  "Its ports answer without a traffic credential (space url; docs/ports.md)");
    cmd->add_option("--timeout", a->timeout,
                    "Sandbox lifetime: SECS (or 30m, 2h) from creation; 0 = none (server "
                    "default 300)");
    cmd->add_option("--on-timeout", a->on_timeout,
                    "What the timeout does: delete (default), pause or suspend");
    cmd->add_option(
        "--idle-timeout", a->idle_timeout,
        "Apply --on-timeout once idle (no command running or started) for SECS; 0 = none");
    cmd->add_flag("--async", a->async, "Do not wait: print the create operation's id");
    cmd->add_option("--wait-timeout", a->wait_timeout,
                    "Give up waiting after SECS (default: no limit)");
    cmd->callback([&ctx, a] { ctx.exit_code = RunCreate(ctx, *a); });
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
    cmd->add_option("ids", a->ids, "Sandbox ids")->required();
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
}

}  // namespace space::cli
