// Helpers for tests that drive a real Prometheus: a client of its HTTP query
// API, and the PromQL sources checked in deploy/ (Grafana dashboard, alert rules).
#ifndef VISMOE_TESTS_TESTING_PROMETHEUS_API_H_
#define VISMOE_TESTS_TESTING_PROMETHEUS_API_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace vismoe::testing {

// The root of the source tree (deploy/ lives there).
std::string SourceDir();

// One sample of an instant-query result: its labels and value.
struct PromSample {
  nlohmann::json metric;  // label name -> value
  double value = 0;       // NaN for "NaN"
};

// GET /api/v1/query?query=... on 127.0.0.1:port. Fails when Prometheus
// answers an error (bad PromQL, unknown function). A scalar result comes back
// as one sample with no labels.
absl::StatusOr<std::vector<PromSample>> PromQuery(int port, const std::string& promql);

// GET /api/v1/<path> and return the "data" member of a successful answer.
absl::StatusOr<nlohmann::json> PromApi(int port, const std::string& path);

// Every "expr" string anywhere in a Grafana dashboard JSON, with Grafana's
// interval variables ($__rate_interval, $__interval, $__range and their ${}
// forms) replaced by `window`. Fails on unparsable JSON or a '$' variable it
// does not know (it would reach Prometheus as invalid PromQL anyway).
absl::StatusOr<std::vector<std::string>> DashboardExpressions(const std::string& dashboard_path,
                                                              absl::string_view window);

// Splits PromQL at top-level comparison operators (== != >= <= > <) and set
// operators (and, or, unless), dropping number literals: the operands whose
// results must exist for the whole expression to be meaningful.
std::vector<std::string> TopLevelOperands(absl::string_view promql);

// Reads a whole file; NotFound if it cannot be opened.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

}  // namespace vismoe::testing

#endif  // VISMOE_TESTS_TESTING_PROMETHEUS_API_H_
