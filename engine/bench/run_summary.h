// RunSummary: what running a request set `repeat` times on one Engine gives:
// counter sums over every run, latency sums, and one JSON record per request
// run. Means per run / per request come from the accessors, so the report and
// the ablation table compute them the same way.
// Thread safety: plain value; RunRequestSet runs on the calling thread.
#ifndef VISMOE_ENGINE_BENCH_RUN_SUMMARY_H_
#define VISMOE_ENGINE_BENCH_RUN_SUMMARY_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/bench/phase_hits.h"
#include "engine/bench/request_set.h"
#include "engine/api/engine.h"
#include "nlohmann/json.hpp"

namespace vismoe::bench {

struct RunSummary {
  int runs = 0;              // repeats of the request set
  int requests_per_run = 0;  // size of the request set
  OffloadStats offload;      // summed over every request of every run
  double ttft_seconds = 0;   // sums over every request
  double tpot_seconds = 0;   // summed over requests with > 1 completion token
  int tpot_requests = 0;
  double total_seconds = 0;  // end-to-end, summed over every request
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t visual_tokens_before = 0;
  int64_t visual_tokens_after = 0;
  ExpertSkipCounts skipping;  // MoDES expert skipping, summed over every request
  CommitCounts commit;        // the commit miss policy, summed over every request
  SpeculativeCounts speculative;  // speculative execution, summed over every request
  PhaseHitTotals phase_hits;  // cache lookups by phase (zero without a PhaseHitCounter)
  nlohmann::json per_request = nlohmann::json::array();

  int64_t request_count() const { return static_cast<int64_t>(runs) * requests_per_run; }
  double MeanTtft() const;
  double MeanTpot() const;
  double MeanRequestSeconds() const;  // end-to-end seconds per request
  double HitRatio() const;            // 1 when there were no queries
  double HotRecall() const;           // 1 when no expert needed a copy
  // Per run of the request set: a counter or sum divided by `runs`.
  double PerRun(double sum) const { return runs > 0 ? sum / runs : 0.0; }
};

// Runs every request of `requests` in order, `repeat` times. A failed request
// is an error naming its run and index. `phases`, when given, is the engine's
// StatsSink: the run's lookups by phase are what it counted during the run.
absl::StatusOr<RunSummary> RunRequestSet(Engine& engine, const std::vector<BenchRequest>& requests,
                                         int repeat, const PhaseHitCounter* phases = nullptr);

}  // namespace vismoe::bench

#endif  // VISMOE_ENGINE_BENCH_RUN_SUMMARY_H_
