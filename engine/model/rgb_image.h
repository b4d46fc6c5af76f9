// RgbImage: a decoded image as the engine takes it (the server decodes files
// and protos into it).
#ifndef VISMOE_ENGINE_MODEL_RGB_IMAGE_H_
#define VISMOE_ENGINE_MODEL_RGB_IMAGE_H_

#include <cstdint>
#include <vector>

namespace vismoe {

// A decoded image: 8-bit RGB, row-major, height * width * 3 bytes; an alpha
// channel composited onto white (transformers' convert_to_rgb, what Qwen's
// processor sees).
struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;
  // Only for an image that had alpha: its colour as stored, alpha dropped
  // (PIL's convert("RGB"), what DeepSeek-VL2's loader sees); same layout.
  std::vector<uint8_t> alpha_dropped;
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_MODEL_RGB_IMAGE_H_
