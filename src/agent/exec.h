// agent/exec: starting one command for the agent (the `exec` op of docs/agent-protocol.md).
//
// ParseExecRequest validates an untrusted request; StartCommand forks the process in its
// own session with piped stdout/stderr (and stdin on request), switched to the requested
// user. Users and groups come from parsing /etc/passwd and /etc/group directly: the agent
// is linked statically, where glibc's NSS functions (getpwnam, ...) do not work.
// Nothing here keeps state; the caller owns the returned fds and the child. Not
// thread-safe (fork in a single-threaded process).
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "agent/users.h"
#include "common/common.h"
#include "common/json.h"
#include "sys/sys.h"

namespace space::agent {

struct ExecRequest {
  uint32_t stream = 0;
  std::string id;
  std::vector<std::string> argv;                         // shell → /bin/sh -c
  std::vector<std::pair<std::string, std::string>> env;  // overrides, in request order
  std::optional<std::string> cwd;
  std::optional<std::string> user;  // name or decimal uid
  bool stdin_pipe = false;
  int64_t timeout_ms = 0;  // 0 = none
  // A pseudo-terminal instead of pipes: stdin, stdout and stderr are its slave side (the
  // command's controlling terminal); its output arrives on stdout, stderr stays empty.
  struct PtySize {
    uint16_t cols = 80;
    uint16_t rows = 24;
  };
  std::optional<PtySize> pty;
};

// Validates {"cols","rows"} (each 1..4096) of a pty request or a resize.
[[nodiscard]] Result<ExecRequest::PtySize> ParsePtySize(const Json& j);

// Validates the JSON of an exec request. Errors are invalid_argument.
[[nodiscard]] Result<ExecRequest> ParseExecRequest(const Json& j);

// A started child. The exec outcome is reported on `error_pipe`: EOF means the program
// was exec'd; kExecFailureSize bytes describe the failure (decode with ExecFailure).
// With a pty, stdin_pipe and stdout_pipe are two descriptors of its master side (write
// and read), stderr_pipe is invalid and pty_master is a third one, for resizes.
struct StartedCommand {
  pid_t pid = -1;
  sys::UniqueFd stdin_pipe;   // write end; invalid unless stdin_pipe (or pty) was requested
  sys::UniqueFd stdout_pipe;  // read end, non-blocking
  sys::UniqueFd stderr_pipe;  // read end, non-blocking; invalid with a pty
  sys::UniqueFd error_pipe;   // read end, non-blocking
  sys::UniqueFd pty_master;   // invalid without a pty
};

// Sets a pty's window size (TIOCSWINSZ); the kernel sends SIGWINCH to its foreground
// process group.
[[nodiscard]] Status ResizePty(int master, ExecRequest::PtySize size);
inline constexpr size_t kExecFailureSize = 8;

// Forks the command: new session (its pid is its process group id), stdio as above (with
// req.pty: a new pseudo-terminal of that size as controlling terminal, TERM=xterm unless
// the environment names one),
// environment = the agent's environ + HOME/USER/LOGNAME of the user + req.env, the user's
// groups/gid/uid when req.user is set, cwd (default: the user's home if it exists, else
// "/"), default signal dispositions and mask, umask 022, no other fds. Does not block
// on the child. Errors (user not found, pipe/fork failure) are returned before forking.
[[nodiscard]] Result<StartedCommand> StartCommand(const ExecRequest& req);

// Turns the bytes read from error_pipe into the error to report (not_found for a
// missing program or cwd, permission_denied for EACCES/EPERM, ...).
Error ExecFailure(const char (&buf)[kExecFailureSize], const ExecRequest& req);

}  // namespace space::agent
