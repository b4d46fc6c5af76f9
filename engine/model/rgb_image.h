// RgbImage: a decoded image as the engine takes it (the server decodes files
// and protos into it).
#ifndef VISMOE_ENGINE_MODEL_RGB_IMAGE_H_
#define VISMOE_ENGINE_MODEL_RGB_IMAGE_H_

#include <cstdint>
#include <vector>

namespace vismoe {

// A decoded image: 8-bit RGB, row-major, height * width * 3 bytes.
struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_MODEL_RGB_IMAGE_H_
