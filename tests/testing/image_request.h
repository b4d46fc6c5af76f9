// A one-image GenerateRequest with a generated 64x64 pattern (64 merged visual
// tokens on the tiny fixture): shared by the engine tests that need an image
// request without an image file.
#ifndef VISMOE_TESTS_TESTING_IMAGE_REQUEST_H_
#define VISMOE_TESTS_TESTING_IMAGE_REQUEST_H_

#include <cstdint>

#include "engine/api/request.h"

namespace vismoe::testing {

inline GenerateRequest PatternImageRequest(int max_new_tokens) {
  GenerateRequest r;
  r.images.resize(1);
  RgbImage& img = r.images[0];
  img.width = img.height = 64;
  for (int y = 0; y < 64; ++y) {
    for (int x = 0; x < 64; ++x) {
      img.pixels.push_back(static_cast<uint8_t>(4 * x));
      img.pixels.push_back(static_cast<uint8_t>(4 * y));
      img.pixels.push_back(static_cast<uint8_t>((x * y) & 255));
    }
  }
  ChatMessage m;
  m.role = "user";
  ContentPart image;
  image.kind = ContentPart::Kind::kImage;
  image.image_index = 0;
  ContentPart text;
  text.text = "Describe this image.";
  m.content = {image, text};
  r.messages = {m};
  r.sampling.max_new_tokens = max_new_tokens;
  return r;
}

}  // namespace vismoe::testing

#endif  // VISMOE_TESTS_TESTING_IMAGE_REQUEST_H_
