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

TEST(ParseBodies, E2bAutoPauseWithoutMemoryIsASuspend) {
  // onTimeout {action: 'pause', keepMemory: false} in the SDKs: a filesystem-only pause.
  auto on_timeout = [](const Json& extra) {
    Json body = {{"templateID", "base"}};
    body.update(extra);
    auto r = e2b::ParseCreate(body);
    return r ? r->on_timeout : "error: " + r.error().message;
  };
  EXPECT_EQ(on_timeout(Json::object()), "delete");
  EXPECT_EQ(on_timeout({{"autoPause", false}, {"autoPauseMemory", false}}), "delete");
  EXPECT_EQ(on_timeout({{"autoPause", true}}), "pause");
  EXPECT_EQ(on_timeout({{"autoPause", true}, {"autoPauseMemory", true}}), "pause");
  EXPECT_EQ(on_timeout({{"autoPause", true}, {"autoPauseMemory", nullptr}}), "pause");
  EXPECT_EQ(on_timeout({{"autoPause", true}, {"autoPauseMemory", false}}), "suspend");
  EXPECT_EQ(on_timeout({{"autoPause", true}, {"autoPauseMemory", "no"}}),
            "error: autoPauseMemory must be a boolean");
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

namespace space::api {
namespace {

TEST(E2bParseTest, ListQueryFiltersOrderAndPages) {
  std::multimap<std::string, std::string> q;
  auto get = [&](const std::string& k) {
    std::vector<std::string> v;
    for (auto [a, b] = q.equal_range(k); a != b; ++a) v.push_back(a->second);
    return v;
  };
  auto l = e2b::ParseListQuery(get, true);
  ASSERT_TRUE(l);
  EXPECT_EQ(l->states, (std::set<std::string>{"running", "paused"}));
  EXPECT_FALSE(l->ascending);
  EXPECT_EQ(l->limit, 100u);
  q = {{"state", "paused"}, {"order", "asc"}, {"limit", "2"}, {"template", "base"},
       {"startedAfter", "2026-12-01T19:03:27.5+01:00"}, {"metadata", "a=b&c="}};
  l = e2b::ParseListQuery(get, true);
  ASSERT_TRUE(l) << l.error().message;
  EXPECT_EQ(l->states, (std::set<std::string>{"paused"}));
  EXPECT_TRUE(l->ascending);
  EXPECT_EQ(l->limit, 2u);
  EXPECT_EQ(l->template_ref, "e2b-base:latest");
  EXPECT_EQ(l->started_after_ms, 1796148207500);
  EXPECT_EQ(l->metadata, (std::map<std::string, std::string>{{"a", "b"}, {"c", ""}}));
  q = {{"metadata", "a%3Db%26odd%2520key%3Dx"}};  // encoded once more, key encoded
  l = e2b::ParseListQuery(get, true);
  ASSERT_TRUE(l) << l.error().message;
  EXPECT_EQ(l->metadata, (std::map<std::string, std::string>{{"a", "b"}, {"odd key", "x"}}));
  q = {{"metadata", "a=b&c="}, {"state", "running"}};
  // v1 lists running sandboxes and ignores v2's parameters.
  l = e2b::ParseListQuery(get, false);
  ASSERT_TRUE(l);
  EXPECT_EQ(l->states, (std::set<std::string>{"running"}));
  EXPECT_EQ(l->limit, 0u);
  // Bad input is a 400, never ignored.
  for (auto bad : std::vector<std::multimap<std::string, std::string>>{
           {{"state", "dead"}}, {{"order", "up"}}, {{"limit", "0"}}, {{"limit", "101"}},
           {{"limit", "x"}}, {{"startedAfter", "yesterday"}}, {{"startedAfter", "2026-13-01T00:00:00Z"}},
           {{"nextToken", "garbage"}}, {{"nextToken", "12.sb/../x"}}, {{"metadata", "novalue"}},
           {{"metadata", "%3Dv"}}, {{"order", "asc"}, {"order", "desc"}}}) {
    q = bad;
    auto r = e2b::ParseListQuery(get, true);
    ASSERT_FALSE(r) << q.begin()->first << "=" << q.begin()->second;
    EXPECT_EQ(r.error().code, Errc::kInvalidArgument);
  }
}

TEST(E2bParseTest, PageTokensRoundTripAndOrder) {
  e2b::PageCursor c{1796148207000, "sb-abc_1"};
  auto back = e2b::DecodePageToken(e2b::EncodePageToken(c));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->created_ms, c.created_ms);
  EXPECT_EQ(back->id, c.id);
  EXPECT_TRUE(e2b::AfterCursor({1, "b"}, {1, "a"}, true));
  EXPECT_FALSE(e2b::AfterCursor({1, "b"}, {1, "a"}, false));
  EXPECT_TRUE(e2b::AfterCursor({0, "z"}, {1, "a"}, false));
  EXPECT_FALSE(e2b::AfterCursor({1, "a"}, {1, "a"}, true));
  EXPECT_EQ(*e2b::ParseRfc3339("1970-01-01T00:00:00Z"), 0);
  EXPECT_EQ(*e2b::ParseRfc3339("2000-03-01T00:00:00.123Z"), 951868800123);
}

TEST(E2bParseTest, RelativePathsStartAtTheBase) {
  EXPECT_EQ(e2b::AbsPath("x.txt"), "/x.txt");
  EXPECT_EQ(e2b::AbsPath("d/x", "/home/user"), "/home/user/d/x");
  EXPECT_EQ(e2b::AbsPath("./x", "/home/user/"), "/home/user/x");
  EXPECT_EQ(e2b::AbsPath(".", "/home/user"), "/home/user");
  EXPECT_EQ(e2b::AbsPath("/etc/hosts", "/home/user"), "/etc/hosts");
  EXPECT_EQ(e2b::AbsPath("x", "relative"), "/x");
}

TEST(E2bParseTest, BaseIsE2bBaseSnapshotsRestore) {
  EXPECT_EQ(e2b::TemplateRef("base"), "e2b-base:latest");
  EXPECT_EQ(e2b::TemplateRef("base:latest"), "base:latest");  // SPACE's own busybox base
  auto r = e2b::ParseCreate(Json{{"templateID", "snap-123:default"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->snapshot_id, "snap-123");
  EXPECT_EQ(r->template_ref, "");
}

}  // namespace
}  // namespace space::api

namespace space::api {
namespace {

TEST(E2bParseTest, WatchDiffs) {
  Json before = Json::parse(R"([{"path":"/w/a","type":"file","size":3,"mtime_ms":1,"mode":420},
                                {"path":"/w/d","type":"dir","size":4096,"mtime_ms":1,"mode":493},
                                {"path":"/w/gone","type":"file","size":0,"mtime_ms":1,"mode":420},
                                {"path":"/elsewhere","type":"file"}])");
  Json after = Json::parse(R"([{"path":"/w/a","type":"file","size":5,"mtime_ms":2,"mode":420},
                               {"path":"/w/d","type":"dir","size":4096,"mtime_ms":9,"mode":448},
                               {"path":"/w/d/new","type":"file","size":2,"mtime_ms":9,"mode":420}])");
  auto a = e2b::WatchStateOf(before, "/w"), b = e2b::WatchStateOf(after, "/w/");
  EXPECT_EQ(a.size(), 3u);
  auto ev = e2b::DiffWatch(a, b);
  std::vector<std::pair<std::string, std::string>> want = {
      {"a", "EVENT_TYPE_WRITE"},      {"d", "EVENT_TYPE_CHMOD"},      {"d/new", "EVENT_TYPE_CREATE"},
      {"d/new", "EVENT_TYPE_WRITE"}, {"gone", "EVENT_TYPE_REMOVE"}};
  EXPECT_EQ(ev, want);
  EXPECT_TRUE(e2b::DiffWatch(b, b).empty());
}

}  // namespace
}  // namespace space::api
