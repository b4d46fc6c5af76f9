// Test helpers: progressive JPEGs and the "scan bomb" built from one (the
// last scan repeated), as an outside probe sent the server.
#ifndef VISMOE_TESTS_SERVER_JPEG_TEST_UTIL_H_
#define VISMOE_TESTS_SERVER_JPEG_TEST_UTIL_H_

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace vismoe::testing {

// A progressive flat grey JPEG (libjpeg's default script: 6 scans, the last
// a few bytes long).
inline std::string ProgressiveGreyJpeg(int size) {
  cv::Mat grey(size, size, CV_8UC1, cv::Scalar::all(128));
  std::vector<uchar> buf;
  EXPECT_TRUE(cv::imencode(".jpg", grey, buf, {cv::IMWRITE_JPEG_PROGRESSIVE, 1}));
  return std::string(buf.begin(), buf.end());
}

// The JPEG with its last scan (SOS segment and entropy-coded data) written
// `extra` more times before the end-of-image marker.
inline std::string RepeatLastJpegScan(const std::string& jpeg, int extra) {
  const size_t last = jpeg.rfind("\xFF\xDA");
  const size_t end = jpeg.rfind("\xFF\xD9");
  EXPECT_TRUE(last != std::string::npos && end != std::string::npos && last < end);
  const std::string scan = jpeg.substr(last, end - last);
  std::string out = jpeg.substr(0, end);
  for (int i = 0; i < extra; ++i) out += scan;
  return out + jpeg.substr(end);
}

}  // namespace vismoe::testing

#endif  // VISMOE_TESTS_SERVER_JPEG_TEST_UTIL_H_
