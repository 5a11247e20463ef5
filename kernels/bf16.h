// fp32 -> bfloat16 conversion shared by every CPU Adam path and its tests.
#pragma once

#include <cstdint>
#include <cstring>

namespace dslaunch::kernels {

// Note [bf16 rounding]
// The upper 16 bits of the fp32 pattern, rounded to nearest with ties to even:
// add 0x7FFF plus the lowest kept bit, then truncate. Overflow past the
// largest finite bf16 becomes +-inf (what round-to-nearest prescribes), and any
// NaN becomes the canonical quiet NaN 0x7FC0 (adding the bias to a NaN pattern
// could carry into the exponent and turn it into inf). This is bit-for-bit
// c10::BFloat16's conversion, so a bf16 copy made here equals `p.to(kBFloat16)`.
// The SIMD paths implement the same three steps on integer lanes.
inline uint16_t FloatToBf16(float value) {
  if (value != value) return 0x7FC0;
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  const uint32_t rounding_bias = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding_bias) >> 16);
}

inline float Bf16ToFloat(uint16_t value) {
  const uint32_t bits = static_cast<uint32_t>(value) << 16;
  float result;
  std::memcpy(&result, &bits, sizeof(result));
  return result;
}

}  // namespace dslaunch::kernels
