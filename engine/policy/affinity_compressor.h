// AffinityCompressor: VisMMOE Algorithm 1 (Eq. 1-5).
//   s~ = min-max normalised saliency;  K_core = floor(alpha N),
//   K_keep = max(1, floor(beta N));  I_core = TopK(s~, K_core)           (1)
//   E_target = union over j in I_core of E_j (the (layer, expert) pairs token j
//   activated in the pinned prefix);
//   Delta_i = |E_i \ E_target| / |E_i|                                   (2, 3)
//   p_i = s~_i - lambda Delta_i                                          (4)
//   I_keep = I_core u TopK({p_i : i not in I_core}, K_keep - K_core)     (5)
// A token with no active experts has Delta = 0. K_core is clamped to K_keep.
// Thread safety: immutable; Select() is reentrant.
#ifndef VISMOE_ENGINE_POLICY_AFFINITY_COMPRESSOR_H_
#define VISMOE_ENGINE_POLICY_AFFINITY_COMPRESSOR_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/policy/token_compressor.h"

namespace vismoe {

// The intermediate quantities of Algorithm 1, for tests and diagnostics.
struct AffinityScores {
  std::vector<float> normalized;  // s~ [N]
  std::vector<int64_t> core;      // I_core, rank order
  std::vector<float> delta;       // Delta_i [N] (0 for core tokens)
  std::vector<float> score;       // p_i [N] (unused for core tokens)
  std::vector<int64_t> kept;      // I_keep, ascending
};

// Runs Algorithm 1. InvalidArgument when the saliency or expert rows do not
// have N entries.
absl::StatusOr<AffinityScores> ScoreAffinity(const CompressionInput& in, double alpha, double beta,
                                             double lambda);

class AffinityCompressor final : public TokenCompressor {
 public:
  // REQUIRES: 0 <= alpha <= beta <= 1, beta > 0.
  AffinityCompressor(double alpha, double beta, double lambda)
      : alpha_(alpha), beta_(beta), lambda_(lambda) {}
  const char* name() const override { return "affinity"; }
  bool needs_routing() const override { return true; }
  absl::StatusOr<std::vector<int64_t>> Select(const CompressionInput& in) const override;

 private:
  double alpha_, beta_, lambda_;
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_POLICY_AFFINITY_COMPRESSOR_H_
