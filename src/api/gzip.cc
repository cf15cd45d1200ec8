#include "api/gzip.h"

#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <vector>

namespace space::api {

namespace {

constexpr size_t kOutChunk = 64 * 1024;
constexpr int kGzipWindow = 16 + MAX_WBITS;  // zlib: a gzip header and trailer, not zlib's

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

struct GzipInflater::Z {
  z_stream s{};
};

GzipInflater::GzipInflater(uint64_t limit) : z_(std::make_unique<Z>()), limit_(limit) {
  if (inflateInit2(&z_->s, kGzipWindow) != Z_OK) z_.reset();
}

GzipInflater::~GzipInflater() {
  if (z_) inflateEnd(&z_->s);
}

Status GzipInflater::Feed(std::string_view in, const std::function<Status(std::string_view)>& out) {
  if (!z_) return Fail(Errc::kInternal, "gzip: zlib could not start");
  std::vector<unsigned char> buf(kOutChunk);
  z_stream& s = z_->s;
  s.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  s.avail_in = static_cast<uInt>(in.size());
  for (;;) {
    if (!in_member_) {
      if (s.avail_in == 0) break;
      in_member_ = saw_member_ = true;
    }
    s.next_out = buf.data();
    s.avail_out = static_cast<uInt>(buf.size());
    int r = inflate(&s, Z_NO_FLUSH);
    if (r == Z_NEED_DICT || r == Z_DATA_ERROR || r == Z_MEM_ERROR || r == Z_STREAM_ERROR) {
      return Fail(Errc::kInvalidArgument,
                  std::string("body is not valid gzip: ") + (s.msg ? s.msg : "corrupt data"));
    }
    size_t got = buf.size() - s.avail_out;
    if (got > 0) {
      total_ += got;
      if (total_ > limit_) {
        return Fail(Errc::kTooLarge, "decompressed body larger than " + std::to_string(limit_) + " bytes");
      }
      SPACE_TRY(out(std::string_view(reinterpret_cast<const char*>(buf.data()), got)));
    }
    if (r == Z_STREAM_END) {
      in_member_ = false;  // another member may follow
      if (inflateReset(&s) != Z_OK) return Fail(Errc::kInternal, "gzip: zlib could not reset");
      continue;
    }
    if (r == Z_BUF_ERROR) break;                      // needs more input
    if (s.avail_in == 0 && s.avail_out != 0) break;  // all taken and all given out
  }
  return Ok();
}

Status GzipInflater::Finish() const {
  if (!saw_member_) return Fail(Errc::kInvalidArgument, "gzip body is empty");
  if (in_member_) return Fail(Errc::kInvalidArgument, "gzip body ends inside its data");
  return Ok();
}

struct GzipDeflater::Z {
  z_stream s{};
  bool ok = false;
};

GzipDeflater::GzipDeflater() : z_(std::make_unique<Z>()) {
  // Level 1: downloads are streamed as they are read; speed over ratio.
  z_->ok = deflateInit2(&z_->s, 1, Z_DEFLATED, kGzipWindow, 8, Z_DEFAULT_STRATEGY) == Z_OK;
}

GzipDeflater::~GzipDeflater() {
  if (z_->ok) deflateEnd(&z_->s);
}

namespace {

std::string Run(z_stream& s, std::string_view in, int flush) {
  std::string out;
  s.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  s.avail_in = static_cast<uInt>(in.size());
  unsigned char buf[kOutChunk];
  for (;;) {
    s.next_out = buf;
    s.avail_out = sizeof buf;
    int r = deflate(&s, flush);
    out.append(reinterpret_cast<const char*>(buf), sizeof buf - s.avail_out);
    if (r == Z_STREAM_END) break;
    if (s.avail_out != 0 && s.avail_in == 0) break;  // all taken, nothing more ready
    if (r == Z_STREAM_ERROR) break;
  }
  return out;
}

}  // namespace

std::string GzipDeflater::Feed(std::string_view in) {
  if (!z_->ok || in.empty()) return "";
  return Run(z_->s, in, Z_NO_FLUSH);
}

std::string GzipDeflater::Finish() {
  if (!z_->ok) return "";
  return Run(z_->s, {}, Z_FINISH);
}

std::string ChooseEncoding(std::string_view header) {
  if (Trim(header).empty()) return "identity";
  double gzip = -1, identity = -1, star = -1;  // -1: not named
  size_t pos = 0;
  while (pos <= header.size()) {
    size_t comma = header.find(',', pos);
    std::string_view item = header.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
    pos = comma == std::string_view::npos ? header.size() + 1 : comma + 1;
    item = Trim(item);
    if (item.empty()) continue;
    std::string_view name = item, params;
    if (size_t semi = item.find(';'); semi != std::string_view::npos) {
      name = Trim(item.substr(0, semi));
      params = item.substr(semi + 1);
    }
    double q = 1;
    // A parameter "q=VALUE" (case-insensitive); others are ignored.
    while (!params.empty()) {
      size_t next = params.find(';');
      std::string p = Lower(Trim(params.substr(0, next)));
      params = next == std::string_view::npos ? std::string_view() : params.substr(next + 1);
      if (p.rfind("q=", 0) == 0) {
        char* end = nullptr;
        double v = std::strtod(p.c_str() + 2, &end);
        q = end && *end == '\0' && v >= 0 && v <= 1 ? v : 0;
      }
    }
    std::string n = Lower(name);
    if (n == "gzip" || n == "x-gzip") gzip = std::max(gzip, q);
    else if (n == "identity") identity = std::max(identity, q);
    else if (n == "*") star = std::max(star, q);
  }
  if (gzip > 0) return "gzip";  // "*" alone is answered with identity, which it also allows
  const bool identity_refused = identity == 0 || (identity < 0 && star == 0);
  return identity_refused ? "" : "identity";
}

}  // namespace space::api
