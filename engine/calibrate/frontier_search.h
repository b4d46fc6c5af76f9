// FrontierSearch: MoDES's search for the two expert-skipping thresholds
// (paper 001, "Frontier Search"): minimise the KL divergence g(tau_t, tau_v)
// to the unskipped model subject to the skip rate f(tau_t, tau_v) >= rho, over
// ascending candidate grids tau_t[0..Dt) and tau_v[0..Dv).
//
// Both f and g grow with each threshold (the paper's monotonicity
// assumption). Then for every text index i only the smallest visual index
// j*(i) with f(i, j) >= rho can be optimal (any larger j costs at least as much
// KL), and j*(i) does not grow with i. Two pointers walk that frontier --
// i up from 0, j down from Dv-1 -- so f and g are evaluated at most at
// 2 Dt + Dv points (each i once at the current j and once where lowering j
// fails) instead of the brute force's Dt * Dv; the best frontier point is the
// answer (ties: the higher skip rate, then the smaller i).
//
// Thread safety: a pure function of its evaluator.
#ifndef VISMOE_ENGINE_CALIBRATE_FRONTIER_SEARCH_H_
#define VISMOE_ENGINE_CALIBRATE_FRONTIER_SEARCH_H_

#include <functional>
#include <vector>

#include "absl/status/statusor.h"

namespace vismoe {

struct FrontierPoint {
  int i = -1;            // text threshold index
  int j = -1;            // visual threshold index
  double skip_rate = 0;  // f
  double kl = 0;         // g
};

struct FrontierSearchResult {
  FrontierPoint best;
  std::vector<FrontierPoint> frontier;  // (i, j*(i)) for every i that reaches rho
  int evaluations = 0;                  // distinct (i, j) evaluated
};

// Evaluates f and g at grid point (i, j) (fills skip_rate and kl).
using FrontierEvaluate = std::function<absl::StatusOr<FrontierPoint>(int i, int j)>;

// InvalidArgument for empty grids or rho outside (0, 1]; FailedPrecondition
// (naming the largest skip rate reached) when no grid point reaches rho;
// otherwise the evaluator's first error or the search result.
absl::StatusOr<FrontierSearchResult> FrontierSearch(int num_text, int num_visual, double rho,
                                                    const FrontierEvaluate& evaluate);

}  // namespace vismoe

#endif  // VISMOE_ENGINE_CALIBRATE_FRONTIER_SEARCH_H_
