// FrontierSearch (paper 001): on monotone synthetic f and g it returns the
// brute-force optimum over the whole grid while evaluating at most 2 Dt + Dv
// points (O(D), against the brute force's Dt * Dv);
// an unreachable target and bad arguments are errors; evaluator errors pass
// through.
#include "engine/calibrate/frontier_search.h"

#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vismoe {
namespace {

using ::testing::HasSubstr;

// f(i, j) = share skipped: text thresholds skip ft[i] of 30% text slots,
// visual ones fv[j] of 70% visual slots; g = KL, text skipping 5x as costly.
struct Synthetic {
  std::vector<double> ft = {0, 0.1, 0.3, 0.5, 0.7, 0.9};
  std::vector<double> fv = {0, 0.2, 0.4, 0.6, 0.8, 0.95, 1.0};
  FrontierPoint At(int i, int j) const {
    FrontierPoint p;
    p.skip_rate = 0.3 * ft[i] + 0.7 * fv[j];
    p.kl = 5.0 * ft[i] * ft[i] + 1.0 * fv[j] * fv[j];
    return p;
  }
  // Brute force: the smallest g with f >= rho (ties: larger f, smaller i).
  FrontierPoint Best(double rho) const {
    FrontierPoint best;
    for (int i = 0; i < static_cast<int>(ft.size()); ++i) {
      for (int j = 0; j < static_cast<int>(fv.size()); ++j) {
        FrontierPoint p = At(i, j);
        p.i = i;
        p.j = j;
        if (p.skip_rate < rho) continue;
        if (best.i < 0 || p.kl < best.kl || (p.kl == best.kl && p.skip_rate > best.skip_rate)) {
          best = p;
        }
      }
    }
    return best;
  }
};

TEST(FrontierSearchTest, FindsTheBruteForceOptimumWithLinearlyManyEvaluations) {
  const Synthetic s;
  const int dt = static_cast<int>(s.ft.size()), dv = static_cast<int>(s.fv.size());
  for (double rho : {0.05, 0.3, 0.5, 0.72, 0.9}) {
    auto r = FrontierSearch(
        dt, dv, rho, [&](int i, int j) -> absl::StatusOr<FrontierPoint> { return s.At(i, j); });
    ASSERT_TRUE(r.ok()) << r.status();
    const FrontierPoint want = s.Best(rho);
    EXPECT_EQ(r->best.i, want.i) << rho;
    EXPECT_EQ(r->best.j, want.j) << rho;
    EXPECT_DOUBLE_EQ(r->best.kl, want.kl);
    EXPECT_GE(r->best.skip_rate, rho);
    EXPECT_LE(r->evaluations, 2 * dt + dv);
    EXPECT_LT(r->evaluations, dt * dv);
    // The frontier: for each i, the smallest j reaching rho.
    for (const FrontierPoint& p : r->frontier) {
      EXPECT_GE(p.skip_rate, rho);
      if (p.j > 0) {
        EXPECT_LT(s.At(p.i, p.j - 1).skip_rate, rho) << p.i << "," << p.j;
      }
    }
  }
}

TEST(FrontierSearchTest, VisualFirstWhenVisualSkippingIsFree) {
  // A known answer: text skipping costs KL, visual skipping nothing; 70% of
  // the slots are visual, so rho = 0.6 is met with tau_text at 0.
  const Synthetic s;
  auto r = FrontierSearch(6, 7, 0.6, [&](int i, int j) -> absl::StatusOr<FrontierPoint> {
    FrontierPoint p = s.At(i, j);
    p.kl = s.ft[i];
    return p;
  });
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->best.i, 0);
  EXPECT_EQ(r->best.j, 5);  // 0.7 * 0.95 = 0.665 >= 0.6 > 0.7 * 0.8
  EXPECT_EQ(r->best.kl, 0.0);
}

TEST(FrontierSearchTest, UnreachableTargetAndBadArgumentsAreErrors) {
  const Synthetic s;
  auto eval = [&](int i, int j) -> absl::StatusOr<FrontierPoint> { return s.At(i, j); };
  auto r = FrontierSearch(6, 7, 0.99, eval);  // at most 0.3 * 0.9 + 0.7 = 0.97
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("skip 0.97"));
  EXPECT_EQ(FrontierSearch(0, 7, 0.5, eval).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FrontierSearch(6, 7, 0.0, eval).status().code(), absl::StatusCode::kInvalidArgument);
  auto failing = FrontierSearch(6, 7, 0.5, [](int, int) -> absl::StatusOr<FrontierPoint> {
    return absl::UnavailableError("model gone");
  });
  EXPECT_EQ(failing.status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace vismoe
