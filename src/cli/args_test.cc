#include "cli/args.h"

#include <gtest/gtest.h>

namespace space::cli {
namespace {

TEST(ParseByteSize, PlainAndSuffixed) {
  EXPECT_EQ(*ParseByteSize("0"), 0);
  EXPECT_EQ(*ParseByteSize("536870912"), 536870912);
  EXPECT_EQ(*ParseByteSize("512M"), 512LL << 20);
  EXPECT_EQ(*ParseByteSize("512m"), 512LL << 20);
  EXPECT_EQ(*ParseByteSize("512MiB"), 512LL << 20);
  EXPECT_EQ(*ParseByteSize("512MB"), 512LL << 20);
  EXPECT_EQ(*ParseByteSize("64k"), 64LL << 10);
  EXPECT_EQ(*ParseByteSize("2G"), 2LL << 30);
  EXPECT_EQ(*ParseByteSize("1T"), 1LL << 40);
  EXPECT_EQ(*ParseByteSize("100B"), 100);
}

TEST(ParseByteSize, RejectsGarbage) {
  for (const char* bad : {"", "M", "-1", "1.5G", "12X", "12 M", "0x10", "1GG", "512Mi B"}) {
    auto r = ParseByteSize(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().code, Errc::kInvalidArgument) << bad;
  }
  EXPECT_FALSE(ParseByteSize("99999999999999999999"));
  EXPECT_FALSE(ParseByteSize("9000000000000T"));  // overflows int64 after the shift
}

TEST(ParseKeyValue, Forms) {
  auto kv = ParseKeyValue("K=V");
  ASSERT_TRUE(kv);
  EXPECT_EQ(kv->first, "K");
  EXPECT_EQ(kv->second, "V");
  kv = ParseKeyValue("K=");
  ASSERT_TRUE(kv);
  EXPECT_EQ(kv->second, "");
  kv = ParseKeyValue("URL=a=b=c");
  ASSERT_TRUE(kv);
  EXPECT_EQ(kv->first, "URL");
  EXPECT_EQ(kv->second, "a=b=c");
  EXPECT_FALSE(ParseKeyValue("=V"));
  EXPECT_FALSE(ParseKeyValue("novalue"));
  EXPECT_FALSE(ParseKeyValue(""));
}

TEST(KeyValuesToObject, LastWinsAndErrors) {
  auto obj = KeyValuesToObject({"A=1", "B=2", "A=3"});
  ASSERT_TRUE(obj);
  EXPECT_EQ(*obj, (Json{{"A", "3"}, {"B", "2"}}));
  EXPECT_FALSE(KeyValuesToObject({"A=1", "oops"}));
  auto empty = KeyValuesToObject({});
  ASSERT_TRUE(empty);
  EXPECT_TRUE(empty->is_object());
  EXPECT_TRUE(empty->empty());
}

TEST(ParseRemotePath, RemoteAndHost) {
  auto r = ParseRemotePath("sb-abc:/work/file.txt");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->sandbox, "sb-abc");
  EXPECT_EQ(r->path, "/work/file.txt");
  r = ParseRemotePath("sb-abc:/");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->path, "/");
  EXPECT_FALSE(ParseRemotePath("./sb-abc:/x"));  // a host path with a colon
  EXPECT_FALSE(ParseRemotePath("dir/a:/x"));
  EXPECT_FALSE(ParseRemotePath("sb-abc:relative"));
  EXPECT_FALSE(ParseRemotePath(":/x"));
  EXPECT_FALSE(ParseRemotePath("/tmp/file"));
  EXPECT_FALSE(ParseRemotePath("file"));
}

TEST(ParseRfc3339Millis, Forms) {
  EXPECT_EQ(*ParseRfc3339Millis("1970-01-01T00:00:00Z"), 0);
  EXPECT_EQ(*ParseRfc3339Millis("1970-01-01T00:00:01.5Z"), 1500);
  EXPECT_EQ(*ParseRfc3339Millis("2026-11-30T10:00:00.123Z"), 1796032800123);
  EXPECT_EQ(*ParseRfc3339Millis("2026-11-30T12:00:00.123+02:00"), 1796032800123);
  EXPECT_EQ(*ParseRfc3339Millis(FormatRfc3339(1234567890123)), 1234567890123);
  EXPECT_FALSE(ParseRfc3339Millis(""));
  EXPECT_FALSE(ParseRfc3339Millis("2026-13-30T10:00:00Z"));
  EXPECT_FALSE(ParseRfc3339Millis("2026-11-30 garbage"));
  EXPECT_FALSE(ParseRfc3339Millis("2026-11-30T10:00:00Zjunk"));
}

TEST(FormatAge, Units) {
  EXPECT_EQ(FormatAge(std::nullopt, 0), "-");
  EXPECT_EQ(FormatAge(0, 5000), "5s");
  EXPECT_EQ(FormatAge(0, 125000), "2m");
  EXPECT_EQ(FormatAge(0, 3 * 3600 * 1000 + 5), "3h");
  EXPECT_EQ(FormatAge(0, 50LL * 3600 * 1000), "2d");
  EXPECT_EQ(FormatAge(10000, 0), "0s");  // clock skew: never negative
}

TEST(ParseSeconds, UnitsAndErrors) {
  EXPECT_EQ(*ParseSeconds("0"), 0);
  EXPECT_EQ(*ParseSeconds("300"), 300);
  EXPECT_EQ(*ParseSeconds("300s"), 300);
  EXPECT_EQ(*ParseSeconds("5m"), 300);
  EXPECT_EQ(*ParseSeconds("2h"), 7200);
  EXPECT_EQ(*ParseSeconds("1d"), 86400);
  for (const char* bad : {"", "s", "-5", "1.5", "5 m", "5M", "5ms", "10x", "1h30m"}) {
    auto r = ParseSeconds(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().code, Errc::kInvalidArgument) << bad;
  }
  EXPECT_FALSE(ParseSeconds("99999999999999999999"));
  EXPECT_FALSE(ParseSeconds("999999999999999999d"));  // overflows after scaling
}

TEST(CheckOnTimeout, KnownActionsOnly) {
  for (const char* ok : {"delete", "pause", "suspend"}) EXPECT_TRUE(CheckOnTimeout(ok)) << ok;
  for (const char* bad : {"", "Delete", "resume", "kill"}) {
    auto r = CheckOnTimeout(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_NE(r.error().message.find("delete, pause or suspend"), std::string::npos);
  }
}

TEST(FormatSize, HumanUnits) {
  EXPECT_EQ(FormatSize(-1), "-");
  EXPECT_EQ(FormatSize(0), "0B");
  EXPECT_EQ(FormatSize(1023), "1023B");
  EXPECT_EQ(FormatSize(1024), "1KiB");
  EXPECT_EQ(FormatSize(1536), "1.5KiB");
  EXPECT_EQ(FormatSize(12345), "12KiB");
  EXPECT_EQ(FormatSize(10 * 1024 * 1024 - 1), "10MiB");  // rounds, never "10.0MiB"
  EXPECT_EQ(FormatSize(3LL << 30), "3GiB");
  EXPECT_EQ(FormatSize((5LL << 40) + (1LL << 39)), "5.5TiB");
  EXPECT_EQ(FormatSize(INT64_MAX), "8EiB");
}

TEST(FormatTable, AlignsColumns) {
  EXPECT_EQ(FormatTable({{"ID", "STATE"}, {"sb-1", "running"}, {"sb-22", ""}}),
            "ID      STATE\n"
            "sb-1    running\n"
            "sb-22\n");
}

TEST(Format, LabelsCellsCommandLine) {
  EXPECT_EQ(FormatLabels(Json{{"b", "2"}, {"a", "1"}}), "a=1,b=2");
  EXPECT_EQ(FormatLabels(Json()), "");
  Json o = {{"s", "x"}, {"n", 3}, {"z", nullptr}};
  EXPECT_EQ(Cell(o, "s"), "x");
  EXPECT_EQ(Cell(o, "n"), "3");
  EXPECT_EQ(Cell(o, "z"), "-");
  EXPECT_EQ(Cell(o, "missing"), "-");
  EXPECT_EQ(CommandLine(Json{{"argv", {"echo", "hi"}}, {"cmd", nullptr}}), "echo hi");
  EXPECT_EQ(CommandLine(Json{{"argv", nullptr}, {"cmd", "echo hi | wc"}}), "echo hi | wc");
}

}  // namespace
}  // namespace space::cli
