// Next-token selection on device, one row of logits per sequence.
// ArgmaxRows: greedy, lowest id on ties (= vismoe::Sampler::Argmax).
// SampleRows: the filtering of vismoe::Sampler (engine/runtime/sampler.h):
// logits / temperature -> keep the top_k largest (0 = all) -> softmax -> keep
// the smallest set of most probable tokens whose mass reaches top_p -> draw.
// Differences, by design: the draw uses a counter-based RNG (SplitMix64 of
// seed, step and row), not std::mt19937_64, so GPU and CPU tokens differ for
// the same seed while each is deterministic per (seed, step, row); and tokens
// tied with the k-th largest logit (or at the top_p boundary) are all kept.
#ifndef VISMOE_ENGINE_OPS_CUDA_SAMPLING_H_
#define VISMOE_ENGINE_OPS_CUDA_SAMPLING_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/ops/cuda/types.h"

namespace vismoe::cuda {

struct DeviceSamplingParams {
  float temperature = 1.0f;  // > 0 (use ArgmaxRows for greedy)
  int top_k = 0;             // 0 = off
  float top_p = 1.0f;        // (0, 1]
};

// out[r] = argmax logits[r, :] for r < n; logits fp32 [n, vocab].
absl::Status ArgmaxRows(const float* logits, int64_t n, int64_t vocab, int32_t* out,
                        StreamHandle stream);

// out[r] = a token drawn from row r. `seed` is per request, `step` the decode
// step (so successive steps draw fresh numbers).
// REQUIRES (else InvalidArgument): temperature > 0 and finite, top_k >= 0,
// top_p in (0, 1].
absl::Status SampleRows(const float* logits, int64_t n, int64_t vocab,
                        const DeviceSamplingParams& params, uint64_t seed, uint64_t step,
                        int32_t* out, StreamHandle stream);

// The uniform in [0, 1) that SampleRows draws for (seed, step, row); exposed
// for tests and for host-side replays.
float SamplingUniform(uint64_t seed, uint64_t step, uint64_t row);

}  // namespace vismoe::cuda

#endif  // VISMOE_ENGINE_OPS_CUDA_SAMPLING_H_
