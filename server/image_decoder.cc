#include "server/image_decoder.h"

#include <atomic>
#include <exception>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/api/image.h"
#include "server/image_header.h"
#include "webp/decode.h"

namespace vismoe::server {
namespace {

// Turns `image` upright for EXIF orientation 1..8, as PIL's exif_transpose.
void ApplyExifOrientation(int orientation, cv::Mat* image) {
  switch (orientation) {
    case 2:  // mirrored
      cv::flip(*image, *image, 1);
      break;
    case 3:  // rotated 180
      cv::flip(*image, *image, -1);
      break;
    case 4:  // upside-down mirror
      cv::flip(*image, *image, 0);
      break;
    case 5:  // transpose
      cv::transpose(*image, *image);
      break;
    case 6:  // needs 90 degrees clockwise
      cv::rotate(*image, *image, cv::ROTATE_90_CLOCKWISE);
      break;
    case 7:  // transverse
      cv::transpose(*image, *image);
      cv::flip(*image, *image, -1);
      break;
    case 8:  // needs 90 degrees counter-clockwise
      cv::rotate(*image, *image, cv::ROTATE_90_COUNTERCLOCKWISE);
      break;
    default:
      break;
  }
}

// cv::imdecode picks the first decoder whose signature test passes, and its
// WebP decoder's test is WebPGetFeatures on the first 32 bytes. Data that
// starts "RIFF....WEBP" but fails that test goes on to OpenCV's other
// decoders, among them GDCM (DICOM) and GDAL, which it feeds from a temporary
// file: client bytes we accepted as WebP would reach those parsers. Run the
// same test first so that such data reaches libwebp or nothing.
absl::Status CheckWebpAcceptedByOpenCv(absl::string_view data) {
  constexpr size_t kOpenCvWebpSignatureBytes = 32;  // WEBP_HEADER_SIZE in grfmt_webp.cpp
  WebPBitstreamFeatures features;
  if (data.size() < kOpenCvWebpSignatureBytes ||
      WebPGetFeatures(reinterpret_cast<const uint8_t*>(data.data()), kOpenCvWebpSignatureBytes,
                      &features) != VP8_STATUS_OK) {
    return absl::InvalidArgumentError(
        "malformed WebP image: libwebp rejects the first 32 bytes (RIFF / VP8 / VP8L / VP8X "
        "headers)");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<ImageDecoder>> ImageDecoder::Create(const Options& options) {
  if (options.max_encoded_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_image_bytes must be positive, got ", options.max_encoded_bytes));
  }
  if (options.max_pixels <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_image_pixels must be positive, got ", options.max_pixels));
  }
  if (options.max_jpeg_scans < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_jpeg_scans must be >= 1, got ", options.max_jpeg_scans));
  }
  if (options.num_threads < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("image decode threads must be >= 1, got ", options.num_threads));
  }
  return std::unique_ptr<ImageDecoder>(new ImageDecoder(options));
}

ImageDecoder::ImageDecoder(const Options& options) : options_(options) {
  // ThreadPool counts the calling thread, so a pool of N gives N decoders.
  if (options_.num_threads > 1) pool_ = std::make_unique<ThreadPool>(options_.num_threads);
}

absl::Status ImageDecoder::CheckLimits(absl::string_view data) const {
  if (data.empty()) return absl::InvalidArgumentError("image data is empty");
  if (static_cast<int64_t>(data.size()) > options_.max_encoded_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("image is ", data.size(),
                                                   " bytes, over the limit of ",
                                                   options_.max_encoded_bytes, " bytes"));
  }
  absl::StatusOr<ImageHeader> header = ParseImageHeader(data);
  if (!header.ok()) return header.status();
  if (header->pixels() > options_.max_pixels) {
    return absl::InvalidArgumentError(absl::StrCat(
        ImageFormatName(header->format), " image is ", header->width, "x", header->height, " = ",
        header->pixels(), " pixels, over the limit of ", options_.max_pixels, " pixels"));
  }
  if (header->format == ImageFormat::kJpeg &&
      JpegScanCount(data, options_.max_jpeg_scans) > options_.max_jpeg_scans) {
    return absl::InvalidArgumentError(
        absl::StrCat("JPEG image has more than ", options_.max_jpeg_scans,
                     " scans (the server's max_jpeg_scans): each scan is a full decoding pass"));
  }
  return absl::OkStatus();
}

absl::StatusOr<RgbImage> ImageDecoder::Decode(absl::string_view data) const {
  absl::Status limits = CheckLimits(data);
  if (!limits.ok()) return limits;
  const ImageHeader header = *ParseImageHeader(data);
  const bool jpeg = header.format == ImageFormat::kJpeg;
  if (jpeg) {
    absl::Status complete = CheckJpegComplete(data);
    if (!complete.ok()) return complete;
  }
  if (header.format == ImageFormat::kWebp) {
    absl::Status accepted = CheckWebpAcceptedByOpenCv(data);
    if (!accepted.ok()) return accepted;
  }
  try {
    const cv::Mat encoded(1, static_cast<int>(data.size()), CV_8UC1,
                          const_cast<char*>(data.data()));
    // IMREAD_UNCHANGED keeps alpha so it can be composited onto white as
    // transformers' convert_to_rgb does (ToRgb). OpenCV does not apply EXIF
    // orientation with IMREAD_UNCHANGED; ApplyExifOrientation does, below.
    cv::Mat raw = cv::imdecode(encoded, cv::IMREAD_UNCHANGED | cv::IMREAD_IGNORE_ORIENTATION);
    if (raw.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot decode ", ImageFormatName(header.format), " image: corrupt or truncated data"));
    }
    if (raw.cols != header.width || raw.rows != header.height) {
      return absl::InvalidArgumentError(absl::StrCat(
          "malformed ", ImageFormatName(header.format), " image: header says ", header.width, "x",
          header.height, " but the data decodes to ", raw.cols, "x", raw.rows));
    }
    if (jpeg && options_.apply_exif_orientation) {
      ApplyExifOrientation(JpegExifOrientation(data), &raw);
    }
    if (raw.depth() == CV_16U) raw.convertTo(raw, CV_8U, 1.0 / 257.0);  // 16-bit PNG
    if (raw.depth() != CV_8U) {
      return absl::InvalidArgumentError(absl::StrCat("unsupported ", ImageFormatName(header.format),
                                                     " sample depth (OpenCV depth ", raw.depth(),
                                                     "); expected 8 or 16 bits"));
    }
    cv::Mat ordered = raw;  // OpenCV decodes BGR(A); ToRgb wants RGB(A)
    if (raw.channels() == 3) cv::cvtColor(raw, ordered, cv::COLOR_BGR2RGB);
    if (raw.channels() == 4) cv::cvtColor(raw, ordered, cv::COLOR_BGRA2RGBA);
    if (!ordered.isContinuous()) ordered = ordered.clone();
    return ToRgb(ordered.data, ordered.total() * ordered.elemSize(), ordered.cols, ordered.rows,
                 ordered.channels());
  } catch (const cv::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("cannot decode ", ImageFormatName(header.format),
                                                   " image: OpenCV error: ", e.what()));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot decode ", ImageFormatName(header.format), " image: ", e.what()));
  }
}

absl::StatusOr<std::vector<RgbImage>> ImageDecoder::DecodeAll(
    const std::vector<absl::string_view>& blobs,
    const std::function<absl::Status()>& cancel_status) {
  std::vector<absl::StatusOr<RgbImage>> results(blobs.size());
  std::atomic<bool> stopped{false};
  ParallelFor(pool_.get(), static_cast<int64_t>(blobs.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      if (stopped.load() || (cancel_status && !cancel_status().ok())) {
        stopped.store(true);
        results[i] = absl::CancelledError("not decoded");
        continue;
      }
      results[i] = Decode(blobs[i]);
    }
  });
  if (stopped.load()) {
    absl::Status why = cancel_status();
    return why.ok() ? absl::CancelledError("request cancelled while decoding images") : why;
  }
  std::vector<RgbImage> images;
  images.reserve(blobs.size());
  for (size_t i = 0; i < results.size(); ++i) {
    if (!results[i].ok()) {
      return absl::Status(results[i].status().code(),
                          absl::StrCat("image ", i, ": ", results[i].status().message()));
    }
    images.push_back(std::move(*results[i]));
  }
  return images;
}

}  // namespace vismoe::server
