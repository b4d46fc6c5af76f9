#include "engine/core/byte_size.h"

#include "gtest/gtest.h"

namespace vismoe {
namespace {

TEST(ParseByteSizeTest, UnitsAndPlainBytes) {
  EXPECT_EQ(*ParseByteSize("4096"), 4096);
  EXPECT_EQ(*ParseByteSize("24GB"), 24000000000LL);
  EXPECT_EQ(*ParseByteSize("512MiB"), 512LL << 20);
  EXPECT_EQ(*ParseByteSize("1.5GiB"), 3LL << 29);
  EXPECT_EQ(*ParseByteSize(" 2 kib "), 2048);
  EXPECT_EQ(*ParseByteSize("7b"), 7);
  EXPECT_EQ(*ParseByteSize("0"), 0);
}

TEST(ParseByteSizeTest, SingleLettersAreBinary) {
  EXPECT_EQ(*ParseByteSize("24G"), 24LL << 30);
  EXPECT_EQ(*ParseByteSize("12.5M"), 12.5 * (1 << 20));
  EXPECT_EQ(*ParseByteSize("3k"), 3072);
  EXPECT_EQ(*ParseByteSize("1T"), 1LL << 40);
}

TEST(ParseByteSizeTest, RejectsJunk) {
  for (const char* bad : {"", "GB", "12XB", "-5", "-1K", "1e3", "12Q", "99999999999TB"}) {
    EXPECT_FALSE(ParseByteSize(bad).ok()) << bad;
  }
  EXPECT_NE(std::string(ParseByteSize("12Q").status().message()).find("\"12Q\""),
            std::string::npos);
}

}  // namespace
}  // namespace vismoe
