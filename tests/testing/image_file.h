// Loads a PNG/JPEG/WebP file into the RGB the engine takes, converting gray
// and alpha the way transformers' convert_to_rgb does (through ToRgb), so
// tests feed the engine what the server's decoder would.
#ifndef VISMOE_TESTS_TESTING_IMAGE_FILE_H_
#define VISMOE_TESTS_TESTING_IMAGE_FILE_H_

#include <string>

#include "absl/status/statusor.h"
#include "engine/api/request.h"

namespace vismoe::testing {

absl::StatusOr<RgbImage> LoadImageFile(const std::string& path);

}  // namespace vismoe::testing

#endif  // VISMOE_TESTS_TESTING_IMAGE_FILE_H_
