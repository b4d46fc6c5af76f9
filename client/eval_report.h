// Scores of an accuracy run, per category and overall.
#ifndef VISMOE_CLIENT_EVAL_REPORT_H_
#define VISMOE_CLIENT_EVAL_REPORT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "client/answer_match.h"
#include "nlohmann/json.hpp"

namespace vismoe::client {

// The result of one evaluated item.
struct EvalOutcome {
  int line = 0;  // the item's line in the data set
  std::string category;
  std::string answer;      // reference
  bool rpc_ok = false;     // false: the request failed; counted as incorrect
  std::string error;       // the RPC error when !rpc_ok
  std::string prediction;  // the model's text
  MatchResult match;
};

struct CategoryScore {
  int64_t total = 0;
  int64_t correct = 0;
  int64_t errors = 0;   // failed requests (included in total, never correct)
  double accuracy = 0;  // correct / total; 0 when total == 0
};

struct EvalReport {
  std::map<std::string, CategoryScore> categories;
  CategoryScore overall;
};

EvalReport BuildEvalReport(const std::vector<EvalOutcome>& outcomes);

// {"config": config, "overall": {...}, "categories": {name: {...}},
//  "items": [...] (only when include_items)}.
nlohmann::json EvalReportToJson(const EvalReport& report, const std::vector<EvalOutcome>& outcomes,
                                const nlohmann::json& config, bool include_items);

// A table: one row per category, then the overall row.
std::string FormatEvalReport(const EvalReport& report);

}  // namespace vismoe::client

#endif  // VISMOE_CLIENT_EVAL_REPORT_H_
