#include "agent/protocol.h"

#include <gtest/gtest.h>

namespace space::agent {
namespace {

TEST(FrameTest, RoundTripsAcrossArbitrarySplits) {
  std::string wire;
  EncodeFrame(FrameType::kStdout, 7, EncodeData(42, "hello"), &wire);
  EncodeFrame(FrameType::kRequest, 1, EncodeMessage({{"op", "ping"}}), &wire);
  for (size_t split = 0; split <= wire.size(); ++split) {
    FrameDecoder d;
    d.Feed(std::string_view(wire).substr(0, split));
    std::vector<Frame> got;
    for (;;) {
      auto f = d.Next();
      ASSERT_TRUE(f);
      if (!*f) break;
      got.push_back(std::move(**f));
    }
    d.Feed(std::string_view(wire).substr(split));
    for (;;) {
      auto f = d.Next();
      ASSERT_TRUE(f);
      if (!*f) break;
      got.push_back(std::move(**f));
    }
    ASSERT_EQ(got.size(), 2u) << split;
    EXPECT_EQ(got[0].type, FrameType::kStdout);
    EXPECT_EQ(got[0].stream, 7u);
    auto data = DecodeData(got[0].payload);
    ASSERT_TRUE(data);
    EXPECT_EQ(data->offset, 42u);
    EXPECT_EQ(data->bytes, "hello");
    auto msg = DecodeMessage(got[1].payload);
    ASSERT_TRUE(msg);
    EXPECT_EQ(msg->json["op"], "ping");
  }
}

TEST(FrameTest, EncodeDataFrameMatchesTheTwoStepEncoding) {
  std::string direct = "prefix";
  EncodeDataFrame(FrameType::kStderr, 9, 1ull << 33, std::string("a\0b", 3), &direct);
  EXPECT_EQ(direct, "prefix" + EncodeFrame(FrameType::kStderr, 9,
                                           EncodeData(1ull << 33, std::string("a\0b", 3))));
}

TEST(MessageTest, InvalidUtf8IsReplacedNotThrown) {
  std::string msg;
  EXPECT_NO_THROW(msg = EncodeMessage({{"name", std::string("bad\xff\xfe")}}));
  auto m = DecodeMessage(msg);
  ASSERT_TRUE(m);
  EXPECT_TRUE(m->json["name"].is_string());
}

TEST(FrameTest, RejectsOversizedFrame) {
  std::string wire = EncodeFrame(FrameType::kStdout, 1, "");
  wire[3] = 0x7f;  // length ~2 GiB
  FrameDecoder d;
  d.Feed(wire);
  EXPECT_FALSE(d.Next());
  EXPECT_FALSE(d.Next());  // stays failed
}

TEST(FrameTest, RejectsUnknownType) {
  std::string wire = EncodeFrame(FrameType::kStdout, 1, "");
  wire[4] = 99;
  FrameDecoder d;
  d.Feed(wire);
  EXPECT_FALSE(d.Next());
}

TEST(MessageTest, RejectsMalformed) {
  EXPECT_FALSE(DecodeMessage(""));
  EXPECT_FALSE(DecodeMessage(std::string("\xff\xff\xff\x7f{}", 6)));
  EXPECT_FALSE(DecodeMessage(EncodeMessage(nlohmann::json::array())));
  std::string bad = EncodeMessage({{"a", 1}});
  bad[5] = '!';
  EXPECT_FALSE(DecodeMessage(bad));
  auto m = DecodeMessage(EncodeMessage({{"op", "write"}}, std::string("\0body", 5)));
  ASSERT_TRUE(m);
  EXPECT_EQ(m->body, std::string("\0body", 5));
}

TEST(AckTest, RoundTripAndValidation) {
  auto a = DecodeAck(EncodeAck(2, 1ull << 40));
  ASSERT_TRUE(a);
  EXPECT_EQ(a->fd, 2);
  EXPECT_EQ(a->offset, 1ull << 40);
  EXPECT_FALSE(DecodeAck("short"));
  EXPECT_FALSE(DecodeAck(EncodeAck(3, 0)));
}

TEST(ErrorJsonTest, RoundTrip) {
  auto j = ErrorJson(Error{Errc::kNotFound, 0, "no such file"});
  auto e = ErrorFromJson(j);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code, Errc::kNotFound);
  EXPECT_EQ(e->message, "no such file");
  EXPECT_FALSE(ErrorFromJson({{"ok", true}}));
  EXPECT_TRUE(ErrorFromJson({{"error", {{"code", 5}}}}));  // wrong types do not throw
}

}  // namespace
}  // namespace space::agent
