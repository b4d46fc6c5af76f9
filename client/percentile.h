// Order statistics for latency samples (TTFT, TPOT, end-to-end) in reports.
#ifndef VISMOE_CLIENT_PERCENTILE_H_
#define VISMOE_CLIENT_PERCENTILE_H_

#include <cstddef>
#include <vector>

#include "nlohmann/json.hpp"

namespace vismoe::client {

// The p-th percentile (p in [0, 100]) of `sorted`, interpolating linearly
// between the two closest ranks (numpy's default "linear" method), so
// Percentile({1,2,3,4}, 50) == 2.5. Returns 0 for an empty input.
// REQUIRES: `sorted` is in ascending order.
double PercentileOfSorted(const std::vector<double>& sorted, double p);

// Summary of a sample set; every field is 0 when count == 0.
struct Distribution {
  size_t count = 0;
  double mean = 0;
  double min = 0;
  double max = 0;
  double p50 = 0;
  double p90 = 0;
  double p99 = 0;
};

// Sorts a copy of `values` and summarizes it.
Distribution Summarize(std::vector<double> values);

// {"count", "mean", "min", "max", "p50", "p90", "p99"}.
nlohmann::json DistributionToJson(const Distribution& d);

}  // namespace vismoe::client

#endif  // VISMOE_CLIENT_PERCENTILE_H_
