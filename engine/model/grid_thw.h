// GridThw: the patch grid of one image (or video) after preprocessing, in
// patches (not merged tokens): t frames (temporal patches), h rows, w columns.
#ifndef VISMOE_ENGINE_MODEL_GRID_THW_H_
#define VISMOE_ENGINE_MODEL_GRID_THW_H_

#include <cstdint>

namespace vismoe {

struct GridThw {
  int64_t t = 0;
  int64_t h = 0;
  int64_t w = 0;

  int64_t num_patches() const { return t * h * w; }
  // Number of LLM tokens after the spatial merge (merge x merge patches each).
  int64_t num_merged(int merge) const { return t * (h / merge) * (w / merge); }
  bool operator==(const GridThw& o) const { return t == o.t && h == o.h && w == o.w; }
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_MODEL_GRID_THW_H_
