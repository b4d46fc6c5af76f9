#include "engine/core/speculative_execution.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace vismoe {
namespace {

// Seconds of the pairs of rows [first, first + n) whose expert a marked slot
// of its row took.
double KeptSeconds(const SpeculationRecord& record, const RouterResult& routing, int64_t first,
                   int64_t n) {
  if (routing.speculative.empty()) return 0;
  double kept = 0;
  const int k = routing.top_k;
  for (int64_t t = first; t < first + n; ++t) {
    for (int j = 0; j < k; ++j) {
      if (!routing.IsSpeculative(t, j)) continue;
      const SpeculatedPair* p = record.Find(t, routing.experts[t * k + j]);
      if (p != nullptr) kept += p->seconds;
    }
  }
  return kept;
}

}  // namespace

const float* SpeculativeExecution::DefaultVector(int layer) const {
  if (default_vectors.empty() || layer < 0 || hidden_size <= 0) return nullptr;
  const size_t at = static_cast<size_t>(layer) * hidden_size;
  if (at + hidden_size > default_vectors.size()) return nullptr;
  return default_vectors.data() + at;
}

absl::Status ValidateSpeculativeExecution(const SpeculativeExecution& s, int num_layers,
                                          const char* what) {
  if (s.default_vectors.empty()) return absl::OkStatus();
  const size_t want = static_cast<size_t>(num_layers) * std::max(s.hidden_size, 0);
  if (s.hidden_size <= 0 || s.default_vectors.size() != want) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": default vectors have ",
                                                   s.default_vectors.size(), " values, expected ",
                                                   num_layers, " layers x hidden ", s.hidden_size));
  }
  return absl::OkStatus();
}

std::vector<SpeculationUnit> PlanSpeculation(const RouterResult& predicted,
                                             const ExpertAvailability& avail) {
  std::vector<SpeculationUnit> units;
  if (avail.all) return units;
  std::vector<int> unit_of(static_cast<size_t>(std::max(predicted.num_experts, 0)), -1);
  const int k = predicted.top_k;
  for (int64_t t = 0; t < predicted.n; ++t) {
    for (int j = 0; j < k; ++j) {
      const int e = predicted.experts[t * k + j];
      if (e < 0 || e >= predicted.num_experts || !avail.Available(e)) continue;
      if (unit_of[e] < 0) {
        unit_of[e] = static_cast<int>(units.size());
        units.push_back(SpeculationUnit{e, {}, 0});
      }
      SpeculationUnit& u = units[unit_of[e]];
      u.rows.push_back(t);
      u.weight += predicted.weights.empty() ? 0.0 : predicted.weights[t * k + j];
    }
  }
  std::sort(units.begin(), units.end(), [](const SpeculationUnit& a, const SpeculationUnit& b) {
    return a.weight != b.weight ? a.weight > b.weight : a.expert < b.expert;
  });
  return units;
}

const SpeculatedPair* SpeculationRecord::Find(int64_t row, int expert) const {
  auto it =
      std::lower_bound(pairs.begin(), pairs.end(), std::pair<int64_t, int>(row, expert),
                       [](const SpeculatedPair& p, const std::pair<int64_t, int>& key) {
                         return p.row != key.first ? p.row < key.first : p.expert < key.second;
                       });
  if (it == pairs.end() || it->row != row || it->expert != expert) return nullptr;
  return &*it;
}

void SpeculativeCounts::Add(const SpeculativeCounts& o) {
  executed += o.executed;
  kept += o.kept;
  discarded += o.discarded;
  compute_seconds += o.compute_seconds;
  kept_seconds += o.kept_seconds;
  saved_seconds += o.saved_seconds;
  bound_seconds += o.bound_seconds;
  wait_seconds += o.wait_seconds;
  overrun_seconds += o.overrun_seconds;
}

void MatchSpeculation(const SpeculationRecord& record, int64_t first, int64_t n,
                      RouterResult* routing, SpeculativeCounts* counts) {
  const int k = routing->top_k;
  SpeculativeCounts c;
  for (const SpeculatedPair& p : record.pairs) {
    if (p.row < first || p.row >= first + n) continue;
    ++c.executed;
    c.compute_seconds += p.seconds;
    bool kept = false;
    for (int j = 0; j < k && !kept; ++j) {
      if (routing->experts[p.row * k + j] != p.expert || routing->IsSkipped(p.row, j)) continue;
      if (routing->speculative.empty()) {
        routing->speculative.assign(static_cast<size_t>(routing->n) * k, 0);
      }
      routing->speculative[p.row * k + j] = 1;
      kept = true;
    }
    if (kept) {
      ++c.kept;
      c.kept_seconds += p.seconds;
    } else {
      ++c.discarded;
    }
  }
  if (counts != nullptr) counts->Add(c);
}

void AccountSpeculationTime(const SpeculationRecord& record, const RouterResult& routing,
                            int64_t first, int64_t n, SpeculativeCounts* counts) {
  if (counts == nullptr || record.rows.empty()) return;
  const auto mine = std::count_if(record.rows.begin(), record.rows.end(),
                                  [&](int64_t r) { return r >= first && r < first + n; });
  if (mine == 0) return;
  const double share = static_cast<double>(mine) / static_cast<double>(record.rows.size());
  counts->wait_seconds += share * record.wait_before;
  counts->overrun_seconds += share * record.overrun;
  counts->bound_seconds += share * std::min(record.wait_before, record.compute);
  const double kept_all = KeptSeconds(record, routing, 0, routing.n);
  if (kept_all <= 0) return;
  const double saved = std::max(0.0, kept_all - record.wait_at_target);
  counts->saved_seconds += saved * KeptSeconds(record, routing, first, n) / kept_all;
}

}  // namespace vismoe
