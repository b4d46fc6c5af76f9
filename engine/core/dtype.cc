#include "engine/core/dtype.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace vismoe {

size_t DTypeBits(DType t) {
  switch (t) {
    case DType::kF32:
      return 32;
    case DType::kF16:
    case DType::kBF16:
      return 16;
    case DType::kF8E4M3:
    case DType::kU8:
    case DType::kE8M0:
      return 8;
    case DType::kMxFp4:
      return 4;
  }
  return 0;
}

size_t DTypeSize(DType t) { return DTypeBits(t) / 8; }

std::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    case DType::kF8E4M3:
      return "F8_E4M3";
    case DType::kU8:
      return "U8";
    case DType::kE8M0:
      return "F8_E8M0";
    case DType::kMxFp4:
      return "MXFP4";
  }
  return "?";
}

absl::StatusOr<DType> ParseDType(std::string_view name) {
  if (name == "F32") return DType::kF32;
  if (name == "F16") return DType::kF16;
  if (name == "BF16") return DType::kBF16;
  if (name == "F8_E4M3") return DType::kF8E4M3;
  if (name == "U8") return DType::kU8;
  if (name == "F8_E8M0") return DType::kE8M0;
  return absl::InvalidArgumentError(
      absl::StrCat("unsupported dtype '", std::string(name),
                   "' (supported: F32, F16, BF16, F8_E4M3, U8, F8_E8M0)"));
}

absl::StatusOr<std::optional<DType>> ParseExpertDType(std::string_view name) {
  if (name == "auto") return std::optional<DType>();
  if (name == "fp8") return std::optional<DType>(DType::kF8E4M3);
  return absl::InvalidArgumentError(
      absl::StrCat("expert_dtype must be auto or fp8, got '", std::string(name), "'"));
}

float F16ToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

uint16_t FloatToF16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // overflow -> inf (after rounding)
  if (abs < 0x38800000u) {                        // subnormal or zero in f16
    if (abs < 0x33000000u) return sign;
    const uint32_t e = abs >> 23;
    const uint32_t m = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14 + (113 - e) - 1 ... see below
    // value = m * 2^(e-150); f16 subnormal unit = 2^-24 -> q = m >> (126 - e)
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return sign | static_cast<uint16_t>(q);
  }
  uint32_t v = abs - 0x38000000u;  // rebias exponent 127 -> 15
  const uint32_t rem = v & 0x1fffu;
  v >>= 13;
  if (rem > 0x1000u || (rem == 0x1000u && (v & 1u))) ++v;
  return sign | static_cast<uint16_t>(v);
}

float E4m3ToFloat(uint8_t v) {
  const uint32_t sign = static_cast<uint32_t>(v & 0x80u) << 24;
  const uint32_t exp = (v >> 3) & 0xfu;
  const uint32_t mant = v & 0x7u;
  if ((v & 0x7fu) == 0x7fu) return std::numeric_limits<float>::quiet_NaN();
  float mag;
  if (exp == 0) {
    mag = std::ldexp(static_cast<float>(mant), -9);  // subnormal: mant/8 * 2^-6
  } else {
    const uint32_t bits = ((exp + 127 - 7) << 23) | (mant << 20);
    std::memcpy(&mag, &bits, sizeof(mag));
  }
  uint32_t bits;
  std::memcpy(&bits, &mag, sizeof(bits));
  bits |= sign;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

float E2m1ToFloat(uint8_t nibble) {
  static constexpr float kMagnitude[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float m = kMagnitude[nibble & 7];
  return (nibble & 8) != 0 ? -m : m;
}

uint8_t FloatToE4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const float a = std::min(std::fabs(f), kE4m3Max);
  // Normals step by 2^(e-3) in [2^e, 2^(e+1)), e >= -6; below 2^-6 the
  // subnormals step by 2^-9. Dividing by the step is exact (a power of two);
  // nearbyint rounds half to even in the default rounding mode.
  int e = 0;
  std::frexp(a, &e);  // a in [2^(e-1), 2^e)
  const int step_exp = std::max(e - 1, -6) - 3;
  const float q = std::nearbyint(std::ldexp(a, -step_exp));  // integer multiple of the step
  const float r = std::ldexp(q, step_exp);                   // may round up to the next binade
  if (r == 0.0f) return sign;
  int re = 0;
  const float m = std::frexp(r, &re);  // r = m * 2^re, m in [0.5, 1)
  uint32_t exp_field = static_cast<uint32_t>(re - 1 + 7);
  uint32_t mant;
  if (re - 1 < -6) {  // subnormal: r = mant * 2^-9
    exp_field = 0;
    mant = static_cast<uint32_t>(std::ldexp(r, 9));
  } else {
    mant = static_cast<uint32_t>(std::ldexp(m, 4)) - 8;  // (2m - 1) * 8
  }
  return static_cast<uint8_t>(sign | (exp_field << 3) | mant);
}

void ToFloat(DType t, const void* src, size_t n, float* dst) {
  switch (t) {
    case DType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case DType::kBF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = Bf16ToFloat(s[i]);
      return;
    }
    case DType::kF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = F16ToFloat(s[i]);
      return;
    }
    case DType::kF8E4M3: {
      const auto* s = static_cast<const uint8_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = E4m3ToFloat(s[i]);
      return;
    }
    case DType::kU8: {
      const auto* s = static_cast<const uint8_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = s[i];
      return;
    }
    case DType::kE8M0: {
      const auto* s = static_cast<const uint8_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = E8m0ToFloat(s[i]);
      return;
    }
    case DType::kMxFp4: {
      const auto* s = static_cast<const uint8_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = E2m1ToFloat(s[i / 2] >> (4 * (i % 2)));
      return;
    }
  }
}

namespace {

// The first value whose exponent bits are all ones (NaN or infinity).
template <typename Bits>
int64_t FirstAllOnesExponent(const void* src, size_t n, Bits mask) {
  const Bits* v = static_cast<const Bits*>(src);
  for (size_t i = 0; i < n; ++i) {
    if ((v[i] & mask) == mask) return static_cast<int64_t>(i);
  }
  return -1;
}

}  // namespace

int64_t FirstNonFinite(DType t, const void* src, size_t n) {
  switch (t) {
    case DType::kBF16:
      return FirstAllOnesExponent<uint16_t>(src, n, 0x7F80);
    case DType::kF16:
      return FirstAllOnesExponent<uint16_t>(src, n, 0x7C00);
    case DType::kF32:
      return FirstAllOnesExponent<uint32_t>(src, n, 0x7F800000u);
    case DType::kF8E4M3:
      return FirstAllOnesExponent<uint8_t>(src, n, 0x7F);
    case DType::kE8M0:
      return FirstAllOnesExponent<uint8_t>(src, n, 0xFF);
    case DType::kU8:
    case DType::kMxFp4:
      return -1;
  }
  return -1;
}

}  // namespace vismoe
