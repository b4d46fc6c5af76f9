// Block quantisation to FP8 (e4m3) the way transformers' FineGrainedFP8
// quantizer writes checkpoints: per block of rows x cols of a weight
// [out, in], scale = 448 / max|w| (1 for an all-zero block), q = e4m3(w *
// scale) saturated at +-448, and the stored dequantisation factor
// weight_scale_inv = 1 / scale in fp32. Partial blocks at the edges take the
// maximum over the elements they hold.
// Thread safety: pure functions.
#ifndef VISMOE_ENGINE_CORE_FP8_BLOCK_H_
#define VISMOE_ENGINE_CORE_FP8_BLOCK_H_

#include <cstdint>

#include "engine/core/tensor.h"

namespace vismoe {

// w [out, in] fp32 -> q [out, in] e4m3 codes and scale_inv
// [ceil(out / b.rows), ceil(in / b.cols)].
void QuantizeFp8Blocks(const float* w, int64_t out, int64_t in, QuantBlock b, uint8_t* q,
                       float* scale_inv);

}  // namespace vismoe

#endif  // VISMOE_ENGINE_CORE_FP8_BLOCK_H_
