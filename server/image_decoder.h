// ImageDecoder: turns encoded JPEG / PNG / WebP bytes into 8-bit RGB images
// with OpenCV, under limits checked BEFORE decoding (encoded size, and the
// pixel count read from the header, a JPEG's scan count), on a bounded pool of worker threads.
// Truncated files are rejected (JPEG: no end-of-image marker), and so is
// WebP data libwebp rejects (OpenCV would try its other decoders on it, GDAL
// among them). A JPEG's EXIF orientation is applied, as transformers'
// load_image (exif_transpose) does, unless Options::apply_exif_orientation is
// false.
//
// Thread safety: Decode and DecodeAll may be called from several threads at
// once; at most `num_threads` images are decoded at the same time.
// Ownership: owns its thread pool. Not copyable.
#ifndef VISMOE_SERVER_IMAGE_DECODER_H_
#define VISMOE_SERVER_IMAGE_DECODER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/api/request.h"
#include "engine/core/thread_pool.h"

namespace vismoe::server {

class ImageDecoder {
 public:
  struct Options {
    int64_t max_encoded_bytes = 20 << 20;  // per image
    int64_t max_pixels = 4096LL * 4096;    // width * height from the header
    int num_threads = 2;                   // concurrent decodes (>= 1)
    bool apply_exif_orientation = true;    // rotate/flip JPEGs upright
    // Scans per JPEG: libjpeg makes a pass over every block per scan, so this
    // times max_pixels bounds the decode work (encoders write 1 to ~12).
    int max_jpeg_scans = 64;
  };

  static absl::StatusOr<std::unique_ptr<ImageDecoder>> Create(const Options& options);
  ImageDecoder(const ImageDecoder&) = delete;
  ImageDecoder& operator=(const ImageDecoder&) = delete;

  // Decodes one image on the calling thread. InvalidArgument names what was
  // wrong (format, size, pixel count, corrupt data).
  absl::StatusOr<RgbImage> Decode(absl::string_view data) const;

  // Decodes all images in parallel on the pool; the first error (in input
  // order) is returned, prefixed with "image <i>: ". `cancel_status`
  // (optional, called from the pool's threads) is asked before each image:
  // once it is not OK no further image starts and it is returned as is. One
  // image's decode is not interrupted: the limits above bound it (a 4096x4096
  // JPEG of 64 scans: ~0.4 s on a 2-core Zen 4).
  absl::StatusOr<std::vector<RgbImage>> DecodeAll(
      const std::vector<absl::string_view>& blobs,
      const std::function<absl::Status()>& cancel_status = {});

  // Cheap checks without decoding: size, header pixel and JPEG scan limits.
  absl::Status CheckLimits(absl::string_view data) const;

  const Options& options() const { return options_; }

 private:
  explicit ImageDecoder(const Options& options);

  Options options_;
  std::unique_ptr<ThreadPool> pool_;  // null when num_threads == 1
};

}  // namespace vismoe::server

#endif  // VISMOE_SERVER_IMAGE_DECODER_H_
