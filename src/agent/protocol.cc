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

void FrameDecoder::Compact() {
  if (pos_ == 0) return;
  if (pos_ == end_) {
    pos_ = end_ = 0;
    return;
  }
  // Move the unread tail to the front only when it is worth it (it is usually small).
  if (pos_ >= (1u << 20) || pos_ * 2 >= end_) {
    std::memmove(buf_.data(), buf_.data() + pos_, end_ - pos_);
    end_ -= pos_;
    pos_ = 0;
  }
}

char* FrameDecoder::Prepare(size_t n) {
  Compact();
  if (buf_.size() < end_ + n) buf_.resize(end_ + n);
  return buf_.data() + end_;
}

void FrameDecoder::Feed(std::string_view bytes) {
  std::memcpy(Prepare(bytes.size()), bytes.data(), bytes.size());
  Commit(bytes.size());
}

Result<std::optional<FrameView>> PeekFrame(std::string_view in) {
  if (in.size() < kHeaderSize) return std::optional<FrameView>();
  const char* h = in.data();
  uint32_t len = GetU32(h);
  uint8_t type = static_cast<uint8_t>(h[4]);
  if (len > kMaxPayload) {
    return Fail(Errc::kInvalidArgument, "agent frame too large: " + std::to_string(len) + " bytes");
  }
  if (!IsKnownFrameType(type)) {
    return Fail(Errc::kInvalidArgument, "unknown agent frame type " + std::to_string(type));
  }
  if (in.size() - kHeaderSize < len) return std::optional<FrameView>();
  return std::optional<FrameView>(
      FrameView{static_cast<FrameType>(type), GetU32(h + 5), in.substr(kHeaderSize, len)});
}

Result<std::optional<FrameView>> FrameDecoder::NextView() {
  if (failed_) return tl::unexpected(*failed_);
  auto f = PeekFrame(std::string_view(buf_.data() + pos_, end_ - pos_));
  if (!f) {
    failed_ = f.error();
    return tl::unexpected(*failed_);
  }
  if (*f) pos_ += kHeaderSize + (*f)->payload.size();
  return f;
}

size_t FrameDecoder::Needed() const {
  const size_t have = end_ - pos_;
  if (have == 0) return 0;
  if (have < kHeaderSize) return kHeaderSize - have;
  const uint64_t len = GetU32(buf_.data() + pos_);
  if (len > kMaxPayload) return 0;  // NextView reports it
  return have >= kHeaderSize + len ? 0 : kHeaderSize + len - have;
}

void FrameDecoder::Release() {
  if (pos_ != end_) return;
  pos_ = end_ = 0;
  std::string().swap(buf_);
}

Result<std::optional<Frame>> FrameDecoder::Next() {
  auto v = NextView();
  if (!v) return tl::unexpected(v.error());
  if (!*v) return std::optional<Frame>();
  return std::optional<Frame>(Frame{(*v)->type, (*v)->stream, std::string((*v)->payload)});
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
  // Through ParseJson: it also bounds the nesting depth (a hostile peer's deep document
  // would overflow the stack when copied).
  auto parsed = ParseJson(payload.substr(4, jlen));
  if (parsed) m.json = std::move(*parsed);
  if (!parsed || !m.json.is_object())
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

void EncodeDataFrameHeader(FrameType type, uint32_t stream, uint64_t offset, size_t length,
                           std::string* out) {
  PutU32(out, static_cast<uint32_t>(8 + length));
  out->push_back(static_cast<char>(type));
  PutU32(out, stream);
  PutU64(out, offset);
}

void EncodeDataFrame(FrameType type, uint32_t stream, uint64_t offset, std::string_view bytes,
                     std::string* out) {
  EncodeDataFrameHeader(type, stream, offset, bytes.size(), out);
  out->append(bytes.data(), bytes.size());
}

Result<DataChunk> DecodeData(std::string_view payload) {
  if (payload.size() < 8) return Fail(Errc::kInvalidArgument, "agent data: short header");
  return DataChunk{GetU64(payload.data()), payload.substr(8)};
}

std::optional<DataHeader> PeekDataHeader(std::string_view in) {
  if (in.size() < kDataHeaderSize) return std::nullopt;
  const uint32_t len = GetU32(in.data());
  const auto type = static_cast<FrameType>(in[4]);
  if (type != FrameType::kStdout && type != FrameType::kStderr) return std::nullopt;
  if (len < 8 || len > kMaxPayload) return std::nullopt;
  return DataHeader{type, GetU32(in.data() + 5), GetU64(in.data() + kHeaderSize), len - 8u};
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
