// Unit tests of api/parse.h and api/e2b/parse.h (the fuzz targets api_bodies, http_target,
// e2b_connect and e2b_multipart drive the same functions with generated input).
#include "api/parse.h"

#include <gtest/gtest.h>

#include "api/e2b/parse.h"

namespace space::api {
namespace {

TEST(ParseTarget, SplitsAndDecodes) {
  Target t = ParseTarget("/v1/sandboxes/sb%2D1/files?path=%2Ftmp%2Fa+b&label=a=b&label=c=d&flag");
  EXPECT_EQ(t.path, "/v1/sandboxes/sb-1/files");
  EXPECT_EQ(t.segments, (std::vector<std::string>{"v1", "sandboxes", "sb-1", "files"}));
  EXPECT_EQ(QueryValue(t.query, "path"), "/tmp/a b");
  EXPECT_EQ(t.query.count("label"), 2u);
  EXPECT_EQ(QueryValue(t.query, "flag", "absent"), "");
  EXPECT_EQ(PercentDecode("%zz%4"), "%zz%4");
}

TEST(ParseQuery, ValuesAndRanges) {
  EXPECT_EQ(WaitMillis(ParseTarget("/?wait=30s").query), 30000);
  EXPECT_EQ(WaitMillis(ParseTarget("/?wait=1h").query), 5 * 60 * 1000);
  EXPECT_EQ(WaitMillis(ParseTarget("/?wait=soon").query), -1);
  EXPECT_EQ(*ParseOffset(ParseTarget("/?offset=42").query, "offset"), 42u);
  EXPECT_FALSE(ParseOffset(ParseTarget("/?offset=-1").query, "offset"));
  // strtoull read these as 0 and 2^64-5; found by fuzz/http_target.
  EXPECT_FALSE(ParseOffset(ParseTarget("/?offset=%00123").query, "offset"));
  EXPECT_FALSE(ParseOffset(ParseTarget("/?offset=%20-5").query, "offset"));
  EXPECT_FALSE(ParseFileMode(ParseTarget("/?mode=%00").query));
  EXPECT_EQ(*ParseOperationsLimit(ParseTarget("/?limit=99999999999999999999999").query),
            INT64_MAX);
  EXPECT_EQ(*ParseOutputLimit(ParseTarget("/?limit=999999999999").query), 64u << 20);
  EXPECT_FALSE(ParseListDepth(ParseTarget("/?depth=17").query));
  EXPECT_EQ(*ParseFileMode(ParseTarget("/?mode=0755").query), 0755);
  EXPECT_FALSE(ParseSandboxFilter(ParseTarget("/?label==x").query));
}

TEST(ParseBodies, E2bPortsArePublicUnlessAllowPublicTrafficIsFalse) {
  // As on E2B (docs/ports.md#e2b).
  auto e = e2b::ParseCreate(Json{{"templateID", "base"}});
  ASSERT_TRUE(e);
  EXPECT_EQ(JsonBoolOr(e->network, "public_traffic", false), true);
  EXPECT_EQ(JsonStringOr(e->network, "mode", ""), "none");
  e = e2b::ParseCreate(Json{{"templateID", "base"}, {"network", {{"allowPublicTraffic", false}}}});
  ASSERT_TRUE(e);
  EXPECT_EQ(JsonBoolOr(e->network, "public_traffic", true), false);
}

TEST(ParseBodies, TimeoutBeyondAYearIsRefusedNotConverted) {
  // Was a float-to-int64 overflow (undefined behaviour) before the range check; found by
  // fuzz/api_bodies.
  auto r = ParseTimeout(Json{{"timeout", 1e300}});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::kInvalidArgument);
  EXPECT_EQ(ParseTimeout(Json{{"timeout", 12.9}, {"on_timeout", "pause"}})->seconds, 12);
}

Json Body(std::string_view text) {
  auto j = ParseJsonBody(text);
  EXPECT_TRUE(j) << text;
  return j ? *j : Json::object();
}

TEST(ParseBodies, CommandAndMint) {
  EXPECT_FALSE(ParseCommand(Body(R"({"argv":["a"],"cmd":"b"})")));
  EXPECT_FALSE(ParseCommand(Body(R"({"cmd":"x","user":-1})")));
  auto uid = ParseCommand(Body(R"({"cmd":"x","user":1000})"));
  ASSERT_TRUE(uid);
  EXPECT_EQ(uid->user, "1000");
  Principal attach;
  attach.kind = Principal::Kind::kToken;
  attach.claims.scopes = auth::kAttachScopes;
  attach.claims.command_id = "cmd-0123456789abcdef";
  auto broader = ParseMint(attach, Body(R"({"scopes":["files:read"]})"));
  ASSERT_FALSE(broader);
  EXPECT_EQ(broader.error().code, Errc::kPermissionDenied);
  auto same = ParseMint(attach, Json::object());
  ASSERT_TRUE(same);
  EXPECT_EQ(same->command_id, "cmd-0123456789abcdef");
}

TEST(E2bParse, SendSignal) {
  EXPECT_EQ(*e2b::ParseSendSignal(Body(R"({"signal":"SIGNAL_SIGKILL"})")), 9);
  EXPECT_EQ(*e2b::ParseSendSignal(Body(R"({"signal":15})")), 15);
  EXPECT_FALSE(e2b::ParseSendSignal(Body(R"({"signal":4294967305})")));  // 2^32 + 9
  EXPECT_FALSE(e2b::ParseSendSignal(Body(R"({"signal":2})")));
}

TEST(E2bParse, MultipartInPieces) {
  e2b::Multipart mp(e2b::MultipartBoundary("multipart/form-data; boundary=\"XY\""));
  std::string name, bytes;
  int ends = 0;
  mp.on_part = [&](const std::string& n) -> Status { name = n; return Ok(); };
  mp.on_data = [&](std::string_view b) -> Status { bytes.append(b); return Ok(); };
  mp.on_end = [&]() -> Status { ++ends; return Ok(); };
  std::string body =
      "--XY\r\nContent-Disposition: form-data; name=\"file\"; filename=\"/a\"\r\n\r\n"
      "hi\r\n--X\r\n--XY--\r\n";
  for (char c : body) ASSERT_TRUE(mp.Feed(std::string_view(&c, 1)));
  EXPECT_TRUE(mp.done());
  EXPECT_EQ(name, "/a");
  EXPECT_EQ(bytes, "hi\r\n--X");
  EXPECT_EQ(ends, 1);
}

}  // namespace
}  // namespace space::api
