#include "common/common.h"
#include "common/json.h"

#include <gtest/gtest.h>

namespace space {
namespace {

TEST(ErrorTest, WrapPrefixesContext) {
  Error e{Errc::kPermissionDenied, EPERM, "EPERM"};
  EXPECT_EQ(std::move(e).Wrap("mount /proc").message, "mount /proc: EPERM");
}

TEST(ErrorTest, ErrnoFailClassifies) {
  auto u = ErrnoFail("open x", ENOENT);
  EXPECT_EQ(u.value().code, Errc::kNotFound);
  EXPECT_NE(u.value().message.find("open x: "), std::string::npos);
}

TEST(IdTest, NewIdIsValidAndUnique) {
  std::string a = NewId("sb"), b = NewId("sb");
  EXPECT_TRUE(IsValidId(a, "sb"));
  EXPECT_NE(a, b);
  EXPECT_FALSE(IsValidId(a, "cmd"));
  EXPECT_FALSE(IsValidId("sb-../../etc/passwd", "sb"));
  EXPECT_FALSE(IsValidId("sb-AAAAAAAAAAAAAAAA", "sb"));
}

TEST(DurationTest, Parses) {
  EXPECT_EQ(ParseDurationMillis("30s"), 30000);
  EXPECT_EQ(ParseDurationMillis("1500ms"), 1500);
  EXPECT_EQ(ParseDurationMillis("2m"), 120000);
  EXPECT_EQ(ParseDurationMillis("10"), 10000);
  EXPECT_EQ(ParseDurationMillis("x"), -1);
  EXPECT_EQ(ParseDurationMillis("5y"), -1);
  EXPECT_EQ(ParseDurationMillis("99999999999999999999999"), -1);
  EXPECT_EQ(ParseDurationMillis("922337203685477570h"), -1);  // overflowed (UB) before
  EXPECT_EQ(ParseDurationMillis("9223372036854775ms"), 9223372036854775);
}

TEST(ErrcTest, NamesRoundTrip) {
  EXPECT_EQ(ErrcFromName(ErrcName(Errc::kTooLarge)), Errc::kTooLarge);
  EXPECT_EQ(ErrcFromName("bogus"), Errc::kInternal);
}

TEST(JsonTest, DeepNestingIsRejectedNotACrash) {
  std::string deep = std::string(400000, '[') + std::string(400000, ']');
  EXPECT_FALSE(ParseJson(deep));
  std::string ok = std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']');
  EXPECT_TRUE(ParseJson(ok));
  std::string too = std::string(kMaxJsonDepth + 1, '{') ;
  EXPECT_FALSE(ParseJson(too + "}"));
  // Brackets inside strings do not count.
  EXPECT_TRUE(ParseJson("{\"a\":\"" + std::string(1000, '[') + "\\\"[\"}"));
}

}  // namespace
}  // namespace space
