// HTTP/1.1 framing and request rewriting for RunMitm: Beast's parser finds the messages, we
// rewrite request heads and (small, text-ish) bodies. Pure: no I/O, so the fuzz target links it.
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/error.hpp>

#include <cctype>
#include <limits>

#include "net/tls/internal.h"

namespace space::net::tls {
namespace http = boost::beast::http;
using bsv = boost::beast::string_view;

namespace {

std::string_view Sv(bsv s) { return std::string_view(s.data(), s.size()); }

bool IEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  return true;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// "Host:port" / "[v6]:port" / "user@host:port" -> "host".
std::string HostOf(std::string_view authority) {
  size_t at = authority.rfind('@');
  if (at != std::string_view::npos) authority.remove_prefix(at + 1);
  if (!authority.empty() && authority.front() == '[') {
    size_t close = authority.find(']');
    return Lower(authority.substr(0, close == std::string_view::npos ? authority.npos : close + 1));
  }
  size_t colon = authority.find(':');
  authority = authority.substr(0, colon);
  if (!authority.empty() && authority.back() == '.') authority.remove_suffix(1);  // FQDN dot
  return Lower(authority);
}

// Beast's header_limit bounds only the unparsed rest of a head: it consumes the start line and
// each complete field as they arrive, so a peer trickling fields could grow a head without end.
// *head_bytes counts what was consumed before the head completed, against max_head.
template <bool isRequest>
size_t PutInto(http::basic_parser<isRequest>& p, std::string_view data, std::string* error,
               size_t* head_bytes, size_t max_head) {
  error->clear();
  if (p.is_done() || data.empty()) return 0;
  bool head_was_done = p.is_header_done();
  boost::system::error_code ec;
  size_t n = p.put(boost::asio::const_buffer(data.data(), data.size()), ec);
  if (!head_was_done) {  // eager is off: a put that completes the head stops right after it
    *head_bytes += n;
    if (*head_bytes > max_head) {
      *error = "header limit exceeded";
      return n;
    }
  }
  if (ec == http::error::need_more) return n;
  if (ec) *error = ec.message();
  return n;
}

// Standard base64 (RFC 4648 section 4) with padding; nullopt when s is not canonical.
std::optional<std::string> Base64Decode(std::string_view s) {
  if (s.size() % 4 != 0) return std::nullopt;
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  for (size_t i = 0; i < s.size(); i += 4) {
    int v[4];
    int pad = 0;
    for (int j = 0; j < 4; ++j) {
      char c = s[i + j];
      if (c == '=' && i + 4 == s.size() && j >= 2) {
        v[j] = 0;
        ++pad;
      } else if (pad > 0 || (v[j] = val(c)) < 0) {
        return std::nullopt;
      }
    }
    uint32_t n = (v[0] << 18) | (v[1] << 12) | (v[2] << 6) | v[3];
    out += static_cast<char>(n >> 16);
    if (pad < 2) out += static_cast<char>((n >> 8) & 0xff);
    if (pad < 1) out += static_cast<char>(n & 0xff);
  }
  return out;
}

std::string Base64Encode(std::string_view s) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < s.size(); i += 3) {
    uint32_t n = static_cast<unsigned char>(s[i]) << 16;
    if (i + 1 < s.size()) n |= static_cast<unsigned char>(s[i + 1]) << 8;
    if (i + 2 < s.size()) n |= static_cast<unsigned char>(s[i + 2]);
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += i + 1 < s.size() ? kAlphabet[(n >> 6) & 63] : '=';
    out += i + 2 < s.size() ? kAlphabet[n & 63] : '=';
  }
  return out;
}

// "Basic <base64(user:password)>" (Authorization, Proxy-Authorization): the placeholder sits
// inside the base64 (git, pip and curl -u send credentials this way), so decode, substitute
// and re-encode. Other values are left to the plain substitution.
uint32_t ApplyBasic(std::string& value, const Substitutions& subs) {
  std::string_view v = Trim(value);
  if (v.size() < 6 || !IEquals(v.substr(0, 6), "basic ")) return 0;
  auto decoded = Base64Decode(Trim(v.substr(6)));
  if (!decoded) return 0;
  uint32_t n = subs.Apply(*decoded);
  if (n > 0) value = "Basic " + Base64Encode(*decoded);
  return n;
}

// Boost 1.74's basic_parser compares `len_ > body_limit_` against the optional itself, so
// boost::none ("no limit") rejects every Content-Length body; the largest value means the same.
constexpr std::uint64_t kNoLimit = std::numeric_limits<std::uint64_t>::max();

}  // namespace

// ---- Substitution -------------------------------------------------------------------------

uint32_t Substitutions::Apply(std::string& s) const {
  if (pairs.empty()) return 0;
  static constexpr std::string_view kPrefix = "space_secret_";
  uint32_t count = 0;
  std::string out;
  size_t pos = 0, copied = 0;
  while ((pos = s.find(kPrefix, pos)) != std::string::npos) {
    bool hit = false;
    for (const auto& [ph, value] : pairs) {
      if (s.compare(pos, ph.size(), ph) == 0) {
        out.append(s, copied, pos - copied);
        out += value;
        pos += ph.size();
        copied = pos;
        ++count;
        hit = true;
        break;
      }
    }
    if (!hit) pos += kPrefix.size();
  }
  if (count == 0) return 0;
  out.append(s, copied, std::string::npos);
  s = std::move(out);
  return count;
}

Substitutions SubstitutionsFor(const std::vector<Secret>& secrets, std::string_view host) {
  Substitutions subs;
  for (const Secret& s : secrets)
    if (!s.placeholder.empty() && SecretAppliesTo(s, host))
      subs.pairs.emplace_back(s.placeholder, s.value);
  return subs;
}

// ---- Request heads ------------------------------------------------------------------------

std::string_view RequestHead::Field(std::string_view name) const {
  for (const auto& [n, v] : fields)
    if (IEquals(n, name)) return v;
  return {};
}

bool BodyIsRewritable(const RequestHead& head, size_t max_body) {
  if (head.chunked || !head.content_length || *head.content_length == 0 ||
      *head.content_length > max_body)
    return false;
  std::string_view enc = Trim(head.Field("content-encoding"));
  if (!enc.empty() && !IEquals(enc, "identity")) return false;
  std::string type = Lower(Trim(head.Field("content-type")));
  type = std::string(Trim(type.substr(0, type.find(';'))));
  if (StartsWith(type, "text/")) return true;
  if (!StartsWith(type, "application/")) return false;
  std::string_view sub = std::string_view(type).substr(12);
  for (std::string_view t : {"json", "x-www-form-urlencoded", "xml", "graphql", "javascript",
                             "x-ndjson"})
    if (sub == t) return true;
  auto ends = [&](std::string_view suf) {
    return sub.size() > suf.size() && sub.substr(sub.size() - suf.size()) == suf;
  };
  return ends("+json") || ends("+xml");
}

std::string SerializeRequestHead(const RequestHead& head, const Substitutions& subs,
                                 std::optional<uint64_t> new_content_length, uint32_t* count) {
  *count = 0;
  std::string out = head.method + " " + head.target + (head.version == 10 ? " HTTP/1.0\r\n"
                                                                          : " HTTP/1.1\r\n");
  for (const auto& [name, value] : head.fields) {
    if (head.expect_continue && IEquals(name, "expect")) continue;
    std::string v = value;
    if (new_content_length && IEquals(name, "content-length")) {
      v = std::to_string(*new_content_length);
    } else {
      if (IEquals(name, "authorization") || IEquals(name, "proxy-authorization"))
        *count += ApplyBasic(v, subs);
      *count += subs.Apply(v);
    }
    out += name;
    out += ": ";
    out += v;
    out += "\r\n";
  }
  out += "\r\n";
  return out;
}

bool AuthorityMatches(const RequestHead& head, std::string_view host) {
  std::string want = HostOf(host);
  std::string_view t = head.target;
  for (std::string_view scheme : {"https://", "http://"}) {
    if (t.size() > scheme.size() && IEquals(t.substr(0, scheme.size()), scheme)) {
      std::string_view rest = t.substr(scheme.size());
      std::string_view auth = rest.substr(0, rest.find_first_of("/?#"));
      if (HostOf(auth) != want) return false;
    }
  }
  bool seen = false;
  for (const auto& [n, v] : head.fields) {
    if (!IEquals(n, "host")) continue;
    if (seen) return false;  // two Host headers: ambiguous, refuse
    seen = true;
    if (HostOf(Trim(v)) != want) return false;
  }
  return true;
}

// ---- Parsers ------------------------------------------------------------------------------

struct RequestParser::Impl : http::basic_parser<true> {
  RequestHead head;
  size_t head_bytes = 0, max_head = 0;

  void on_request_impl(http::verb, bsv method, bsv target, int version,
                       boost::system::error_code&) override {
    head.method = std::string(Sv(method));
    head.target = std::string(Sv(target));
    head.version = version == 10 ? 10 : 11;
  }
  void on_response_impl(int, bsv, int, boost::system::error_code&) override {}
  void on_field_impl(http::field, bsv name, bsv value, boost::system::error_code&) override {
    head.fields.emplace_back(std::string(Sv(name)), std::string(Sv(value)));
  }
  void on_header_impl(boost::system::error_code&) override {
    head.chunked = chunked();
    if (auto cl = content_length()) head.content_length = *cl;
    head.keep_alive = keep_alive();
    head.upgrade = !head.Field("upgrade").empty();
    head.expect_continue = IEquals(Trim(head.Field("expect")), "100-continue");
  }
  void on_body_init_impl(boost::optional<std::uint64_t> const&,
                         boost::system::error_code&) override {}
  size_t on_body_impl(bsv body, boost::system::error_code&) override { return body.size(); }
  void on_chunk_header_impl(std::uint64_t, bsv, boost::system::error_code&) override {}
  size_t on_chunk_body_impl(std::uint64_t, bsv body, boost::system::error_code&) override {
    return body.size();
  }
  void on_finish_impl(boost::system::error_code&) override {}
};

RequestParser::RequestParser(size_t max_head_bytes) : impl_(std::make_unique<Impl>()) {
  impl_->max_head = max_head_bytes;
  impl_->header_limit(static_cast<std::uint32_t>(max_head_bytes));
  impl_->body_limit(kNoLimit);  // bodies stream through; only rewritten ones are buffered
  impl_->eager(false);             // stop after the head so the caller can decide
}
RequestParser::~RequestParser() = default;
size_t RequestParser::Put(std::string_view data, std::string* error) {
  return PutInto(*impl_, data, error, &impl_->head_bytes, impl_->max_head);
}
bool RequestParser::head_done() const { return impl_->is_header_done(); }
bool RequestParser::done() const { return impl_->is_done(); }
const RequestHead& RequestParser::head() const { return impl_->head; }

struct ResponseParser::Impl : http::basic_parser<false> {
  int status = 0;
  size_t head_bytes = 0, max_head = 0;
  void on_request_impl(http::verb, bsv, bsv, int, boost::system::error_code&) override {}
  void on_response_impl(int code, bsv, int, boost::system::error_code&) override { status = code; }
  void on_field_impl(http::field, bsv, bsv, boost::system::error_code&) override {}
  void on_header_impl(boost::system::error_code&) override {}
  void on_body_init_impl(boost::optional<std::uint64_t> const&,
                         boost::system::error_code&) override {}
  size_t on_body_impl(bsv body, boost::system::error_code&) override { return body.size(); }
  void on_chunk_header_impl(std::uint64_t, bsv, boost::system::error_code&) override {}
  size_t on_chunk_body_impl(std::uint64_t, bsv body, boost::system::error_code&) override {
    return body.size();
  }
  void on_finish_impl(boost::system::error_code&) override {}
};

ResponseParser::ResponseParser(size_t max_head_bytes, bool head_request)
    : impl_(std::make_unique<Impl>()) {
  impl_->max_head = max_head_bytes;
  impl_->header_limit(static_cast<std::uint32_t>(max_head_bytes));
  impl_->body_limit(kNoLimit);  // responses stream, whatever their size
  impl_->eager(false);          // stop after the head, so head_bytes counts the head alone
  impl_->skip(head_request);  // a response to HEAD has no body whatever it says
}
ResponseParser::~ResponseParser() = default;
size_t ResponseParser::Put(std::string_view data, std::string* error) {
  return PutInto(*impl_, data, error, &impl_->head_bytes, impl_->max_head);
}
void ResponseParser::PutEof(std::string* error) {
  error->clear();
  boost::system::error_code ec;
  impl_->put_eof(ec);
  if (ec) *error = ec.message();
}
bool ResponseParser::head_done() const { return impl_->is_header_done(); }
bool ResponseParser::done() const { return impl_->is_done(); }
int ResponseParser::status() const { return impl_->status; }
bool ResponseParser::keep_alive() const { return impl_->keep_alive(); }
bool ResponseParser::NeedsEof() const { return impl_->need_eof(); }

}  // namespace space::net::tls
