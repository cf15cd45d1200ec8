// api/e2b/parse: the pure parsers of the E2B-compatible surface (api/e2b and fuzz/ only):
// control-plane bodies and queries, the process.Process and filesystem.Filesystem request
// messages (after api/e2b/connect.h has unwrapped them), and the multipart/form-data upload
// parser. No connection, no platform: unit-testable and fuzzed (fuzz/e2b_connect,
// fuzz/e2b_multipart). Bad input is a clear Error, never an exception.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>

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
// ?metadata= "k=v&k2=v2" (the SDK encodes keys and values, then the whole string) -> labels.
std::map<std::string, std::string> ParseMetadataQuery(const std::string& q);

// ---- envd (routes_e2b_envd.cc)
// E2B accepts paths relative to the user's home; SPACE's commands default to / there.
std::string AbsPath(const std::string& path);
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
[[nodiscard]] Result<std::string> PathField(const Json& req, const char* name);
// filesystem.Filesystem/ListDir: depth, 1..16 (default 1).
int ListDirDepth(const Json& req);

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
