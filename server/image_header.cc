#include "server/image_header.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace vismoe::server {
namespace {

constexpr unsigned char kPngMagic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

uint32_t Byte(absl::string_view d, size_t i) { return static_cast<unsigned char>(d[i]); }
uint32_t Be16(absl::string_view d, size_t i) { return (Byte(d, i) << 8) | Byte(d, i + 1); }
uint32_t Be32(absl::string_view d, size_t i) { return (Be16(d, i) << 16) | Be16(d, i + 2); }
uint32_t Le16(absl::string_view d, size_t i) { return Byte(d, i) | (Byte(d, i + 1) << 8); }
uint32_t Le24(absl::string_view d, size_t i) { return Le16(d, i) | (Byte(d, i + 2) << 16); }
uint32_t Le32(absl::string_view d, size_t i) { return Le24(d, i) | (Byte(d, i + 3) << 24); }

absl::Status Truncated(const char* format, const char* what) {
  return absl::InvalidArgumentError(absl::StrCat("truncated ", format, " image: ", what));
}

absl::StatusOr<ImageHeader> ParsePng(absl::string_view d) {
  // Signature (8), IHDR length (4), "IHDR" (4), width (4), height (4).
  if (d.size() < 24) return Truncated("PNG", "header shorter than 24 bytes");
  if (d.substr(12, 4) != "IHDR") {
    return absl::InvalidArgumentError("malformed PNG image: first chunk is not IHDR");
  }
  ImageHeader h{ImageFormat::kPng, Be32(d, 16), Be32(d, 20)};
  // The PNG spec caps both at 2^31 - 1; larger values would also overflow
  // pixels() and slip past the decoder's pixel limit as a negative count.
  constexpr int64_t kMaxPngDimension = (int64_t{1} << 31) - 1;
  if (h.width > kMaxPngDimension || h.height > kMaxPngDimension) {
    return absl::InvalidArgumentError(absl::StrCat("malformed PNG image: ", h.width, "x", h.height,
                                                   " exceeds the format's 2^31-1 limit"));
  }
  return h;
}

bool IsJpegSof(uint32_t marker) {
  // SOF0..SOF15 except DHT (C4), JPG (C8) and DAC (CC).
  return marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC;
}

absl::StatusOr<ImageHeader> ParseJpeg(absl::string_view d) {
  size_t i = 2;  // after SOI
  while (true) {
    if (i >= d.size()) return Truncated("JPEG", "no SOF segment before end of data");
    if (Byte(d, i) != 0xFF) {
      return absl::InvalidArgumentError(
          absl::StrCat("malformed JPEG image: expected a marker at byte ", i));
    }
    while (i < d.size() && Byte(d, i) == 0xFF) ++i;  // fill bytes
    if (i >= d.size()) return Truncated("JPEG", "no SOF segment before end of data");
    const uint32_t marker = Byte(d, i++);
    if (marker == 0xD8 || marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) continue;
    if (marker == 0xD9 || marker == 0xDA) {
      return absl::InvalidArgumentError("malformed JPEG image: no SOF segment before scan data");
    }
    if (i + 2 > d.size()) return Truncated("JPEG", "segment length");
    const uint32_t length = Be16(d, i);
    if (length < 2) {
      return absl::InvalidArgumentError("malformed JPEG image: segment length below 2");
    }
    if (IsJpegSof(marker)) {
      // length (2), precision (1), height (2), width (2).
      if (i + 7 > d.size()) return Truncated("JPEG", "SOF segment");
      ImageHeader h{ImageFormat::kJpeg, Be16(d, i + 5), Be16(d, i + 3)};
      return h;
    }
    i += length;
  }
}

// Calls visit(marker, payload) for each marker segment before the first scan
// (payload without the length field) and returns the offset of the scan's
// header, or npos when the data ends or is malformed before a scan.
template <typename Visit>
size_t WalkJpegSegments(absl::string_view d, Visit visit) {
  size_t i = 2;  // after SOI
  while (i < d.size() && Byte(d, i) == 0xFF) {
    while (i < d.size() && Byte(d, i) == 0xFF) ++i;  // fill bytes
    if (i >= d.size()) return absl::string_view::npos;
    const uint32_t marker = Byte(d, i++);
    if (marker == 0xD8 || marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) continue;
    if (marker == 0xDA) return i;
    if (marker == 0xD9 || i + 2 > d.size() || Be16(d, i) < 2) return absl::string_view::npos;
    const uint32_t length = Be16(d, i);
    if (i + length > d.size()) return absl::string_view::npos;
    visit(marker, d.substr(i + 2, length - 2));
    i += length;
  }
  return absl::string_view::npos;
}

// Orientation tag of a TIFF structure ("II*\0" or "MM\0*"), or 1.
int TiffOrientation(absl::string_view t) {
  if (t.size() < 8 || (t.substr(0, 2) != "II" && t.substr(0, 2) != "MM")) return 1;
  const bool le = t[0] == 'I';
  const auto u16 = [&](size_t i) { return le ? Le16(t, i) : Be16(t, i); };
  const auto u32 = [&](size_t i) { return le ? Le32(t, i) : Be32(t, i); };
  if (u16(2) != 42) return 1;
  const size_t ifd = u32(4);
  if (ifd + 2 > t.size()) return 1;
  const size_t entries = u16(ifd);
  for (size_t e = 0; e < entries && ifd + 2 + 12 * (e + 1) <= t.size(); ++e) {
    const size_t at = ifd + 2 + 12 * e;
    if (u16(at) != 0x0112 || u16(at + 2) != 3) continue;  // Orientation, SHORT
    const uint32_t value = u16(at + 8);
    return value >= 1 && value <= 8 ? static_cast<int>(value) : 1;
  }
  return 1;
}

}  // namespace

absl::Status CheckJpegComplete(absl::string_view data) {
  const size_t scan = WalkJpegSegments(data, [](uint32_t, absl::string_view) {});
  if (scan == absl::string_view::npos) {
    return Truncated("JPEG", "the data ends before the first scan");
  }
  // In entropy-coded data 0xFF is always followed by 0x00 or RSTn, so FFD9
  // after the scan header can only be the end-of-image marker.
  if (data.find("\xFF\xD9", scan) == absl::string_view::npos) {
    return Truncated("JPEG", "no end-of-image marker (the file is cut short)");
  }
  return absl::OkStatus();
}

namespace {

bool IsStandaloneMarker(uint32_t marker) {
  return marker == 0xD8 || marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7);
}

// The offset of the first marker at or after i in entropy-coded data (0xFF
// followed by a byte that is not a stuffed 0x00, an RSTn or a fill 0xFF), or
// npos.
size_t NextMarker(absl::string_view d, size_t i) {
  while ((i = d.find('\xFF', i)) != absl::string_view::npos && i + 1 < d.size()) {
    const uint32_t next = Byte(d, i + 1);
    if (next != 0x00 && next != 0xFF && !(next >= 0xD0 && next <= 0xD7)) return i;
    ++i;
  }
  return absl::string_view::npos;
}

}  // namespace

int JpegScanCount(absl::string_view data, int stop_after) {
  int scans = 0;
  size_t i = 2;  // after SOI
  while (i < data.size() && Byte(data, i) == 0xFF && scans <= stop_after) {
    while (i < data.size() && Byte(data, i) == 0xFF) ++i;  // fill bytes
    if (i >= data.size()) break;
    const uint32_t marker = Byte(data, i++);
    if (IsStandaloneMarker(marker)) continue;
    if (marker == 0xD9 || i + 2 > data.size() || Be16(data, i) < 2) break;
    i += Be16(data, i);
    if (marker != 0xDA) continue;
    ++scans;
    i = NextMarker(data, i);  // past the scan's entropy-coded data
  }
  return scans;
}

int JpegExifOrientation(absl::string_view data) {
  int orientation = 1;
  WalkJpegSegments(data, [&](uint32_t marker, absl::string_view payload) {
    constexpr absl::string_view kExif("Exif\0\0", 6);
    if (marker == 0xE1 && payload.substr(0, 6) == kExif && orientation == 1) {
      orientation = TiffOrientation(payload.substr(6));
    }
  });
  return orientation;
}

namespace {

absl::StatusOr<ImageHeader> ParseWebp(absl::string_view d) {
  if (d.size() < 16) return Truncated("WebP", "RIFF header");
  const absl::string_view fourcc = d.substr(12, 4);
  ImageHeader h;
  h.format = ImageFormat::kWebp;
  if (fourcc == "VP8 ") {
    // Chunk header (8), frame tag (3), start code 9D 01 2A, 14-bit sizes.
    if (d.size() < 30) return Truncated("WebP", "VP8 frame header");
    if (Byte(d, 23) != 0x9D || Byte(d, 24) != 0x01 || Byte(d, 25) != 0x2A) {
      return absl::InvalidArgumentError("malformed WebP image: bad VP8 start code");
    }
    h.width = Le16(d, 26) & 0x3FFF;
    h.height = Le16(d, 28) & 0x3FFF;
  } else if (fourcc == "VP8L") {
    // Chunk header (8), signature 0x2F, then 14-bit (width-1), 14-bit (height-1).
    if (d.size() < 25) return Truncated("WebP", "VP8L header");
    if (Byte(d, 20) != 0x2F) {
      return absl::InvalidArgumentError("malformed WebP image: bad VP8L signature");
    }
    const uint32_t bits = Le32(d, 21);
    h.width = (bits & 0x3FFF) + 1;
    h.height = ((bits >> 14) & 0x3FFF) + 1;
  } else if (fourcc == "VP8X") {
    // Chunk header (8), flags (4), 24-bit (canvas width-1), 24-bit (height-1).
    if (d.size() < 30) return Truncated("WebP", "VP8X header");
    h.width = static_cast<int64_t>(Le24(d, 24)) + 1;
    h.height = static_cast<int64_t>(Le24(d, 27)) + 1;
  } else {
    return absl::InvalidArgumentError("malformed WebP image: unknown first chunk");
  }
  return h;
}

}  // namespace

const char* ImageFormatName(ImageFormat format) {
  switch (format) {
    case ImageFormat::kJpeg:
      return "JPEG";
    case ImageFormat::kPng:
      return "PNG";
    case ImageFormat::kWebp:
      return "WebP";
    case ImageFormat::kUnknown:
      break;
  }
  return "unknown";
}

ImageFormat SniffImageFormat(absl::string_view d) {
  if (d.size() >= 8 &&
      d.substr(0, 8) == absl::string_view(reinterpret_cast<const char*>(kPngMagic), 8)) {
    return ImageFormat::kPng;
  }
  if (d.size() >= 3 && Byte(d, 0) == 0xFF && Byte(d, 1) == 0xD8 && Byte(d, 2) == 0xFF) {
    return ImageFormat::kJpeg;
  }
  if (d.size() >= 12 && d.substr(0, 4) == "RIFF" && d.substr(8, 4) == "WEBP") {
    return ImageFormat::kWebp;
  }
  return ImageFormat::kUnknown;
}

absl::StatusOr<ImageHeader> ParseImageHeader(absl::string_view data) {
  absl::StatusOr<ImageHeader> header;
  switch (SniffImageFormat(data)) {
    case ImageFormat::kPng:
      header = ParsePng(data);
      break;
    case ImageFormat::kJpeg:
      header = ParseJpeg(data);
      break;
    case ImageFormat::kWebp:
      header = ParseWebp(data);
      break;
    case ImageFormat::kUnknown:
      return absl::InvalidArgumentError(
          "unsupported image format: only JPEG, PNG and WebP are accepted (magic bytes not "
          "recognised)");
  }
  if (!header.ok()) return header;
  if (header->width <= 0 || header->height <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("malformed ", ImageFormatName(header->format),
                                                   " image: zero width or height in header"));
  }
  return header;
}

}  // namespace vismoe::server
