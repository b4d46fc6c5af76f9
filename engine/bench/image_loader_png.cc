// LoadImage for vismoe-bench-lite, the build without OpenCV that is carried to
// a GPU machine (tests/gpu/make_bundle.sh): PNG files through libpng's
// simplified API in their own 8-bit format (gray, gray+alpha, RGB, RGBA;
// palettes expanded), converted to RGB as the server's decoder converts them
// (rgb_convert.h). No gamma chunk is applied by OpenCV, so a PNG carrying one
// (gAMA/iCCP/sRGB other than sRGB) is refused rather than decoded
// differently; so are 16-bit PNGs (vismoe-bench refuses those too) and every
// other format (use vismoe-bench).
#include <png.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/bench/request_set.h"
#include "engine/model/rgb_convert.h"

namespace vismoe::bench {
namespace {

constexpr unsigned char kPngSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

// True when the PNG has a chunk that would make libpng convert colours.
bool HasColourChunk(const std::vector<char>& bytes) {
  size_t at = 8;
  while (at + 8 <= bytes.size()) {
    const auto* p = reinterpret_cast<const unsigned char*>(bytes.data() + at);
    const size_t len = (size_t{p[0]} << 24) | (size_t{p[1]} << 16) | (size_t{p[2]} << 8) | p[3];
    const std::string type(bytes.data() + at + 4, 4);
    if (type == "gAMA" || type == "iCCP" || type == "cHRM" || type == "sBIT") return true;
    if (type == "IDAT" || type == "IEND") return false;  // colour chunks come before IDAT
    at += 12 + len;
  }
  return false;
}

}  // namespace

absl::StatusOr<RgbImage> LoadImage(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open image file ", path));
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
  if (bytes.size() < 8 || std::memcmp(bytes.data(), kPngSignature, 8) != 0) {
    return absl::UnimplementedError(absl::StrCat("image file ", path,
                                                 " is not a PNG: vismoe-bench-lite reads PNG only; "
                                                 "use vismoe-bench, or --synthetic_images"));
  }
  if (HasColourChunk(bytes)) {
    return absl::UnimplementedError(
        absl::StrCat("image file ", path,
                     " has a gamma or colour-profile chunk, which libpng would apply and "
                     "the server's decoder does not; use vismoe-bench"));
  }
  png_image image;
  std::memset(&image, 0, sizeof(image));
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&image, bytes.data(), bytes.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot decode image file ", path, ": ", image.message));
  }
  if ((image.format & PNG_FORMAT_FLAG_LINEAR) != 0) {
    png_image_free(&image);
    return absl::InvalidArgumentError(absl::StrCat("image file ", path, " is not 8-bit"));
  }
  image.format &= ~static_cast<png_uint_32>(PNG_FORMAT_FLAG_COLORMAP);
  const int channels = static_cast<int>(PNG_IMAGE_SAMPLE_CHANNELS(image.format));
  std::vector<uint8_t> pixels(PNG_IMAGE_SIZE(image));
  if (!png_image_finish_read(&image, nullptr, pixels.data(), 0, nullptr)) {
    const std::string why = image.message;
    png_image_free(&image);
    return absl::InvalidArgumentError(absl::StrCat("cannot decode image file ", path, ": ", why));
  }
  auto rgb = ToRgb(pixels.data(), pixels.size(), static_cast<int>(image.width),
                   static_cast<int>(image.height), channels);
  if (!rgb.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", rgb.status().message()));
  }
  return rgb;
}

}  // namespace vismoe::bench
