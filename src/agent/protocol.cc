#include "agent/protocol.h"

#include <cstring>

#include "common/json.h"

namespace space::agent {
namespace {

void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutU64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}
uint64_t GetU64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

}  // namespace

bool IsKnownFrameType(uint8_t t) { return t >= 1 && t <= 8; }

void EncodeFrame(FrameType type, uint32_t stream, std::string_view payload, std::string* out) {
  PutU32(out, static_cast<uint32_t>(payload.size()));
  out->push_back(static_cast<char>(type));
  PutU32(out, stream);
  out->append(payload.data(), payload.size());
}

std::string EncodeFrame(FrameType type, uint32_t stream, std::string_view payload) {
  std::string out;
  out.reserve(kHeaderSize + payload.size());
  EncodeFrame(type, stream, payload, &out);
  return out;
}

Result<std::optional<Frame>> FrameDecoder::Next() {
  if (failed_) return tl::unexpected(*failed_);
  if (buf_.size() - pos_ < kHeaderSize) {
    if (pos_ > 0) {
      buf_.erase(0, pos_);
      pos_ = 0;
    }
    return std::optional<Frame>();
  }
  const char* h = buf_.data() + pos_;
  uint32_t len = GetU32(h);
  uint8_t type = static_cast<uint8_t>(h[4]);
  if (len > kMaxPayload) {
    failed_ = Error{Errc::kInvalidArgument, 0,
                    "agent frame too large: " + std::to_string(len) + " bytes"};
    return tl::unexpected(*failed_);
  }
  if (!IsKnownFrameType(type)) {
    failed_ = Error{Errc::kInvalidArgument, 0, "unknown agent frame type " + std::to_string(type)};
    return tl::unexpected(*failed_);
  }
  if (buf_.size() - pos_ < kHeaderSize + len) return std::optional<Frame>();
  Frame f{static_cast<FrameType>(type), GetU32(h + 5), buf_.substr(pos_ + kHeaderSize, len)};
  pos_ += kHeaderSize + len;
  if (pos_ == buf_.size()) {
    buf_.clear();
    pos_ = 0;
  } else if (pos_ > (1u << 20)) {
    buf_.erase(0, pos_);
    pos_ = 0;
  }
  return std::optional<Frame>(std::move(f));
}

std::string EncodeMessage(const nlohmann::json& json, std::string_view body) {
  // Invalid UTF-8 (e.g. a file name from the sandbox) is replaced, not thrown: a message
  // must always encode, and nothing from the sandbox may crash either end.
  std::string j = json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string out;
  out.reserve(4 + j.size() + body.size());
  PutU32(&out, static_cast<uint32_t>(j.size()));
  out += j;
  out.append(body.data(), body.size());
  return out;
}

Result<Message> DecodeMessage(std::string_view payload) {
  if (payload.size() < 4) return Fail(Errc::kInvalidArgument, "agent message: short header");
  uint32_t jlen = GetU32(payload.data());
  if (jlen > payload.size() - 4) return Fail(Errc::kInvalidArgument, "agent message: bad JSON length");
  Message m;
  m.json = nlohmann::json::parse(payload.substr(4, jlen), nullptr, /*allow_exceptions=*/false);
  if (m.json.is_discarded() || !m.json.is_object())
    return Fail(Errc::kInvalidArgument, "agent message: JSON is not an object");
  m.body = std::string(payload.substr(4 + jlen));
  return m;
}

std::string EncodeData(uint64_t offset, std::string_view bytes) {
  std::string out;
  out.reserve(8 + bytes.size());
  PutU64(&out, offset);
  out.append(bytes.data(), bytes.size());
  return out;
}

void EncodeDataFrame(FrameType type, uint32_t stream, uint64_t offset, std::string_view bytes,
                     std::string* out) {
  PutU32(out, static_cast<uint32_t>(8 + bytes.size()));
  out->push_back(static_cast<char>(type));
  PutU32(out, stream);
  PutU64(out, offset);
  out->append(bytes.data(), bytes.size());
}

Result<DataChunk> DecodeData(std::string_view payload) {
  if (payload.size() < 8) return Fail(Errc::kInvalidArgument, "agent data: short header");
  return DataChunk{GetU64(payload.data()), payload.substr(8)};
}

std::string EncodeAck(uint8_t fd, uint64_t offset) {
  std::string out;
  out.push_back(static_cast<char>(fd));
  PutU64(&out, offset);
  return out;
}

Result<Ack> DecodeAck(std::string_view payload) {
  if (payload.size() != 9) return Fail(Errc::kInvalidArgument, "agent ack: bad size");
  uint8_t fd = static_cast<uint8_t>(payload[0]);
  if (fd > 2) return Fail(Errc::kInvalidArgument, "agent ack: bad fd");
  return Ack{fd, GetU64(payload.data() + 1)};
}

nlohmann::json ErrorJson(const Error& e) {
  return {{"ok", false},
          {"error", {{"code", std::string(ErrcName(e.code))}, {"message", e.message}}}};
}

std::optional<Error> ErrorFromJson(const nlohmann::json& j) {
  auto it = j.find("error");
  if (it == j.end() || !it->is_object()) return std::nullopt;
  Error e;
  e.code = ErrcFromName(JsonStringOr(*it, "code", "internal"));
  e.message = JsonStringOr(*it, "message", "agent error");
  return e;
}

}  // namespace space::agent
