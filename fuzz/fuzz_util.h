// fuzz/fuzz_util: small helpers shared by the fuzz targets (header-only, no state).
//
// Check() aborts with a message when a parser breaks one of its promises, so libFuzzer (and
// the replay tests) report wrong answers, not only memory errors. SplitSizes turns fuzzer
// bytes into a deterministic sequence of chunk sizes for feeding incremental decoders.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace space::fuzz {

inline void Check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz invariant violated: %s\n", what);
  std::abort();
}

// Deterministic chunk sizes in [1, max_chunk] from a 32-bit seed (xorshift): the same input
// always splits the same way, so crashes reproduce.
class SplitSizes {
 public:
  SplitSizes(uint32_t seed, size_t max_chunk) : state_(seed | 1), max_(max_chunk ? max_chunk : 1) {}
  size_t Next() {
    state_ ^= state_ << 13;
    state_ ^= state_ >> 17;
    state_ ^= state_ << 5;
    return 1 + state_ % max_;
  }

 private:
  uint32_t state_;
  size_t max_;
};

// Takes a little-endian u32 off the front of `in` (fewer bytes: what is there).
inline uint32_t TakeU32(std::string_view* in) {
  uint32_t v = 0;
  for (int i = 0; i < 4 && !in->empty(); ++i) {
    v |= static_cast<uint32_t>(static_cast<uint8_t>((*in)[0])) << (8 * i);
    in->remove_prefix(1);
  }
  return v;
}

}  // namespace space::fuzz
