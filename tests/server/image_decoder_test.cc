#include "server/image_decoder.h"

#include <atomic>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/image_header.h"
#include "tests/server/jpeg_test_util.h"

namespace vismoe::server {
namespace {

using ::testing::HasSubstr;

std::string EncodeMat(const std::string& ext, const cv::Mat& img) {
  std::vector<uchar> buf;
  EXPECT_TRUE(cv::imencode(ext, img, buf));
  return std::string(buf.begin(), buf.end());
}

std::unique_ptr<ImageDecoder> MakeDecoder(int64_t max_bytes = 1 << 20, int64_t max_pixels = 1 << 20,
                                          int threads = 2) {
  absl::StatusOr<std::unique_ptr<ImageDecoder>> d =
      ImageDecoder::Create({max_bytes, max_pixels, threads});
  EXPECT_TRUE(d.ok()) << d.status();
  return std::move(*d);
}

TEST(ImageDecoderTest, CreateRejectsBadOptions) {
  EXPECT_FALSE(ImageDecoder::Create({0, 10, 1}).ok());
  EXPECT_FALSE(ImageDecoder::Create({10, 0, 1}).ok());
  EXPECT_FALSE(ImageDecoder::Create({10, 10, 0}).ok());
}

TEST(ImageDecoderTest, DecodesColorPngToRgb) {
  cv::Mat bgr(2, 3, CV_8UC3);
  for (int y = 0; y < 2; ++y) {
    for (int x = 0; x < 3; ++x) bgr.at<cv::Vec3b>(y, x) = cv::Vec3b(10 * x, 50 + y, 200);  // B,G,R
  }
  auto decoder = MakeDecoder();
  absl::StatusOr<RgbImage> img = decoder->Decode(EncodeMat(".png", bgr));
  ASSERT_TRUE(img.ok()) << img.status();
  EXPECT_EQ(img->width, 3);
  EXPECT_EQ(img->height, 2);
  ASSERT_EQ(img->pixels.size(), 18u);
  // Pixel (y=1, x=2): R=200, G=51, B=20.
  const uint8_t* p = &img->pixels[(1 * 3 + 2) * 3];
  EXPECT_EQ(p[0], 200);
  EXPECT_EQ(p[1], 51);
  EXPECT_EQ(p[2], 20);
}

TEST(ImageDecoderTest, GrayscaleBecomesThreeEqualChannels) {
  cv::Mat gray(4, 5, CV_8UC1, cv::Scalar(123));
  absl::StatusOr<RgbImage> img = MakeDecoder()->Decode(EncodeMat(".png", gray));
  ASSERT_TRUE(img.ok()) << img.status();
  ASSERT_EQ(img->pixels.size(), 4u * 5 * 3);
  for (uint8_t v : img->pixels) EXPECT_EQ(v, 123);
}

TEST(ImageDecoderTest, AlphaIsCompositedOntoWhite) {
  // As transformers' convert_to_rgb: transparent pixels become white, partly
  // transparent ones are blended with Pillow's arithmetic.
  cv::Mat bgra(3, 3, CV_8UC4, cv::Scalar(30, 60, 90, 0));  // fully transparent
  bgra.at<cv::Vec4b>(0, 1) = cv::Vec4b(0, 0, 0, 128);      // half-transparent black
  bgra.at<cv::Vec4b>(0, 2) = cv::Vec4b(30, 60, 90, 255);   // opaque
  absl::StatusOr<RgbImage> img = MakeDecoder()->Decode(EncodeMat(".png", bgra));
  ASSERT_TRUE(img.ok()) << img.status();
  ASSERT_EQ(img->pixels.size(), 27u);
  EXPECT_EQ(img->pixels[0], 255);
  EXPECT_EQ(img->pixels[1], 255);
  EXPECT_EQ(img->pixels[2], 255);
  EXPECT_EQ(img->pixels[3], 127);
  EXPECT_EQ(img->pixels[6], 90);  // R
  EXPECT_EQ(img->pixels[7], 60);  // G
  EXPECT_EQ(img->pixels[8], 30);  // B
}

TEST(ImageDecoderTest, SixteenBitPngIsScaledTo8Bit) {
  cv::Mat deep(2, 2, CV_16UC3, cv::Scalar(0, 257 * 100, 65535));
  absl::StatusOr<RgbImage> img = MakeDecoder()->Decode(EncodeMat(".png", deep));
  ASSERT_TRUE(img.ok()) << img.status();
  EXPECT_EQ(img->pixels[0], 255);
  EXPECT_EQ(img->pixels[1], 100);
  EXPECT_EQ(img->pixels[2], 0);
}

TEST(ImageDecoderTest, DecodesJpegAndWebp) {
  cv::Mat bgr(16, 24, CV_8UC3, cv::Scalar(0, 0, 255));  // pure red
  for (const char* ext : {".jpg", ".webp"}) {
    absl::StatusOr<RgbImage> img = MakeDecoder()->Decode(EncodeMat(ext, bgr));
    ASSERT_TRUE(img.ok()) << ext << ": " << img.status();
    EXPECT_EQ(img->width, 24);
    EXPECT_EQ(img->height, 16);
    EXPECT_GT(img->pixels[0], 200) << ext;  // R channel first
    EXPECT_LT(img->pixels[2], 60) << ext;
  }
}

TEST(ImageDecoderTest, PngBombRejectedFromHeader) {
  std::string png = EncodeMat(".png", cv::Mat(4, 4, CV_8UC3, cv::Scalar::all(1)));
  // Forge IHDR to 50000 x 50000 (2.5 gigapixels); the CRC is now wrong too,
  // but the pixel limit must trip before any decoding is attempted.
  const char forged[8] = {0, 0, static_cast<char>(0xC3), 0x50, 0, 0, static_cast<char>(0xC3), 0x50};
  png.replace(16, 8, forged, 8);
  absl::StatusOr<RgbImage> img = MakeDecoder()->Decode(png);
  ASSERT_FALSE(img.ok());
  EXPECT_EQ(img.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(img.status().message()), HasSubstr("50000x50000"));
  EXPECT_THAT(std::string(img.status().message()), HasSubstr("over the limit"));
}

// Found by tests/fuzz/image_decoder_fuzzer: 0xFFFFFFFF x 0xFFFFFEB8 overflowed
// the pixel count to a negative number, which passed the pixel limit.
TEST(ImageDecoderTest, PngDimensionsOverflowingThePixelCountAreRejected) {
  std::string png = EncodeMat(".png", cv::Mat(4, 4, CV_8UC3, cv::Scalar::all(1)));
  png.replace(16, 8, std::string("\xFF\xFF\xFF\xFF\xFF\xFF\xFE\xB8", 8));
  const absl::Status s = MakeDecoder()->CheckLimits(png);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("malformed PNG image"));
}

// Found by tests/fuzz/image_decoder_fuzzer: a WebP header our parser accepts
// but libwebp rejects (here: VP8L version bits set) made cv::imdecode try its
// other decoders; with "DTED" at byte 140 it handed the bytes to GDAL through
// a temporary file, with "DICM" at byte 128 to GDCM. Now libwebp's verdict
// comes first.
TEST(ImageDecoderTest, WebpThatLibwebpRejectsNeverReachesOtherDecoders) {
  for (const auto& [offset, tag] : {std::pair<size_t, std::string>{140, "DTED"}, {128, "DICM"}}) {
    std::string webp("RIFF\x98\0\0\0WEBPVP8L\x8b\0\0\0\x2f", 21);
    webp += std::string("\x03\x40\x00\xe0", 4);  // 4x2, version 7 (libwebp wants 0)
    webp.resize(160, '\x13');
    webp.replace(offset, 4, tag);
    ASSERT_TRUE(ParseImageHeader(webp).ok()) << tag;
    absl::StatusOr<RgbImage> img = MakeDecoder()->Decode(webp);
    EXPECT_EQ(img.status().code(), absl::StatusCode::kInvalidArgument) << tag;
    EXPECT_THAT(std::string(img.status().message()), HasSubstr("libwebp rejects")) << tag;
  }
}

TEST(ImageDecoderTest, EncodedSizeLimit) {
  std::string png = EncodeMat(".png", cv::Mat(64, 64, CV_8UC3, cv::Scalar::all(9)));
  auto decoder = MakeDecoder(/*max_bytes=*/16);
  absl::Status s = decoder->CheckLimits(png);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("bytes, over the limit of 16 bytes"));
}

TEST(ImageDecoderTest, PixelLimitIsInclusive) {
  std::string png = EncodeMat(".png", cv::Mat(10, 10, CV_8UC3, cv::Scalar::all(9)));
  EXPECT_TRUE(MakeDecoder(1 << 20, 100)->Decode(png).ok());
  EXPECT_FALSE(MakeDecoder(1 << 20, 99)->Decode(png).ok());
}

TEST(ImageDecoderTest, TruncatedAndCorruptDataAreInvalidArgument) {
  cv::Mat noise(32, 32, CV_8UC3);
  cv::randu(noise, 0, 255);
  auto decoder = MakeDecoder();
  for (const char* ext : {".png", ".jpg", ".webp"}) {
    const std::string full = EncodeMat(ext, noise);
    const std::string cut = full.substr(0, full.size() / 2);
    absl::StatusOr<RgbImage> img = decoder->Decode(cut);
    // OpenCV's JPEG decoder may return a partially grey image for a cut
    // file; what matters is that nothing throws or crashes and errors are
    // InvalidArgument.
    if (!img.ok()) {
      EXPECT_EQ(img.status().code(), absl::StatusCode::kInvalidArgument) << ext;
    }
  }
  std::string png = EncodeMat(".png", noise);
  for (size_t i = 40; i < png.size(); i += 7) png[i] = static_cast<char>(png[i] ^ 0x5A);
  absl::StatusOr<RgbImage> img = decoder->Decode(png);
  ASSERT_FALSE(img.ok());
  EXPECT_EQ(img.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(img.status().message()), HasSubstr("PNG"));
  EXPECT_THAT(std::string(decoder->Decode("").status().message()), HasSubstr("empty"));
  EXPECT_THAT(std::string(decoder->Decode("random bytes here!").status().message()),
              HasSubstr("unsupported image format"));
}

// libjpeg decodes a cut JPEG with only a warning and grey rows; the decoder
// must reject it as it rejects a cut PNG. Data after the end marker is fine.
TEST(ImageDecoderTest, TruncatedJpegIsRejected) {
  cv::Mat noise(64, 48, CV_8UC3);
  cv::randu(noise, 0, 255);
  const std::string full = EncodeMat(".jpg", noise);
  auto decoder = MakeDecoder();
  ASSERT_TRUE(decoder->Decode(full).ok());
  EXPECT_TRUE(decoder->Decode(full + std::string(16, '\0')).ok());
  for (const size_t keep : {full.size() - 2, full.size() * 2 / 3, full.size() / 3}) {
    absl::StatusOr<RgbImage> img = decoder->Decode(full.substr(0, keep));
    ASSERT_FALSE(img.ok()) << keep << " of " << full.size() << " bytes";
    EXPECT_EQ(img.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(img.status().message()), HasSubstr("truncated JPEG"));
  }
}

// `jpeg` with an APP1 EXIF segment right after SOI whose IFD0 holds only the
// orientation tag, little- or big-endian TIFF.
std::string WithExifOrientation(const std::string& jpeg, int orientation, bool little_endian) {
  const auto u16 = [&](int v) {
    return little_endian ? std::string{char(v & 0xFF), char(v >> 8)}
                         : std::string{char(v >> 8), char(v & 0xFF)};
  };
  const auto u32 = [&](int v) {
    return little_endian ? u16(v & 0xFFFF) + u16(v >> 16) : u16(v >> 16) + u16(v & 0xFFFF);
  };
  std::string tiff = little_endian ? "II" : "MM";
  tiff += u16(42) + u32(8);                    // magic, IFD0 at offset 8
  tiff += u16(1);                              // one entry:
  tiff += u16(0x0112) + u16(3) + u32(1);       //   Orientation, SHORT, count 1
  tiff += u16(orientation) + u16(0) + u32(0);  //   value (padded); no next IFD
  const std::string payload = std::string("Exif\0\0", 6) + tiff;
  const int length = static_cast<int>(payload.size()) + 2;
  const std::string app1 =
      std::string{'\xFF', '\xE1', char(length >> 8), char(length & 0xFF)} + payload;
  return jpeg.substr(0, 2) + app1 + jpeg.substr(2);
}

// The pixel at (x, y) of `img`, RGB.
cv::Vec3b At(const RgbImage& img, int x, int y) {
  const uint8_t* p = &img.pixels[(static_cast<size_t>(y) * img.width + x) * 3];
  return {p[0], p[1], p[2]};
}

// A phone photo stored sideways with orientation 6 is turned upright, as
// transformers' load_image (PIL exif_transpose) does; the option turns it off.
// A progressive JPEG repeating its last scan thousands of times (a 200 KB
// file that took 42 s of CPU at 4096x4096) is refused from its scan count
// before decoding; one within the limit decodes.
TEST(ImageDecoderTest, JpegScanBombIsRefusedBeforeDecoding) {
  const std::string progressive = testing::ProgressiveGreyJpeg(256);
  ImageDecoder::Options options;
  options.max_jpeg_scans = 20;
  auto decoder = std::move(*ImageDecoder::Create(options));
  absl::StatusOr<RgbImage> ok = decoder->Decode(testing::RepeatLastJpegScan(progressive, 14));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->width, 256);
  const absl::Status bomb =
      decoder->Decode(testing::RepeatLastJpegScan(progressive, 3000)).status();
  EXPECT_EQ(bomb.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bomb.message()), HasSubstr("more than 20 scans"));
  EXPECT_THAT(std::string(bomb.message()), HasSubstr("max_jpeg_scans"));
  options.max_jpeg_scans = 0;
  EXPECT_FALSE(ImageDecoder::Create(options).ok());
}

TEST(ImageDecoderTest, AppliesExifOrientation) {
  // 40 wide, 24 high: left half red, right half blue (BGR for OpenCV).
  cv::Mat bgr(24, 40, CV_8UC3, cv::Scalar(0, 0, 255));
  bgr(cv::Rect(20, 0, 20, 24)).setTo(cv::Scalar(255, 0, 0));
  const std::string plain = EncodeMat(".jpg", bgr);
  auto decoder = MakeDecoder();
  for (const bool le : {true, false}) {
    absl::StatusOr<RgbImage> upright = decoder->Decode(WithExifOrientation(plain, 6, le));
    ASSERT_TRUE(upright.ok()) << upright.status();
    // Rotated 90 degrees clockwise: 24 wide, 40 high, red on top.
    EXPECT_EQ(upright->width, 24);
    EXPECT_EQ(upright->height, 40);
    EXPECT_GT(At(*upright, 12, 5)[0], 200);   // red
    EXPECT_GT(At(*upright, 12, 35)[2], 200);  // blue
    absl::StatusOr<RgbImage> mirrored = decoder->Decode(WithExifOrientation(plain, 2, le));
    ASSERT_TRUE(mirrored.ok());
    EXPECT_EQ(mirrored->width, 40);
    EXPECT_GT(At(*mirrored, 5, 12)[2], 200);  // blue now on the left
    absl::StatusOr<RgbImage> ccw = decoder->Decode(WithExifOrientation(plain, 8, le));
    ASSERT_TRUE(ccw.ok());
    EXPECT_EQ(ccw->height, 40);
    EXPECT_GT(At(*ccw, 12, 5)[2], 200);  // counter-clockwise: blue on top
  }
  ImageDecoder::Options off;
  off.apply_exif_orientation = false;
  auto raw_decoder = std::move(*ImageDecoder::Create(off));
  absl::StatusOr<RgbImage> raw = raw_decoder->Decode(WithExifOrientation(plain, 6, true));
  ASSERT_TRUE(raw.ok());
  EXPECT_EQ(raw->width, 40);
  EXPECT_EQ(raw->height, 24);
  EXPECT_GT(At(*raw, 5, 12)[0], 200);  // red still on the left
}

TEST(ImageDecoderTest, DecodeAllKeepsOrderAndReportsFirstError) {
  auto decoder = MakeDecoder(1 << 20, 1 << 20, 3);
  std::vector<std::string> blobs;
  for (int i = 1; i <= 5; ++i) {
    blobs.push_back(EncodeMat(".png", cv::Mat(i, 2 * i, CV_8UC3, cv::Scalar::all(i))));
  }
  std::vector<absl::string_view> views(blobs.begin(), blobs.end());
  absl::StatusOr<std::vector<RgbImage>> all = decoder->DecodeAll(views);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 5u);
  for (int i = 1; i <= 5; ++i) {
    EXPECT_EQ((*all)[i - 1].height, i);
    EXPECT_EQ((*all)[i - 1].width, 2 * i);
  }
  views[3] = "garbage";
  all = decoder->DecodeAll(views);
  ASSERT_FALSE(all.ok());
  EXPECT_THAT(std::string(all.status().message()), HasSubstr("image 3: "));
}

// A request cancelled while its images decode starts no further image and
// gets its cancellation back (#37, item 2): here the corrupt second image is
// never decoded, so its error cannot be the answer.
TEST(ImageDecoderTest, DecodeAllStopsWhenCancelled) {
  auto decoder = MakeDecoder(1 << 20, 1 << 20, 1);  // one thread: images in order
  const std::string png = EncodeMat(".png", cv::Mat(4, 4, CV_8UC3, cv::Scalar::all(9)));
  std::vector<absl::string_view> views = {png, "garbage", png};
  std::atomic<int> asked{0};
  auto cancel_after_first = [&]() -> absl::Status {
    return asked.fetch_add(1) == 0 ? absl::OkStatus()
                                   : absl::DeadlineExceededError("request deadline exceeded");
  };
  absl::StatusOr<std::vector<RgbImage>> all = decoder->DecodeAll(views, cancel_after_first);
  EXPECT_EQ(all.status().code(), absl::StatusCode::kDeadlineExceeded) << all.status();
  EXPECT_EQ(all.status().message(), "request deadline exceeded");
  // Without cancellation the same images report the corrupt one.
  all = decoder->DecodeAll(views, [] { return absl::OkStatus(); });
  EXPECT_THAT(std::string(all.status().message()), HasSubstr("image 1: "));
}

}  // namespace
}  // namespace vismoe::server
