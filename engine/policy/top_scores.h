// Ranking helper shared by the expert predictors: the (expert, score) list an
// ExpertPredictor::Predict returns.
// Thread safety: pure function.
#ifndef VISMOE_ENGINE_POLICY_TOP_SCORES_H_
#define VISMOE_ENGINE_POLICY_TOP_SCORES_H_

#include <utility>
#include <vector>

#include "absl/types/span.h"

namespace vismoe {

// Up to `count` (index, score) pairs with score > 0, highest score first, ties
// to the lower index.
std::vector<std::pair<int, double>> TopScores(absl::Span<const double> scores, int count);

}  // namespace vismoe

#endif  // VISMOE_ENGINE_POLICY_TOP_SCORES_H_
