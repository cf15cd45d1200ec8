// auth: SPACE's credentials — operator API keys (hashed for storage), scoped, expiring,
// HMAC-signed tokens, and the listen-address policy. Pure computation over libsodium: no
// files, no store, no clocks but the one passed in. Everything here is thread-safe; a
// SigningKeys is immutable once built (rotation makes a new one).
//
// Token format (docs/security.md, "Tokens and access"):
//   st1.<kid>.<base64url(claims JSON)>.<base64url(HMAC-SHA256(key[kid], "st1.<kid>.<claims>"))>
// Claims: {"sb": sandbox id, "gen": the sandbox's generation, "cmd": command id or absent,
// "sc": [scope names], "exp": unix seconds, "iat": unix seconds}. A token is valid when
// its kid is still in the key set, the MAC matches, and exp is in the future; whether its
// sandbox still exists (and has the same generation) is for the caller to check.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/common.h"

namespace space::auth {

// ---------------------------------------------------------------- scopes
// What a token may do inside its one sandbox. Operator keys are not scoped: they may do
// everything, including the global routes no token reaches (create/list sandboxes, fork,
// templates, keys, the global snapshot and operation lists).
enum Scope : uint32_t {
  kSandboxRead = 1u << 0,       // "sandbox:read": GET the sandbox, its operations
  kSandboxLifecycle = 1u << 1,  // "sandbox:lifecycle": pause/resume/suspend/wake/timeout/delete
  kCommandsExec = 1u << 2,      // "commands:exec": start commands
  kCommandsRead = 1u << 3,      // "commands:read": list commands, status, output
  kCommandsWrite = 1u << 4,     // "commands:write": stdin, signals
  kFilesRead = 1u << 5,         // "files:read": read, list, stat
  kFilesWrite = 1u << 6,        // "files:write": write, remove, mkdir, rename
  kSnapshots = 1u << 7,         // "snapshots": take, list and delete the sandbox's snapshots
  kPorts = 1u << 8,             // "ports": mint traffic URLs for the sandbox's ports
};
using Scopes = uint32_t;
inline constexpr Scopes kAllSandboxScopes = (1u << 9) - 1;
// What the attach token of a command carries (bound to that command).
inline constexpr Scopes kAttachScopes = kCommandsRead | kCommandsWrite;

// "files:read" -> kFilesRead; "*" or "sandbox:*" -> kAllSandboxScopes. kInvalidArgument
// names the unknown scope.
[[nodiscard]] Result<Scopes> ParseScope(std::string_view name);
[[nodiscard]] Result<Scopes> ParseScopes(const std::vector<std::string>& names);
// Names in a fixed order.
std::vector<std::string> ScopeNames(Scopes s);

// ---------------------------------------------------------------- operator keys
// A new operator key: "sk-" + 48 hex characters (192 bits of system entropy); in E2B's
// shape (`e2b`), which E2B's SDKs check client-side (^e2b_[0-9a-f]+$), "e2b_" + 48 hex.
// Both kinds are operator keys alike, on every route.
std::string NewApiKey(bool e2b = false);
// The stored form of a key: hex BLAKE2b-256 of a domain tag and the key. Keys are random
// and high-entropy, so an unsalted fast hash is enough (no dictionary to attack).
std::string HashApiKey(std::string_view key);
// A short prefix safe to show in listings ("sk-1a2b3c").
std::string KeyHint(std::string_view key);
// `bytes` of system entropy as hex (session ids, CSRF tokens of the web console).
std::string NewSecret(size_t bytes);
// Compares secrets in time independent of where they differ (false when sizes differ).
bool SecretEquals(std::string_view a, std::string_view b);

// ---------------------------------------------------------------- tokens
struct Claims {
  std::string sandbox_id;
  int64_t generation = 0;    // the sandbox's generation when minted (see core)
  std::string command_id;    // "" = not bound to a command
  Scopes scopes = 0;
  int64_t expires_s = 0;     // unix seconds
  int64_t issued_s = 0;
};

inline bool LooksLikeToken(std::string_view bearer) { return StartsWith(bearer, "st1."); }

// Traffic tokens open a sandbox's ports to HTTP clients (docs/ports.md); they are no API
// credential, and no API token is a traffic token:
//   tt1.<kid>.<base64url(claims JSON)>.<base64url(HMAC-SHA256(key[kid], "tt1.<kid>.<claims>"))>
// Claims: {"sb", "gen", "port" (0 = every port), "exp" (unix seconds, 0 = never)}.
struct TrafficClaims {
  std::string sandbox_id;
  int64_t generation = 0;
  int port = 0;              // 1..65535, or 0 for every port of the sandbox
  int64_t expires_s = 0;     // 0 = until the sandbox (or the signing key) is gone
};
inline bool LooksLikeTrafficToken(std::string_view t) { return StartsWith(t, "tt1."); }

// The HMAC keys tokens are signed with, by key id. The newest key signs; every key in the
// set verifies, so tokens signed before a rotation stay valid until their key is dropped.
class SigningKeys {
 public:
  struct Key {
    std::string id;       // 8 hex characters
    std::string secret;   // 32 raw bytes
    int64_t created_ms = 0;
  };

  // A set with one fresh key.
  static SigningKeys Generate();
  // Parses the JSON form written by Serialize(). kInvalidArgument if malformed or empty.
  [[nodiscard]] static Result<SigningKeys> Parse(std::string_view text);
  std::string Serialize() const;

  // Adds a fresh key that signs from now on; returns its id.
  std::string Rotate();
  // Removes a key: tokens signed with it stop verifying. kNotFound for an unknown id;
  // kConflict for the signing (newest) key — rotate first.
  [[nodiscard]] Status Drop(std::string_view id);
  const std::vector<Key>& keys() const { return keys_; }   // oldest first
  const std::string& current_id() const { return keys_.back().id; }

  // Signs claims with the current key.
  std::string Mint(const Claims& claims) const;
  // Checks a token's form, key id, MAC and expiry against `now_s`. kUnauthenticated says
  // which check failed (malformed, unknown key, bad signature, expired).
  [[nodiscard]] Result<Claims> Verify(std::string_view token, int64_t now_s) const;
  // The same for traffic tokens (a different prefix, so neither kind passes for the other).
  std::string MintTraffic(const TrafficClaims& claims) const;
  [[nodiscard]] Result<TrafficClaims> VerifyTraffic(std::string_view token, int64_t now_s) const;

 private:
  const Key* Find(std::string_view id) const;
  std::string Sign(std::string_view prefix, const std::string& claims_json) const;
  // The claims JSON of a token of kind `prefix` whose key and MAC check out.
  [[nodiscard]] Result<std::string> Open(std::string_view prefix, std::string_view token) const;
  std::vector<Key> keys_;   // never empty once built
};

// ---------------------------------------------------------------- listen policy
// True for 127.0.0.0/8, ::1, ::ffff:127.x.y.z and "localhost".
bool IsLoopback(std::string_view address);
// Decides whether spaced may listen on `address`. Refuses (kInvalidArgument) to serve
// without authentication on a non-loopback address; otherwise returns the warnings to log
// (non-loopback without a TLS proxy in front; no authentication on loopback).
[[nodiscard]] Result<std::vector<std::string>> CheckListenPolicy(std::string_view address,
                                                                 bool no_auth,
                                                                 bool behind_tls_proxy);

}  // namespace space::auth
