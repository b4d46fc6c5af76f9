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
  // Parsed dimensions are below 2^31 (PNG) or 2^24 (JPEG, WebP): no overflow.
  int64_t pixels() const { return width * height; }
};

// Parses the dimensions from the header: PNG IHDR, the JPEG SOFn segment, or
// the WebP VP8 / VP8L / VP8X chunk. InvalidArgument for unknown formats,
// truncated or malformed headers, zero dimensions, and PNG dimensions over
// 2^31 - 1.
absl::StatusOr<ImageHeader> ParseImageHeader(absl::string_view data);

// JPEG only. OK when the data has an end-of-image marker (FFD9) after the
// start of its first scan; InvalidArgument "truncated JPEG image: ..."
// otherwise. (libjpeg decodes a truncated file with only a warning, filling
// the missing rows with grey.) Data after the marker is allowed.
absl::Status CheckJpegComplete(absl::string_view data);

// JPEG only: the number of scans (SOS segments) in the data, counting no
// further than stop_after + 1. Each scan of a progressive JPEG is a full pass
// over the image's blocks in libjpeg, so the scan count times the pixel count
// bounds the decode work; a file that repeats a tiny scan thousands of times
// would otherwise take tens of seconds of CPU. Malformed data ends the count
// (the decoder reports it).
int JpegScanCount(absl::string_view data, int stop_after);

// JPEG only: the EXIF orientation (1..8, TIFF tag 0x0112 of IFD0 in the APP1
// "Exif" segment), or 1 when there is none or it is malformed.
int JpegExifOrientation(absl::string_view data);

}  // namespace vismoe::server

#endif  // VISMOE_SERVER_IMAGE_HEADER_H_
