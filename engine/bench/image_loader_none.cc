// LoadImage for vismoe-bench-lite, the build without OpenCV that can be
// carried to a GPU machine (tests/gpu/make_bundle.sh): image files are refused
// with a message pointing at --synthetic_images.
#include "absl/strings/str_cat.h"
#include "engine/bench/request_set.h"

namespace vismoe::bench {

absl::StatusOr<RgbImage> LoadImage(const std::string& path) {
  return absl::UnimplementedError(absl::StrCat(
      "cannot read image file ", path,
      ": vismoe-bench-lite is built without OpenCV; use vismoe-bench, or --synthetic_images"));
}

}  // namespace vismoe::bench
