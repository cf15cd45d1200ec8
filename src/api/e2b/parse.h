// api/e2b/parse: the pure parsers of the E2B-compatible surface (api/e2b and fuzz/ only):
// control-plane bodies and queries, the process.Process and filesystem.Filesystem request
// messages (after api/e2b/connect.h has unwrapped them), and the multipart/form-data upload
// parser. No connection, no platform: unit-testable and fuzzed (fuzz/e2b_connect,
// fuzz/e2b_multipart). Bad input is a clear Error, never an exception.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "api/parse.h"

namespace space::api::e2b {

// ---- control plane (routes_e2b_control.cc)
// E2B names templates without tags ("base"); SPACE refs are name:tag or a digest.
std::string TemplateRef(const std::string& e2b_template);
// POST /sandboxes (E2B's NewSandbox)
// The create body's allow_internet_access and network {allowOut, denyOut, allowPublicTraffic}
// as a SPACE network policy object (null: none asked for).
[[nodiscard]] Result<Json> NetworkFromE2b(const Json& body);
[[nodiscard]] Result<core::CreateSandboxRequest> ParseCreate(const Json& body);
// {"timeout": seconds} of create, connect and setTimeout: -1 when absent.
[[nodiscard]] Result<int64_t> TimeoutSeconds(const Json& body);
// ?metadata= "k=v&k2=v2" (the SDK encodes keys and values, then the whole string) -> labels;
// a pair without "=" or with an empty key is kInvalidArgument.
[[nodiscard]] Result<std::map<std::string, std::string>> ParseMetadataFilter(const std::string& q);
// An RFC 3339 date-time ("2026-12-01T19:03:27Z", fractions and offsets allowed) in unix ms.
[[nodiscard]] Result<int64_t> ParseRfc3339(const std::string& s);

// Where a page of a list ends: the last item's start time and id (lists are ordered by
// start time, then id). Sent to clients as an opaque token (X-Next-Token / nextToken).
struct PageCursor {
  int64_t created_ms = 0;
  std::string id;
};
std::string EncodePageToken(const PageCursor& c);
[[nodiscard]] Result<PageCursor> DecodePageToken(const std::string& token);
// ?limit= of a paged list: 1..100 (default 100).
[[nodiscard]] Result<size_t> ParsePageLimit(const std::string& limit);
// Whether an item at `c` comes after `after` in the given order.
bool AfterCursor(const PageCursor& c, const PageCursor& after, bool ascending);

// GET /sandboxes and /v2/sandboxes: the query's filters, order and page.
struct ListQuery {
  std::set<std::string> states;                 // E2B states: running, paused
  std::map<std::string, std::string> metadata;  // all must match
  bool ascending = false;                       // v2 default: newest first
  int64_t started_after_ms = -1;                // -1 = any
  std::string template_ref;                     // a SPACE ref (TemplateRef); "" = any
  size_t limit = 0;                             // 0 = all (v1)
  std::optional<PageCursor> after;
};
// `get(key)` gives every value of a query parameter. v1 lists running sandboxes only and
// takes only metadata; v2 takes state, order, startedAfter, template, limit and nextToken.
[[nodiscard]] Result<ListQuery> ParseListQuery(
    const std::function<std::vector<std::string>(const std::string&)>& get, bool v2);

// ---- envd (routes_e2b_envd.cc)
// E2B accepts paths relative to the user's home; SPACE's commands default to / there.
// A relative path is taken from `base` (the sandbox's working directory, E2B's user home).
std::string AbsPath(const std::string& path, const std::string& base = "/");
// The user of an `Authorization: Basic base64("user:")` header value; "" when not one.
std::string BasicUser(const std::string& authorization);
// A Content-Type without its parameters ("multipart/form-data; boundary=x" -> the type).
std::string MediaType(std::string content_type);
// The boundary parameter of a multipart Content-Type ("" when there is none).
std::string MultipartBoundary(const std::string& content_type);

// process.Process/Start
[[nodiscard]] Result<core::CommandRequest> ParseStart(const Json& req);
// The pid of a ProcessSelector (Connect, SendInput, CloseStdin, SendSignal, Update); tags
// are not supported (kNotFound).
[[nodiscard]] Result<int64_t> SelectedPid(const Json& req);
// process.Process/SendInput: the decoded bytes of input.stdin or input.pty.
[[nodiscard]] Result<std::string> ParseSendInput(const Json& req);
// process.Process/SendSignal: SIGKILL or SIGTERM.
[[nodiscard]] Result<int> ParseSendSignal(const Json& req);
// process.Process/Update: pty.size.
[[nodiscard]] Result<core::CommandRequest::PtySize> ParseUpdate(const Json& req);
// filesystem.Filesystem: a required path field, made absolute.
[[nodiscard]] Result<std::string> PathField(const Json& req, const char* name, const std::string& base = "/");
// filesystem.Filesystem/ListDir: depth, 1..16 (default 1).
int ListDirDepth(const Json& req);

// Directory watching (watch.cc) polls the directory's listing and reports what changed
// between two listings as envd's FilesystemEvents.
struct WatchEntry {
  std::string type;  // agent ENTRY type: file, dir, symlink, other
  int64_t size = 0;
  int64_t mtime_ms = 0;
  int64_t mode = 0;
  Json entry;  // the agent ENTRY itself, kept when asked for (events with their entry)
};
// Relative path (to the watched directory) -> entry.
using WatchState = std::map<std::string, WatchEntry>;
// The state of an agent ListFiles answer (an array of ENTRY objects) under `dir`.
WatchState WatchStateOf(const Json& entries, const std::string& dir, bool keep_entries = false);
// The events between two states, as {name, EVENT_TYPE_…}: a new entry is CREATE (then WRITE
// when it has content), a changed size or mtime WRITE, a changed mode CHMOD, a gone one REMOVE.
std::vector<std::pair<std::string, std::string>> DiffWatch(const WatchState& before, const WatchState& after);

// An incremental multipart/form-data parser: parts arrive through Feed() in any
// pieces; each part's name (the filename, or the request's path) and bytes go to the
// callbacks without holding a whole file in memory.
class Multipart {
 public:
  explicit Multipart(std::string boundary) : delim_("\r\n--" + std::move(boundary)) {}
  std::function<Status(const std::string& filename)> on_part;
  std::function<Status(std::string_view bytes)> on_data;
  std::function<Status()> on_end;

  Status Feed(std::string_view data);
  bool done() const { return state_ == kDone; }

 private:
  static std::string Filename(const std::string& headers);

  enum State { kPreamble, kAfterBoundary, kHeaders, kBody, kDone };
  State state_ = kPreamble;
  std::string delim_;
  std::string buf_;
};

}  // namespace space::api::e2b
