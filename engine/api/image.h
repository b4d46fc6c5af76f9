// Images in the public API: the decoded RgbImage a request carries, and ToRgb,
// the conversion a decoder must apply so pixels reach the model exactly as
// transformers' convert_to_rgb gives them (alpha composited onto white).
// Both are defined in engine/model, beside the image preprocessing.
#ifndef VISMOE_ENGINE_API_IMAGE_H_
#define VISMOE_ENGINE_API_IMAGE_H_

#include "engine/model/rgb_convert.h"  // IWYU pragma: export
#include "engine/model/rgb_image.h"    // IWYU pragma: export

#endif  // VISMOE_ENGINE_API_IMAGE_H_
