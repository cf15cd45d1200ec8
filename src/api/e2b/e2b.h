// api/e2b: an E2B-compatible surface on spaced's port, so the unmodified E2B SDKs work
// against SPACE (docs/e2b-compat.md).
//
// Two halves, both thin translations onto core::Platform (no second implementation of
// sandboxes, commands or files):
//  - the control plane (routes_e2b_control.cc): `/v2/sandboxes`, `/sandboxes/{id}/…`,
//    authorised by `X-API-KEY`, errors as E2B's `{"code":<http status>,"message"}`;
//  - the in-sandbox "envd" API (routes_e2b_envd.cc): `/health`, `/files` and the
//    Connect-RPC services `process.Process` and `filesystem.Filesystem` (JSON codec),
//    routed by the `E2b-Sandbox-Id` header and authorised by `X-Access-Token`.
// E2B sandbox ids are SPACE sandbox ids. api/ only; included by api/server.cc.
#pragma once

#include <string>
#include <string_view>

#include "api/http.h"

namespace space::api::e2b {

// The envd version the surface reports: the SDK gates features on it (0.5.7: octet-stream
// uploads and closeStdin; 0.6.2: file metadata; 0.6.3: watch events with their entry;
// 0.6.4: watching with network mounts allowed).
inline constexpr char kEnvdVersion[] = "0.6.4";
// E2B's file metadata: extended attributes of this prefix, the rest of the name the key.
inline constexpr char kMetadataXattrPrefix[] = "user.e2b.";
// envd's port, as the SDKs name it in the E2b-Sandbox-Port header; calls that name any
// other port go to that port inside the sandbox (the code interpreter's is 49999).
inline constexpr char kEnvdPort[] = "49983";

// Whether a request is for E2B's envd: it names its sandbox in E2b-Sandbox-Id, or (SDK
// releases before 2.8 send no such header) it is an envd path (/health, /files, the
// Connect-RPC services) carrying a sandbox token as X-Access-Token.
bool IsEnvdRequest(const Ctx& ctx);

// Handles the request if it belongs to the E2B surface (answering it, errors included);
// false otherwise. Called by the server before its own authentication.
Awaitable<bool> Route(Ctx& ctx);

// Control plane and envd halves (each true if it handled the request).
Awaitable<bool> RouteControl(Ctx& ctx);
Awaitable<bool> RouteEnvd(Ctx& ctx, const std::string& sandbox_id);
// envd's /files (routes_e2b_files.cc): GET streams a file (gzip when Accept-Encoding asks),
// POST writes one or more (multipart or octet-stream, gzip when Content-Encoding says so).
Awaitable<void> EnvdFilesGet(Ctx& ctx, const std::string& sandbox_id);
Awaitable<void> EnvdFilesPost(Ctx& ctx, const std::string& sandbox_id);
// envd's REST errors: {"code":<status>,"message"}; the SDK maps 404 to FileNotFoundError,
// 502 to "sandbox not running" (TimeoutError), 507 to NotEnoughSpaceError.
Awaitable<void> ReplyRestError(Ctx& ctx, int status, const std::string& message);
Awaitable<void> ReplyRestError(Ctx& ctx, const Error& e);
// The request's media type (Content-Type without parameters, lower case).
std::string EnvdContentType(const Ctx& ctx);
// Where envd's relative paths start: the home of the `user` the call names (in the
// sandbox's /etc/passwd), else the template's WORKDIR (E2B's user home in e2b-base), else /.
std::string RelativeBase(core::Platform* p, const std::string& sandbox_id, const std::string& user = "");
// Whom envd's file calls act as: `requested` (the call's username) if named, else the
// sandbox's default user (its template's USER), "" for root (the agent itself).
std::string FileUser(core::Platform* p, const std::string& sandbox_id, const std::string& requested);
// E2B volumes: /volumes and /volumecontent (routes_e2b_volumes.cc, docs/volumes.md).
Awaitable<bool> RouteVolumes(Ctx& ctx);
// E2B's template build API, Template.build's calls (routes_e2b_templates.cc), and its
// template tags (routes_e2b_tags.cc).
Awaitable<bool> RouteTemplates(Ctx& ctx);
Awaitable<bool> RouteTemplateTags(Ctx& ctx);

// The `envdAccessToken` of a sandbox, checked on every envd request: SPACE's sandbox token
// with every sandbox scope, one per sandbox (the same at every create and connect, so
// URLs signed with it can be checked), valid for the sandbox's life: revoked when it is
// deleted or when its signing key is dropped.
std::string AccessToken(const Ctx& ctx, const store::SandboxRecord& sb);
bool AccessTokenValid(const Ctx& ctx, const std::string& sandbox_id, std::string_view token);
// envd's signed /files URLs (the SDK's downloadUrl/uploadUrl): `signature` is
// "v1_" + base64(sha256("path:operation:user:token[:expiration]")) without padding, with
// the query's path and username as given, operation "read" (GET) or "write" (POST).
// Ok, or kUnauthenticated saying why (expired, no match).
[[nodiscard]] Status SignatureValid(const Ctx& ctx, const store::SandboxRecord& sb,
                                    std::string_view operation);
// An agent ENTRY (docs/agent-protocol.md) as filesystem.EntryInfo, its user.e2b.*
// attributes as `metadata`.
Json EntryInfo(const Json& entry);
// The `trafficAccessToken`: a traffic token for every port of the sandbox, sent by E2B
// clients as `e2b-traffic-access-token` (docs/ports.md); null for public-traffic sandboxes.
Json TrafficToken(const Ctx& ctx, const store::SandboxRecord& sb);
// The `domain` of create and connect answers: --sandbox-domain plus ":<spaced's port>".
std::string SandboxDomain(const Ctx& ctx);

// Whether X-API-KEY holds an operator API key.
bool ApiKeyValid(const Ctx& ctx);

// An http header by name ("" when absent).
std::string HeaderOr(const Ctx& ctx, std::string_view name);

}  // namespace space::api::e2b
