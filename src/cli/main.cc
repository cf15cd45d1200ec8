// space: the command-line client of spaced. See `space --help` and docs/api.md.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>

#include "cli/args.h"
#include "cli/commands.h"

namespace space::cli {

Result<client::Client*> Context::GetClient() {
  if (client_) return &*client_;
  auto env = client::Client::FromEnvironment(globals.data_dir);
  if (!env) return tl::unexpected(env.error());
  if (globals.url.empty() && globals.api_key.empty()) {
    client_.emplace(std::move(*env));
  } else {
    client_.emplace(globals.url.empty() ? env->url() : globals.url,
                    globals.api_key.empty() ? env->api_key() : globals.api_key);
  }
  return &*client_;
}

int ReportError(const Error& error) {
  std::fprintf(stderr, "space: %s\n", error.message.c_str());
  return kExitError;
}

int ReportUsage(const std::string& message) {
  std::fprintf(stderr, "space: %s\n", message.c_str());
  return kExitUsage;
}

void PrintJson(const Json& j) { PrintText(DumpJson(j) + "\n"); }

void PrintText(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

client::WaitOptions WaitOptionsFor(double wait_timeout_secs) {
  client::WaitOptions o;
  if (wait_timeout_secs > 0) {
    o.timeout = std::chrono::milliseconds{static_cast<int64_t>(wait_timeout_secs * 1000)};
  }
  if (::isatty(STDERR_FILENO)) {
    // A short first wait, so someone watching learns within a second what the command is
    // waiting for; the long poll that follows costs nothing extra.
    o.first_wait = std::chrono::milliseconds{1000};
    o.on_pending = [](const Json& op) {
      std::fprintf(stderr, "waiting for %s (%s)...\n", JsonStringOr(op, "id", "?").c_str(),
                   JsonStringOr(op, "kind", "operation").c_str());
    };
  }
  return o;
}

void PrintAsync(const Context& ctx, const Json& answer) {
  if (ctx.globals.json) {
    PrintJson(answer);
    return;
  }
  const Json* op = JsonField(answer, "operation");
  PrintText(JsonStringOr(op ? *op : Json(), "id", "") + "\n");
}

}  // namespace space::cli

int main(int argc, char** argv) {
  using namespace space::cli;
  // A closed stdout (e.g. `space logs ... | head`) must be an EPIPE error we handle, not a
  // silent death by SIGPIPE in the middle of a request.
  ::signal(SIGPIPE, SIG_IGN);

  CLI::App app{"space: run commands in SPACE sandboxes through spaced", "space"};
  app.set_help_all_flag("--help-all", "Show help for all subcommands");
  Context ctx;
  app.add_option("--url", ctx.globals.url,
                 "spaced base URL (default: $SPACE_URL, else DATA_DIR/url, else "
                 "http://127.0.0.1:7070)");
  app.add_option("--api-key", ctx.globals.api_key,
                 "API key (default: $SPACE_API_KEY, else DATA_DIR/api-key)");
  app.add_option("--data-dir", ctx.globals.data_dir,
                 "spaced's data dir, to find url and api-key (default: $SPACE_DATA_DIR, else "
                 "./.space-data)");
  app.add_flag("--json", ctx.globals.json, "Print JSON instead of tables");
  app.require_subcommand(1);

  AddSandboxCommands(app, ctx);
  AddExecCommands(app, ctx);
  AddCodeCommands(app, ctx);
  AddFileCommands(app, ctx);
  AddLifecycleCommands(app, ctx);
  AddSnapshotCommands(app, ctx);
  AddVolumeCommands(app, ctx);
  AddTemplateCommands(app, ctx);
  AddKeyCommands(app, ctx);
  AddMcpCommands(app, ctx);
  AddShellCommand(app, ctx);
  AddCompletionCommand(app, ctx);
  // Global options are accepted after the subcommand too (`space ls --json`).
  for (CLI::App* sub : app.get_subcommands({})) sub->fallthrough();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::fprintf(stderr, "space: %s\nRun 'space --help' for usage.\n", e.what());
    return kExitUsage;
  }
  return ctx.exit_code;
}
