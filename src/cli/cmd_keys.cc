// space keys create | ls | rm — operator API keys; space token — mint a sandbox token.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>

#include "cli/args.h"
#include "cli/commands.h"

namespace space::cli {

namespace {

int RunKeysCreate(Context& ctx, const std::string& name, bool e2b) {
  auto c = ctx.GetClient();
  if (!c) return ReportError(c.error());
  auto k = (*c)->CreateKey(name, e2b);
  if (!k) return ReportError(std::move(k).error().Wrap("keys create " + name));
  if (ctx.globals.json) {
    PrintJson(*k);
  } else {
    // The key alone on stdout (for `KEY=$(space keys create ci)`); it is never shown again.
    PrintText(JsonStringOr(*k, "key", "") + "\n");
    std::fprintf(stderr, "created API key %s (%s); store it now, it is not shown again\n",
                 name.c_str(), JsonStringOr(*k, "id", "").c_str());
  }
  return 0;
}

int RunKeysLs(Context& ctx) {
  auto c = ctx.GetClient();
  if (!c) return ReportError(c.error());
  auto list = (*c)->ListKeys();
  if (!list) return ReportError(list.error());
  if (ctx.globals.json) {
    PrintJson(*list);
    return 0;
  }
  std::vector<std::vector<std::string>> rows = {{"ID", "NAME", "KEY", "AGE"}};
  for (const Json& k : *list) {
    auto created = ParseRfc3339Millis(JsonStringOr(k, "created_at", ""));
    rows.push_back({Cell(k, "id"), Cell(k, "name"), Cell(k, "hint") + "…",
                    FormatAge(created, NowUnixMillis())});
  }
  PrintText(FormatTable(rows));
  return 0;
}

int RunKeysRm(Context& ctx, const std::vector<std::string>& ids) {
  auto c = ctx.GetClient();
  if (!c) return ReportError(c.error());
  int rc = 0;
  Json out = Json::array();
  for (const auto& id : ids) {
    auto k = (*c)->DeleteKey(id);
    if (!k) {
      rc = ReportError(std::move(k).error().Wrap("keys rm " + id));
      continue;
    }
    if (ctx.globals.json) {
      out.push_back(*k);
    } else {
      PrintText(JsonStringOr(*k, "id", id) + "\n");
    }
  }
  if (ctx.globals.json) PrintJson(out);
  return rc;
}

struct TokenArgs {
  std::string sandbox;
  std::vector<std::string> scopes;
  std::string command;
  int64_t ttl_s = 0;
};

int RunToken(Context& ctx, const TokenArgs& a) {
  if (a.ttl_s < 0) return ReportUsage("--ttl must not be negative");
  auto c = ctx.GetClient();
  if (!c) return ReportError(c.error());
  Json body = Json::object();
  if (!a.scopes.empty()) body["scopes"] = a.scopes;
  if (!a.command.empty()) body["command_id"] = a.command;
  if (a.ttl_s > 0) body["ttl_s"] = a.ttl_s;
  auto t = (*c)->MintToken(a.sandbox, body);
  if (!t) return ReportError(std::move(t).error().Wrap("token " + a.sandbox));
  if (ctx.globals.json) {
    PrintJson(*t);
  } else {
    PrintText(JsonStringOr(*t, "token", "") + "\n");
  }
  return 0;
}

struct UrlArgs {
  std::string sandbox, port, ttl;
};

int RunUrl(Context& ctx, const UrlArgs& a) {
  int64_t ttl = 0;
  if (!a.ttl.empty()) {
    auto t = ParseSeconds(a.ttl);
    if (!t) return ReportUsage("--ttl: " + t.error().message);
    if (*t <= 0) return ReportUsage("--ttl must be positive");
    ttl = *t;
  }
  auto c = ctx.GetClient();
  if (!c) return ReportError(c.error());
  auto u = (*c)->PortUrl(a.sandbox, a.port, ttl);
  if (!u) return ReportError(std::move(u).error().Wrap("url " + a.sandbox + " " + a.port));
  if (ctx.globals.json) {
    PrintJson(*u);
  } else {
    PrintText(JsonStringOr(*u, "url", "") + "\n");
  }
  return 0;
}

}  // namespace

void AddKeyCommands(CLI::App& app, Context& ctx) {
  CLI::App* keys = app.add_subcommand("keys", "Manage operator API keys");
  keys->require_subcommand(1);
  {
    auto name = std::make_shared<std::string>();
    auto e2b = std::make_shared<bool>(false);
    CLI::App* cmd = keys->add_subcommand("create", "Create an API key; prints it (only this once)");
    cmd->add_option("name", *name, "A unique name, e.g. ci")->required();
    cmd->add_flag("--e2b", *e2b,
                  "Make the key in E2B's shape (e2b_ + hex), which E2B's SDKs accept as E2B_API_KEY; "
                  "it works on every SPACE route too");
    cmd->callback([&ctx, name, e2b] { ctx.exit_code = RunKeysCreate(ctx, *name, *e2b); });
  }
  {
    CLI::App* cmd = keys->add_subcommand("ls", "List API keys (names and hints, never the keys)");
    cmd->callback([&ctx] { ctx.exit_code = RunKeysLs(ctx); });
  }
  {
    auto ids = std::make_shared<std::vector<std::string>>();
    CLI::App* cmd = keys->add_subcommand("rm", "Revoke API keys by id or name");
    cmd->add_option("keys", *ids, "Key ids or names")->required();
    cmd->callback([&ctx, ids] { ctx.exit_code = RunKeysRm(ctx, *ids); });
  }
  for (CLI::App* sub : keys->get_subcommands({})) sub->fallthrough();
  {
    auto a = std::make_shared<TokenArgs>();
    CLI::App* cmd = app.add_subcommand(
        "token", "Mint a token scoped to one sandbox (or one command); prints it");
    cmd->add_option("sandbox", a->sandbox, "Sandbox id")->required();
    cmd->add_option("--scope", a->scopes,
                    "A scope (repeatable; default: all of yours): sandbox:read, "
                    "sandbox:lifecycle, commands:exec, commands:read, commands:write, "
                    "files:read, files:write, snapshots, ports");
    cmd->add_option("--command", a->command, "Bind the token to this command id");
    cmd->add_option("--ttl", a->ttl_s, "Lifetime in seconds (default: spaced's --token-ttl)");
    cmd->callback([&ctx, a] { ctx.exit_code = RunToken(ctx, *a); });
  }
  {
    auto a = std::make_shared<UrlArgs>();
    CLI::App* cmd = app.add_subcommand(
        "url", "Print a URL to a port of a sandbox (its signed credential in the query string)");
    cmd->add_option("sandbox", a->sandbox, "Sandbox id")->required();
    cmd->add_option("port", a->port, "Port inside the sandbox (1..65535)")->required();
    cmd->add_option("--ttl", a->ttl, "How long the URL works: SECS (or 30m, 2h); default 1 h");
    cmd->callback([&ctx, a] { ctx.exit_code = RunUrl(ctx, *a); });
  }
}

}  // namespace space::cli
