#include "server/image_header.h"

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/jpeg_test_util.h"

namespace vismoe::server {
namespace {

using ::testing::HasSubstr;

std::string Encode(const std::string& ext, int width, int height, int type = CV_8UC3,
                   std::vector<int> params = {}) {
  cv::Mat img(height, width, type, cv::Scalar::all(77));
  std::vector<uchar> buf;
  EXPECT_TRUE(cv::imencode(ext, img, buf, params));
  return std::string(buf.begin(), buf.end());
}

TEST(ImageHeaderTest, SniffsMagicBytes) {
  EXPECT_EQ(SniffImageFormat(Encode(".png", 3, 2)), ImageFormat::kPng);
  EXPECT_EQ(SniffImageFormat(Encode(".jpg", 3, 2)), ImageFormat::kJpeg);
  EXPECT_EQ(SniffImageFormat(Encode(".webp", 3, 2)), ImageFormat::kWebp);
  EXPECT_EQ(SniffImageFormat("GIF89a......"), ImageFormat::kUnknown);
  EXPECT_EQ(SniffImageFormat(Encode(".bmp", 3, 2)), ImageFormat::kUnknown);
  EXPECT_EQ(SniffImageFormat(""), ImageFormat::kUnknown);
  EXPECT_EQ(SniffImageFormat("\x89PNG"), ImageFormat::kUnknown);  // too short
}

TEST(ImageHeaderTest, ReadsDimensionsOfEveryFormat) {
  struct Case {
    std::string data;
    ImageFormat format;
  };
  const std::vector<Case> cases = {
      {Encode(".png", 37, 21), ImageFormat::kPng},
      {Encode(".png", 37, 21, CV_8UC1), ImageFormat::kPng},
      {Encode(".png", 37, 21, CV_8UC4), ImageFormat::kPng},
      {Encode(".jpg", 37, 21), ImageFormat::kJpeg},
      {Encode(".jpg", 37, 21, CV_8UC3, {cv::IMWRITE_JPEG_PROGRESSIVE, 1}), ImageFormat::kJpeg},
      {Encode(".webp", 37, 21, CV_8UC3, {cv::IMWRITE_WEBP_QUALITY, 80}), ImageFormat::kWebp},
      {Encode(".webp", 37, 21, CV_8UC3, {cv::IMWRITE_WEBP_QUALITY, 101}), ImageFormat::kWebp},
  };
  for (const Case& c : cases) {
    absl::StatusOr<ImageHeader> h = ParseImageHeader(c.data);
    ASSERT_TRUE(h.ok()) << h.status();
    EXPECT_EQ(h->format, c.format);
    EXPECT_EQ(h->width, 37);
    EXPECT_EQ(h->height, 21);
    EXPECT_EQ(h->pixels(), 37 * 21);
  }
}

TEST(ImageHeaderTest, ReadsVp8xCanvasSize) {
  static const char kHead[] = "RIFF\x16\0\0\0WEBPVP8X\x0a\0\0\0";
  std::string d(kHead, sizeof(kHead) - 1);
  d.append(4, '\0');  // flags + reserved
  // width-1 = 69999 (0x01116F), height-1 = 49999 (0x00C34F), 24-bit LE.
  d += std::string("\x6F\x11\x01\x4F\xC3\x00", 6);
  absl::StatusOr<ImageHeader> h = ParseImageHeader(d);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->format, ImageFormat::kWebp);
  EXPECT_EQ(h->width, 70000);
  EXPECT_EQ(h->height, 50000);
}

TEST(ImageHeaderTest, ForgedPngIhdrReportsHugeSize) {
  std::string png = Encode(".png", 4, 4);
  // IHDR width/height at bytes 16..23: forge 100000 x 100000.
  const char forged[8] = {0x00, 0x01, static_cast<char>(0x86), static_cast<char>(0xA0),
                          0x00, 0x01, static_cast<char>(0x86), static_cast<char>(0xA0)};
  png.replace(16, 8, forged, 8);
  absl::StatusOr<ImageHeader> h = ParseImageHeader(png);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->pixels(), 10000000000LL);
}

// Found by tests/fuzz/image_header_fuzzer: 0xFFFFFFFF x 0xFFFFFFFF was
// accepted and pixels() overflowed (a negative count passed the pixel limit).
TEST(ImageHeaderTest, RejectsPngDimensionsOverTheSpecLimit) {
  std::string png = Encode(".png", 4, 4);
  png.replace(16, 8, std::string(8, '\xFF'));
  absl::StatusOr<ImageHeader> h = ParseImageHeader(png);
  EXPECT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(h.status().message()), HasSubstr("exceeds the format's 2^31-1 limit"));
  // The largest legal size still parses, and its pixel count is exact.
  png.replace(16, 8, std::string("\x7F\xFF\xFF\xFF\x7F\xFF\xFF\xFF", 8));
  h = ParseImageHeader(png);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->pixels(), int64_t{0x7FFFFFFF} * 0x7FFFFFFF);
}

TEST(ImageHeaderTest, RejectsUnknownTruncatedAndZeroSized) {
  EXPECT_THAT(std::string(ParseImageHeader("hello world, not an image").status().message()),
              HasSubstr("unsupported image format"));
  const std::string png = Encode(".png", 4, 4);
  EXPECT_THAT(std::string(ParseImageHeader(png.substr(0, 20)).status().message()),
              HasSubstr("truncated PNG"));
  const std::string jpg = Encode(".jpg", 4, 4);
  EXPECT_THAT(std::string(ParseImageHeader(jpg.substr(0, 4)).status().message()),
              HasSubstr("JPEG"));
  EXPECT_FALSE(ParseImageHeader(std::string("\xFF\xD8\xFF\xDA\x00\x02", 6)).ok());  // SOS first
  static const char kRiff[] = "RIFF\0\0\0\0WEBPABCD............";
  EXPECT_THAT(
      std::string(ParseImageHeader(std::string(kRiff, sizeof(kRiff) - 1)).status().message()),
      HasSubstr("unknown first chunk"));
  std::string zero = png;
  zero.replace(16, 4, std::string(4, '\0'));
  EXPECT_THAT(std::string(ParseImageHeader(zero).status().message()), HasSubstr("zero width"));
  std::string not_ihdr = png;
  not_ihdr.replace(12, 4, "IDAT");
  EXPECT_THAT(std::string(ParseImageHeader(not_ihdr).status().message()), HasSubstr("IHDR"));
}

// Scans are counted by walking the segments and skipping entropy-coded data
// (0xFF 0x00 stuffing, RSTn), so bytes that spell a marker inside a segment's
// payload or the pixel data are not scans.
TEST(ImageHeaderTest, JpegScanCountCountsEveryScan) {
  EXPECT_EQ(JpegScanCount(Encode(".jpg", 64, 48), 100), 1);  // baseline
  const std::string progressive = testing::ProgressiveGreyJpeg(64);
  EXPECT_EQ(JpegScanCount(progressive, 100), 6);  // libjpeg's grey progression
  EXPECT_EQ(JpegScanCount(Encode(".jpg", 64, 48, CV_8UC3, {cv::IMWRITE_JPEG_PROGRESSIVE, 1}), 100),
            10);  // and its colour one
  const std::string bomb = testing::RepeatLastJpegScan(progressive, 3000);
  EXPECT_EQ(JpegScanCount(bomb, 5000), 3006);
  EXPECT_EQ(JpegScanCount(bomb, 64), 65) << "counts no further than the limit + 1";
  // A comment segment full of FF DA bytes is one segment, not scans.
  std::string comment = "\xFF\xFE";
  comment += static_cast<char>(0);
  comment += static_cast<char>(2 + 40);
  for (int i = 0; i < 20; ++i) comment += "\xFF\xDA";
  std::string with_comment = progressive;
  with_comment.insert(2, comment);
  EXPECT_EQ(JpegScanCount(with_comment, 100), 6);
  EXPECT_LT(JpegScanCount(progressive.substr(0, progressive.size() / 2), 100), 6);  // cut short
}

TEST(ImageHeaderTest, RandomBytesNeverCrash) {
  uint32_t state = 12345;
  for (int trial = 0; trial < 2000; ++trial) {
    std::string d(trial % 64, '\0');
    for (char& c : d) {
      state = state * 1664525u + 1013904223u;
      c = static_cast<char>(state >> 24);
    }
    // Force a known magic half the time so the format parsers get exercised.
    if (trial % 3 == 0 && d.size() >= 3) d.replace(0, 3, "\xFF\xD8\xFF");
    if (trial % 3 == 1 && d.size() >= 12) {
      d.replace(0, 4, "RIFF");
      d.replace(8, 4, "WEBP");
    }
    EXPECT_GE(JpegScanCount(d, 8), 0);
    absl::StatusOr<ImageHeader> h = ParseImageHeader(d);
    if (h.ok()) {
      EXPECT_GT(h->width, 0);
      EXPECT_GT(h->height, 0);
    }
  }
}

}  // namespace
}  // namespace vismoe::server
