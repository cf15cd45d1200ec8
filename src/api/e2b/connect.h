// api/e2b/connect: the pieces of the Connect RPC protocol (connectrpc.com/docs/protocol)
// that the E2B SDK uses with its JSON codec: unary calls (`application/json` bodies) and
// server-streaming calls (`application/connect+json`, length-prefixed envelopes ending
// with an end-stream message). Also proto3-JSON bytes (base64). Pure functions, no I/O;
// no Beast here, so they are unit-tested on their own.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/common.h"
#include "common/json.h"

namespace space::api::e2b::connect {

inline constexpr uint8_t kFlagCompressed = 0x01;
inline constexpr uint8_t kFlagEndStream = 0x02;
// Largest request message accepted (the SDK's are small: stdin pieces, paths).
inline constexpr size_t kMaxMessage = 16u << 20;

// The Connect code for a SPACE error ("invalid_argument", "not_found", ...).
std::string_view CodeFor(Errc code);
// The HTTP status the Connect protocol gives a code (unary errors).
int HttpStatusFor(std::string_view code);
// {"code":code,"message":message}
Json ErrorJson(std::string_view code, std::string_view message);

// One envelope: u8 flags | u32 big-endian length | payload.
std::string Envelope(uint8_t flags, std::string_view payload);
// The end-stream envelope: {} on success, {"error":{...}} otherwise.
std::string EndStream(const Json& error = nullptr);

// The one message of a server-streaming request body: exactly one uncompressed,
// non-end-stream envelope whose length matches the body. invalid_argument otherwise.
[[nodiscard]] Result<std::string> SingleMessage(std::string_view body);

// The envelopes of a client-streaming request body, as its bytes arrive in any pieces.
// Compressed envelopes, ones over kMaxMessage and data after an end-stream envelope are
// invalid_argument.
class EnvelopeReader {
 public:
  struct Message {
    uint8_t flags = 0;
    std::string payload;
  };
  [[nodiscard]] Result<std::vector<Message>> Feed(std::string_view data);
  // Whether the bytes so far end on an envelope's boundary.
  bool at_boundary() const { return buf_.empty(); }

 private:
  std::string buf_;
  bool ended_ = false;
};

// Parses a message's JSON: empty = {}; anything but an object is invalid_argument.
[[nodiscard]] Result<Json> ParseMessage(std::string_view payload);

// proto3 JSON `bytes`: standard base64 out; standard or URL-safe, padded or not, in.
std::string Base64Encode(std::string_view bytes);
[[nodiscard]] Result<std::string> Base64Decode(std::string_view text);

// proto3 JSON field lookup: `json_name` (lowerCamelCase) or the proto field name.
const Json* Field(const Json& msg, std::string_view json_name, std::string_view proto_name = {});

}  // namespace space::api::e2b::connect
