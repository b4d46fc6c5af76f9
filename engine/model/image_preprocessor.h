// ImagePreprocessor: turns a decoded RGB8 image into the flattened patch rows
// the Qwen2-VL / Qwen3-VL vision tower consumes, reproducing transformers'
// Qwen2VLImageProcessor (the torchvision "fast" backend, default in v5):
// smart_resize to multiples of patch_size * merge_size within
// [min_pixels, max_pixels], antialiased bicubic resize on uint8, fused
// rescale + normalise in fp32, duplication to temporal_patch_size frames, and
// patchify in merge-block order (rows: bh, bw, mh, mw; columns: C, T, P, P).
//
// Thread safety: immutable after Create(); Process() may run concurrently.
#ifndef VISMOE_ENGINE_MODEL_IMAGE_PREPROCESSOR_H_
#define VISMOE_ENGINE_MODEL_IMAGE_PREPROCESSOR_H_

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/model/grid_thw.h"
#include "engine/model/rgb_image.h"

namespace vismoe {

// The fields of preprocessor_config.json the engine honours. Defaults are the
// Qwen2VLImageProcessor class defaults, used when a key is absent.
struct PreprocessorConfig {
  int patch_size = 14;
  int temporal_patch_size = 2;
  int merge_size = 2;
  int64_t min_pixels = 56 * 56;         // size.shortest_edge or min_pixels
  int64_t max_pixels = 28 * 28 * 1280;  // size.longest_edge or max_pixels
  bool do_resize = true;
  int resample = 3;  // PIL code; only 3 (bicubic) is supported
  bool do_rescale = true;
  double rescale_factor = 1.0 / 255.0;
  bool do_normalize = true;
  std::array<float, 3> image_mean = {0.48145466f, 0.4578275f, 0.40821073f};
  std::array<float, 3> image_std = {0.26862954f, 0.26130258f, 0.27577711f};

  // Parses the JSON text; InvalidArgument naming the field on a bad value.
  // Takes the fields at the top level (preprocessor_config.json) or nested
  // under "image_processor" (processor_config.json as transformers v5 saves).
  static absl::StatusOr<PreprocessorConfig> Parse(absl::string_view json_text);
  // Reads `<dir>/preprocessor_config.json`, else `<dir>/processor_config.json`.
  static absl::StatusOr<PreprocessorConfig> Load(const std::string& dir);
};

struct PreprocessOptions {
  // Inputs with more pixels than this (before resizing) are rejected, to bound
  // the memory a request can make the engine allocate.
  int64_t max_input_pixels = int64_t{64} * 1024 * 1024;
};

struct PreprocessedImage {
  GridThw grid;  // in patches
  int resized_height = 0;
  int resized_width = 0;
  std::vector<float> patches;  // [grid.num_patches(), patch_dim()]
};

// transformers' smart_resize: (height, width) rounded to multiples of
// `factor` with the pixel count in [min_pixels, max_pixels], aspect ratio kept
// as closely as possible. InvalidArgument when a side is < 1 or the aspect
// ratio exceeds 200.
absl::StatusOr<std::pair<int, int>> SmartResize(int height, int width, int factor,
                                                int64_t min_pixels, int64_t max_pixels);

class ImagePreprocessor {
 public:
  static absl::StatusOr<ImagePreprocessor> Create(const std::string& dir,
                                                  const PreprocessOptions& options = {});
  // REQUIRES: config passes the same checks as a loaded one (Create validates).
  static absl::StatusOr<ImagePreprocessor> FromConfig(const PreprocessorConfig& config,
                                                      const PreprocessOptions& options = {});

  const PreprocessorConfig& config() const { return config_; }
  // Columns of one patch row: 3 * temporal_patch_size * patch_size^2.
  int64_t patch_dim() const;

  // InvalidArgument for an empty image, a buffer whose size is not
  // width * height * 3, too many input pixels, or a bad aspect ratio.
  absl::StatusOr<PreprocessedImage> Process(const RgbImage& image) const;

 private:
  ImagePreprocessor(PreprocessorConfig config, PreprocessOptions options)
      : config_(std::move(config)), options_(options) {}

  PreprocessorConfig config_;
  PreprocessOptions options_;
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_MODEL_IMAGE_PREPROCESSOR_H_
