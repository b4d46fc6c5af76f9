// Element types of stored weights and their conversions to fp32.
// The CPU backend computes in fp32; weights stay in their file dtype and are
// widened on the fly with these helpers.
// F8_E4M3 (float8_e4m3fn: 4 exponent bits, bias 7, 3 mantissa bits, no
// infinities, 0x7f/0xff NaN, largest finite 448) holds only block-scaled
// linear weights (TensorView::scale): its conversions give the unscaled value.
// MXFP4 (OCP microscaling FP4, as GPT-OSS publishes its experts): e2m1
// elements, two per byte (the even element in the low nibble; bit 3 the sign,
// magnitudes 0, .5, 1, 1.5, 2, 3, 4, 6), each block of 32 along the input
// dimension scaled by one F8_E8M0 byte (2^(v - 127); 0xff NaN). Checkpoints
// store both as U8 (raw bytes, which nothing computes with directly).
#ifndef VISMOE_ENGINE_CORE_DTYPE_H_
#define VISMOE_ENGINE_CORE_DTYPE_H_

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

#include "absl/status/statusor.h"

namespace vismoe {

enum class DType : uint8_t { kF32, kF16, kBF16, kF8E4M3, kU8, kE8M0, kMxFp4 };

// Bits per element (4 for MXFP4).
size_t DTypeBits(DType t);
// Bytes of `n` elements. REQUIRES: n * DTypeBits(t) a multiple of 8.
inline size_t DTypeBytes(DType t, int64_t n) { return static_cast<size_t>(n) * DTypeBits(t) / 8; }

// Bytes per element. REQUIRES: t is not MXFP4 (half a byte: DTypeBytes).
size_t DTypeSize(DType t);
// "F32", "F16", "BF16", "F8_E4M3", "U8", "F8_E8M0" (the safetensors
// spelling), "MXFP4" (no safetensors dtype: checkpoints store U8 blocks).
std::string_view DTypeName(DType t);
// Parses the safetensors spelling of every dtype but MXFP4; anything else is
// InvalidArgument.
absl::StatusOr<DType> ParseDType(std::string_view name);

inline float Bf16ToFloat(uint16_t v) {
  uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// Round-to-nearest-even, as torch does; NaN stays NaN.
inline uint16_t FloatToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float F16ToFloat(uint16_t h);
uint16_t FloatToF16(float f);

// Exact: every e4m3 value is an fp32 value (NaN stays NaN).
float E4m3ToFloat(uint8_t v);
// Round to nearest even, saturating at +-448 (torch's cast after the clamp
// its FP8 quantisers apply); NaN -> 0x7f.
uint8_t FloatToE4m3(float f);
// The largest finite e4m3 value.
inline constexpr float kE4m3Max = 448.0f;

// 2^(v - 127), exact: the byte is an fp32 exponent field, so v << 23, except
// v = 0 (the subnormal 2^-127) and the NaN 0xff. Inline: the matrix kernels
// convert one scale per block of 32 MXFP4 weights.
inline float E8m0ToFloat(uint8_t v) {
  const uint32_t bits = v == 0 ? 0x00400000u : v == 0xff ? 0x7fc00000u : uint32_t{v} << 23;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}
// The e2m1 value of the low four bits of `nibble` (exact).
float E2m1ToFloat(uint8_t nibble);

// The --expert_dtype choice (engine/offload/expert_dtype.h): "auto" -> unset
// (as stored), "fp8" -> F8_E4M3; InvalidArgument naming the choices otherwise.
absl::StatusOr<std::optional<DType>> ParseExpertDType(std::string_view name);

// Widens `n` elements of type `t` at `src` into fp32 `dst` (MXFP4: the
// unscaled e2m1 values, n even; U8: the integers).
void ToFloat(DType t, const void* src, size_t n, float* dst);

// The index of the first NaN or infinity among `n` values of float dtype `t`
// at `src` (read from the bits: a bf16 value costs one mask and compare),
// or -1 when every value is finite (e4m3, e8m0: not NaN; they have no
// infinities; U8 and MXFP4 have neither).
int64_t FirstNonFinite(DType t, const void* src, size_t n);

}  // namespace vismoe

#endif  // VISMOE_ENGINE_CORE_DTYPE_H_
