#include "engine/policy/top_scores.h"

#include <algorithm>

namespace vismoe {

std::vector<std::pair<int, double>> TopScores(absl::Span<const double> scores, int count) {
  std::vector<std::pair<int, double>> out;
  if (count <= 0) return out;
  for (size_t e = 0; e < scores.size(); ++e) {
    if (scores[e] > 0) out.push_back({static_cast<int>(e), scores[e]});
  }
  // Stable: equal scores keep ascending index order.
  std::stable_sort(out.begin(), out.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  if (static_cast<int>(out.size()) > count) out.resize(count);
  return out;
}

}  // namespace vismoe
