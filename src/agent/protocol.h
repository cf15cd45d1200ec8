// agent/protocol: the framed channel between spaced and space-agent (docs/agent-protocol.md).
//
// Shared by the host side (core/) and the in-sandbox agent. Pure functions and a
// byte-stream decoder: no I/O, no threads. A FrameDecoder is not thread-safe; use one
// per connection. Every decode path validates its input: frames come from code that may
// be hostile (the agent runs inside the sandbox) and must never crash the reader.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/common.h"

namespace space::agent {

inline constexpr uint32_t kProtocolVersion = 1;
inline constexpr size_t kHeaderSize = 9;                  // u32 length | u8 type | u32 stream
inline constexpr uint32_t kMaxPayload = 4u << 20;         // larger frames are a protocol error
inline constexpr uint32_t kMaxDataChunk = 1u << 20;       // agent sends output in chunks <= this
inline constexpr uint64_t kOutputWindow = 8ull << 20;     // unacknowledged bytes per output fd
// STDIN bytes the agent holds for one command that has not read them yet: the host must
// stay below it (the agent closes the command's stdin when a STDIN frame would exceed it).
inline constexpr uint64_t kMaxPendingStdin = 8ull << 20;
inline constexpr uint32_t kMaxFileChunk = 2u << 20;       // read/write body per request
// A REQUEST on this stream id (any payload) asks the agent for a fresh HELLO; no response.
inline constexpr uint32_t kHelloRequest = 0xffffffffu;

enum class FrameType : uint8_t {
  kHello = 1,     // agent -> host, stream 0, JSON
  kRequest = 2,   // host -> agent, stream = request id, message (JSON + body)
  kResponse = 3,  // agent -> host, stream = request id, message (JSON + body)
  kStdout = 4,    // agent -> host, stream = command stream, u64 offset | bytes
  kStderr = 5,    // agent -> host, same
  kExit = 6,      // agent -> host, stream = command stream, JSON
  kAck = 7,       // host -> agent, stream = command stream, u8 fd | u64 offset
  kStdin = 8,     // host -> agent, stream = command stream, bytes; empty = close stdin
};

bool IsKnownFrameType(uint8_t t);

struct Frame {
  FrameType type;
  uint32_t stream = 0;
  std::string payload;
};

// Appends the encoded frame to `out`.
void EncodeFrame(FrameType type, uint32_t stream, std::string_view payload, std::string* out);
std::string EncodeFrame(FrameType type, uint32_t stream, std::string_view payload);

// Incremental decoder: Feed() bytes as they arrive, then Next() until it returns nullopt.
// After an error the decoder stays failed (the connection must be closed).
// A decoded frame whose payload points into the decoder's buffer: valid until the next
// call of any FrameDecoder method.
struct FrameView {
  FrameType type;
  uint32_t stream = 0;
  std::string_view payload;
};

// The frame at the start of `in`, if it is complete (zero-copy: the view points into `in`),
// nullopt if more bytes are needed, or an error for an oversized frame or an unknown type.
// The frame occupies kHeaderSize + payload.size() bytes of `in`.
Result<std::optional<FrameView>> PeekFrame(std::string_view in);

class FrameDecoder {
 public:
  void Feed(std::string_view bytes);
  // Zero-copy input: returns space for at least `n` more bytes at the end of the buffer;
  // after writing k of them there (e.g. with read(2)), call Commit(k).
  char* Prepare(size_t n);
  void Commit(size_t k) { end_ += k; }
  // Returns the next complete frame, nullopt if more bytes are needed, or an error for
  // an oversized frame or an unknown type.
  Result<std::optional<Frame>> Next();
  // Like Next() without copying the payload.
  Result<std::optional<FrameView>> NextView();
  size_t buffered() const { return end_ - pos_; }
  // Bytes still missing from the frame in progress: the rest of its header, or (once the
  // header is in) the rest of the frame; 0 when nothing is buffered or a frame is complete.
  // Feeding exactly this much lets a reader complete one frame without copying more.
  size_t Needed() const;
  // Frees the buffer when nothing is buffered: an idle connection then holds no memory.
  void Release();
  // The unread input (the start of a frame in progress); valid until the next call of a
  // non-const method.
  std::string_view Pending() const { return std::string_view(buf_.data() + pos_, end_ - pos_); }
  // Drops the unread input (its reader took the frame in progress over) and the buffer.
  void Clear() {
    pos_ = end_ = 0;
    std::string().swap(buf_);
  }

 private:
  void Compact();
  std::string buf_;     // bytes [pos_, end_) are unread input; [end_, size) is spare room
  size_t pos_ = 0;
  size_t end_ = 0;
  std::optional<Error> failed_;
};

// A request/response message: u32 json_len | JSON object | body bytes.
struct Message {
  nlohmann::json json;
  std::string body;
};
std::string EncodeMessage(const nlohmann::json& json, std::string_view body = {});
Result<Message> DecodeMessage(std::string_view payload);

// Output data: u64 offset | bytes.
struct DataChunk {
  uint64_t offset = 0;
  std::string_view bytes;   // points into the payload
};
std::string EncodeData(uint64_t offset, std::string_view bytes);
// Appends a whole STDOUT/STDERR frame, the same bytes as
// EncodeFrame(type, stream, EncodeData(offset, bytes), out) without the temporary copy.
void EncodeDataFrame(FrameType type, uint32_t stream, uint64_t offset, std::string_view bytes,
                     std::string* out);
// Appends only the first kDataHeaderSize bytes of such a frame (header and offset) for
// `length` bytes of output, which the caller sends right after it.
inline constexpr size_t kDataHeaderSize = kHeaderSize + 8;
void EncodeDataFrameHeader(FrameType type, uint32_t stream, uint64_t offset, size_t length,
                           std::string* out);
Result<DataChunk> DecodeData(std::string_view payload);
// The first kDataHeaderSize bytes of a STDOUT/STDERR frame at the start of `in`, whose
// output may not have arrived yet: nullopt if `in` is shorter, or starts with another type
// of frame or one too short to be data. Frame-level errors are PeekFrame's to report.
struct DataHeader {
  FrameType type;
  uint32_t stream = 0;
  uint64_t offset = 0;
  size_t length = 0;  // bytes of output (the payload less its offset)
};
std::optional<DataHeader> PeekDataHeader(std::string_view in);

// Acknowledgement: u8 fd (1 stdout, 2 stderr, 0 exit) | u64 offset (bytes durable below it).
struct Ack {
  uint8_t fd = 0;
  uint64_t offset = 0;
};
std::string EncodeAck(uint8_t fd, uint64_t offset);
Result<Ack> DecodeAck(std::string_view payload);

// Builds an error response JSON: {"ok":false,"error":{"code":..,"message":..}}.
nlohmann::json ErrorJson(const Error& e);
// Turns a response JSON back into an Error if it is one.
std::optional<Error> ErrorFromJson(const nlohmann::json& j);

}  // namespace space::agent
