// TokenCompressor: picks which visual tokens of one image survive the pinned
// prefix (VisMMOE 3.2). Kinds (DESIGN.md "Policies"):
//   none      keeps every token;
//   random    floor(beta*N) tokens drawn uniformly without replacement from a
//             seeded generator (same seed + same N = same choice);
//   saliency  the floor(beta*N) tokens with the highest head-averaged vision
//             attention (VisionOutput::saliency);
//   affinity  Algorithm 1 (AffinityCompressor, affinity_compressor.h).
// Every kind except none keeps exactly max(1, floor(beta*N)) tokens: an image
// never vanishes entirely. Ties in a ranking go to the lower token index.
//
// Thread safety: Select() is const and reentrant for every kind.
#ifndef VISMOE_ENGINE_POLICY_TOKEN_COMPRESSOR_H_
#define VISMOE_ENGINE_POLICY_TOKEN_COMPRESSOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/policy/token_compressor_options.h"

namespace vismoe {


// The visual tokens of one image as the compressor sees them.
struct CompressionInput {
  int64_t num_tokens = 0;            // N
  absl::Span<const float> saliency;  // [N]; required by saliency and affinity
  // Affinity only: the experts each token activated in the pinned-prefix MoE
  // layers, [N, experts_per_token]. An expert is identified across layers
  // (e.g. slot * num_experts + expert), so the union over the prefix is a set
  // of (layer, expert) pairs. Duplicates within a row count once.
  absl::Span<const int> active_experts;
  int experts_per_token = 0;
};

class TokenCompressor {
 public:
  virtual ~TokenCompressor() = default;
  virtual const char* name() const = 0;
  // True when Select() reads CompressionInput::active_experts.
  virtual bool needs_routing() const { return false; }
  // Indices of the kept tokens, ascending. InvalidArgument when a field the
  // kind needs is missing or has the wrong size.
  virtual absl::StatusOr<std::vector<int64_t>> Select(const CompressionInput& in) const = 0;
};

// `options` with keep ratio `beta` and the salient-core ratio alpha clamped
// to it, so every beta in (0, 1] is valid for every kind (a keep ratio below
// the default alpha of 0.1 gives a core of the whole keep budget). The engine
// and server apply keep ratios this way.
TokenCompressorOptions WithKeepRatio(TokenCompressorOptions options, double beta);

// InvalidArgument for an unknown kind (the message lists the known ones) or
// an out-of-range ratio.
absl::StatusOr<std::unique_ptr<TokenCompressor>> MakeTokenCompressor(
    const TokenCompressorOptions& options);

// max(1, floor(beta * n)) for n >= 1, else 0.
int64_t KeepBudget(double ratio, int64_t n);

// Min-max normalisation to [0, 1] (Algorithm 1, line 3); all zeros when every
// value is equal.
std::vector<float> NormalizeUnit(absl::Span<const float> s);

// Indices of the k largest scores, ties to the lower index, in rank order.
std::vector<int64_t> TopKIndices(absl::Span<const float> scores, int64_t k);

}  // namespace vismoe

#endif  // VISMOE_ENGINE_POLICY_TOKEN_COMPRESSOR_H_
