#include "engine/core/dtype.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace vismoe {
namespace {

TEST(DTypeTest, ParseAndName) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    auto parsed = ParseDType(DTypeName(t));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, t);
  }
  EXPECT_FALSE(ParseDType("I8").ok());
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kF32), 4u);
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
