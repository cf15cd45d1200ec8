// cli/tty: interactive commands on a pseudo-terminal inside the sandbox (`space shell`,
// `space exec -t`). Internal to the space executable.
#pragma once

#include <string>

#include "cli/commands.h"

namespace space::cli {

// Runs the command `body` ({"argv"} or {"cmd"}, plus env/cwd/user/timeout) in sandbox `id`
// on a new pty the size of our terminal: our terminal is raw while it runs, our keystrokes
// go to it, its output comes to our stdout, window-size changes are forwarded, SIGTERM and
// SIGHUP are passed on. Returns the command's exit status (as `space exec`). Our terminal
// is restored however this ends (errors, signals, a crash). stdin must be a terminal.
int RunOnTerminal(Context& ctx, const std::string& id, Json body);

}  // namespace space::cli
