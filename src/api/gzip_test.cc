#include "api/gzip.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <random>

namespace space::api {
namespace {

// What zlib's own one-shot gzip writer makes of `data` (an independent encoder).
std::string GzipWithZlib(const std::string& data) {
  z_stream s{};
  EXPECT_EQ(deflateInit2(&s, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&s, data.size()) + 64, '\0');
  s.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  s.avail_in = static_cast<uInt>(data.size());
  s.next_out = reinterpret_cast<Bytef*>(out.data());
  s.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&s, Z_FINISH), Z_STREAM_END);
  out.resize(s.total_out);
  deflateEnd(&s);
  return out;
}

std::string GunzipWithZlib(const std::string& gz) {
  z_stream s{};
  EXPECT_EQ(inflateInit2(&s, 16 + MAX_WBITS), Z_OK);
  std::string out;
  char buf[65536];
  s.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(gz.data()));
  s.avail_in = static_cast<uInt>(gz.size());
  int r;
  do {
    s.next_out = reinterpret_cast<Bytef*>(buf);
    s.avail_out = sizeof buf;
    r = inflate(&s, Z_NO_FLUSH);
    out.append(buf, sizeof buf - s.avail_out);
  } while (r == Z_OK);
  EXPECT_EQ(r, Z_STREAM_END);
  inflateEnd(&s);
  return out;
}

std::string Mixed(size_t n) {
  std::mt19937 rng(7);
  std::string s;
  while (s.size() < n) {
    if (rng() % 2) {
      s += "line " + std::to_string(s.size()) + " of some text\n";
    } else {
      for (int i = 0; i < 64; ++i) s.push_back(static_cast<char>(rng()));
    }
  }
  s.resize(n);
  return s;
}

// Feeds `gz` in pieces of `step` bytes; the decompressed bytes, or the error.
Result<std::string> Inflate(const std::string& gz, size_t step, uint64_t limit = 1ull << 30) {
  GzipInflater in(limit);
  std::string out;
  for (size_t i = 0; i < gz.size(); i += step) {
    Status st = in.Feed(std::string_view(gz).substr(i, step), [&](std::string_view b) {
      out.append(b);
      return Ok();
    });
    if (!st) return tl::unexpected(st.error());
  }
  Status st = in.Finish();
  if (!st) return tl::unexpected(st.error());
  return out;
}

TEST(GzipTest, InflatesWhatZlibWroteInAnyPieces) {
  const std::string data = Mixed(3 << 20);
  const std::string gz = GzipWithZlib(data);
  for (size_t step : {size_t{1} << 20, size_t{4096}, size_t{7}}) {
    auto got = Inflate(gz, step);
    ASSERT_TRUE(got) << got.error().message;
    EXPECT_EQ(*got, data) << "step " << step;
  }
}

TEST(GzipTest, DeflatedPiecesAreOneMemberZlibReads) {
  const std::string data = Mixed(2 << 20);
  GzipDeflater d;
  std::string gz;
  for (size_t i = 0; i < data.size(); i += 100000) gz += d.Feed(std::string_view(data).substr(i, 100000));
  gz += d.Finish();
  EXPECT_LT(gz.size(), data.size());
  EXPECT_EQ(GunzipWithZlib(gz), data);
  GzipDeflater empty;
  std::string none = empty.Feed("");
  none += empty.Finish();
  EXPECT_EQ(GunzipWithZlib(none), "");
  GzipDeflater small;  // all of it in one piece, then the end
  std::string one = small.Feed("a small file\n");
  one += small.Finish();
  EXPECT_EQ(GunzipWithZlib(one), "a small file\n");
}

TEST(GzipTest, MembersOneAfterAnotherAreOneStream) {
  auto got = Inflate(GzipWithZlib("first ") + GzipWithZlib("second"), 3);
  ASSERT_TRUE(got) << got.error().message;
  EXPECT_EQ(*got, "first second");
}

TEST(GzipTest, BadBodiesAreRefused) {
  auto not_gzip = Inflate("plain text, not gzip at all", 5);
  ASSERT_FALSE(not_gzip);
  EXPECT_EQ(not_gzip.error().code, Errc::kInvalidArgument);
  EXPECT_NE(not_gzip.error().message.find("not valid gzip"), std::string::npos);

  std::string gz = GzipWithZlib(Mixed(100000));
  auto cut = Inflate(gz.substr(0, gz.size() / 2), 1000);
  ASSERT_FALSE(cut);
  EXPECT_NE(cut.error().message.find("ends inside"), std::string::npos);

  std::string flipped = gz;
  flipped[flipped.size() - 6] ^= 0x55;  // the CRC-32 trailer
  EXPECT_FALSE(Inflate(flipped, 1000));

  auto empty = Inflate("", 1);
  ASSERT_FALSE(empty);
  EXPECT_EQ(empty.error().code, Errc::kInvalidArgument);

  EXPECT_FALSE(Inflate(GzipWithZlib("ok") + "trailing junk", 4));
}

TEST(GzipTest, ExpansionBeyondTheLimitStopsEarly) {
  // 64 MiB of zeros compress to ~64 KiB: a small body must not become a full disk.
  const std::string gz = GzipWithZlib(std::string(64 << 20, '\0'));
  ASSERT_LT(gz.size(), 100u << 10);
  GzipInflater in(1 << 20);
  uint64_t delivered = 0;
  Status st = in.Feed(gz, [&](std::string_view b) {
    delivered += b.size();
    return Ok();
  });
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().code, Errc::kTooLarge);
  EXPECT_LE(delivered, 1u << 20);
  auto exact = Inflate(GzipWithZlib(std::string(1000, 'a')), 100, 1000);
  EXPECT_TRUE(exact);
}

TEST(GzipTest, ASinkErrorStopsTheFeed) {
  GzipInflater in(1 << 30);
  int calls = 0;
  Status st = in.Feed(GzipWithZlib(Mixed(1 << 20)), [&](std::string_view) {
    ++calls;
    return Fail(Errc::kInsufficientStorage, "disk full");
  });
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().code, Errc::kInsufficientStorage);
  EXPECT_EQ(calls, 1);
}

TEST(GzipTest, ChooseEncodingFollowsAcceptEncoding) {
  EXPECT_EQ(ChooseEncoding(""), "identity");
  EXPECT_EQ(ChooseEncoding("gzip"), "gzip");
  EXPECT_EQ(ChooseEncoding("GZip;Q=0.5"), "gzip");
  EXPECT_EQ(ChooseEncoding("br, gzip;q=0.2, deflate"), "gzip");
  EXPECT_EQ(ChooseEncoding("x-gzip"), "gzip");
  EXPECT_EQ(ChooseEncoding("gzip;q=0"), "identity");
  EXPECT_EQ(ChooseEncoding("br"), "identity");
  EXPECT_EQ(ChooseEncoding("*"), "identity");
  EXPECT_EQ(ChooseEncoding("identity;q=0"), "");
  EXPECT_EQ(ChooseEncoding("br, *;q=0"), "");
  EXPECT_EQ(ChooseEncoding("gzip;q=0, identity;q=0"), "");
  EXPECT_EQ(ChooseEncoding("identity;q=0, gzip"), "gzip");
  EXPECT_EQ(ChooseEncoding("*;q=0, identity"), "identity");
  EXPECT_EQ(ChooseEncoding("gzip;q=bogus"), "identity");
  EXPECT_EQ(ChooseEncoding(" , ,gzip ;  q=1 ,"), "gzip");
}

}  // namespace
}  // namespace space::api
