// api/parse: the pure parsers of spaced's API requests (api/ and fuzz/ only).
//
// Everything a route reads from a request — the target and its query, JSON bodies, query
// values — is turned into core requests or plain values here, with no connection, no Beast
// and no platform, so the parsers can be unit-tested and fuzzed (fuzz/api_bodies,
// fuzz/http_target). Each returns a clear kInvalidArgument Error for bad input and never
// throws. The routes (routes_*.cc) call these and nothing else to parse.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "auth/auth.h"
#include "common/common.h"
#include "common/json.h"
#include "core/core.h"

namespace space::api {

using Query = std::multimap<std::string, std::string>;

// Who sent a request: set by the server before any route runs (api/access.cc).
struct Principal {
  enum class Kind { kNone, kOperator, kToken };
  Kind kind = Kind::kNone;
  std::string key_name;   // kOperator: the API key's name ("no-auth" under --no-auth)
  auth::Claims claims;    // kToken: the verified claims
  bool is_operator() const { return kind == Kind::kOperator; }
  bool is_token() const { return kind == Kind::kToken; }
};

// ---- the request target (server.cc)
struct Target {
  std::string path;                   // percent-decoded, without the query
  std::vector<std::string> segments;  // the raw path split on '/', each percent-decoded
  Query query;                        // decoded keys and values ("k" alone: value "")
};
Target ParseTarget(std::string_view target);

// Decodes %XX escapes and '+' (as a space) of a URL component.
std::string PercentDecode(std::string_view s);

// The first value of `key` (def if absent).
std::string QueryValue(const Query& q, const std::string& key, const std::string& def = "");

// ?wait=30s (capped at 5 minutes); 0 if absent; -1 if malformed.
int64_t WaitMillis(const Query& q);

// ---- bodies
// A JSON request body: empty = {}; kInvalidArgument unless it is a JSON object.
[[nodiscard]] Result<Json> ParseJsonBody(std::string_view body);

// body[key] as a map of strings (absent: empty; with null_is_empty, null too); anything
// else is kInvalidArgument naming the key. Used for env and metadata, here and by e2b/.
[[nodiscard]] Result<std::map<std::string, std::string>> ParseStringMap(const Json& body,
                                                                       const char* key,
                                                                       bool null_is_empty = false);

// ---- sandboxes (routes_sandboxes.cc)
// POST /v1/sandboxes
[[nodiscard]] Result<core::CreateSandboxRequest> ParseCreate(const Json& body);
// The create's `volumes`: [{name, path, read_only}] (core checks names and paths).
[[nodiscard]] Result<std::vector<core::VolumeMount>> ParseVolumeMounts(const Json& v);
// POST /v1/volumes {name, size_bytes?}: (name, size; 0 = the default).
[[nodiscard]] Result<std::pair<std::string, int64_t>> ParseVolumeCreate(const Json& body);
// GET /v1/sandboxes?state=&label=k=v...
[[nodiscard]] Result<core::SandboxFilter> ParseSandboxFilter(const Query& q);
// POST /v1/sandboxes/{id}/fork {"count"}: clamped to 0..1000000 (core reports the range).
[[nodiscard]] Result<int64_t> ParseForkCount(const Json& body);
// POST /v1/sandboxes/{id}/timeout {"timeout", "on_timeout"}
struct TimeoutRequest {
  int64_t seconds = 0;
  std::string on_timeout;
};
[[nodiscard]] Result<TimeoutRequest> ParseTimeout(const Json& body);
// GET /v1/operations?limit= (default 100)
[[nodiscard]] Result<int64_t> ParseOperationsLimit(const Query& q);

// ---- commands (routes_commands.cc)
// POST /v1/sandboxes/{id}/commands
[[nodiscard]] Result<core::CommandRequest> ParseCommand(const Json& body);
// A terminal size {"cols":N,"rows":N} (each 1..4096).
[[nodiscard]] Result<core::CommandRequest::PtySize> ParsePtySize(const Json& j);
// POST .../signal {"signal": name or number} -> 1..64
[[nodiscard]] Result<int> ParseSignal(const Json& body);
// An output offset query value (0 if absent).
[[nodiscard]] Result<uint64_t> ParseOffset(const Query& q, const std::string& key);
// GET .../output?limit= (default 8 MiB, capped at 64 MiB)
[[nodiscard]] Result<size_t> ParseOutputLimit(const Query& q);

// ---- files (routes_files.cc)
bool Truthy(const std::string& v);  // "1", "true" or "yes"
// PUT files?mode= (octal, default 0644)
[[nodiscard]] Result<int> ParseFileMode(const Query& q);
// GET files:list?depth= (1..16, default 1)
[[nodiscard]] Result<int> ParseListDepth(const Query& q);
// POST files:rename {"from", "to"}
[[nodiscard]] Result<std::pair<std::string, std::string>> ParseRename(const Json& body);

// ---- templates (routes_templates.cc)
// A spec plus a base64 context of up to 16 MiB: larger than ordinary JSON bodies.
inline constexpr size_t kMaxBuildBody = 24u << 20;
// POST /v1/templates
[[nodiscard]] Result<core::TemplateBuildRequest> ParseBuild(const Json& body);

// ---- access (routes_access.cc)
// POST /v1/sandboxes/{id}/tokens: the claims asked for, checked against what the caller
// holds (never a scope, a command or a lifetime beyond its own token). expires_s holds the
// requested TTL (0 = default) until MintToken applies it.
[[nodiscard]] Result<auth::Claims> ParseMint(const Principal& who, const Json& body);

}  // namespace space::api
