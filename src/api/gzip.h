// api/gzip: gzip bodies (RFC 1952) for HTTP routes that take or give them, streamed through
// zlib: `Content-Encoding: gzip` uploads and `Accept-Encoding: gzip` downloads. No I/O.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "common/common.h"

namespace space::api {

// Decompresses a gzip stream fed in pieces, handing each decompressed piece to `out`.
// Several gzip members one after another are one stream (as gunzip reads them). More than
// `limit` decompressed bytes fail with kTooLarge (a small body cannot expand without bound);
// bytes that are not gzip fail with kInvalidArgument.
class GzipInflater {
 public:
  explicit GzipInflater(uint64_t limit);
  ~GzipInflater();
  GzipInflater(const GzipInflater&) = delete;
  GzipInflater& operator=(const GzipInflater&) = delete;

  Status Feed(std::string_view in, const std::function<Status(std::string_view)>& out);
  // After the last piece: fails if the stream stopped inside a member (or was empty).
  Status Finish() const;
  uint64_t total_out() const { return total_; }

 private:
  struct Z;
  std::unique_ptr<Z> z_;
  uint64_t limit_;
  uint64_t total_ = 0;
  bool in_member_ = false;   // inside a member that has not ended yet
  bool saw_member_ = false;  // at least one member began
};

// Compresses a stream given in pieces. Feed and Finish return the compressed bytes that
// are ready (possibly none); their concatenation is one gzip member.
class GzipDeflater {
 public:
  GzipDeflater();
  ~GzipDeflater();
  GzipDeflater(const GzipDeflater&) = delete;
  GzipDeflater& operator=(const GzipDeflater&) = delete;

  std::string Feed(std::string_view in);
  std::string Finish();

 private:
  struct Z;
  std::unique_ptr<Z> z_;
};

// The coding of a response for an Accept-Encoding header (RFC 9110 12.5.3): "gzip" when
// gzip is acceptable (q > 0), else "identity" when that is (an absent header, or identity
// not refused by "identity;q=0" or "*;q=0"), else "" (nothing acceptable: answer 406).
std::string ChooseEncoding(std::string_view accept_encoding);

}  // namespace space::api
