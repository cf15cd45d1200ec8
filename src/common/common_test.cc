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

TEST(IdTest, UuidsAreVersion4TextAndChecked) {
  std::string a = NewUuidV4(), b = NewUuidV4();
  EXPECT_NE(a, b);
  EXPECT_TRUE(IsUuidText(a));
  EXPECT_EQ(a[14], '4');                                      // version
  EXPECT_NE(std::string("89ab").find(a[19]), std::string::npos);  // RFC 4122 variant
  const unsigned char raw[16] = {0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef,
                                 0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0xff};
  EXPECT_EQ(UuidText(raw), "01234567-89ab-cdef-0011-2233445566ff");
  EXPECT_TRUE(IsUuidText(UuidText(raw)));
  EXPECT_FALSE(IsUuidText("01234567-89ab-cdef-0011-2233445566f"));    // short
  EXPECT_FALSE(IsUuidText("01234567-89AB-cdef-0011-2233445566ff"));   // upper case
  EXPECT_FALSE(IsUuidText("01234567_89ab-cdef-0011-2233445566ff"));   // separator
  EXPECT_FALSE(IsUuidText("../../../etc/passwd-aaaaaaaaaaaaaaaaa"));
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
