// Fuzz target http_request: Beast's HTTP/1.1 request parser configured as spaced configures it.
//
// spaced's route-level parsing (target/query splitting, ReadBody, the route table) sits in
// anonymous namespaces of src/api/server.cc and is not reachable from here; this target fuzzes
// the configuration: a header parse with header_limit 64 KiB as Server::Impl::Serve does, then
// the body with a string_body parser moved from it and body_limit 1 MiB (ApiOptions::
// max_json_body) as Ctx::ReadBody does, over the input fed in seed-chosen pieces the way bytes
// arrive from a socket. Input: u32 split seed | request bytes (possibly several, keep-alive).
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include "fuzz/fuzz_util.h"

namespace {

namespace beast = boost::beast;
namespace http = beast::http;
using space::fuzz::Check;

constexpr size_t kHeaderLimit = 64 * 1024;
constexpr uint64_t kBodyLimit = 1 << 20;

// Feeds bytes to `p` until it is done (or, with `header_only`, has the header): bytes
// buffered in `carry` first, then pieces taken off `in`, then EOF. False on a parse error.
template <class Parser>
bool Drive(Parser& p, bool header_only, std::string_view* in, space::fuzz::SplitSizes& sizes,
           std::string* carry) {
  beast::error_code ec;
  for (;;) {
    if (header_only ? p.is_header_done() : p.is_done()) return true;
    if (!carry->empty()) {
      size_t used = p.put(boost::asio::buffer(carry->data(), carry->size()), ec);
      Check(used <= carry->size(), "parser consumed more than it was given");
      carry->erase(0, used);
      if (ec == http::error::need_more) {
        ec = {};
      } else if (ec) {
        return false;
      } else if (used > 0) {
        continue;
      }
    }
    if (in->empty()) {
      p.put_eof(ec);
      return !ec && (header_only ? p.is_header_done() : p.is_done());
    }
    size_t n = std::min(sizes.Next(), in->size());
    carry->append(in->substr(0, n));
    in->remove_prefix(n);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  uint32_t seed = space::fuzz::TakeU32(&in);
  space::fuzz::SplitSizes sizes(seed, 1 + (seed >> 24) % 128);
  std::string carry;
  // Keep-alive: up to a few requests on one "connection", like Serve's loop.
  for (int req = 0; req < 4; ++req) {
    http::request_parser<http::empty_body> head;
    head.header_limit(kHeaderLimit);
    head.body_limit(std::numeric_limits<uint64_t>::max());
    head.eager(false);
    if (!Drive(head, /*header_only=*/true, &in, sizes, &carry)) return 0;
    // What Serve and the routes read from the header.
    const auto& h = head.get();
    (void)h.method_string();
    (void)h.target();
    bool keep_alive = h.keep_alive();
    (void)h.find(http::field::content_type);
    (void)h.find(http::field::authorization);
    if (auto len = head.content_length(); len && *len > kBodyLimit) return 0;  // 413
    http::request_parser<http::string_body> body(std::move(head));
    body.body_limit(kBodyLimit);
    if (!Drive(body, /*header_only=*/false, &in, sizes, &carry)) return 0;
    Check(body.get().body().size() <= kBodyLimit, "body larger than body_limit accepted");
    if (auto len = body.content_length(); len)
      Check(body.get().body().size() == *len, "body size differs from Content-Length");
    if (!keep_alive) return 0;
  }
  return 0;
}
