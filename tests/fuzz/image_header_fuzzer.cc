// Fuzzes the image header parsers (server/image_header.h): format sniffing,
// the JPEG / PNG / WebP dimension parsers, the JPEG completeness check and the
// EXIF orientation reader and the scan counter, on arbitrary bytes as a client would send them.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "absl/strings/string_view.h"
#include "server/image_header.h"

namespace vismoe::server {
namespace {

void Fuzz(absl::string_view data) {
  const ImageFormat format = SniffImageFormat(data);
  absl::StatusOr<ImageHeader> header = ParseImageHeader(data);
  if (header.ok()) {
    // The decoder's limits trust these: a positive size of the sniffed format.
    if (header->format != format || header->width <= 0 || header->height <= 0) std::abort();
    (void)header->pixels();  // UBSan: the product must not overflow
  }
  if (format == ImageFormat::kJpeg) {
    (void)CheckJpegComplete(data);
    const int orientation = JpegExifOrientation(data);
    if (orientation < 1 || orientation > 8) std::abort();
    // Counts no further than the limit + 1.
    const int scans = JpegScanCount(data, 3);
    if (scans < 0 || scans > 4) std::abort();
  }
}

}  // namespace
}  // namespace vismoe::server

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  vismoe::server::Fuzz(absl::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
