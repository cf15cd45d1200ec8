// space exec | logs | ps
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <thread>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/exec_io.h"
#include "cli/tty.h"
#include "sys/sys.h"

namespace space::cli {

using client::Client;
using client::MuxKind;
using client::MuxOffsets;

namespace {

constexpr int kExitBrokenPipe = 128 + SIGPIPE;

// ---- exec ----

struct ExecArgs {
  std::string id;
  std::vector<std::string> command;
  std::vector<std::string> env;
  std::string cwd, user;
  double timeout = 0;
  CLI::Option* timeout_opt = nullptr;
  bool stdin_ = false;
  bool shell = false;
  bool tty = false;
};

const char* SignalName(int sig) {
  switch (sig) {
    case SIGINT:
      return "INT";
    case SIGTERM:
      return "TERM";
    case SIGHUP:
      return "HUP";
    default:
      return "TERM";
  }
}

int RunExec(Context& ctx, const ExecArgs& a) {
  if (a.command.empty()) return ReportUsage("exec: no command (space exec ID -- CMD ARGS...)");
  Json body = Json::object();
  if (a.shell) {
    std::string line;
    for (const std::string& part : a.command) line += (line.empty() ? "" : " ") + part;
    body["cmd"] = line;
  } else {
    body["argv"] = a.command;
  }
  auto env = KeyValuesToObject(a.env);
  if (!env) return ReportUsage("--env: " + env.error().message);
  if (!env->empty()) body["env"] = *env;
  if (!a.cwd.empty()) body["cwd"] = a.cwd;
  if (!a.user.empty()) body["user"] = a.user;
  if (a.timeout_opt->count() > 0) {
    if (!(a.timeout > 0) || !std::isfinite(a.timeout)) {
      return ReportUsage("--timeout must be a positive number of seconds");
    }
    if (a.timeout == std::floor(a.timeout)) {
      body["timeout"] = static_cast<int64_t>(a.timeout);
    } else {
      body["timeout"] = a.timeout;
    }
  }
  if (a.tty) return RunOnTerminal(ctx, a.id, std::move(body));  // cmd_tty.cc
  body["stdin"] = a.stdin_;

  auto c = ctx.GetClient();
  if (!c) return ReportError(c.error());
  Client& client = **c;

  // Block the signals we forward before any thread exists, so every thread (ours and
  // curl's) inherits the mask and only the forwarder below ever receives them.
  sigset_t forwarded;
  sigemptyset(&forwarded);
  sigaddset(&forwarded, SIGINT);
  sigaddset(&forwarded, SIGTERM);
  sigaddset(&forwarded, SIGHUP);
  sigaddset(&forwarded, SIGUSR2);  // not forwarded: wakes the forwarder to exit promptly
  pthread_sigmask(SIG_BLOCK, &forwarded, nullptr);

  auto started = client.StartCommand(a.id, body);
  if (!started) return ReportError(started.error());
  std::string cid = JsonStringOr(*started, "id", "");
  if (cid.empty()) return ReportError(Error{Errc::kInternal, 0, "spaced returned no command id"});

  std::atomic<bool> done{false};
  std::thread forwarder([&] {
    int interrupts = 0;
    const timespec tick{0, 100 * 1000 * 1000};
    while (!done.load()) {
      int sig = sigtimedwait(&forwarded, nullptr, &tick);
      if (sig <= 0 || sig == SIGUSR2) continue;
      if (sig == SIGINT && ++interrupts >= 2) {
        std::fprintf(stderr, "space: interrupted; %s keeps running in %s\n", cid.c_str(),
                     a.id.c_str());
        std::_Exit(128 + SIGINT);
      }
      auto s = client.Signal(a.id, cid, SignalName(sig));
      if (!s && !done.load()) {
        std::fprintf(stderr, "space: forwarding SIG%s: %s\n", SignalName(sig),
                     s.error().message.c_str());
      }
    }
  });

  std::optional<StdinPump> pump;
  if (a.stdin_) pump.emplace(client, a.id, cid);
  if (pump && !pump->status()) {
    done = true;
    forwarder.join();
    return ReportError(pump->status().error());
  }

  bool broken_pipe = false;
  MuxOffsets offsets;
  auto command = client.FollowOutput(a.id, cid, offsets, [&](MuxKind kind, std::string_view b) {
    if (kind == MuxKind::kExit) return true;
    if (!sys::WriteAll(kind == MuxKind::kStdout ? STDOUT_FILENO : STDERR_FILENO, b)) {
      broken_pipe = true;
      return false;
    }
    return true;
  });

  done = true;
  pump.reset();
  pthread_kill(forwarder.native_handle(), SIGUSR2);
  forwarder.join();
  return ExitStatusOf(command, broken_pipe, cid);
}

// ---- logs ----

struct LogsArgs {
  std::string id, cid, stream;
  bool follow = false;
};

int RunLogs(Context& ctx, const LogsArgs& a) {
  if (!a.stream.empty() && a.stream != "stdout" && a.stream != "stderr") {
    return ReportUsage("--stream must be stdout or stderr");
  }
  auto c = ctx.GetClient();
  if (!c) return ReportError(c.error());
  // One chosen stream goes to our stdout (to be piped); both keep their own fds.
  auto fd_for = [&](const std::string& s) {
    return a.stream.empty() && s == "stderr" ? STDERR_FILENO : STDOUT_FILENO;
  };
  if (a.follow) {
    MuxOffsets offsets;
    bool broken_pipe = false;
    auto r = (*c)->FollowOutput(a.id, a.cid, offsets, [&](MuxKind kind, std::string_view b) {
      if (kind == MuxKind::kExit) return true;
      std::string s = kind == MuxKind::kStdout ? "stdout" : "stderr";
      if (!a.stream.empty() && s != a.stream) return true;
      if (!sys::WriteAll(fd_for(s), b)) {
        broken_pipe = true;
        return false;
      }
      return true;
    });
    if (!r) return ReportError(r.error());
    return broken_pipe ? kExitBrokenPipe : 0;
  }
  std::vector<std::string> streams = a.stream.empty() ? std::vector<std::string>{"stdout", "stderr"}
                                                      : std::vector<std::string>{a.stream};
  for (const std::string& s : streams) {
    uint64_t offset = 0;
    for (;;) {
      auto chunk = (*c)->ReadOutput(a.id, a.cid, s, offset);
      if (!chunk) return ReportError(chunk.error());
      if (chunk->bytes.empty()) break;
      if (!sys::WriteAll(fd_for(s), chunk->bytes)) return kExitBrokenPipe;
      // A server that does not advance would loop forever; stop instead.
      if (chunk->next_offset <= offset) break;
      offset = chunk->next_offset;
    }
  }
  return 0;
}

// ---- ps ----

int RunPs(Context& ctx, const std::string& id) {
  auto c = ctx.GetClient();
  if (!c) return ReportError(c.error());
  auto list = (*c)->ListCommands(id);
  if (!list) return ReportError(list.error());
  if (ctx.globals.json) {
    PrintJson(*list);
    return 0;
  }
  std::vector<std::vector<std::string>> rows = {{"ID", "STATE", "EXIT", "AGE", "COMMAND"}};
  for (const Json& cmd : *list) {
    std::string state = JsonStringOr(cmd, "state", "");
    std::string exit = "-";
    if (state == "exited" || state == "failed" || state == "lost") {
      exit = std::to_string(Client::ExitCodeOf(cmd));
      if (JsonBoolOr(cmd, "timed_out", false)) {
        exit += " (timeout)";
      } else if (auto sig = JsonInt(cmd, "signal"); sig && *sig > 0) {
        exit += " (signal " + std::to_string(*sig) + ")";
      }
    }
    std::string line = CommandLine(cmd);
    if (line.size() > 60) line = line.substr(0, 57) + "...";
    rows.push_back(
        {Cell(cmd, "id"), state, exit,
         FormatAge(ParseRfc3339Millis(JsonStringOr(cmd, "started_at", "")), NowUnixMillis()),
         line});
  }
  PrintText(FormatTable(rows));
  return 0;
}

}  // namespace

void AddExecCommands(CLI::App& app, Context& ctx) {
  {
    auto a = std::make_shared<ExecArgs>();
    CLI::App* cmd = app.add_subcommand(
        "exec",
        "Run a command in a sandbox, streaming its output; exits with its exit code "
        "(128+N if killed by signal N, 124 on timeout)");
    cmd->add_option("-e,--env", a->env, "Environment variable K=V (repeatable)")
        ->allow_extra_args(false);
    cmd->add_option("-w,--cwd", a->cwd, "Working directory inside the sandbox");
    cmd->add_option("-u,--user", a->user, "User to run as");
    a->timeout_opt = cmd->add_option("--timeout", a->timeout, "Kill the command after SECS");
    cmd->add_flag("-i,--stdin", a->stdin_, "Copy this terminal's stdin to the command");
    cmd->add_flag("-t,--tty", a->tty,
                  "Run it on a terminal (a pty in the sandbox; ours raw, its size followed)");
    cmd->add_flag("--shell", a->shell,
                  "Run the words as one shell command line ({\"cmd\": ...}) instead of argv");
    cmd->add_option("id", a->id, "Sandbox id")->required();
    cmd->add_option("command", a->command, "Command and arguments (put them after --)")->required();
    cmd->footer("Example: space exec sb-abc -- sh -c 'echo $HOME'; space exec -t sb-abc -- top");
    cmd->callback([&ctx, a] { ctx.exit_code = RunExec(ctx, *a); });
  }
  {
    auto a = std::make_shared<LogsArgs>();
    CLI::App* cmd = app.add_subcommand("logs", "Print a command's stored output");
    cmd->add_option("id", a->id, "Sandbox id")->required();
    cmd->add_option("cid", a->cid, "Command id")->required();
    cmd->add_flag("-f,--follow", a->follow, "Keep streaming until the command exits");
    cmd->add_option("--stream", a->stream,
                    "Only stdout or stderr (printed to stdout); default both, each to its own");
    cmd->callback([&ctx, a] { ctx.exit_code = RunLogs(ctx, *a); });
  }
  {
    auto id = std::make_shared<std::string>();
    CLI::App* cmd = app.add_subcommand("ps", "List a sandbox's commands");
    cmd->add_option("id", *id, "Sandbox id")->required();
    cmd->callback([&ctx, id] { ctx.exit_code = RunPs(ctx, *id); });
  }
}

}  // namespace space::cli
