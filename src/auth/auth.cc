// auth: key hashing, token codec and listen policy. See auth.h for the contract.
#include "auth/auth.h"

#include <sodium.h>

#include <algorithm>
#include <array>

#include "common/json.h"

namespace space::auth {
namespace {

constexpr std::array<std::pair<const char*, Scopes>, 9> kScopeNames = {{
    {"sandbox:read", kSandboxRead},
    {"sandbox:lifecycle", kSandboxLifecycle},
    {"commands:exec", kCommandsExec},
    {"commands:read", kCommandsRead},
    {"commands:write", kCommandsWrite},
    {"files:read", kFilesRead},
    {"files:write", kFilesWrite},
    {"snapshots", kSnapshots},
    {"ports", kPorts},
}};

constexpr std::string_view kTokenPrefix = "st1.";
constexpr std::string_view kTrafficPrefix = "tt1.";
// Tokens are small; anything much larger is not one of ours (and not worth decoding).
constexpr size_t kMaxTokenBytes = 4096;

// sodium_init is idempotent and thread-safe; every entry point that needs libsodium's
// random generator or primitives calls this first.
void InitSodium() {
  if (sodium_init() < 0) SPACE_CHECK(!"libsodium init failed");
}

std::string RandomBytes(size_t n) {
  InitSodium();
  std::string out(n, '\0');
  randombytes_buf(out.data(), n);
  return out;
}

std::string Base64Url(std::string_view bytes) {
  std::string out(sodium_base64_encoded_len(bytes.size(), sodium_base64_VARIANT_URLSAFE_NO_PADDING),
                  '\0');
  sodium_bin2base64(out.data(), out.size(), reinterpret_cast<const unsigned char*>(bytes.data()),
                    bytes.size(), sodium_base64_VARIANT_URLSAFE_NO_PADDING);
  out.resize(out.size() - 1);  // the terminating NUL
  return out;
}

std::optional<std::string> FromBase64Url(std::string_view text) {
  std::string out(text.size(), '\0');
  size_t len = 0;
  const char* end = nullptr;
  if (sodium_base642bin(reinterpret_cast<unsigned char*>(out.data()), out.size(), text.data(),
                        text.size(), nullptr, &len, &end,
                        sodium_base64_VARIANT_URLSAFE_NO_PADDING) != 0 ||
      end != text.data() + text.size())
    return std::nullopt;
  out.resize(len);
  return out;
}

std::string Mac(const std::string& secret, std::string_view message) {
  std::string mac(crypto_auth_hmacsha256_BYTES, '\0');
  crypto_auth_hmacsha256_state st;
  crypto_auth_hmacsha256_init(&st, reinterpret_cast<const unsigned char*>(secret.data()),
                              secret.size());
  crypto_auth_hmacsha256_update(&st, reinterpret_cast<const unsigned char*>(message.data()),
                                message.size());
  crypto_auth_hmacsha256_final(&st, reinterpret_cast<unsigned char*>(mac.data()));
  return mac;
}

std::optional<std::string> FromHex(std::string_view hex) {
  std::string out(hex.size() / 2 + 1, '\0');
  size_t len = 0;
  const char* end = nullptr;
  if (sodium_hex2bin(reinterpret_cast<unsigned char*>(out.data()), out.size(), hex.data(),
                     hex.size(), nullptr, &len, &end) != 0 ||
      end != hex.data() + hex.size())
    return std::nullopt;
  out.resize(len);
  return out;
}

tl::unexpected<Error> Unauthenticated(std::string why) {
  return Fail(Errc::kUnauthenticated, "invalid token: " + std::move(why));
}

}  // namespace

// ---------------------------------------------------------------- scopes

Result<Scopes> ParseScope(std::string_view name) {
  if (name == "*" || name == "sandbox:*") return kAllSandboxScopes;
  for (const auto& [n, s] : kScopeNames) {
    if (name == n) return s;
  }
  return Fail(Errc::kInvalidArgument, "unknown scope \"" + std::string(name) + "\"");
}

Result<Scopes> ParseScopes(const std::vector<std::string>& names) {
  Scopes out = 0;
  for (const auto& n : names) {
    auto s = ParseScope(n);
    if (!s) return s;
    out |= *s;
  }
  return out;
}

std::vector<std::string> ScopeNames(Scopes s) {
  std::vector<std::string> out;
  for (const auto& [n, bit] : kScopeNames) {
    if (s & bit) out.emplace_back(n);
  }
  return out;
}

// ---------------------------------------------------------------- operator keys

std::string NewSecret(size_t bytes) { return HexEncode(RandomBytes(bytes)); }

bool SecretEquals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && sodium_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string NewApiKey(bool e2b) { return (e2b ? "e2b_" : "sk-") + HexEncode(RandomBytes(24)); }

std::string HashApiKey(std::string_view key) {
  InitSodium();
  static constexpr std::string_view kDomain = "space operator key v1";
  unsigned char out[32];
  crypto_generichash_state st;
  crypto_generichash_init(&st, nullptr, 0, sizeof out);
  crypto_generichash_update(&st, reinterpret_cast<const unsigned char*>(kDomain.data()),
                            kDomain.size() + 1);  // with its NUL: a separator
  crypto_generichash_update(&st, reinterpret_cast<const unsigned char*>(key.data()), key.size());
  crypto_generichash_final(&st, out, sizeof out);
  return HexEncode(std::string_view(reinterpret_cast<const char*>(out), sizeof out));
}

std::string KeyHint(std::string_view key) { return std::string(key.substr(0, 9)); }

// ---------------------------------------------------------------- signing keys

SigningKeys SigningKeys::Generate() {
  SigningKeys k;
  k.Rotate();
  return k;
}

Result<SigningKeys> SigningKeys::Parse(std::string_view text) {
  auto j = ParseJson(text);
  const Json* arr = j ? JsonField(*j, "keys") : nullptr;
  if (!arr || !arr->is_array() || arr->empty())
    return Fail(Errc::kInvalidArgument, "token signing keys: want {\"keys\":[…]} with at least one key");
  SigningKeys out;
  for (const Json& e : *arr) {
    auto id = JsonString(e, "id");
    auto secret_hex = JsonString(e, "secret");
    auto secret = secret_hex ? FromHex(*secret_hex) : std::nullopt;
    if (!id || id->empty() || id->size() > 32 || id->find('.') != std::string::npos || !secret ||
        secret->size() != crypto_auth_hmacsha256_KEYBYTES)
      return Fail(Errc::kInvalidArgument,
                  "token signing keys: each key needs an id (no '.') and a 32-byte hex secret");
    if (out.Find(*id)) return Fail(Errc::kInvalidArgument, "token signing keys: duplicate id " + *id);
    out.keys_.push_back(Key{*id, *secret, JsonInt(e, "created_ms").value_or(0)});
  }
  return out;
}

std::string SigningKeys::Serialize() const {
  Json arr = Json::array();
  for (const Key& k : keys_) {
    arr.push_back(Json{{"id", k.id}, {"secret", HexEncode(k.secret)}, {"created_ms", k.created_ms}});
  }
  Json j = Json::object();
  j["keys"] = std::move(arr);
  return j.dump(1) + "\n";
}

std::string SigningKeys::Rotate() {
  std::string id;
  do {
    id = HexEncode(RandomBytes(4));
  } while (Find(id));
  keys_.push_back(Key{id, RandomBytes(crypto_auth_hmacsha256_KEYBYTES), NowUnixMillis()});
  return id;
}

Status SigningKeys::Drop(std::string_view id) {
  auto it = std::find_if(keys_.begin(), keys_.end(), [&](const Key& k) { return k.id == id; });
  if (it == keys_.end()) return Fail(Errc::kNotFound, "no token signing key " + std::string(id));
  if (it + 1 == keys_.end())
    return Fail(Errc::kConflict, "token signing key " + std::string(id) +
                                     " is the one that signs; rotate before dropping it");
  keys_.erase(it);
  return Ok();
}

const SigningKeys::Key* SigningKeys::Find(std::string_view id) const {
  for (const Key& k : keys_) {
    if (k.id == id) return &k;
  }
  return nullptr;
}

std::string SigningKeys::Sign(std::string_view prefix, const std::string& claims_json) const {
  SPACE_CHECK(!keys_.empty());
  const Key& key = keys_.back();
  std::string signed_part = std::string(prefix) + key.id + "." + Base64Url(claims_json);
  return signed_part + "." + Base64Url(Mac(key.secret, signed_part));
}

Result<std::string> SigningKeys::Open(std::string_view prefix, std::string_view token) const {
  if (token.size() > kMaxTokenBytes || !StartsWith(token, prefix))
    return Unauthenticated("malformed");
  std::string_view rest = token.substr(prefix.size());
  size_t dot1 = rest.find('.');
  size_t dot2 = dot1 == std::string_view::npos ? dot1 : rest.find('.', dot1 + 1);
  if (dot2 == std::string_view::npos || rest.find('.', dot2 + 1) != std::string_view::npos)
    return Unauthenticated("malformed");
  const Key* key = Find(rest.substr(0, dot1));
  if (!key) return Unauthenticated("unknown signing key (rotated out?)");
  std::string_view signed_part = token.substr(0, prefix.size() + dot2);
  auto mac = FromBase64Url(rest.substr(dot2 + 1));
  std::string want = Mac(key->secret, signed_part);
  if (!mac || mac->size() != want.size() ||
      sodium_memcmp(mac->data(), want.data(), want.size()) != 0)
    return Unauthenticated("bad signature");
  // Signed by us: from here on a failure is a bug or an old format, not an attack.
  auto payload = FromBase64Url(rest.substr(dot1 + 1, dot2 - dot1 - 1));
  if (!payload) return Unauthenticated("malformed claims");
  return std::move(*payload);
}

// The claims object of an opened token.
static Result<Json> ClaimsObject(const Result<std::string>& opened) {
  if (!opened) return tl::unexpected(opened.error());
  auto j = ParseJson(*opened);
  if (!j || !j->is_object()) return Unauthenticated("malformed claims");
  return std::move(*j);
}

std::string SigningKeys::Mint(const Claims& c) const {
  Json j = {{"sb", c.sandbox_id},
            {"gen", c.generation},
            {"sc", ScopeNames(c.scopes)},
            {"exp", c.expires_s},
            {"iat", c.issued_s}};
  if (!c.command_id.empty()) j["cmd"] = c.command_id;
  return Sign(kTokenPrefix, j.dump());
}

Result<Claims> SigningKeys::Verify(std::string_view token, int64_t now_s) const {
  auto opened = ClaimsObject(Open(kTokenPrefix, token));
  if (!opened) return tl::unexpected(opened.error());
  const Json& j = *opened;
  Claims c;
  auto sb = JsonString(j, "sb");
  auto exp = JsonInt(j, "exp");
  const Json* sc = JsonField(j, "sc");
  if (!sb || !exp || !sc || !sc->is_array()) return Unauthenticated("malformed claims");
  c.sandbox_id = *sb;
  c.generation = JsonInt(j, "gen").value_or(0);
  c.command_id = JsonStringOr(j, "cmd", "");
  c.expires_s = *exp;
  c.issued_s = JsonInt(j, "iat").value_or(0);
  for (const Json& n : *sc) {
    auto s = n.is_string() ? ParseScope(n.get<std::string>()) : Result<Scopes>(0u);
    if (!s) return Unauthenticated("unknown scope in claims");
    c.scopes |= *s;
  }
  if (c.expires_s <= now_s) return Unauthenticated("expired");
  return c;
}

std::string SigningKeys::MintTraffic(const TrafficClaims& c) const {
  return Sign(kTrafficPrefix,
              Json{{"sb", c.sandbox_id}, {"gen", c.generation}, {"port", c.port}, {"exp", c.expires_s}}
                  .dump());
}

Result<TrafficClaims> SigningKeys::VerifyTraffic(std::string_view token, int64_t now_s) const {
  auto opened = ClaimsObject(Open(kTrafficPrefix, token));
  if (!opened) return tl::unexpected(opened.error());
  const Json& j = *opened;
  auto sb = JsonString(j, "sb");
  auto exp = JsonInt(j, "exp");
  auto port = JsonInt(j, "port");
  if (!sb || !exp || !port || *port < 0 || *port > 65535) return Unauthenticated("malformed claims");
  TrafficClaims c;
  c.sandbox_id = *sb;
  c.generation = JsonInt(j, "gen").value_or(0);
  c.port = static_cast<int>(*port);
  c.expires_s = *exp;
  if (c.expires_s != 0 && c.expires_s <= now_s) return Unauthenticated("expired");
  return c;
}

// ---------------------------------------------------------------- listen policy

bool IsLoopback(std::string_view a) {
  if (a.size() > 2 && a.front() == '[' && a.back() == ']') a = a.substr(1, a.size() - 2);
  if (a == "localhost" || a == "::1") return true;
  if (StartsWith(a, "::ffff:")) a.remove_prefix(7);
  return StartsWith(a, "127.");
}

Result<std::vector<std::string>> CheckListenPolicy(std::string_view address, bool no_auth,
                                                   bool behind_tls_proxy) {
  std::vector<std::string> warnings;
  bool loopback = IsLoopback(address);
  if (!loopback && no_auth) {
    return Fail(Errc::kInvalidArgument,
                "refusing to serve " + std::string(address) +
                    " without authentication (--no-auth is only allowed on loopback addresses)");
  }
  if (no_auth) {
    warnings.push_back("authentication is OFF (--no-auth): every local process can drive spaced");
  }
  if (!loopback && !behind_tls_proxy) {
    warnings.push_back(
        "listening on non-loopback address " + std::string(address) +
        " over plain HTTP: API keys and tokens cross the network in clear text. Put a "
        "TLS-terminating proxy in front (then pass --behind-tls-proxy) or listen on 127.0.0.1");
  }
  return warnings;
}

}  // namespace space::auth
