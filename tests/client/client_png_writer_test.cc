#include <cstring>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <string>
#include <vector>

#include "client/media_type.h"
#include "client/png_writer.h"
#include "client/request_set.h"
#include "gtest/gtest.h"

namespace vismoe::client {
namespace {

TEST(PngWriterTest, ChecksumsMatchKnownValues) {
  const char* check = "123456789";
  EXPECT_EQ(Crc32(reinterpret_cast<const uint8_t*>(check), 9), 0xCBF43926u);
  const char* wiki = "Wikipedia";
  EXPECT_EQ(Adler32(reinterpret_cast<const uint8_t*>(wiki), 9), 0x11E60398u);
}

// Decodes with OpenCV (an independent decoder) and compares every pixel.
void ExpectRoundTrip(int width, int height) {
  std::vector<uint8_t> rgb(static_cast<size_t>(width) * height * 3);
  for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<uint8_t>((i * 37 + i / 7) & 0xFF);
  const std::string png = EncodePngRgb(width, height, rgb.data());
  EXPECT_EQ(SniffImageMediaType(png), "image/png");
  cv::Mat encoded(1, static_cast<int>(png.size()), CV_8UC1, const_cast<char*>(png.data()));
  cv::Mat bgr = cv::imdecode(encoded, cv::IMREAD_COLOR);
  ASSERT_FALSE(bgr.empty()) << width << "x" << height;
  ASSERT_EQ(bgr.cols, width);
  ASSERT_EQ(bgr.rows, height);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      const cv::Vec3b px = bgr.at<cv::Vec3b>(y, x);
      const uint8_t* want = &rgb[(static_cast<size_t>(y) * width + x) * 3];
      ASSERT_EQ(px[2], want[0]) << x << "," << y;
      ASSERT_EQ(px[1], want[1]) << x << "," << y;
      ASSERT_EQ(px[0], want[2]) << x << "," << y;
    }
  }
}

TEST(PngWriterTest, SmallImageRoundTrips) { ExpectRoundTrip(3, 2); }

TEST(PngWriterTest, ImageSpanningSeveralStoredBlocksRoundTrips) {
  // 200 * 150 * 3 + 150 filter bytes = 90150 raw bytes: two stored blocks.
  ExpectRoundTrip(200, 150);
}

TEST(PngWriterTest, ExactBlockBoundaryRoundTrips) {
  // (21845 * 3 + 1) = 65536 raw bytes with one row: one full block + 1 byte.
  ExpectRoundTrip(21845, 1);
}

TEST(SyntheticSetTest, ImagesDecodeAndSetIsDeterministic) {
  const std::vector<PromptSpec> a = MakeSyntheticRequestSet(8, 42);
  const std::vector<PromptSpec> b = MakeSyntheticRequestSet(8, 42);
  ASSERT_EQ(a.size(), 8u);
  int images = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_FALSE(a[i].prompt.empty());
    ASSERT_EQ(a[i].images.size(), b[i].images.size());
    for (size_t k = 0; k < a[i].images.size(); ++k) {
      const ImageInput& img = a[i].images[k];
      EXPECT_EQ(img.bytes, b[i].images[k].bytes);
      EXPECT_EQ(img.media_type, "image/png");
      cv::Mat encoded(1, static_cast<int>(img.bytes.size()), CV_8UC1,
                      const_cast<char*>(img.bytes.data()));
      cv::Mat decoded = cv::imdecode(encoded, cv::IMREAD_COLOR);
      ASSERT_FALSE(decoded.empty());
      EXPECT_EQ(decoded.cols % 32, 0);
      EXPECT_GE(decoded.cols, 64);
      EXPECT_LE(decoded.rows, 256);
      ++images;
    }
  }
  EXPECT_GT(images, 0);
  EXPECT_TRUE(a[1].images.empty());  // the set mixes text-only requests in
}

TEST(MediaTypeTest, SniffsMagicBytes) {
  EXPECT_EQ(SniffImageMediaType(std::string("\xFF\xD8\xFF\xE0", 4)), "image/jpeg");
  EXPECT_EQ(SniffImageMediaType(std::string("RIFF\x10\0\0\0WEBPVP8 ", 16)), "image/webp");
  EXPECT_EQ(SniffImageMediaType("GIF89a..."), "image/gif");
  EXPECT_EQ(SniffImageMediaType("hello world"), "");
  EXPECT_EQ(SniffImageMediaType(""), "");
}

}  // namespace
}  // namespace vismoe::client
