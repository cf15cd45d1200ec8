#include "api/e2b/connect.h"

#include <array>

namespace space::api::e2b::connect {

std::string_view CodeFor(Errc code) {
  switch (code) {
    case Errc::kInvalidArgument:
      return "invalid_argument";
    case Errc::kNotFound:
      return "not_found";
    case Errc::kConflict:
      return "failed_precondition";
    case Errc::kUnauthenticated:
      return "unauthenticated";
    case Errc::kPermissionDenied:
      return "permission_denied";
    case Errc::kResourceExhausted:
      return "resource_exhausted";
    case Errc::kTooLarge:
      // Not resource_exhausted: the SDK would call that a rate limit.
      return "invalid_argument";
    case Errc::kUnavailable:
      return "unavailable";
    case Errc::kDeadlineExceeded:
      return "deadline_exceeded";
    case Errc::kInsufficientStorage:
      return "resource_exhausted";
    default:
      return "internal";
  }
}

int HttpStatusFor(std::string_view code) {
  static const std::array<std::pair<std::string_view, int>, 16> kStatus = {{
      {"canceled", 499},           {"unknown", 500},         {"invalid_argument", 400},
      {"deadline_exceeded", 504},  {"not_found", 404},       {"already_exists", 409},
      {"permission_denied", 403},  {"resource_exhausted", 429},
      {"failed_precondition", 400}, {"aborted", 409},        {"out_of_range", 400},
      {"unimplemented", 501},      {"internal", 500},        {"unavailable", 503},
      {"data_loss", 500},          {"unauthenticated", 401},
  }};
  for (const auto& [c, s] : kStatus)
    if (c == code) return s;
  return 500;
}

Json ErrorJson(std::string_view code, std::string_view message) {
  return {{"code", std::string(code)}, {"message", std::string(message)}};
}

std::string Envelope(uint8_t flags, std::string_view payload) {
  std::string out;
  out.reserve(5 + payload.size());
  out.push_back(static_cast<char>(flags));
  uint32_t n = static_cast<uint32_t>(payload.size());
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>((n >> shift) & 0xff));
  out.append(payload);
  return out;
}

std::string EndStream(const Json& error) {
  Json end = Json::object();
  if (!error.is_null()) end["error"] = error;
  return Envelope(kFlagEndStream, end.dump(-1, ' ', false, Json::error_handler_t::replace));
}

Result<std::string> SingleMessage(std::string_view body) {
  if (body.size() < 5)
    return Fail(Errc::kInvalidArgument, "request is not a Connect envelope (shorter than 5 bytes)");
  auto flags = static_cast<uint8_t>(body[0]);
  uint32_t n = 0;
  for (int i = 1; i <= 4; ++i) n = (n << 8) | static_cast<uint8_t>(body[i]);
  if (flags & kFlagCompressed)
    return Fail(Errc::kInvalidArgument, "compressed envelopes are not supported");
  if (flags != 0) return Fail(Errc::kInvalidArgument, "unexpected envelope flags " + std::to_string(flags));
  if (n > kMaxMessage) return Fail(Errc::kInvalidArgument, "envelope larger than the limit");
  if (body.size() - 5 != n)
    return Fail(Errc::kInvalidArgument,
                "envelope length " + std::to_string(n) + " does not match the " +
                    std::to_string(body.size() - 5) + " bytes that follow (one message expected)");
  return std::string(body.substr(5));
}

Result<Json> ParseMessage(std::string_view payload) {
  if (payload.empty()) return Json::object();
  auto j = ParseJson(payload);
  if (!j) return Fail(Errc::kInvalidArgument, "message is not valid JSON");
  if (!j->is_object()) return Fail(Errc::kInvalidArgument, "message must be a JSON object");
  return std::move(*j);
}

namespace {
constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int Sextet(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+' || c == '-') return 62;
  if (c == '/' || c == '_') return 63;
  return -1;
}
}  // namespace

std::string Base64Encode(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= in.size(); i += 3) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out.push_back(kAlphabet[(v >> s) & 63]);
  }
  if (size_t rest = in.size() - i; rest > 0) {
    uint32_t v = uint8_t(in[i]) << 16;
    if (rest == 2) v |= uint8_t(in[i + 1]) << 8;
    out.push_back(kAlphabet[(v >> 18) & 63]);
    out.push_back(kAlphabet[(v >> 12) & 63]);
    out.push_back(rest == 2 ? kAlphabet[(v >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

Result<std::string> Base64Decode(std::string_view in) {
  while (!in.empty() && in.back() == '=') in.remove_suffix(1);
  if (in.size() % 4 == 1) return Fail(Errc::kInvalidArgument, "invalid base64 length");
  std::string out;
  out.reserve(in.size() * 3 / 4);
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    int v = Sextet(c);
    if (v < 0) return Fail(Errc::kInvalidArgument, "invalid base64 character");
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  return out;
}

const Json* Field(const Json& msg, std::string_view json_name, std::string_view proto_name) {
  if (!msg.is_object()) return nullptr;
  auto it = msg.find(std::string(json_name));
  if (it == msg.end() && !proto_name.empty()) it = msg.find(std::string(proto_name));
  if (it == msg.end() || it->is_null()) return nullptr;
  return &*it;
}

Result<std::vector<EnvelopeReader::Message>> EnvelopeReader::Feed(std::string_view data) {
  buf_.append(data);
  std::vector<Message> out;
  size_t at = 0;
  while (buf_.size() - at >= 5) {
    const auto* b = reinterpret_cast<const unsigned char*>(buf_.data() + at);
    const uint8_t flags = b[0];
    const size_t len = (size_t{b[1]} << 24) | (size_t{b[2]} << 16) | (size_t{b[3]} << 8) | b[4];
    if (ended_) return Fail(Errc::kInvalidArgument, "data after the end-stream envelope");
    if (flags & kFlagCompressed) return Fail(Errc::kInvalidArgument, "compressed messages are not supported");
    if (len > kMaxMessage) return Fail(Errc::kInvalidArgument, "message larger than 16 MiB");
    if (buf_.size() - at - 5 < len) break;
    out.push_back({flags, buf_.substr(at + 5, len)});
    if (flags & kFlagEndStream) ended_ = true;
    at += 5 + len;
  }
  buf_.erase(0, at);
  return out;
}

}  // namespace space::api::e2b::connect
