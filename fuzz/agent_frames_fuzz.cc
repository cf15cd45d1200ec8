// Fuzz target agent_frames: the agent channel's FrameDecoder over arbitrary byte streams.
//
// Input: u32 split seed | stream bytes. The stream is decoded twice, once fed whole (Feed +
// Next) and once in seed-chosen pieces alternating Feed and Prepare/Commit (drained with
// NextView after each piece), and both decodings must agree frame for frame, in the error and
// in the bytes left over. Every frame must re-encode to exactly the bytes it came from, and
// its payload is run through DecodeMessage, DecodeData and DecodeAck (all three, whatever the
// type: a hostile agent chooses types freely), whose successes must round-trip.
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "agent/protocol.h"
#include "fuzz/fuzz_util.h"

namespace {

using space::agent::FrameDecoder;
using space::agent::FrameType;
using space::fuzz::Check;

struct Decoded {
  std::vector<space::agent::Frame> frames;
  bool failed = false;
  size_t left = 0;
};

void CheckPayload(std::string_view payload) {
  if (auto m = space::agent::DecodeMessage(payload)) {
    Check(m->json.is_object(), "DecodeMessage returned a non-object");
    // First encoding normalises the JSON text; from then on encoding must be stable.
    std::string once = space::agent::EncodeMessage(m->json, m->body);
    auto again = space::agent::DecodeMessage(once);
    Check(again.has_value(), "DecodeMessage rejects EncodeMessage output");
    Check(again->body == m->body, "message body changed in round trip");
    Check(space::agent::EncodeMessage(again->json, again->body) == once,
          "EncodeMessage not stable after one round trip");
    if (auto e = space::agent::ErrorFromJson(m->json)) {
      Check(!e->message.empty(), "ErrorFromJson gave an empty message");
      (void)space::agent::ErrorJson(*e).dump();
    }
  } else {
    Check(!m.error().message.empty(), "DecodeMessage error without message");
  }
  if (auto d = space::agent::DecodeData(payload)) {
    Check(space::agent::EncodeData(d->offset, d->bytes) == payload, "DecodeData round trip");
  } else {
    Check(payload.size() < 8, "DecodeData rejected a payload of >= 8 bytes");
  }
  if (auto a = space::agent::DecodeAck(payload)) {
    Check(a->fd <= 2, "DecodeAck accepted fd > 2");
    Check(space::agent::EncodeAck(a->fd, a->offset) == payload, "DecodeAck round trip");
  }
}

Decoded DecodeWhole(std::string_view stream) {
  Decoded out;
  FrameDecoder dec;
  dec.Feed(stream);
  for (;;) {
    auto f = dec.Next();
    if (!f) {
      out.failed = true;
      Check(!dec.Next().has_value(), "decoder recovered after an error");
      return out;
    }
    if (!*f) break;
    out.frames.push_back(std::move(**f));
  }
  out.left = dec.buffered();
  return out;
}

Decoded DecodeSplit(std::string_view stream, uint32_t seed) {
  Decoded out;
  FrameDecoder dec;
  space::fuzz::SplitSizes sizes(seed, 1 + (seed >> 24) % 64);
  bool zero_copy = seed & 0x10000;
  while (!stream.empty() && !out.failed) {
    size_t n = std::min(sizes.Next(), stream.size());
    if (zero_copy) {
      char* p = dec.Prepare(n);
      std::memcpy(p, stream.data(), n);
      dec.Commit(n);
    } else {
      dec.Feed(stream.substr(0, n));
    }
    zero_copy = !zero_copy;
    stream.remove_prefix(n);
    for (;;) {
      auto f = dec.NextView();
      if (!f) {
        out.failed = true;
        break;
      }
      if (!*f) break;
      out.frames.push_back({(*f)->type, (*f)->stream, std::string((*f)->payload)});
    }
  }
  out.left = dec.buffered();
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  uint32_t seed = space::fuzz::TakeU32(&in);

  Decoded whole = DecodeWhole(in);
  Decoded split = DecodeSplit(in, seed);
  Check(whole.failed == split.failed, "split feeding changes whether the stream fails");
  Check(whole.frames.size() == split.frames.size(), "split feeding changes the frame count");

  size_t consumed = 0;
  for (size_t i = 0; i < whole.frames.size(); ++i) {
    const auto& a = whole.frames[i];
    const auto& b = split.frames[i];
    Check(a.type == b.type && a.stream == b.stream && a.payload == b.payload,
          "split feeding changes a frame");
    Check(space::agent::IsKnownFrameType(static_cast<uint8_t>(a.type)), "unknown type decoded");
    Check(a.payload.size() <= space::agent::kMaxPayload, "oversized frame decoded");
    std::string enc = space::agent::EncodeFrame(a.type, a.stream, a.payload);
    Check(in.substr(consumed, enc.size()) == enc, "frame does not re-encode to its input bytes");
    consumed += enc.size();
    CheckPayload(a.payload);
  }
  if (!whole.failed) {
    Check(whole.left == in.size() - consumed, "whole decoder lost or invented bytes");
    Check(split.left == whole.left, "split feeding leaves a different remainder");
  }
  return 0;
}
