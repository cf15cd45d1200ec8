// space shell | exec -t: a pseudo-terminal in the sandbox, driven from ours.
//
// The remote command runs on a pty spaced's agent makes (POST .../commands with "pty"). Our
// terminal goes raw, so every key (^C, ^Z, arrows) reaches the remote line discipline as
// is; the remote pty does the echoing and the \n -> \r\n. Threads: this one streams the
// output; one copies stdin; one takes the signals (SIGWINCH -> resize, SIGTERM/SIGHUP ->
// passed on, then we leave). The saved terminal state is restored by whichever way out
// comes first: the normal return, exit(), a fatal signal. Stdin pumping and the exit status
// are exec's (exec_io.h).
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <thread>

#include "cli/args.h"
#include "cli/exec_io.h"
#include "cli/tty.h"
#include "sys/sys.h"

namespace space::cli {

using client::Client;
using client::MuxKind;
using client::MuxOffsets;

namespace {

// The terminal state to restore; touched by signal handlers, hence plain globals.
termios g_saved;
std::atomic<bool> g_raw{false};

void RestoreTerminal() {
  // tcsetattr is async-signal-safe; the exchange makes it happen once.
  if (g_raw.exchange(false)) (void)::tcsetattr(STDIN_FILENO, TCSADRAIN, &g_saved);
}

void OnFatalSignal(int sig) {
  RestoreTerminal();
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

Status MakeRaw() {
  if (::tcgetattr(STDIN_FILENO, &g_saved) != 0) return ErrnoFail("tcgetattr");
  static bool hooks = false;
  if (!hooks) {
    hooks = true;
    std::atexit(RestoreTerminal);
    struct sigaction sa {};
    sa.sa_handler = OnFatalSignal;
    sa.sa_flags = SA_RESETHAND;
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) ::sigaction(sig, &sa, nullptr);
  }
  termios raw = g_saved;
  ::cfmakeraw(&raw);
  raw.c_cc[VMIN] = 1;
  raw.c_cc[VTIME] = 0;
  g_raw = true;
  if (::tcsetattr(STDIN_FILENO, TCSADRAIN, &raw) != 0) {
    g_raw = false;
    return ErrnoFail("tcsetattr");
  }
  return Ok();
}

struct RawGuard {
  ~RawGuard() { RestoreTerminal(); }
};

std::pair<int, int> WindowSize() {
  winsize ws{};
  for (int fd : {STDOUT_FILENO, STDIN_FILENO}) {
    if (::ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 && ws.ws_row > 0) {
      return {ws.ws_col, ws.ws_row};
    }
  }
  return {80, 24};
}

}  // namespace

int RunOnTerminal(Context& ctx, const std::string& id, Json body) {
  if (!::isatty(STDIN_FILENO)) {
    return ReportUsage("a terminal is needed (stdin is not a tty); without -t, use exec -i");
  }
  auto c = ctx.GetClient();
  if (!c) return ReportError(c.error());
  Client& client = **c;
  auto [cols, rows] = WindowSize();
  body["pty"] = {{"cols", cols}, {"rows", rows}};
  if (!body.contains("env")) body["env"] = Json::object();
  if (!body["env"].contains("TERM")) {
    const char* term = std::getenv("TERM");
    body["env"]["TERM"] = term && *term ? term : "xterm";
  }

  // Block what the signal thread takes before any thread exists (curl's included).
  sigset_t taken;
  sigemptyset(&taken);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGWINCH, SIGUSR2}) sigaddset(&taken, sig);
  pthread_sigmask(SIG_BLOCK, &taken, nullptr);

  auto started = client.StartCommand(id, body);
  if (!started) return ReportError(started.error());
  const std::string cid = JsonStringOr(*started, "id", "");
  if (cid.empty()) return ReportError(Error{Errc::kInternal, 0, "spaced returned no command id"});

  RawGuard guard;
  if (auto st = MakeRaw(); !st) {
    (void)client.Signal(id, cid, "KILL");
    return ReportError(st.error());
  }

  std::atomic<bool> done{false};
  const std::string resize_path = "/v1/sandboxes/" + Client::QueryEscape(id) + "/commands/" +
                                  Client::QueryEscape(cid) + "/resize";
  std::thread signals([&] {
    const timespec tick{0, 100 * 1000 * 1000};
    while (!done.load()) {
      int sig = sigtimedwait(&taken, nullptr, &tick);
      if (sig <= 0 || sig == SIGUSR2) continue;
      if (sig == SIGWINCH) {
        auto [w, h] = WindowSize();
        (void)client.Call("POST", resize_path, Json{{"cols", w}, {"rows", h}});
        continue;
      }
      // Someone wants us gone: hang up the remote terminal (as closing a real one would),
      // give the terminal back, and leave with the shell's status for that signal.
      // (SIGHUP whatever we got: an interactive shell ignores SIGTERM and SIGINT.)
      (void)client.Signal(id, cid, "HUP");
      RestoreTerminal();
      std::fprintf(stderr, "\r\nspace: %s; left %s in %s\n", strsignal(sig), cid.c_str(), id.c_str());
      std::_Exit(128 + sig);
    }
  });

  // Our keys, to the remote terminal (our EOF is its ^D).
  std::optional<StdinPump> keys(std::in_place, client, id, cid);
  if (!keys->status()) {
    done = true;
    signals.join();
    return ReportError(keys->status().error());
  }

  bool broken = false;
  MuxOffsets offsets;
  auto command = client.FollowOutput(id, cid, offsets, [&](MuxKind kind, std::string_view b) {
    if (kind == MuxKind::kExit) return true;
    if (!sys::WriteAll(STDOUT_FILENO, b)) {
      broken = true;
      return false;
    }
    return true;
  });

  done = true;
  keys.reset();
  pthread_kill(signals.native_handle(), SIGUSR2);
  signals.join();
  RestoreTerminal();
  return ExitStatusOf(command, broken, cid);
}

namespace {

struct ShellArgs {
  std::string id, shell, cwd, user;
  std::vector<std::string> env;
};

int RunShell(Context& ctx, const ShellArgs& a) {
  Json body = Json::object();
  if (a.shell.empty()) {
    // The sandbox's best shell: bash where the template has it, else sh.
    body["cmd"] = "if [ -x /bin/bash ]; then exec /bin/bash -l; fi; exec /bin/sh -l";
  } else {
    body["argv"] = {a.shell};
  }
  auto env = KeyValuesToObject(a.env);
  if (!env) return ReportUsage("--env: " + env.error().message);
  if (!env->empty()) body["env"] = *env;
  if (!a.cwd.empty()) body["cwd"] = a.cwd;
  if (!a.user.empty()) body["user"] = a.user;
  return RunOnTerminal(ctx, a.id, std::move(body));
}

}  // namespace

void AddShellCommand(CLI::App& app, Context& ctx) {
  auto a = std::make_shared<ShellArgs>();
  CLI::App* cmd = app.add_subcommand(
      "shell", "Open an interactive shell in a sandbox (a terminal; exits with the shell's status)");
  cmd->add_option("id", a->id, "Sandbox id")->required();
  cmd->add_option("--shell", a->shell, "Shell to run (default: /bin/bash if present, else /bin/sh)");
  cmd->add_option("-e,--env", a->env, "Environment variable K=V (repeatable)")->allow_extra_args(false);
  cmd->add_option("-w,--cwd", a->cwd, "Working directory inside the sandbox");
  cmd->add_option("-u,--user", a->user, "User to run as");
  cmd->footer("Example: space shell sb-abc   (leave with exit or ^D)");
  cmd->callback([&ctx, a] { ctx.exit_code = RunShell(ctx, *a); });
}

}  // namespace space::cli
