#include "client/eval_report.h"

#include "absl/strings/str_format.h"

namespace vismoe::client {
namespace {

void Add(const EvalOutcome& o, CategoryScore* s) {
  ++s->total;
  if (!o.rpc_ok) {
    ++s->errors;
  } else if (o.match.correct) {
    ++s->correct;
  }
}

void Finish(CategoryScore* s) {
  s->accuracy = s->total > 0 ? static_cast<double>(s->correct) / static_cast<double>(s->total) : 0;
}

nlohmann::json ScoreToJson(const CategoryScore& s) {
  return nlohmann::json{
      {"total", s.total}, {"correct", s.correct}, {"errors", s.errors}, {"accuracy", s.accuracy}};
}

std::string Row(const std::string& name, const CategoryScore& s) {
  return absl::StrFormat("%-24s %7d %7d %7d %8.2f%%\n", name, s.total, s.correct, s.errors,
                         s.accuracy * 100);
}

}  // namespace

EvalReport BuildEvalReport(const std::vector<EvalOutcome>& outcomes) {
  EvalReport report;
  for (const EvalOutcome& o : outcomes) {
    Add(o, &report.categories[o.category]);
    Add(o, &report.overall);
  }
  for (auto& [name, score] : report.categories) Finish(&score);
  Finish(&report.overall);
  return report;
}

nlohmann::json EvalReportToJson(const EvalReport& report, const std::vector<EvalOutcome>& outcomes,
                                const nlohmann::json& config, bool include_items) {
  nlohmann::json categories = nlohmann::json::object();
  for (const auto& [name, score] : report.categories) categories[name] = ScoreToJson(score);
  nlohmann::json out{
      {"config", config}, {"overall", ScoreToJson(report.overall)}, {"categories", categories}};
  if (include_items) {
    nlohmann::json items = nlohmann::json::array();
    for (const EvalOutcome& o : outcomes) {
      nlohmann::json item{{"line", o.line},
                          {"category", o.category},
                          {"answer", o.answer},
                          {"prediction", o.prediction},
                          {"extracted", o.match.extracted},
                          {"match", MatchKindName(o.match.kind)},
                          {"correct", o.rpc_ok && o.match.correct}};
      if (!o.rpc_ok) item["error"] = o.error;
      items.push_back(std::move(item));
    }
    out["items"] = std::move(items);
  }
  return out;
}

std::string FormatEvalReport(const EvalReport& report) {
  std::string out = absl::StrFormat("%-24s %7s %7s %7s %9s\n", "category", "total", "correct",
                                    "errors", "accuracy");
  for (const auto& [name, score] : report.categories) out += Row(name, score);
  out += Row("overall", report.overall);
  return out;
}

}  // namespace vismoe::client
