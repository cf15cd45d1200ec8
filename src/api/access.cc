// Access control: who is calling (operator key or token) and whether the route allows it.
// The one place that decides: kAccessRules maps every route to the scopes it needs.
#include <array>

#include "api/console_sessions.h"
#include "api/http.h"

namespace space::api {

namespace {

using namespace auth;

enum RuleFlags : uint8_t {
  kOperatorOnly = 0,
  kAnyPrincipal = 1 << 0,   // every authenticated caller (no sandbox involved)
  kCommandBound = 1 << 1,   // command-bound (attach) tokens may use it too
};

// One route: METHOD and a pattern of '/'-separated segments. A segment is a literal,
// "{sb}" (the sandbox id), "{cid}" (a command id), "{op}" (an operation: allowed when it
// targets the caller's sandbox), "{snap}" (a snapshot: allowed when taken from it), "*"
// (any one segment) or a final "**" (any rest). `header`, when set, names the request
// header that carries the sandbox id instead of the path. Routes not listed here are
// operator-only; the first matching rule wins.
struct AccessRule {
  const char* method;
  const char* pattern;
  Scopes any_of;   // the token needs one of these (0 with kOperatorOnly: operators only)
  uint8_t flags = kOperatorOnly;
  const char* header = nullptr;
};

constexpr Scopes kOpScopes = kSandboxRead | kSandboxLifecycle | kSnapshots;

const AccessRule kAccessRules[] = {
    {"GET", "/v1/whoami", 0, kAnyPrincipal},
    // MCP (routes_mcp.cc): its tools call the API with the same credential, checked there.
    {"POST", "/mcp", 0, kAnyPrincipal},
    // Sandboxes. Creating and listing are global: operators only.
    {"GET", "/v1/sandboxes/{sb}", kSandboxRead},
    {"DELETE", "/v1/sandboxes/{sb}", kSandboxLifecycle},
    {"POST", "/v1/sandboxes/{sb}/pause", kSandboxLifecycle},
    {"POST", "/v1/sandboxes/{sb}/resume", kSandboxLifecycle},
    {"POST", "/v1/sandboxes/{sb}/suspend", kSandboxLifecycle},
    {"POST", "/v1/sandboxes/{sb}/wake", kSandboxLifecycle},
    {"POST", "/v1/sandboxes/{sb}/timeout", kSandboxLifecycle},
    // The policy may be read by the sandbox's token; changing it is the operator's (code
    // inside a sandbox must not widen its own egress). PUT is therefore not listed.
    {"GET", "/v1/sandboxes/{sb}/network", kSandboxRead},
    {"GET", "/v1/sandboxes/{sb}/metrics", kSandboxRead},
    {"POST", "/v1/sandboxes/{sb}/snapshots", kSnapshots},
    {"GET", "/v1/sandboxes/{sb}/snapshots", kSnapshots},
    {"GET", "/v1/snapshots/{snap}", kSnapshots},
    {"DELETE", "/v1/snapshots/{snap}", kSnapshots},
    // Any token of the sandbox may mint a narrower one (the handler enforces "narrower").
    {"POST", "/v1/sandboxes/{sb}/tokens", kAllSandboxScopes, kCommandBound},
    // Commands.
    {"POST", "/v1/sandboxes/{sb}/commands", kCommandsExec},
    {"GET", "/v1/sandboxes/{sb}/commands", kCommandsRead},
    {"GET", "/v1/sandboxes/{sb}/commands/{cid}", kCommandsRead, kCommandBound},
    {"GET", "/v1/sandboxes/{sb}/commands/{cid}/output", kCommandsRead, kCommandBound},
    {"POST", "/v1/sandboxes/{sb}/commands/{cid}/stdin", kCommandsWrite, kCommandBound},
    {"POST", "/v1/sandboxes/{sb}/commands/{cid}/signal", kCommandsWrite, kCommandBound},
    {"GET", "/v1/sandboxes/{sb}/commands/{cid}/terminal", kCommandsWrite, kCommandBound},
    {"DELETE", "/v1/sandboxes/{sb}/commands/{cid}/output", kCommandsWrite},
    // Files.
    {"GET", "/v1/sandboxes/{sb}/files", kFilesRead},
    {"GET", "/v1/sandboxes/{sb}/files:list", kFilesRead},
    {"GET", "/v1/sandboxes/{sb}/files:stat", kFilesRead},
    {"PUT", "/v1/sandboxes/{sb}/files", kFilesWrite},
    {"DELETE", "/v1/sandboxes/{sb}/files", kFilesWrite},
    {"POST", "/v1/sandboxes/{sb}/files:mkdir", kFilesWrite},
    {"POST", "/v1/sandboxes/{sb}/files:rename", kFilesWrite},
    // Ports (routes_ports.cc): signed URLs, and the API path to a port.
    {"POST", "/v1/sandboxes/{sb}/urls", kPorts},
    {"*", "/v1/sandboxes/{sb}/ports/*/**", kPorts},
    // Operations: a token sees those of its own sandbox.
    {"GET", "/v1/operations/{op}", kOpScopes},
};

// What a request needs, once matched against a rule.
struct Need {
  const AccessRule* rule = nullptr;   // null: no rule (operator only)
  std::string sandbox_id, command_id, operation_id, snapshot_id;
};

std::vector<std::string_view> SplitPattern(std::string_view p) {
  std::vector<std::string_view> out;
  size_t pos = 0;
  while (pos < p.size()) {
    size_t next = p.find('/', pos);
    if (next == std::string_view::npos) next = p.size();
    if (next > pos) out.push_back(p.substr(pos, next - pos));
    pos = next + 1;
  }
  return out;
}

bool Match(const AccessRule& r, const Ctx& ctx, Need* need) {
  if (std::string_view(r.method) != "*" && ctx.method != r.method) return false;
  auto pat = SplitPattern(r.pattern);
  const auto& s = ctx.segments;
  Need n;
  n.rule = &r;
  size_t i = 0;
  for (; i < pat.size(); ++i) {
    if (pat[i] == "**") break;
    if (i >= s.size()) return false;
    if (pat[i] == "{sb}") {
      n.sandbox_id = s[i];
    } else if (pat[i] == "{cid}") {
      n.command_id = s[i];
    } else if (pat[i] == "{op}") {
      n.operation_id = s[i];
    } else if (pat[i] == "{snap}") {
      n.snapshot_id = s[i];
    } else if (pat[i] != "*" && pat[i] != s[i]) {
      return false;
    }
  }
  if (i == pat.size() && i != s.size()) return false;
  if (r.header) n.sandbox_id = ctx.Header(std::string_view(r.header));
  *need = std::move(n);
  return true;
}

Need FindNeed(const Ctx& ctx) {
  Need need;
  for (const AccessRule& r : kAccessRules) {
    if (Match(r, ctx, &need)) return need;
  }
  return Need{};
}

Awaitable<void> Deny(Ctx& ctx, int status, std::string message) {
  Error e(status == 401 ? Errc::kUnauthenticated : Errc::kPermissionDenied, 0, std::move(message));
  Json body = ErrorBody(e);
  std::vector<std::pair<std::string, std::string>> headers;
  if (status == 401) headers.emplace_back("WWW-Authenticate", "Bearer");
  co_await ctx.Reply(status, body, headers);
}

// The credential: "Authorization: Bearer X", else the X-API-Key header (what E2B SDKs
// send), else a WebSocket subprotocol "space-auth.X" (browsers cannot set headers on a
// WebSocket, and a URL would leak it to logs). Empty if none.
std::string Credential(const Ctx& ctx) {
  std::string auth = ctx.Header(http::field::authorization);
  const std::string prefix = "Bearer ";
  if (auth.size() > prefix.size() && auth.compare(0, prefix.size(), prefix) == 0)
    return auth.substr(prefix.size());
  std::string key = ctx.Header(std::string_view("X-API-Key"));
  if (!key.empty()) return key;
  const std::string protocols = ctx.Header(http::field::sec_websocket_protocol);
  const std::string_view tag = "space-auth.";
  for (size_t pos = 0; pos < protocols.size();) {
    size_t end = protocols.find(',', pos);
    if (end == std::string::npos) end = protocols.size();
    std::string_view item(protocols.data() + pos, end - pos);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item.substr(0, tag.size()) == tag) return std::string(item.substr(tag.size()));
    pos = end + 1;
  }
  return "";
}

bool Mutating(const std::string& method) {
  return method != "GET" && method != "HEAD" && method != "OPTIONS";
}

bool SandboxGone(const store::SandboxRecord& sb) {
  return sb.state == "deleting" || sb.state == "deleted";
}

}  // namespace

bool MayAccess(const Principal& who, Scopes any_of, const std::string& sandbox_id,
               const std::string& command_id) {
  if (who.is_operator()) return true;
  if (!who.is_token()) return false;
  const Claims& c = who.claims;
  if (any_of == 0 || (c.scopes & any_of) == 0) return false;
  if (sandbox_id.empty() || c.sandbox_id != sandbox_id) return false;
  return c.command_id.empty() || c.command_id == command_id;
}

Awaitable<bool> RequireAccess(Ctx& ctx, Scopes any_of, const std::string& sandbox_id,
                              const std::string& command_id) {
  if (MayAccess(ctx.principal, any_of, sandbox_id, command_id)) co_return true;
  co_await Deny(ctx, 403, "this token does not allow " + ctx.method + " " + ctx.path);
  co_return false;
}

Awaitable<bool> Authorize(Ctx& ctx) {
  core::Platform* p = ctx.platform;
  if (ctx.opts->no_auth) {
    ctx.principal.kind = Principal::Kind::kOperator;
    ctx.principal.key_name = "no-auth";
    co_return true;
  }
  std::string cred = Credential(ctx);
  if (cred.empty()) {
    // The web console's session cookie (docs/console.md): an operator, as the key it
    // logged in with, while that key lives. Changes need the session's CSRF token, and a
    // WebSocket (which no CSRF header can ride on) the page's own origin.
    auto cookie = CookieValue(ctx.Header(http::field::cookie), kSessionCookie);
    if (cookie && ctx.sessions) {
      auto session = ctx.sessions->Find(*cookie, NowUnixMillis() / 1000);
      if (!session) {
        co_await Deny(ctx, 401, "console session expired or unknown: log in again");
        co_return false;
      }
      auto key = p->FindApiKeyByHash(session->key_hash);
      if (!key) {
        ctx.sessions->Remove(session->id);
        co_await Deny(ctx, 401, "the API key of this console session was revoked: log in again");
        co_return false;
      }
      if (Mutating(ctx.method) &&
          !auth::SecretEquals(ctx.Header(std::string_view(kCsrfHeader)), session->csrf)) {
        co_await Deny(ctx, 403, "missing or wrong X-CSRF-Token for a console session");
        co_return false;
      }
      const bool upgrade = !ctx.Header(http::field::upgrade).empty();
      if (upgrade && !SameOrigin(ctx.Header(http::field::origin), ctx.Header(http::field::host))) {
        co_await Deny(ctx, 403, "a console session's WebSocket must come from the console's own origin");
        co_return false;
      }
      ctx.principal.kind = Principal::Kind::kOperator;
      ctx.principal.key_name = key->name;
      co_return true;
    }
    co_await Deny(ctx, 401, "missing API key or token (Authorization: Bearer KEY)");
    co_return false;
  }
  if (!LooksLikeToken(cred)) {
    auto key = p->FindApiKey(cred);
    if (!key) {
      co_await Deny(ctx, 401, "invalid API key");
      co_return false;
    }
    ctx.principal.kind = Principal::Kind::kOperator;
    ctx.principal.key_name = key->name;
    co_return true;
  }

  auto claims = ctx.opts->signing_keys->Verify(cred, NowUnixMillis() / 1000);
  if (!claims) {
    co_await Deny(ctx, 401, claims.error().message);
    co_return false;
  }
  // Revocation: a token dies with its sandbox (and with any sandbox that reused the id).
  std::string sid = claims->sandbox_id;
  auto sb = co_await ctx.Blocking([&] { return p->GetSandbox(sid); });
  if (!sb || SandboxGone(*sb) || sb->created_ms != claims->generation) {
    co_await Deny(ctx, 401, "token revoked: its sandbox " + sid + " was deleted");
    co_return false;
  }
  ctx.principal.kind = Principal::Kind::kToken;
  ctx.principal.claims = std::move(*claims);

  Need need = FindNeed(ctx);
  const Claims& c = ctx.principal.claims;
  const AccessRule* r = need.rule;
  if (r && (r->flags & kAnyPrincipal)) co_return true;
  if (!r || r->any_of == 0) {
    co_await Deny(ctx, 403, "a sandbox token cannot use " + ctx.method + " " + ctx.path +
                                " (operator API key required)");
    co_return false;
  }
  if (!c.command_id.empty() && !(r->flags & kCommandBound)) {
    co_await Deny(ctx, 403, "this token is bound to command " + c.command_id);
    co_return false;
  }
  // Resources named by their own id belong to the sandbox they came from.
  if (!need.operation_id.empty()) {
    std::string id = need.operation_id;
    auto op = co_await ctx.Blocking([&] { return p->GetOperation(id); });
    need.sandbox_id = op ? op->target : "";
  } else if (!need.snapshot_id.empty()) {
    std::string id = need.snapshot_id;
    auto snap = co_await ctx.Blocking([&] { return p->GetSnapshot(id); });
    need.sandbox_id = snap ? snap->sandbox_id : "";
  }
  if (need.sandbox_id != c.sandbox_id) {
    co_await Deny(ctx, 403, "this token is for sandbox " + c.sandbox_id);
    co_return false;
  }
  if (!(c.scopes & r->any_of)) {
    std::string want;
    for (const auto& n : ScopeNames(r->any_of)) want += (want.empty() ? "" : " or ") + n;
    co_await Deny(ctx, 403, ctx.method + " " + ctx.path + " needs scope " + want);
    co_return false;
  }
  if (!c.command_id.empty() && need.command_id != c.command_id && !need.command_id.empty()) {
    co_await Deny(ctx, 403, "this token is bound to command " + c.command_id);
    co_return false;
  }
  co_return true;
}

std::pair<std::string, int64_t> MintToken(const Ctx& ctx, const store::SandboxRecord& sb,
                                          const std::string& command_id, Scopes scopes,
                                          int64_t ttl_s) {
  int64_t now = NowUnixMillis() / 1000;
  if (ttl_s <= 0) ttl_s = ctx.opts->token_ttl_s;
  ttl_s = std::min(ttl_s, ctx.opts->max_token_ttl_s);
  Claims c;
  c.sandbox_id = sb.id;
  c.generation = sb.created_ms;
  c.command_id = command_id;
  c.scopes = scopes;
  c.issued_s = now;
  c.expires_s = now + ttl_s;
  if (ctx.principal.is_token()) c.expires_s = std::min(c.expires_s, ctx.principal.claims.expires_s);
  return {ctx.opts->signing_keys->Mint(c), c.expires_s};
}

}  // namespace space::api
