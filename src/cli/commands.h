// commands: the `space` CLI's subcommands, registered on a CLI11 app by group. Internal to
// the space executable (main.cc wires them up); single-threaded except where a command
// starts its own helper threads (exec).
#pragma once

#include <optional>
#include <string>

#include "cli/client.h"
#include "common/common.h"
#include "common/json.h"

namespace CLI {
class App;
}

namespace space::cli {

// Exit statuses of the CLI besides a command's own exit code.
constexpr int kExitError = 1;
constexpr int kExitUsage = 2;

struct Globals {
  std::string url;
  std::string api_key;
  std::string data_dir;
  bool json = false;
};

// Shared by all subcommands of one invocation.
class Context {
 public:
  Globals globals;
  int exit_code = 0;

  // The Client for the globals (--url/--api-key over the environment), built once.
  Result<client::Client*> GetClient();

 private:
  std::optional<client::Client> client_;
};

// Prints "space: <message>" to stderr; returns kExitError.
int ReportError(const Error& error);
// Prints "space: <message>" to stderr; returns kExitUsage.
int ReportUsage(const std::string& message);
// Writes JSON (pretty) plus a newline to stdout.
void PrintJson(const Json& j);
// Writes text to stdout as is.
void PrintText(const std::string& text);

// How a waiting command waits: at most `wait_timeout_secs` (0 = no limit) and, only when
// stderr is a terminal, with a one-line "waiting for op-… (kind)..." on stderr once the
// operation turns out not to finish at once. stdout never sees progress.
client::WaitOptions WaitOptionsFor(double wait_timeout_secs);
// Prints what an --async command prints for an answer {"operation":OP,...}: the operation id
// alone, or with --json the whole answer.
void PrintAsync(const Context& ctx, const Json& answer);

// create, ls, get, rm, ops, op, templates, runtimes
void AddSandboxCommands(CLI::App& app, Context& ctx);
// exec, logs, ps
void AddExecCommands(CLI::App& app, Context& ctx);
// cp
void AddFileCommands(CLI::App& app, Context& ctx);
// pause, resume, suspend, wake, timeout
void AddLifecycleCommands(CLI::App& app, Context& ctx);
// snapshot, snapshots, snapshot-rm, fork
void AddSnapshotCommands(CLI::App& app, Context& ctx);
// volume create|ls|rm (cmd_volume.cc)
void AddVolumeCommands(CLI::App& app, Context& ctx);
// template build, template import
void AddTemplateCommands(CLI::App& app, Context& ctx);
// keys create|ls|rm, token
void AddKeyCommands(CLI::App& app, Context& ctx);
// run-code (cmd_code.cc)
void AddCodeCommands(CLI::App& app, Context& ctx);
// mcp (cmd_mcp.cc)
void AddMcpCommands(CLI::App& app, Context& ctx);
// shell (cmd_tty.cc)
void AddShellCommand(CLI::App& app, Context& ctx);
// completion bash: registered last, it describes the others
void AddCompletionCommand(CLI::App& app, Context& ctx);

}  // namespace space::cli
