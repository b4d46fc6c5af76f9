// Trains the mlp-lookahead predictor (VisMMOE 3.3.2) on CPU: soft binary
// cross-entropy with logits against the Eq. 9 targets, Adam, mini-batches,
// BatchNorm in training mode (running statistics for inference), inverted
// dropout. Deterministic for a fixed seed (own mt19937_64 draws).
// Thread safety: a free function; no shared state.
#ifndef VISMOE_ENGINE_CALIBRATE_MLP_TRAINER_H_
#define VISMOE_ENGINE_CALIBRATE_MLP_TRAINER_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/policy/mlp_lookahead.h"

namespace vismoe {

struct LookaheadSample {
  std::vector<float> x;       // Eq. 7 features
  std::vector<float> target;  // Eq. 9, [num_experts]
};

struct MlpTrainOptions {
  int hidden1 = 64;
  int hidden2 = 32;  // bottleneck
  float dropout = 0.1f;
  int epochs = 60;
  int batch_size = 32;
  float learning_rate = 3e-3f;
  float weight_decay = 1e-4f;
  uint64_t seed = 0;
};

// InvalidArgument when there are fewer than 2 samples or their sizes differ.
// `final_loss` (optional) gets the mean training loss of the last epoch.
absl::StatusOr<MlpLookahead> TrainMlpLookahead(const std::vector<LookaheadSample>& samples,
                                               const MlpTrainOptions& options,
                                               float* final_loss = nullptr);

}  // namespace vismoe

#endif  // VISMOE_ENGINE_CALIBRATE_MLP_TRAINER_H_
