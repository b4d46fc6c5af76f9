// LoadImage for vismoe-bench: OpenCV decodes the file. (vismoe-bench-lite
// links image_loader_png.cc instead.)
#include <fstream>
#include <iterator>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/bench/request_set.h"
#include "engine/model/rgb_convert.h"
#include "opencv2/imgcodecs.hpp"
#include "opencv2/imgproc.hpp"

namespace vismoe::bench {

absl::StatusOr<RgbImage> LoadImage(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open image file ", path));
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
  if (bytes.empty()) return absl::InvalidArgumentError(absl::StrCat("empty image file ", path));
  // imdecode never throws for bad data (it returns an empty Mat).
  const cv::Mat encoded(1, static_cast<int>(bytes.size()), CV_8UC1,
                        const_cast<char*>(bytes.data()));
  cv::Mat raw = cv::imdecode(encoded, cv::IMREAD_UNCHANGED);
  if (raw.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot decode image file ", path));
  }
  if (raw.depth() != CV_8U) {
    return absl::InvalidArgumentError(absl::StrCat("image file ", path, " is not 8-bit"));
  }
  cv::Mat ordered = raw;  // OpenCV decodes BGR(A)
  if (raw.channels() == 3) cv::cvtColor(raw, ordered, cv::COLOR_BGR2RGB);
  if (raw.channels() == 4) cv::cvtColor(raw, ordered, cv::COLOR_BGRA2RGBA);
  if (!ordered.isContinuous()) ordered = ordered.clone();
  auto rgb = ToRgb(ordered.data, ordered.total() * ordered.elemSize(), ordered.cols, ordered.rows,
                   ordered.channels());
  if (!rgb.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", rgb.status().message()));
  }
  return rgb;
}

}  // namespace vismoe::bench
