// The token codec (sign, verify, rotation, expiry, tampering), key hashing, scopes and the
// listen policy.
#include "auth/auth.h"

#include <gtest/gtest.h>

#include "common/json.h"

namespace space::auth {
namespace {

constexpr int64_t kNow = 1'800'000'000;

Claims SomeClaims() {
  Claims c;
  c.sandbox_id = "sb-abcdefghijklmnop";
  c.generation = 1234567;
  c.command_id = "cmd-qrstuvwxyz234567";
  c.scopes = kCommandsRead | kCommandsWrite;
  c.issued_s = kNow;
  c.expires_s = kNow + 60;
  return c;
}

// Replaces one character of `s` at `pos` with a different one of the base64url alphabet.
std::string Flip(std::string s, size_t pos) {
  s[pos] = s[pos] == 'A' ? 'B' : 'A';
  return s;
}

TEST(TokenTest, MintedTokenVerifiesWithItsClaims) {
  SigningKeys keys = SigningKeys::Generate();
  std::string t = keys.Mint(SomeClaims());
  EXPECT_TRUE(LooksLikeToken(t));
  auto c = keys.Verify(t, kNow);
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->sandbox_id, "sb-abcdefghijklmnop");
  EXPECT_EQ(c->generation, 1234567);
  EXPECT_EQ(c->command_id, "cmd-qrstuvwxyz234567");
  EXPECT_EQ(c->scopes, kCommandsRead | kCommandsWrite);
  EXPECT_EQ(c->expires_s, kNow + 60);
  EXPECT_EQ(c->issued_s, kNow);
}

TEST(TokenTest, ExpiredTokenIsRejected) {
  SigningKeys keys = SigningKeys::Generate();
  std::string t = keys.Mint(SomeClaims());
  EXPECT_TRUE(keys.Verify(t, kNow + 59));
  auto late = keys.Verify(t, kNow + 60);
  ASSERT_FALSE(late);
  EXPECT_EQ(late.error().code, Errc::kUnauthenticated);
  EXPECT_NE(late.error().message.find("expired"), std::string::npos);
}

TEST(TokenTest, EveryTamperedCharacterIsRejected) {
  SigningKeys keys = SigningKeys::Generate();
  std::string t = keys.Mint(SomeClaims());
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == '.') continue;
    auto r = keys.Verify(Flip(t, i), kNow);
    ASSERT_FALSE(r) << "accepted with character " << i << " changed";
    EXPECT_EQ(r.error().code, Errc::kUnauthenticated);
  }
}

TEST(TokenTest, ForgedClaimsWithAnotherKeyAreRejected) {
  SigningKeys mine = SigningKeys::Generate();
  SigningKeys theirs = SigningKeys::Generate();
  Claims broad = SomeClaims();
  broad.scopes = kAllSandboxScopes;
  auto r = mine.Verify(theirs.Mint(broad), kNow);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::kUnauthenticated);
  // Same key id, different secret: the signature check, not the kid lookup, rejects it.
  std::string forged = theirs.Mint(broad);
  std::string kid = mine.current_id();
  forged.replace(4, theirs.current_id().size(), kid);
  r = mine.Verify(forged, kNow);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("signature"), std::string::npos) << r.error().message;
}

TEST(TokenTest, MalformedTokensAreRejected) {
  SigningKeys keys = SigningKeys::Generate();
  std::string good = keys.Mint(SomeClaims());
  for (std::string bad : {std::string(""), std::string("st1."), std::string("st1.a.b"),
                          std::string("sk-1234"), good + ".x", good.substr(0, good.size() - 3),
                          std::string("st2") + good.substr(3), std::string(5000, 'a')}) {
    auto r = keys.Verify(bad, kNow);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().code, Errc::kUnauthenticated);
  }
}

TEST(TokenTest, RotationKeepsOldTokensValidUntilTheirKeyIsDropped) {
  SigningKeys keys = SigningKeys::Generate();
  std::string old_kid = keys.current_id();
  std::string old_token = keys.Mint(SomeClaims());
  std::string new_kid = keys.Rotate();
  EXPECT_NE(new_kid, old_kid);
  EXPECT_EQ(keys.current_id(), new_kid);
  std::string new_token = keys.Mint(SomeClaims());
  EXPECT_EQ(new_token.substr(4, new_kid.size()), new_kid);
  // The set survives a round trip through its file form.
  auto reloaded = SigningKeys::Parse(keys.Serialize());
  ASSERT_TRUE(reloaded) << reloaded.error().message;
  EXPECT_TRUE(reloaded->Verify(old_token, kNow));
  EXPECT_TRUE(reloaded->Verify(new_token, kNow));
  // The signing key cannot be dropped; the old one can, and its tokens die with it.
  EXPECT_EQ(reloaded->Drop(new_kid).error().code, Errc::kConflict);
  EXPECT_EQ(reloaded->Drop("nope").error().code, Errc::kNotFound);
  ASSERT_TRUE(reloaded->Drop(old_kid));
  auto r = reloaded->Verify(old_token, kNow);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("unknown signing key"), std::string::npos);
  EXPECT_TRUE(reloaded->Verify(new_token, kNow));
}

TEST(TokenTest, KeyFileParsingRejectsBadInput) {
  for (const char* bad : {"", "{}", "{\"keys\":[]}", "{\"keys\":[{\"id\":\"a\",\"secret\":\"00\"}]}",
                          "{\"keys\":[{\"id\":\"a.b\",\"secret\":\"" /* 32 bytes */
                          "0000000000000000000000000000000000000000000000000000000000000000\"}]}",
                          "not json"}) {
    auto r = SigningKeys::Parse(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().code, Errc::kInvalidArgument);
  }
}

TEST(ScopeTest, NamesRoundTripAndUnknownNamesAreErrors) {
  auto s = ParseScopes({"files:read", "commands:exec"});
  ASSERT_TRUE(s);
  EXPECT_EQ(*s, kFilesRead | kCommandsExec);
  EXPECT_EQ(ScopeNames(*s), (std::vector<std::string>{"commands:exec", "files:read"}));
  EXPECT_EQ(*ParseScope("*"), kAllSandboxScopes);
  EXPECT_EQ(*ParseScopes(ScopeNames(kAllSandboxScopes)), kAllSandboxScopes);
  auto bad = ParseScopes({"files:read", "root"});
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("root"), std::string::npos);
}

TEST(ApiKeyTest, HashIsStableDistinctAndNotTheKey) {
  std::string a = NewApiKey(), b = NewApiKey();
  EXPECT_NE(a, b);
  EXPECT_TRUE(StartsWith(a, "sk-"));
  EXPECT_EQ(a.size(), 3u + 48u);
  EXPECT_EQ(HashApiKey(a), HashApiKey(a));
  EXPECT_NE(HashApiKey(a), HashApiKey(b));
  EXPECT_EQ(HashApiKey(a).size(), 64u);
  EXPECT_EQ(HashApiKey(a).find(a.substr(3)), std::string::npos);
  EXPECT_EQ(KeyHint(a), a.substr(0, 9));
}

TEST(ListenPolicyTest, LoopbackAndNonLoopback) {
  EXPECT_TRUE(IsLoopback("127.0.0.1"));
  EXPECT_TRUE(IsLoopback("127.1.2.3"));
  EXPECT_TRUE(IsLoopback("::1"));
  EXPECT_TRUE(IsLoopback("[::1]"));
  EXPECT_TRUE(IsLoopback("localhost"));
  EXPECT_FALSE(IsLoopback("0.0.0.0"));
  EXPECT_FALSE(IsLoopback("::"));
  EXPECT_FALSE(IsLoopback("10.0.0.1"));
  EXPECT_FALSE(IsLoopback("128.0.0.1"));

  auto quiet = CheckListenPolicy("127.0.0.1", false, false);
  ASSERT_TRUE(quiet);
  EXPECT_TRUE(quiet->empty());
  auto open = CheckListenPolicy("0.0.0.0", false, false);
  ASSERT_TRUE(open);
  ASSERT_EQ(open->size(), 1u);
  EXPECT_NE((*open)[0].find("TLS"), std::string::npos);
  auto proxied = CheckListenPolicy("0.0.0.0", false, true);
  ASSERT_TRUE(proxied);
  EXPECT_TRUE(proxied->empty());
  auto local_noauth = CheckListenPolicy("127.0.0.1", true, false);
  ASSERT_TRUE(local_noauth);
  EXPECT_EQ(local_noauth->size(), 1u);
  auto refused = CheckListenPolicy("0.0.0.0", true, true);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, Errc::kInvalidArgument);
}


TEST(TrafficTokenTest, RoundTripExpiryAndNoCrossUse) {
  SigningKeys keys = SigningKeys::Generate();
  TrafficClaims tc;
  tc.sandbox_id = "sb-abcdefghijklmnop";
  tc.generation = 42;
  tc.port = 8080;
  tc.expires_s = kNow + 60;
  std::string t = keys.MintTraffic(tc);
  EXPECT_TRUE(LooksLikeTrafficToken(t));
  EXPECT_FALSE(LooksLikeToken(t));
  auto c = keys.VerifyTraffic(t, kNow);
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->sandbox_id, tc.sandbox_id);
  EXPECT_EQ(c->generation, 42);
  EXPECT_EQ(c->port, 8080);
  EXPECT_EQ(c->expires_s, kNow + 60);
  // Expired; tampered; signed by another key set.
  EXPECT_FALSE(keys.VerifyTraffic(t, kNow + 60));
  EXPECT_FALSE(keys.VerifyTraffic(Flip(t, t.size() - 3), kNow));
  EXPECT_FALSE(SigningKeys::Generate().VerifyTraffic(t, kNow));
  // 0 = no expiry.
  tc.expires_s = 0;
  EXPECT_TRUE(keys.VerifyTraffic(keys.MintTraffic(tc), kNow + 1'000'000'000));
  // A traffic token is no API token and an API token no traffic token, even re-prefixed.
  EXPECT_FALSE(keys.Verify(t, kNow));
  std::string api = keys.Mint(SomeClaims());
  EXPECT_FALSE(keys.VerifyTraffic(api, kNow));
  EXPECT_FALSE(keys.VerifyTraffic("tt1." + api.substr(4), kNow));
  EXPECT_FALSE(keys.Verify("st1." + t.substr(4), kNow));
}

}  // namespace
}  // namespace space::auth
