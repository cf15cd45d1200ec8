// client: the C++ client of spaced's HTTP API (docs/api.md), used by the `space` CLI and by
// the project's tests to drive a real daemon.
//
// A Client holds a base URL and an API key and nothing else of consequence; it owns a small
// pool of libcurl easy handles so consecutive requests reuse their keep-alive connections.
// Every method is blocking and returns Result: transport failures become kUnavailable
// ("cannot reach spaced at URL: ...") or kDeadlineExceeded, and HTTP error statuses become
// the Error carried in the server's `{"error":{"code","message"}}` body. Thread-safe: any
// number of threads may call methods of one Client at once (each call borrows its own
// handle), e.g. one thread streaming a command's output while another sends its stdin.
// Callbacks run on the calling thread, inside the call.
//
// MuxParser (the `format=mux` output-stream decoder) is exposed for tests and other users
// of the raw stream.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/common.h"
#include "common/json.h"

namespace space::client {

using std::chrono::milliseconds;

// One HTTP exchange as received. Header names are lower-cased.
struct HttpResponse {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;

  bool ok() const { return status >= 200 && status < 300; }
  // First header with this name (case-insensitive), if any.
  std::optional<std::string> Header(std::string_view name) const;
};

// The Error an HTTP error response stands for: the code and message of its
// `{"error":{...}}` body, or, when the body is not that, a code derived from the status.
Error ErrorFromResponse(const HttpResponse& response);

// Kinds of records in the `format=mux` output stream.
enum class MuxKind : uint8_t { kStdout = 1, kStderr = 2, kExit = 3 };

// Receives output: stdout/stderr bytes (possibly a record in several pieces) and, once, the
// exit record's payload (the COMMAND as JSON text). Return false to stop the stream.
using MuxCallback = std::function<bool(MuxKind kind, std::string_view bytes)>;

// Incremental decoder of `u8 kind | u32 length LE | bytes` records. Input may be split at any
// byte; stdout/stderr payloads are passed on as soon as they arrive (not buffered per record),
// the exit payload is delivered whole. Not thread-safe.
class MuxParser {
 public:
  // Feeds the next bytes of the stream. Returns false if the callback asked to stop, an
  // kInvalidArgument error on an unknown kind, an oversized exit record, or bytes after the
  // exit record.
  Result<bool> Feed(std::string_view data, const MuxCallback& callback);
  // True when the stream stopped in the middle of a record (header or payload).
  bool mid_record() const { return header_have_ > 0 || remaining_ > 0; }
  bool saw_exit() const { return saw_exit_; }
  // Payload bytes delivered so far for each output stream.
  uint64_t stdout_bytes() const { return stdout_bytes_; }
  uint64_t stderr_bytes() const { return stderr_bytes_; }

  static constexpr uint32_t kMaxExitRecord = 4 << 20;

 private:
  unsigned char header_[5] = {};
  size_t header_have_ = 0;
  uint32_t remaining_ = 0;  // payload bytes still expected for the current record
  MuxKind kind_ = MuxKind::kStdout;
  std::string exit_payload_;
  bool saw_exit_ = false;
  uint64_t stdout_bytes_ = 0, stderr_bytes_ = 0;
};

// Byte offsets into a command's two output streams. StreamMux advances them as it delivers
// bytes, so after a dropped connection they say where to resume.
struct MuxOffsets {
  uint64_t stdout_offset = 0;
  uint64_t stderr_offset = 0;
};

// One read of stored output (GET .../output).
struct OutputChunk {
  std::string bytes;
  uint64_t next_offset = 0;      // Space-Next-Offset
  std::string state;             // Space-Command-State
  std::optional<int> exit_code;  // Space-Exit-Code, when the command has ended
};

struct ClientOptions {
  milliseconds connect_timeout{5000};
  // Cap on any single request, 0 = none. Requests with `wait` and output streams can
  // legitimately last minutes, so the default is none.
  milliseconds request_timeout{0};
  // How long to keep retrying requests spaced refused with 429 (it is at a configured
  // limit), honouring Retry-After; 0 = report the 429 at once.
  milliseconds retry_busy_for{30000};
};

// Byte sink for downloads; return false to abort (the call then fails with the error the
// sink reports through its own channel, or kInternal "aborted").
using DataCallback = std::function<bool(std::string_view bytes)>;

// How the *AndWait helpers wait for an operation. The first request asks spaced to hold its
// answer for up to `first_wait` (capped by what is left of `timeout`); if the operation is
// still unfinished then, `on_pending` (if set) is called once with the OP, and WaitOperation
// long-polls until it finishes.
struct WaitOptions {
  milliseconds timeout{0};          // overall limit, 0 = none; past it: kDeadlineExceeded
  milliseconds first_wait{300000};  // server-side wait on the first request (spaced caps 5 min)
  std::function<void(const Json& op)> on_pending;
};

// The sandbox lifecycle transitions (POST /v1/sandboxes/{id}/{pause|resume|suspend|wake}).
enum class Transition { kPause, kResume, kSuspend, kWake };
// "pause", "resume", "suspend", "wake".
const char* TransitionName(Transition t);
// The inverse of TransitionName; nullopt for anything else.
std::optional<Transition> ParseTransition(std::string_view name);

// One entry of a fork operation's result: a new sandbox, "running" when it worked, else
// another state with `error` saying why.
struct ForkedSandbox {
  std::string id;
  std::string state;
  std::string error;
};

// The "sandboxes" array of a fork operation's result. Entries whose "error" is an object
// {"code","message"} keep its message. kInternal when the result has no such array.
Result<std::vector<ForkedSandbox>> ForkedSandboxesOf(const Json& op);

class Client {
 public:
  // `base_url` like "http://127.0.0.1:7070" (a missing scheme means http://, a trailing '/'
  // is dropped). An empty api_key sends no Authorization header.
  Client(std::string base_url, std::string api_key, ClientOptions options = {});
  ~Client();
  Client(Client&&) noexcept;
  Client& operator=(Client&&) noexcept;
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Builds a Client from the environment:
  //   data dir = data_dir_override, else $SPACE_DATA_DIR, else ./.space-data;
  //   URL      = $SPACE_URL, else the file <data dir>/url, else http://127.0.0.1:7070;
  //   key      = $SPACE_API_KEY, else the file <data dir>/api-key, else none.
  // Missing files are fine; unreadable ones are errors.
  static Result<Client> FromEnvironment(std::string_view data_dir_override = {},
                                        ClientOptions options = {});
  static std::string ResolveDataDir(std::string_view data_dir_override);

  const std::string& url() const;
  const std::string& api_key() const;

  // ---- Generic ----
  // Any request; `path_with_query` starts with '/'. Returns the response whatever its status;
  // errors only for transport failures.
  Result<HttpResponse> Request(std::string_view method, std::string_view path_with_query,
                               std::string_view body = {}, std::string_view content_type = {});
  // A JSON request: sends `body` (if any) as application/json, turns error statuses into
  // Error, parses the answer (an empty answer is {}).
  Result<Json> Call(std::string_view method, std::string_view path_with_query,
                    const std::optional<Json>& body = std::nullopt);

  // GET /healthz.
  Status Health();

  // ---- Sandboxes ----
  // POST /v1/sandboxes. Returns {"operation":OP,"sandbox":SANDBOX}. With wait > 0 the server
  // holds the answer until the sandbox runs (or `wait` passes, then the operation may still
  // be pending: use WaitOperation). A failed create is an Error.
  Result<Json> CreateSandbox(const Json& body, milliseconds wait = milliseconds{0});
  // Creates and waits for the sandbox to be running (however long that takes, up to
  // `timeout`; 0 = no limit); returns the SANDBOX.
  Result<Json> CreateSandboxAndWait(const Json& body, milliseconds timeout = milliseconds{0});
  // GET /v1/sandboxes; returns the array of SANDBOX. `labels` must all match.
  Result<Json> ListSandboxes(const std::vector<std::pair<std::string, std::string>>& labels = {},
                             std::string_view state = {});
  Result<Json> GetSandbox(std::string_view id);
  // DELETE /v1/sandboxes?label=K=V...: every sandbox the labels (at least one) match, one
  // delete operation each; returns {"operations":[OP],"count":N,"errors":[{sandbox_id,error}]}.
  Result<Json> DeleteSandboxesByLabel(const std::vector<std::pair<std::string, std::string>>& labels);
  // DELETE /v1/sandboxes/{id}; returns {"operation":OP}.
  Result<Json> DeleteSandbox(std::string_view id, milliseconds wait = milliseconds{0});
  Result<Json> CreateSandboxAndWait(const Json& body, const WaitOptions& options);
  // Deletes and waits until the delete operation finished; a failed delete is an Error.
  Status DeleteSandboxAndWait(std::string_view id, milliseconds timeout = milliseconds{0});
  Status DeleteSandboxAndWait(std::string_view id, const WaitOptions& options);
  // POST /v1/sandboxes/{id}/{action} (pause, resume, suspend, wake, fork, ...); returns the
  // answer (normally {"operation":OP}).
  Result<Json> SandboxAction(std::string_view id, std::string_view action,
                             const Json& body = Json::object());

  // ---- Lifecycle and timeouts ----
  // POST /v1/sandboxes/{id}/{transition}[?wait=]. Returns {"operation":OP,"sandbox":SANDBOX};
  // the OP may be unfinished (202). An illegal transition or a busy sandbox is kConflict; with
  // `wait`, spaced answers an operation that failed within it as its error.
  Result<Json> StartTransition(std::string_view id, Transition transition,
                               milliseconds wait = milliseconds{0});
  // StartTransition, then waits for the operation (see WaitOptions). Returns the SANDBOX as it
  // is afterwards (GET); a failed operation is its Error.
  Result<Json> TransitionAndWait(std::string_view id, Transition transition,
                                 const WaitOptions& options = {});
  // POST /v1/sandboxes/{id}/timeout: the sandbox now expires `seconds` from now (0 = never);
  // `on_timeout` ("delete", "pause", "suspend"; empty = keep the current one). Returns SANDBOX.
  Result<Json> SetTimeout(std::string_view id, int64_t seconds, std::string_view on_timeout = {});

  // ---- Snapshots and forks ----
  // POST /v1/sandboxes/{id}/snapshots[?wait=]. Returns {"operation":OP} (result
  // {"snapshot_id"} once it succeeded) and, when finished within `wait`, "snapshot":SNAPSHOT.
  Result<Json> StartSnapshot(std::string_view id, milliseconds wait = milliseconds{0});
  // StartSnapshot, then waits for the operation; returns the new snapshot's id. A failed
  // operation is its Error.
  Result<std::string> SnapshotAndWait(std::string_view id, const WaitOptions& options = {});
  // GET /v1/snapshots (all, oldest first) or, with a sandbox id, GET
  // /v1/sandboxes/{id}/snapshots. Returns the array of SNAPSHOT.
  Result<Json> ListSnapshots(std::string_view sandbox_id = {});
  Result<Json> GetSnapshot(std::string_view snapshot_id);  // SNAPSHOT
  Status DeleteSnapshot(std::string_view snapshot_id);
  // POST /v1/sandboxes/{id}/fork {"count":N}[?wait=]. Returns {"operation":OP,
  // "sandboxes":[SANDBOX…]}. `count` < 1 is kInvalidArgument without a request.
  Result<Json> StartFork(std::string_view id, int count, milliseconds wait = milliseconds{0});
  // StartFork, then waits for the operation; returns one entry per fork, each of which may
  // have failed on its own (check every entry's state). A failed operation is returned as
  // its entries too when they include failed forks (they carry the reasons); otherwise it is
  // its Error, naming any forks reported running so they can be cleaned up.
  Result<std::vector<ForkedSandbox>> ForkAndWait(std::string_view id, int count,
                                                 const WaitOptions& options = {});

  // ---- Commands ----
  // POST .../commands with {"argv":[..]} or {"cmd":".."} plus env/cwd/user/stdin/timeout.
  // Returns {"id":"cmd-…","command":COMMAND}.
  Result<Json> StartCommand(std::string_view id, const Json& body);
  Result<Json> ListCommands(std::string_view id);  // array of COMMAND
  Result<Json> GetCommand(std::string_view id, std::string_view cid,
                          milliseconds wait = milliseconds{0});
  // GET .../output?stream=&offset=[&limit=][&wait=]: stored bytes from `offset`.
  Result<OutputChunk> ReadOutput(std::string_view id, std::string_view cid, std::string_view stream,
                                 uint64_t offset, milliseconds wait = milliseconds{0},
                                 int64_t limit = -1);
  // GET .../output?format=mux from `offsets`, delivering records to `callback` as they arrive
  // and advancing `offsets`. Returns the COMMAND of the exit record; null JSON if the callback
  // stopped the stream; kUnavailable if the connection dropped or the stream ended before the
  // exit record (resume with the same `offsets`).
  Result<Json> StreamMux(std::string_view id, std::string_view cid, MuxOffsets& offsets,
                         const MuxCallback& callback);
  // POST .../commands?stream=mux: starts a command and streams its output in the same
  // request (one round trip less than StartCommand + StreamMux). *cid gets the command's id
  // as soon as the answer's headers arrive, so a dropped stream can be resumed with
  // FollowOutput(id, *cid, offsets, ...).
  Result<Json> StartAndStream(std::string_view id, const Json& body, MuxOffsets& offsets,
                              const MuxCallback& callback, std::string* cid);
  // StreamMux, reconnecting from `offsets` after dropped connections until the exit record
  // arrives. Gives up when no progress was made for `give_up_after`.
  Result<Json> FollowOutput(std::string_view id, std::string_view cid, MuxOffsets& offsets,
                            const MuxCallback& callback,
                            milliseconds give_up_after = milliseconds{30000});
  // Runs a command to completion and collects its output (for tests and scripts).
  struct RunOutput {
    Json command;  // the final COMMAND
    std::string out, err;
    int exit_code = -1;  // see ExitCodeOf
  };
  Result<RunOutput> Run(std::string_view id, const Json& body);
  Result<RunOutput> Run(std::string_view id, const std::vector<std::string>& argv);
  // POST .../stdin (raw bytes; eof closes the command's stdin after them).
  Status SendStdin(std::string_view id, std::string_view cid, std::string_view bytes,
                   bool eof = false);
  // POST .../signal; `signal` is a name ("TERM", "SIGKILL") or a number ("9").
  Status Signal(std::string_view id, std::string_view cid, std::string_view signal);

  // ---- Files (paths are absolute inside the sandbox) ----
  // Streams the file to `sink`; returns its size in bytes.
  Result<uint64_t> ReadFile(std::string_view id, std::string_view path, const DataCallback& sink);
  Result<std::string> ReadFile(std::string_view id, std::string_view path);
  // Downloads into a host file (created or truncated with `host_mode`, written as it arrives).
  Result<uint64_t> ReadFileTo(std::string_view id, std::string_view path,
                              const std::string& host_path, int host_mode = 0644);
  // PUT .../files from memory; returns {"path","size"}. `mode` < 0 lets the server choose.
  Result<Json> WriteFile(std::string_view id, std::string_view path, std::string_view data,
                         int mode = -1);
  // PUT .../files streamed from a host file (never held in memory).
  Result<Json> WriteFileFrom(std::string_view id, std::string_view path,
                             const std::string& host_path, int mode = -1);
  // PUT .../files streamed from an open fd: with size >= 0 as Content-Length, else chunked.
  Result<Json> WriteFileFromFd(std::string_view id, std::string_view path, int fd, int64_t size,
                               int mode = -1);
  Result<Json> ListFiles(std::string_view id, std::string_view path, int depth = 1);  // ENTRYs
  Result<Json> Stat(std::string_view id, std::string_view path);                      // ENTRY
  Status Mkdir(std::string_view id, std::string_view path);
  Status Remove(std::string_view id, std::string_view path, bool recursive = false);
  Status Rename(std::string_view id, std::string_view from, std::string_view to);

  // ---- Operations and templates ----
  Result<Json> GetOperation(std::string_view id, milliseconds wait = milliseconds{0});
  // Polls (with the server-side wait) until the operation is succeeded or failed and returns
  // it; kDeadlineExceeded after `timeout` (0 = no limit). A failed operation is NOT an error
  // here: look at its "state" and "error".
  Result<Json> WaitOperation(std::string_view id, milliseconds timeout = milliseconds{0});
  Result<Json> ListOperations(std::string_view state = {}, int limit = -1);  // newest first
  Result<Json> ListTemplates();
  // GET /v1/runtimes: [{name, kind, available, why_not?, capabilities, limitations}].
  Result<Json> ListRuntimes();

  // ---- Access: operator keys and tokens (client_access.cc) ----
  // POST /v1/keys {"name"}: returns {"id","name","hint","created_at","key"}; "key" is shown
  // only here. Operator keys only.
  Result<Json> CreateKey(std::string_view name, bool e2b = false);  // e2b: an e2b_… key
  Result<Json> ListKeys();                              // array of {"id","name","hint",…}
  Result<Json> DeleteKey(std::string_view id_or_name);  // the revoked key's record
  // POST /v1/sandboxes/{id}/tokens with {"scopes":[…],"ttl_s":N,"command_id":…} (all
  // optional): {"token","sandbox_id","scopes","expires_at"[,"command_id"]}.
  Result<Json> MintToken(std::string_view sandbox_id, const Json& body = Json::object());
  Result<Json> WhoAmI();                                // GET /v1/whoami
  // POST /v1/sandboxes/{id}/urls {"port", "ttl"}: a signed URL to one port of the sandbox
  // (docs/ports.md): {"url","host","port","token","expires_at","public_traffic",…}. `port`
  // goes as given, so spaced names a bad one; ttl_s 0 = spaced's default (1 h).
  Result<Json> PortUrl(std::string_view sandbox_id, std::string_view port, int64_t ttl_s = 0);

  // ---- Helpers ----
  // Percent-encodes a query component (keeps unreserved characters, '/' and ':').
  static std::string QueryEscape(std::string_view s);
  // "30s" / "1500ms" as the API's `wait` parameter.
  static std::string FormatWait(milliseconds wait);
  // The Error a failed operation carries (its "error" object), or kInternal.
  static Error OperationError(const Json& op);
  // The shell-style exit status of a finished COMMAND: exit_code; 128+signal; 124 if timed
  // out; 127 if it could not start ("failed"); 255 when lost or unknown.
  static int ExitCodeOf(const Json& command);

 private:
  struct Impl;
  struct Transfer;
  Result<HttpResponse> Perform(Transfer& t);  // PerformOnce, retrying 429s (retry_busy_for)
  Result<HttpResponse> PerformOnce(Transfer& t);
  // Performs `t` as a mux stream (see StreamMux); `command_id`, if given, receives the
  // Space-Command-Id header.
  Result<Json> PerformMux(Transfer& t, std::string_view what, MuxOffsets& offsets,
                          const MuxCallback& callback, std::string* command_id);
  // Sends `method path?wait=` (wait per `options`), then waits for the answer's "operation"
  // until it is finished, calling options.on_pending once if it was not. Returns {answer, OP};
  // the OP may be failed, and is null when the answer carries none.
  Result<std::pair<Json, Json>> StartAndFollow(std::string_view method, const std::string& path,
                                               const std::optional<Json>& body,
                                               const WaitOptions& options);
  std::string SandboxPath(std::string_view id) const;
  std::unique_ptr<Impl> impl_;
};

}  // namespace space::client
