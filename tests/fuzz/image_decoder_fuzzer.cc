// Fuzzes the image decoding path (server/image_decoder.h): encoded bytes ->
// header limits -> OpenCV decode -> EXIF orientation -> RGB, with the
// server's default limits (ImageDecoder::Options), on the calling thread.
// Besides sanitizer reports it flags input that cv::imdecode handed to a
// decoder other than libjpeg / libpng / libwebp: those read a temporary file
// (OPENCV_TEMP_PATH), which changes the mtime of the directory set here.
#include <stdlib.h>
#include <sys/stat.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "server/image_decoder.h"
#include "server/image_header.h"

namespace vismoe::server {
namespace {

const ImageDecoder& Decoder() {
  static const ImageDecoder* const decoder = [] {
    ImageDecoder::Options options;  // the server's defaults
    options.num_threads = 1;        // Decode() runs on the caller anyway
    return ImageDecoder::Create(options).value().release();
  }();
  return *decoder;
}

// OpenCV's temporary files go here; its mtime changes when one is made.
const std::string& TempDir() {
  static const std::string* const dir = [] {
    char tmpl[] = "/tmp/vismoe_decoder_fuzz.XXXXXX";
    if (mkdtemp(tmpl) == nullptr) std::abort();
    setenv("OPENCV_TEMP_PATH", tmpl, 1);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(TempDir(), ec);
    });
    return new std::string(tmpl);
  }();
  return *dir;
}

timespec TempDirMtime() {
  struct stat st;
  if (stat(TempDir().c_str(), &st) != 0) std::abort();
  return st.st_mtim;
}

void Fuzz(absl::string_view data) {
  const timespec before = TempDirMtime();
  absl::StatusOr<RgbImage> image = Decoder().Decode(data);
  const timespec after = TempDirMtime();
  if (before.tv_sec != after.tv_sec || before.tv_nsec != after.tv_nsec) {
    std::fprintf(stderr, "image bytes reached an OpenCV decoder that reads a temporary file\n");
    std::abort();
  }
  if (!image.ok()) return;
  // A decoded image obeys the limit and its buffer matches its size.
  const ImageHeader header = ParseImageHeader(data).value();
  const int64_t pixels = int64_t{image->width} * image->height;
  if (pixels != header.pixels() || pixels > Decoder().options().max_pixels ||
      image->pixels.size() != static_cast<size_t>(pixels) * 3) {
    std::abort();
  }
}

}  // namespace
}  // namespace vismoe::server

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  vismoe::server::TempDir();  // before OpenCV reads OPENCV_TEMP_PATH
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  vismoe::server::Fuzz(absl::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
