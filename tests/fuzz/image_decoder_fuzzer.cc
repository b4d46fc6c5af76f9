// Fuzzes the image decoding path (server/image_decoder.h): encoded bytes ->
// header limits -> OpenCV decode -> EXIF orientation -> RGB, with the
// server's default limits (ImageDecoder::Options), on the calling thread.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "absl/strings/string_view.h"
#include "server/image_decoder.h"
#include "server/image_header.h"

namespace vismoe::server {
namespace {

const ImageDecoder& Decoder() {
  static const ImageDecoder* const decoder = [] {
    ImageDecoder::Options options;  // the server's defaults
    options.num_threads = 1;        // Decode() runs on the caller anyway
    return ImageDecoder::Create(options).value().release();
  }();
  return *decoder;
}

void Fuzz(absl::string_view data) {
  absl::StatusOr<RgbImage> image = Decoder().Decode(data);
  if (!image.ok()) return;
  // A decoded image obeys the limit and its buffer matches its size.
  const ImageHeader header = ParseImageHeader(data).value();
  const int64_t pixels = int64_t{image->width} * image->height;
  if (pixels != header.pixels() || pixels > Decoder().options().max_pixels ||
      image->pixels.size() != static_cast<size_t>(pixels) * 3) {
    std::abort();
  }
}

}  // namespace
}  // namespace vismoe::server

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  vismoe::server::Fuzz(absl::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
