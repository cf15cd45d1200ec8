#include "api/e2b/connect.h"

#include <gtest/gtest.h>

namespace space::api::e2b::connect {
namespace {

TEST(ConnectTest, EnvelopeRoundTrip) {
  std::string e = Envelope(0, R"({"a":1})");
  ASSERT_EQ(e.size(), 12u);
  EXPECT_EQ(e[0], 0);
  EXPECT_EQ(e.substr(1, 4), std::string("\0\0\0\7", 4));
  auto m = SingleMessage(e);
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(*m, R"({"a":1})");
  EXPECT_EQ(EndStream(), std::string("\2\0\0\0\2{}", 7));
  std::string err = EndStream(ErrorJson("not_found", "x"));
  EXPECT_EQ(err[0], kFlagEndStream);
  EXPECT_NE(err.find(R"("error":{"code":"not_found","message":"x"})"), std::string::npos) << err;
}

TEST(ConnectTest, MalformedEnvelopesAreInvalidArgument) {
  std::string ok = Envelope(0, "{}");
  for (std::string bad : {std::string(), std::string("\0\0\0", 3), ok.substr(0, ok.size() - 1),
                          ok + "x", ok + ok, Envelope(kFlagCompressed, "{}"),
                          Envelope(kFlagEndStream, "{}"),
                          std::string("\0\xff\xff\xff\xff", 5)}) {
    auto m = SingleMessage(bad);
    ASSERT_FALSE(m) << "accepted " << bad.size() << " bytes";
    EXPECT_EQ(m.error().code, Errc::kInvalidArgument);
  }
  EXPECT_FALSE(ParseMessage("[1]"));
  EXPECT_FALSE(ParseMessage("{"));
  EXPECT_TRUE(ParseMessage("")->empty());
}

TEST(ConnectTest, Base64) {
  for (std::string s : {std::string(), std::string("a"), std::string("ab"), std::string("abc"),
                        std::string("\0\xff\xfe\x01 binary", 10)}) {
    auto d = Base64Decode(Base64Encode(s));
    ASSERT_TRUE(d);
    EXPECT_EQ(*d, s);
  }
  EXPECT_EQ(Base64Encode("hi\n"), "aGkK");
  EXPECT_EQ(*Base64Decode("aGk"), "hi");      // unpadded
  EXPECT_EQ(*Base64Decode("_-8="), "\xff\xef");  // URL-safe
  EXPECT_FALSE(Base64Decode("a"));
  EXPECT_FALSE(Base64Decode("a*bc"));
}

TEST(ConnectTest, CodesAndStatuses) {
  EXPECT_EQ(CodeFor(Errc::kNotFound), "not_found");
  EXPECT_EQ(CodeFor(Errc::kUnavailable), "unavailable");
  EXPECT_EQ(HttpStatusFor("not_found"), 404);
  EXPECT_EQ(HttpStatusFor("already_exists"), 409);
  EXPECT_EQ(HttpStatusFor("unavailable"), 503);
  EXPECT_EQ(HttpStatusFor("bogus"), 500);
  Json m = {{"exitCode", 3}, {"symlink_target", "x"}};
  EXPECT_EQ(*Field(m, "exitCode", "exit_code"), 3);
  EXPECT_EQ(*Field(m, "symlinkTarget", "symlink_target"), "x");
  EXPECT_EQ(Field(m, "missing"), nullptr);
}

TEST(ConnectTest, EnvelopeReaderTakesPiecesInAnySize) {
  std::string body = Envelope(0, R"({"a":1})") + Envelope(0, "") + EndStream();
  for (size_t step : {size_t{1}, size_t{3}, body.size()}) {
    EnvelopeReader r;
    std::vector<EnvelopeReader::Message> got;
    for (size_t i = 0; i < body.size(); i += step) {
      auto m = r.Feed(std::string_view(body).substr(i, step));
      ASSERT_TRUE(m) << m.error().message;
      got.insert(got.end(), m->begin(), m->end());
    }
    ASSERT_EQ(got.size(), 3u);
    EXPECT_EQ(got[0].payload, R"({"a":1})");
    EXPECT_EQ(got[1].payload, "");
    EXPECT_EQ(got[2].flags & kFlagEndStream, kFlagEndStream);
    EXPECT_TRUE(r.at_boundary());
  }
  EnvelopeReader r;
  EXPECT_FALSE(r.Feed(Envelope(kFlagCompressed, "x")));
  EnvelopeReader r2;
  EXPECT_FALSE(r2.Feed(EndStream() + Envelope(0, "{}")));
  EnvelopeReader r3;
  EXPECT_FALSE(r3.Feed(std::string("\0\x7f\xff\xff\xff", 5)));  // 2 GiB
  EnvelopeReader r4;
  ASSERT_TRUE(r4.Feed(Envelope(0, "{}").substr(0, 4)));
  EXPECT_FALSE(r4.at_boundary());
}

}  // namespace
}  // namespace space::api::e2b::connect
