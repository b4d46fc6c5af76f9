#include "engine/policy/decayed_target.h"

#include <algorithm>

namespace vismoe {

std::vector<float> DecayedTarget(const std::vector<std::vector<int>>& activated, int layer,
                                 int window, float gamma, int num_experts) {
  std::vector<float> g(num_experts, 0.0f);
  float weight = 1.0f;  // gamma^(d-1)
  for (int d = 1; d <= window; ++d, weight *= gamma) {
    const int j = layer + d;
    if (j < 0 || j >= static_cast<int>(activated.size())) break;
    for (int e : activated[j]) {
      if (e >= 0 && e < num_experts) g[e] = std::max(g[e], weight);
    }
  }
  return g;
}

}  // namespace vismoe
