// MlpLookahead: the compression-guided lookahead predictor of VisMMOE 3.3
// (Eq. 6-8), inference side. Input x_l = [h_r; h_h; h_v] (routing-history
// histogram, hidden state mean-pooled over the retained tokens, static visual
// summary); z = psi(W2 psi(W1 x)), y = Wo z with psi = BatchNorm-ReLU-Dropout
// (inference: BatchNorm with running statistics, dropout off). y scores the
// global expert pool; the runtime prefetches its top-B.
// The weights come from the calibration trainer (engine/calibrate/) and round
// trip through a safetensors profile (Save/Load).
// Thread safety: immutable after construction; Predict() is reentrant.
#ifndef VISMOE_ENGINE_POLICY_MLP_LOOKAHEAD_H_
#define VISMOE_ENGINE_POLICY_MLP_LOOKAHEAD_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/core/tensor.h"

namespace vismoe {

class SafetensorsFile;

// One Linear + BatchNorm block (the BN part is absent in the output layer).
struct MlpLayer {
  int in = 0, out = 0;
  std::vector<float> w;  // [out, in]
  std::vector<float> b;  // [out]
  // BatchNorm (empty for the output layer).
  std::vector<float> bn_gamma, bn_beta, bn_mean, bn_var;  // [out]
};

struct MlpLookaheadWeights {
  MlpLayer l1, l2, lo;  // x -> h1 -> h2 (bottleneck) -> num_experts
  float bn_eps = 1e-5f;
};

class MlpLookahead {
 public:
  explicit MlpLookahead(MlpLookaheadWeights w) : w_(std::move(w)) {}

  int input_dim() const { return w_.l1.in; }
  int num_experts() const { return w_.lo.out; }
  const MlpLookaheadWeights& weights() const { return w_; }

  // y [num_experts] for one feature vector. REQUIRES: x.size() == input_dim().
  std::vector<float> Predict(absl::Span<const float> x) const;

  // Writes the weights as F32 tensors "mlp.{l1,l2,lo}.{w,b,bn_gamma,...}"
  // with metadata kind=mlp-lookahead.
  absl::Status Save(const std::string& path) const;
  // InvalidArgument naming the tensor when a shape does not fit.
  static absl::StatusOr<MlpLookahead> Load(const std::string& path);

  // The tensors Save writes, as views into this object (valid while it lives);
  // lets a calibration profile store the MLP inside its own safetensors file.
  std::vector<std::pair<std::string, TensorView>> Tensors() const;
  // Reads the "mlp.*" tensors from an open file (as Tensors() names them).
  // InvalidArgument naming the file and tensor when a shape does not fit.
  static absl::StatusOr<MlpLookahead> FromFile(const SafetensorsFile& file, float bn_eps);

 private:
  MlpLookaheadWeights w_;
};

// The linear part of a layer: out[o] = b[o] + sum_i w[o, i] x[i].
void MlpLinear(const MlpLayer& l, const float* x, float* out);

}  // namespace vismoe

#endif  // VISMOE_ENGINE_POLICY_MLP_LOOKAHEAD_H_
