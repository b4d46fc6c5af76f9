// Image media types recognised by their leading bytes, so the client labels
// what it sends without trusting file extensions.
#ifndef VISMOE_CLIENT_MEDIA_TYPE_H_
#define VISMOE_CLIENT_MEDIA_TYPE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace vismoe::client {

// "image/png", "image/jpeg", "image/gif", "image/webp" or "image/bmp" from the
// magic bytes of `data`; an empty string when none matches.
std::string SniffImageMediaType(absl::string_view data);

// An image file read into memory with its media type.
struct ImageInput {
  std::string source;  // path, or a label such as "synthetic:3"
  std::string bytes;
  std::string media_type;
};

// Reads `path` and sniffs its type. Errors name the path: NotFound when it
// cannot be read, InvalidArgument when empty or not JPEG, PNG or WebP (the
// formats the server accepts).
absl::StatusOr<ImageInput> ReadImageFile(const std::string& path);

}  // namespace vismoe::client

#endif  // VISMOE_CLIENT_MEDIA_TYPE_H_
