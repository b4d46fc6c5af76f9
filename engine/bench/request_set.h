// The request set of a vismoe-bench run: from a JSONL file, one request per
// line,
//   {"prompt": "...", "max_new_tokens": N, "images": ["a.jpg", ...], "temperature": T, "seed": S}
// (all but the prompt optional; greedy by default)
// with image paths relative to the JSONL file's directory (absolute ones as
// given), or the single --prompt / --image request. Image files are read as
// raw bytes and decoded here (OpenCV, converted to RGB the way the server's
// decoder and transformers do), so a run measures the engine, not decoding.
// Thread safety: plain values and free functions.
#ifndef VISMOE_ENGINE_BENCH_REQUEST_SET_H_
#define VISMOE_ENGINE_BENCH_REQUEST_SET_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/api/request.h"

namespace vismoe::bench {

struct BenchRequest {
  std::string prompt;
  int max_new_tokens = 32;
  float temperature = 0.0f;  // 0 = greedy
  uint64_t seed = 0;
  std::vector<std::string> image_paths;  // resolved paths, for the report
  std::vector<RgbImage> images;          // decoded, same order

  // One user message: the images first (image_index 0..n-1), then the text,
  // the order Qwen3-VL's chat examples use.
  GenerateRequest ToGenerateRequest() const;
};

// Reads and decodes one image file. NotFound / InvalidArgument naming the path.
absl::StatusOr<RgbImage> LoadImage(const std::string& path);

// Parses `path`. Every problem is InvalidArgument or NotFound with a message
// that starts "<path>:<line>: " (a bad line, a missing or undecodable image).
absl::StatusOr<std::vector<BenchRequest>> LoadRequestSet(const std::string& path,
                                                         int default_max_new_tokens);

// A deterministic patterned size x size RGB image (the index varies it):
// vision-tower work of a real image without an image file.
RgbImage SyntheticImage(int size, int index);

// The single-prompt request: `synthetic_images` synthetic images first, then
// the image file `image_path` (may be empty).
absl::StatusOr<BenchRequest> SingleRequest(const std::string& prompt, const std::string& image_path,
                                           int synthetic_images, int synthetic_image_size,
                                           int max_new_tokens);

}  // namespace vismoe::bench

#endif  // VISMOE_ENGINE_BENCH_REQUEST_SET_H_
