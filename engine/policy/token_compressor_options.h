// TokenCompressorOptions: the server's default token compression policy and a
// request's override of it (VisMMOE 3.2; engine/policy/token_compressor.h).
#ifndef VISMOE_ENGINE_POLICY_TOKEN_COMPRESSOR_OPTIONS_H_
#define VISMOE_ENGINE_POLICY_TOKEN_COMPRESSOR_OPTIONS_H_

#include <cstdint>
#include <string>

namespace vismoe {

struct TokenCompressorOptions {
  std::string kind = "none";  // none | random | saliency | affinity
  double beta = 0.5;          // keep ratio, in (0, 1]
  // Salient-core ratio of Algorithm 1, in [0, beta]. The paper calls it "a
  // small salient ratio" without a number; 0.1 (a fifth of the default keep
  // budget) is our choice.
  double alpha = 0.1;
  double lambda = 2.0;  // working-set weight of Eq. 4 (the paper's fixed value)
  uint64_t seed = 0;    // random kind only
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_POLICY_TOKEN_COMPRESSOR_OPTIONS_H_
