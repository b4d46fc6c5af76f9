// The routing-realistic mode of the synthetic weights (issue #32): after the
// random fill, ShapeForRealisticRouting rewrites a few tensors so that the
// model's OWN forward pass routes the way real MoE models do -- each token's
// experts partly its own and partly shared with its recent neighbours --
// instead of sending every token to nearly the same experts (what random
// weights at std 0.02 do). Nothing is replayed or overridden at run time: the
// routing comes from the same kernels as any checkpoint's.
//
// The construction (engine/model/synthetic_routing.md has the derivation):
//  - hidden dimension 0 is a constant "position channel" z = kZ in every
//    token's embedding (text embeddings, and the vision merger's bias for
//    visual tokens); nothing else reads it or writes it (column 0 of every
//    reading matrix and row 0 of every writing matrix are zero);
//  - q_proj and k_proj read only z, into one temporal RoPE frequency pair,
//    and q_norm / k_norm scale it, so that every attention head's score of
//    token t for token s is A cos(theta (t - s)): attention is a causal window
//    of about `window` tokens over the values, whatever the content -- the
//    smoothly drifting context of a real model's residual stream;
//  - o_proj's gain sets how much of that context each layer adds beside the
//    token's own embedding; matrices are rescaled to unit-variance outputs so
//    that a small-hidden variant of a shape routes like the full one.
// Thread safety: free functions over their arguments.
#ifndef VISMOE_ENGINE_MODEL_SYNTHETIC_ROUTING_H_
#define VISMOE_ENGINE_MODEL_SYNTHETIC_ROUTING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/core/thread_pool.h"
#include "engine/model/arch_spec.h"
#include "engine/model/model_config.h"

namespace vismoe {

// How synthetic weights route: kRandom (every tensor random, the original
// mode) or kRealistic (ShapeForRealisticRouting on top).
enum class SyntheticRouting { kRandom, kRealistic };

// "random" | "realistic"; InvalidArgument naming the value otherwise.
absl::StatusOr<SyntheticRouting> ParseSyntheticRouting(const std::string& name);
const char* SyntheticRoutingName(SyntheticRouting routing);

// The construction's knobs (defaults: the values matched to the published
// Qwen3-30B-A3B decode statistics; see synthetic_routing.md).
struct RealisticRoutingParams {
  double window = 16.0;        // attention's width in tokens (std of the causal Gaussian)
  double context_gain = 0.75;  // o_proj's output std, relative to a token embedding's
  double moe_gain = 0.5;       // each expert's output std, relative to a token embedding's
  double z = 1.0;              // the position channel, relative to a token embedding's norm
  double popularity = 0.7;     // std of each expert's fixed logit offset (the router reads z)
  double visual_gain = 8.0;    // the vision merger's output std, relative to a token embedding's
  double patch_position_gain = 50.0;  // multiplies the vision tower's position embeddings
};

// One tensor of the synthetic block: its spec and its bf16 storage.
struct SyntheticTensor {
  const TensorSpec* spec = nullptr;
  uint16_t* data = nullptr;
};

// Rewrites `tensors` (every tensor of ExpectedTensors(config), randomly
// filled at std kSyntheticStd) for realistic routing. Deterministic: depends
// on the tensors' current values and `params` only.
// InvalidArgument when the config has no temporal RoPE frequency to use or
// head_dim < 4.
// Tensors are shaped in parallel on `pool` (may be null).
absl::Status ShapeForRealisticRouting(const ModelConfig& config,
                                      const RealisticRoutingParams& params,
                                      const std::vector<SyntheticTensor>& tensors,
                                      ThreadPool* pool);

// A RoPE frequency pair of one position axis (0 token order, 1 image row,
// 2 image column: interleaved M-RoPE) whose angle per position step is
// closest to target_theta. InvalidArgument when the axis has none.
struct RopePair {
  int index = -1;
  double theta = 0;
};
absl::StatusOr<RopePair> PickRopePair(const TextConfig& text, int axis, double target_theta);

}  // namespace vismoe

#endif  // VISMOE_ENGINE_MODEL_SYNTHETIC_ROUTING_H_
