// Eq. 9 of VisMMOE: the distance-decayed supervision target of the lookahead
// predictor at MoE layer l over the global expert pool,
//   g[e] = max_{1 <= d <= W} gamma^(d-1) * 1[e in E_{l+d}],
// where E_j is the set of experts MoE layer j activated (layers past the last
// one contribute nothing).
#ifndef VISMOE_ENGINE_POLICY_DECAYED_TARGET_H_
#define VISMOE_ENGINE_POLICY_DECAYED_TARGET_H_

#include <vector>

namespace vismoe {

// `activated[j]`: expert ids of MoE layer j (out-of-range ids are ignored).
// REQUIRES: window >= 1, 0 < gamma <= 1.
std::vector<float> DecayedTarget(const std::vector<std::vector<int>>& activated, int layer,
                                 int window, float gamma, int num_experts);

}  // namespace vismoe

#endif  // VISMOE_ENGINE_POLICY_DECAYED_TARGET_H_
