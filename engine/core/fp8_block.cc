#include "engine/core/fp8_block.h"

#include <algorithm>
#include <cmath>

#include "engine/core/dtype.h"

namespace vismoe {

void QuantizeFp8Blocks(const float* w, int64_t out, int64_t in, QuantBlock b, uint8_t* q,
                       float* scale_inv) {
  const int64_t stride = CeilDiv(in, b.cols);
  for (int64_t ob = 0; ob < out; ob += b.rows) {
    const int64_t oe = std::min(out, ob + b.rows);
    for (int64_t ib = 0; ib < in; ib += b.cols) {
      const int64_t ie = std::min(in, ib + b.cols);
      float max_abs = 0;
      for (int64_t o = ob; o < oe; ++o) {
        for (int64_t i = ib; i < ie; ++i) max_abs = std::max(max_abs, std::fabs(w[o * in + i]));
      }
      const float scale = max_abs > 0 ? kE4m3Max / max_abs : 1.0f;
      scale_inv[(ob / b.rows) * stride + ib / b.cols] = 1.0f / scale;
      for (int64_t o = ob; o < oe; ++o) {
        for (int64_t i = ib; i < ie; ++i) q[o * in + i] = FloatToE4m3(w[o * in + i] * scale);
      }
    }
  }
}

}  // namespace vismoe
