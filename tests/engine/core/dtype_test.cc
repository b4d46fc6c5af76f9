#include "engine/core/dtype.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace vismoe {
namespace {

TEST(DTypeTest, ParseAndName) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3}) {
    auto parsed = ParseDType(DTypeName(t));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, t);
  }
  EXPECT_FALSE(ParseDType("I8").ok());
  EXPECT_EQ(*ParseDType("U8"), DType::kU8);
  EXPECT_EQ(*ParseDType("F8_E8M0"), DType::kE8M0);
  EXPECT_FALSE(ParseDType("MXFP4").ok());  // no safetensors dtype: U8 blocks
  EXPECT_EQ(DTypeName(DType::kMxFp4), "MXFP4");
  EXPECT_EQ(DTypeBits(DType::kMxFp4), 4u);
  EXPECT_EQ(DTypeBytes(DType::kMxFp4, 64), 32u);
  EXPECT_EQ(DTypeBytes(DType::kBF16, 3), 6u);
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kF32), 4u);
  EXPECT_EQ(DTypeSize(DType::kF8E4M3), 1u);
  EXPECT_EQ(DTypeName(DType::kF8E4M3), "F8_E4M3");
}

TEST(DTypeTest, Mxfp4AndE8m0DecodeTheFormatsValues) {
  const float magnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (uint8_t c = 0; c < 16; ++c) {
    EXPECT_EQ(E2m1ToFloat(c), c < 8 ? magnitudes[c] : -magnitudes[c - 8]) << int{c};
  }
  EXPECT_TRUE(std::signbit(E2m1ToFloat(8)));  // -0
  EXPECT_EQ(E8m0ToFloat(127), 1.0f);
  EXPECT_EQ(E8m0ToFloat(0), std::ldexp(1.0f, -127));
  EXPECT_EQ(E8m0ToFloat(254), std::ldexp(1.0f, 127));
  EXPECT_TRUE(std::isnan(E8m0ToFloat(255)));
  // Two elements per byte, the even one in the low nibble.
  const uint8_t bytes[2] = {0x2f, 0x70};
  float v[4];
  ToFloat(DType::kMxFp4, bytes, 4, v);
  EXPECT_EQ(v[0], -6.0f);
  EXPECT_EQ(v[1], 1.0f);
  EXPECT_EQ(v[2], 0.0f);
  EXPECT_EQ(v[3], 6.0f);
  EXPECT_EQ(FirstNonFinite(DType::kE8M0, "\x01\x7f\xff", 3), 2);
  EXPECT_EQ(FirstNonFinite(DType::kMxFp4, "\xff\xff", 4), -1);
}

TEST(DTypeTest, E4m3DecodesTheFormatsValues) {
  EXPECT_EQ(E4m3ToFloat(0x00), 0.0f);
  EXPECT_TRUE(std::signbit(E4m3ToFloat(0x80)));
  EXPECT_EQ(E4m3ToFloat(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(E4m3ToFloat(0x07), 7 * std::ldexp(1.0f, -9));
  EXPECT_EQ(E4m3ToFloat(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(E4m3ToFloat(0x38), 1.0f);
  EXPECT_EQ(E4m3ToFloat(0x3c), 1.5f);
  EXPECT_EQ(E4m3ToFloat(0x7e), 448.0f);
  EXPECT_EQ(E4m3ToFloat(0xfe), -448.0f);
  EXPECT_TRUE(std::isnan(E4m3ToFloat(0x7f)));
  EXPECT_TRUE(std::isnan(E4m3ToFloat(0xff)));
  EXPECT_EQ(FirstNonFinite(DType::kF8E4M3, "\x01\x7e\xff", 3), 2);
  EXPECT_EQ(FirstNonFinite(DType::kF8E4M3, "\x01\x7e\xfe", 3), -1);
}

// FloatToE4m3 against a search over every finite e4m3 value: the nearest,
// ties to the even code (mantissa bit 0 clear), saturating at +-448.
TEST(DTypeTest, E4m3EncodeIsRoundToNearestEvenWithSaturation) {
  for (uint32_t v = 0; v < 256; ++v) {
    const auto b = static_cast<uint8_t>(v);
    if ((b & 0x7f) == 0x7f) continue;
    if (b == 0x80) continue;  // -0 encodes as 0x80 too, checked below
    EXPECT_EQ(FloatToE4m3(E4m3ToFloat(b)), b) << std::hex << v;
  }
  EXPECT_EQ(FloatToE4m3(-0.0f), 0x80);
  auto nearest = [](float f) {
    int best = -1;
    double best_d = 0;
    for (int v = 0; v < 128; ++v) {  // magnitudes; sign added after
      if (v == 0x7f) continue;
      const double d = std::fabs(std::fabs(static_cast<double>(f)) - E4m3ToFloat(v));
      if (best < 0 || d < best_d || (d == best_d && (v & 1) == 0)) {
        best = v;
        best_d = d;
      }
    }
    return static_cast<uint8_t>(best | (std::signbit(f) ? 0x80 : 0));
  };
  uint32_t state = 12345;
  for (int k = 0; k < 20000; ++k) {
    state = state * 1664525u + 1013904223u;
    // Magnitudes from 2^-12 to 2^9, both signs, plus the exact midpoints.
    float f = std::ldexp(1.0f + (state >> 9) / 8388608.0f, static_cast<int>(state % 22) - 12);
    if (k % 4 == 1) f = -f;
    if (k % 4 == 2) {
      const uint8_t lo = static_cast<uint8_t>(state % 0x7e);
      f = 0.5f * (E4m3ToFloat(lo) + E4m3ToFloat(lo + 1));
    }
    const float clamped = std::fmin(std::fmax(f, -448.0f), 448.0f);
    EXPECT_EQ(FloatToE4m3(f), nearest(clamped)) << f;
  }
  EXPECT_EQ(FloatToE4m3(1e6f), 0x7e);
  EXPECT_EQ(FloatToE4m3(-1e6f), 0xfe);
  EXPECT_EQ(FloatToE4m3(std::numeric_limits<float>::infinity()), 0x7e);
  EXPECT_EQ(FloatToE4m3(std::numeric_limits<float>::quiet_NaN()), 0x7f);
  EXPECT_EQ(FloatToE4m3(std::ldexp(1.0f, -11)), 0x00);  // below half the smallest subnormal
}

TEST(DTypeTest, Bf16RoundTripAndRounding) {
  for (float f : {0.0f, 1.0f, -2.5f, 3.140625f, std::ldexp(1.0f, -100), 65536.0f}) {
    EXPECT_EQ(Bf16ToFloat(FloatToBf16(f)), f) << f;
  }
  // 1 + 2^-8 lies exactly between two bf16 values: ties to even (1.0).
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.0f + 1.0f / 256)), 1.0f);
  // 1 + 3*2^-8 ties to the even neighbour above.
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.0f + 3.0f / 256)), 1.0f + 4.0f / 256);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(DTypeTest, F16RoundTripAllValues) {
  // Every finite f16 bit pattern survives f16 -> f32 -> f16.
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const uint16_t v = static_cast<uint16_t>(h);
    if ((v & 0x7c00u) == 0x7c00u) continue;  // inf/nan
    EXPECT_EQ(FloatToF16(F16ToFloat(v)), v) << std::hex << h;
  }
  EXPECT_EQ(F16ToFloat(0x3c00), 1.0f);
  EXPECT_EQ(F16ToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(FloatToF16(1e9f), 0x7c00);  // overflow to inf
}

}  // namespace
}  // namespace vismoe
