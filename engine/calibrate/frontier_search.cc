#include "engine/calibrate/frontier_search.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"

namespace vismoe {

absl::StatusOr<FrontierSearchResult> FrontierSearch(int num_text, int num_visual, double rho,
                                                    const FrontierEvaluate& evaluate) {
  if (num_text < 1 || num_visual < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("frontier search: empty threshold grid (", num_text, " x ", num_visual, ")"));
  }
  if (!(rho > 0 && rho <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("frontier search: target skip rate must be in (0, 1], got ", rho));
  }
  FrontierSearchResult out;
  std::map<std::pair<int, int>, FrontierPoint> seen;
  auto at = [&](int i, int j) -> absl::StatusOr<FrontierPoint> {
    auto it = seen.find({i, j});
    if (it != seen.end()) return it->second;
    VISMOE_ASSIGN_OR_RETURN(FrontierPoint p, evaluate(i, j));
    p.i = i;
    p.j = j;
    ++out.evaluations;
    seen[{i, j}] = p;
    return p;
  };
  double reached = 0;
  int j = num_visual - 1;
  for (int i = 0; i < num_text; ++i) {
    VISMOE_ASSIGN_OR_RETURN(FrontierPoint p, at(i, j));
    reached = std::max(reached, p.skip_rate);
    if (p.skip_rate < rho) continue;  // even the largest j left is not enough at this i
    // j*(i): lower j while the target still holds.
    while (j > 0) {
      VISMOE_ASSIGN_OR_RETURN(FrontierPoint lower, at(i, j - 1));
      if (lower.skip_rate < rho) break;
      p = lower;
      --j;
    }
    out.frontier.push_back(p);
    const FrontierPoint& b = out.best;
    if (b.i < 0 || p.kl < b.kl || (p.kl == b.kl && p.skip_rate > b.skip_rate)) out.best = p;
  }
  if (out.frontier.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("frontier search: no threshold pair reaches the target skip rate ", rho,
                     "; the largest thresholds skip ", reached));
  }
  return out;
}

}  // namespace vismoe
