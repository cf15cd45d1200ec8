// space pause | resume | suspend | wake | timeout
#include <CLI/CLI.hpp>
#include <memory>

#include "cli/args.h"
#include "cli/commands.h"

namespace space::cli {

using client::Transition;

namespace {

struct TransitionArgs {
  Transition transition = Transition::kPause;
  std::string id;
  bool async = false;
  double wait_timeout = 0;
};

int RunTransition(Context& ctx, const TransitionArgs& a) {
  if (a.wait_timeout < 0) return ReportUsage("--wait-timeout must not be negative");
  auto c = ctx.GetClient();
  if (!c) return ReportError(c.error());
  std::string what = std::string(client::TransitionName(a.transition)) + " " + a.id;
  if (a.async) {
    auto r = (*c)->StartTransition(a.id, a.transition);
    if (!r) return ReportError(std::move(r).error().Wrap(what));
    PrintAsync(ctx, *r);
    return 0;
  }
  auto sb = (*c)->TransitionAndWait(a.id, a.transition, WaitOptionsFor(a.wait_timeout));
  if (!sb) return ReportError(std::move(sb).error().Wrap(what));
  if (ctx.globals.json) PrintJson(*sb);
  return 0;
}

struct TimeoutArgs {
  std::string id, seconds, on_timeout;
};

int RunTimeout(Context& ctx, const TimeoutArgs& a) {
  auto secs = ParseSeconds(a.seconds);
  if (!secs) return ReportUsage("timeout: " + secs.error().message);
  if (!a.on_timeout.empty()) {
    if (auto ok = CheckOnTimeout(a.on_timeout); !ok) {
      return ReportUsage("--on-timeout: " + ok.error().message);
    }
  }
  auto c = ctx.GetClient();
  if (!c) return ReportError(c.error());
  auto sb = (*c)->SetTimeout(a.id, *secs, a.on_timeout);
  if (!sb) return ReportError(std::move(sb).error().Wrap("timeout " + a.id));
  if (ctx.globals.json) PrintJson(*sb);
  return 0;
}

void AddTransition(CLI::App& app, Context& ctx, Transition t, const char* help) {
  auto a = std::make_shared<TransitionArgs>();
  a->transition = t;
  CLI::App* cmd = app.add_subcommand(client::TransitionName(t), help);
  cmd->add_option("id", a->id, "Sandbox id")->required();
  cmd->add_flag("--async", a->async, "Do not wait: print the operation's id");
  cmd->add_option("--wait-timeout", a->wait_timeout,
                  "Give up waiting after SECS (default: no limit)");
  cmd->callback([&ctx, a] { ctx.exit_code = RunTransition(ctx, *a); });
}

}  // namespace

void AddLifecycleCommands(CLI::App& app, Context& ctx) {
  AddTransition(app, ctx, Transition::kPause,
                "Freeze a running sandbox (waits; prints nothing, --json: the sandbox)");
  AddTransition(app, ctx, Transition::kResume,
                "Unfreeze a paused sandbox (waits; prints nothing, --json: the sandbox)");
  AddTransition(app, ctx, Transition::kSuspend,
                "Stop a sandbox, keeping its filesystem (waits; prints nothing, --json: the "
                "sandbox)");
  AddTransition(app, ctx, Transition::kWake,
                "Start a suspended sandbox again (waits; prints nothing, --json: the sandbox)");
  {
    auto a = std::make_shared<TimeoutArgs>();
    CLI::App* cmd = app.add_subcommand(
        "timeout", "Make a sandbox expire SECONDS from now (0 = never); prints nothing");
    cmd->add_option("id", a->id, "Sandbox id")->required();
    cmd->add_option("seconds", a->seconds, "SECONDS (or 30m, 2h, 1d); 0 = no timeout")->required();
    cmd->add_option("--on-timeout", a->on_timeout,
                    "What the timeout does: delete, pause or suspend (default: unchanged)");
    cmd->callback([&ctx, a] { ctx.exit_code = RunTimeout(ctx, *a); });
  }
}

}  // namespace space::cli
