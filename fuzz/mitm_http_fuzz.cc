// Fuzz target mitm_http: the HTTP/1.1 handling of the secrets relay (src/net/tls/http_relay.cc)
// on bytes a sandbox (requests) or an upstream (responses) controls.
//
// Input: u32 split seed, then a byte stream. The stream goes, in random pieces, through
// RequestParser as RunMitm drives it (head, then the body, then the next request; up to 4) and,
// separately, through ResponseParser. Checks: a head never grows past the limit;
// a serialised head with no secrets in scope has no substitutions and parses again to the same
// method, target and fields (less Expect); with a secret in scope every placeholder in a value
// is gone and the secret is there; BodyIsRewritable only for Content-Length bodies within the
// limit; substituting in a body never leaves the placeholder behind.
#include <cctype>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "net/tls/internal.h"

namespace {

using space::fuzz::Check;
namespace tls = space::net::tls;

constexpr std::string_view kPlaceholder = "space_secret_K_00112233445566778899aabbccddeeff";
constexpr size_t kMaxHead = 8 * 1024;
constexpr size_t kMaxBody = 4 * 1024;

void CheckHead(const tls::RequestHead& head) {
  tls::Substitutions none;
  uint32_t n = 0;
  std::string out = tls::SerializeRequestHead(head, none, std::nullopt, &n);
  Check(n == 0, "no secrets in scope: no substitutions");
  tls::RequestParser again(kMaxHead * 2);
  std::string error;
  size_t used = again.Put(out, &error);
  Check(error.empty() && again.head_done(), "a serialised head parses again");
  Check(used <= out.size(), "consumed within the buffer");
  const tls::RequestHead& h2 = again.head();
  Check(h2.method == head.method && h2.target == head.target, "request line survives");
  // RunMitm answers 100-continue itself, so Expect is the one field dropped.
  std::vector<std::pair<std::string, std::string>> want;
  for (const auto& f : head.fields) {
    std::string lower = f.first;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (!(head.expect_continue && lower == "expect")) want.push_back(f);
  }
  Check(h2.fields == want, "fields survive unchanged");

  tls::Substitutions subs;
  subs.pairs = {{std::string(kPlaceholder), "REAL"}};
  std::string sub = tls::SerializeRequestHead(head, subs, std::nullopt, &n);
  // Names and the request line are not rewritten; every header value is.
  tls::RequestParser swapped(kMaxHead * 2);
  swapped.Put(sub, &error);
  Check(error.empty() && swapped.head_done(), "a substituted head parses again");
  for (const auto& [name, value] : swapped.head().fields)
    Check(value.find(kPlaceholder) == std::string::npos, "placeholder swapped in field values");
  (void)tls::AuthorityMatches(head, "api.example.test");
  bool rw = tls::BodyIsRewritable(head, kMaxBody);
  if (rw)
    Check(head.content_length && *head.content_length <= kMaxBody && !head.chunked,
          "rewritable bodies have a Content-Length within the limit");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  space::fuzz::SplitSizes split(space::fuzz::TakeU32(&in), 512);
  std::string_view stream = in;

  // Requests, as RunMitm reads them.
  std::string pending;
  size_t pos = 0;
  for (int req = 0; req < 4; ++req) {
    tls::RequestParser parser(kMaxHead);
    std::string error, body;
    size_t head_consumed = 0;
    while (!parser.done() && error.empty()) {
      bool head_was_done = parser.head_done();
      size_t n = parser.Put(pending, &error);
      Check(n <= pending.size(), "consumed within the buffer");
      if (!head_was_done) head_consumed += n;
      Check(head_consumed <= kMaxHead || !error.empty(), "a head never grows past the limit");
      if (head_was_done) body.append(pending, 0, n);
      pending.erase(0, n);
      if (!head_was_done && parser.head_done()) CheckHead(parser.head());
      if (n > 0 || !error.empty()) continue;
      if (pos >= stream.size() || pending.size() > kMaxHead * 2) break;
      size_t k = std::min(split.Next(), stream.size() - pos);
      pending.append(stream.substr(pos, k));
      pos += k;
    }
    if (!parser.done() || !error.empty()) break;
    const tls::RequestHead& head = parser.head();
    if (head.content_length && !head.chunked)
      Check(body.size() == *head.content_length, "Content-Length body read exactly");
    tls::Substitutions subs;
    subs.pairs = {{std::string(kPlaceholder), "REAL"}};
    subs.Apply(body);
    Check(body.find(kPlaceholder) == std::string::npos, "body substitution complete");
  }

  // Responses, as RelayResponse frames them.
  tls::ResponseParser resp(kMaxHead, (size & 1) != 0);
  std::string buf, error;
  pos = 0;
  while (!resp.done() && error.empty()) {
    size_t n = resp.Put(buf, &error);
    Check(n <= buf.size(), "response consumed within the buffer");
    buf.erase(0, n);
    if (n > 0) continue;
    if (pos >= stream.size()) {
      if (resp.head_done() && resp.NeedsEof()) resp.PutEof(&error);
      break;
    }
    size_t k = std::min(split.Next(), stream.size() - pos);
    buf.append(stream.substr(pos, k));
    pos += k;
  }
  if (resp.done()) (void)resp.keep_alive();
  return 0;
}
