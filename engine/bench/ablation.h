// The VisMMOE Table 4 ablation (paper 000, section 4.3.1) on one request set
// and one budget: one fresh Engine per row, each row adding one stage.
//   base                       no compression, no prefetch, LRU eviction
//   +compression               + affinity compression (Algorithm 1) at beta = --keep_ratio
//   +prediction & prefetching  + the ablation predictor driving prefetch (B = --prefetch_count,
//                              W = --lookahead_window), still LRU eviction
//   full                       + guarded eviction (only Expired slabs, lowest predictor
//                              priority first) + L_pinned by Eq. 10 from the calibration
//                              profile when one is given (else --pinned_layers, like the
//                              other rows)
// Every row keeps the model, budget, copy bandwidth, KV capacity, threads and
// --pinned_layers of the command line. The calibration profile is passed only
// to the rows that can use it (the prefetching ones).
// Thread safety: free functions; rows run one after another on the caller's thread.
#ifndef VISMOE_ENGINE_BENCH_ABLATION_H_
#define VISMOE_ENGINE_BENCH_ABLATION_H_

#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/bench/request_set.h"
#include "engine/bench/run_summary.h"
#include "engine/api/engine.h"
#include "nlohmann/json.hpp"

namespace vismoe::bench {

struct AblationRowConfig {
  std::string name;      // "base", "+compression", "+prediction & prefetching", "full"
  std::string turns_on;  // what the row adds, for the report
  EngineOptions options;
};

struct AblationRow {
  AblationRowConfig config;
  RunSummary summary;
  int pinned_layers = 0;  // as configured (-1 = Eq. 10)
};

// The four rows over `flags` (the command line's engine options).
// `predictor`: history | router-lookahead | mlp-lookahead.
std::vector<AblationRowConfig> AblationConfigs(const EngineOptions& flags, double keep_ratio,
                                               const std::string& predictor);

// Runs every row. An engine or request failure is an error naming the row.
absl::StatusOr<std::vector<AblationRow>> RunAblation(const std::vector<AblationRowConfig>& configs,
                                                     const std::vector<BenchRequest>& requests,
                                                     int repeat);

// Human-readable table (one line per row, normalised to the base row).
void PrintAblationTable(const std::vector<AblationRow>& rows, std::FILE* out);

// The rows as the report's "ablation" array.
nlohmann::json AblationJson(const std::vector<AblationRow>& rows);

}  // namespace vismoe::bench

#endif  // VISMOE_ENGINE_BENCH_ABLATION_H_
