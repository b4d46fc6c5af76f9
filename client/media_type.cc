#include "client/media_type.h"

#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace vismoe::client {

std::string SniffImageMediaType(absl::string_view data) {
  if (absl::StartsWith(data, absl::string_view("\x89PNG\r\n\x1a\n", 8))) return "image/png";
  if (absl::StartsWith(data, "\xFF\xD8\xFF")) return "image/jpeg";
  if (absl::StartsWith(data, "GIF87a") || absl::StartsWith(data, "GIF89a")) return "image/gif";
  if (data.size() >= 12 && absl::StartsWith(data, "RIFF") && data.substr(8, 4) == "WEBP") {
    return "image/webp";
  }
  if (data.size() >= 14 && absl::StartsWith(data, "BM")) return "image/bmp";
  return "";
}

absl::StatusOr<ImageInput> ReadImageFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open image file ", path));
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) return absl::NotFoundError(absl::StrCat("cannot read image file ", path));
  ImageInput image;
  image.source = path;
  image.bytes = std::move(buf).str();
  if (image.bytes.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("image file ", path, " is empty"));
  }
  image.media_type = SniffImageMediaType(image.bytes);
  if (image.media_type.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "image file ", path, " is not a JPEG, PNG or WebP image (unknown magic bytes)"));
  }
  if (image.media_type != "image/png" && image.media_type != "image/jpeg" &&
      image.media_type != "image/webp") {
    return absl::InvalidArgumentError(absl::StrCat("image file ", path, " is ", image.media_type,
                                                   "; the server accepts JPEG, PNG or WebP"));
  }
  return image;
}

}  // namespace vismoe::client
