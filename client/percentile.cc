#include "client/percentile.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace vismoe::client {

double PercentileOfSorted(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  p = std::clamp(p, 0.0, 100.0);
  const double rank = p / 100.0 * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = rank - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

Distribution Summarize(std::vector<double> values) {
  Distribution d;
  if (values.empty()) return d;
  std::sort(values.begin(), values.end());
  d.count = values.size();
  d.mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(d.count);
  d.min = values.front();
  d.max = values.back();
  d.p50 = PercentileOfSorted(values, 50);
  d.p90 = PercentileOfSorted(values, 90);
  d.p99 = PercentileOfSorted(values, 99);
  return d;
}

nlohmann::json DistributionToJson(const Distribution& d) {
  return nlohmann::json{{"count", d.count}, {"mean", d.mean}, {"min", d.min}, {"max", d.max},
                        {"p50", d.p50},     {"p90", d.p90},   {"p99", d.p99}};
}

}  // namespace vismoe::client
