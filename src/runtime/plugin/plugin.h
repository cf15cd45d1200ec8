// plugin: runtimes outside the daemon — executables speaking the `space-runtime/v1`
// contract (docs/runtime-plugins.md) — made into a Runtime that core uses like the built-ins.
//
// Each call runs `<executable> <verb>` in a new session (its own process group) with one
// JSON request on stdin and reads one JSON reply from stdout; stderr is captured (bounded)
// into spaced's log. A call past its verb's timeout, or whose reply exceeds the size limit,
// has its whole process group killed; so has anything the plugin leaves in its process
// group after it exits (a plugin keeps per-sandbox daemons in a session of their own).
//
// On disk (spaced's side; the plugin owns DATA/runtime/<name>/ itself):
//   DATA/runtime-plugins/<name>/plugin.json  {"executable", "state_dir"}: for clean-up tools
//   DATA/runtime-plugins/<name>/handles/<id>.json  the handle a successful start returned,
//       plus the agent socket path; written (fsync'd) before Start() returns, so that after
//       a restart spaced re-inspects, pauses and destroys each instance with its handle.
//   DATA/runtime-plugins/<name>/handles/<id>.starting  written before `start` is called and
//       removed when it returns: a start interrupted by a crash is in List() until destroyed.
//
// Thread-safety: calls for different ids may run concurrently; calls for one id are
// serialised by the caller (core/).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/common.h"
#include "common/json.h"
#include "runtime/runtime.h"

namespace space::runtime {

inline constexpr const char* kPluginContract = "space-runtime/v1";

struct PluginOptions {
  std::string name;            // the runtime's name: the executable's file name
  std::string executable;      // absolute path
  std::string state_dir;       // the plugin's own directory (DATA/runtime/<name>)
  std::string handle_dir;      // spaced's (DATA/runtime-plugins/<name>)
  std::string agent_binary;    // host path of the static space-agent
  uint32_t uid_shift = 0;      // template files are owned by root + this
  size_t max_reply_bytes = 1u << 20;
  // Upper bound on any verb's timeout (a plugin's `info` may ask for less or more).
  int64_t max_timeout_ms = 600000;
};

// Probes the plugin (`version`, then `info`) and returns its runtime. Never fails for an
// unusable plugin (not executable, unknown contract version, bad replies, `info` saying it
// is unavailable): that runtime is returned anyway, Describe() says why, and Start() fails
// with that reason, so `--runtime NAME` explains itself. Fails only for bad options.
[[nodiscard]] Result<std::unique_ptr<Runtime>> CreatePluginRuntime(const PluginOptions& opts);

// Executables in `dirs` (in order; the first of a name wins, later ones are logged and
// skipped). Names must match [a-z0-9][a-z0-9._-]{0,63}; other entries and hidden files
// are ignored. Missing dirs are skipped. Returns absolute paths.
std::vector<std::string> FindPlugins(const std::vector<std::string>& dirs);

// One call of the contract, for tools and tests: runs `executable verb` with `request`
// (the version field is added) and returns the reply object or the plugin's error.
struct PluginCallOptions {
  std::string name;          // for messages and log lines
  std::string cwd;           // "" = inherit
  int64_t timeout_ms = 30000;
  size_t max_reply_bytes = 1u << 20;
};
[[nodiscard]] Result<Json> CallPlugin(const std::string& executable, const std::string& verb,
                                      Json request, const PluginCallOptions& opts);

}  // namespace space::runtime
