#include "tests/testing/image_file.h"

#include "absl/strings/str_cat.h"
#include "engine/model/rgb_convert.h"
#include "opencv2/imgcodecs.hpp"
#include "opencv2/imgproc.hpp"

namespace vismoe::testing {

absl::StatusOr<RgbImage> LoadImageFile(const std::string& path) {
  cv::Mat raw = cv::imread(path, cv::IMREAD_UNCHANGED);
  if (raw.empty()) return absl::NotFoundError(absl::StrCat("cannot decode ", path));
  if (raw.depth() != CV_8U) return absl::InvalidArgumentError(absl::StrCat(path, ": not 8-bit"));
  cv::Mat ordered = raw;  // OpenCV decodes BGR(A)
  if (raw.channels() == 3) cv::cvtColor(raw, ordered, cv::COLOR_BGR2RGB);
  if (raw.channels() == 4) cv::cvtColor(raw, ordered, cv::COLOR_BGRA2RGBA);
  if (!ordered.isContinuous()) ordered = ordered.clone();
  return ToRgb(ordered.data, ordered.total() * ordered.elemSize(), ordered.cols, ordered.rows,
               ordered.channels());
}

}  // namespace vismoe::testing
