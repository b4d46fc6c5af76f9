// Image format identification and header parsing (dimensions) for the three
// formats the server accepts: JPEG, PNG and WebP. Reading the header first
// lets the server reject a decompression bomb before any pixel is allocated.
//
// Thread safety: stateless free functions.
#ifndef VISMOE_SERVER_IMAGE_HEADER_H_
#define VISMOE_SERVER_IMAGE_HEADER_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace vismoe::server {

enum class ImageFormat { kUnknown, kJpeg, kPng, kWebp };
const char* ImageFormatName(ImageFormat format);

// Identifies the format from the magic bytes only.
ImageFormat SniffImageFormat(absl::string_view data);

struct ImageHeader {
  ImageFormat format = ImageFormat::kUnknown;
  int64_t width = 0;
  int64_t height = 0;
  int64_t pixels() const { return width * height; }
};

// Parses the dimensions from the header: PNG IHDR, the JPEG SOFn segment, or
// the WebP VP8 / VP8L / VP8X chunk. InvalidArgument for unknown formats,
// truncated or malformed headers, and zero dimensions.
absl::StatusOr<ImageHeader> ParseImageHeader(absl::string_view data);

}  // namespace vismoe::server

#endif  // VISMOE_SERVER_IMAGE_HEADER_H_
