// Concurrency sweep: what continuous batching buys through the Engine on its
// own backend (CUDA included, unlike the batch sweep's CPU decoder). For each
// stream count N, N copies of one request (each prompt prefixed with its
// stream's number, so no two prompts are the same) are submitted from N
// threads at once and the engine batches their steps. Reported per N: output
// tokens/s over the wall time, decode tokens/s (tokens after each stream's
// first, over the span from the first stream's first token to the last
// stream's end), mean TTFT and TPOT, and the ratio to N = 1 of the same run.
// Thread safety: runs on the calling thread and N threads of its own.
#ifndef VISMOE_ENGINE_BENCH_CONCURRENCY_SWEEP_H_
#define VISMOE_ENGINE_BENCH_CONCURRENCY_SWEEP_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/api/engine.h"
#include "engine/bench/request_set.h"
#include "nlohmann/json.hpp"

namespace vismoe::bench {

struct ConcurrencyRow {
  int streams = 0;
  int64_t completion_tokens = 0;
  int64_t decode_tokens = 0;  // completion tokens after each stream's first
  double wall_seconds = 0;    // first submission to last completion
  double decode_seconds = 0;  // earliest first token to last completion
  double mean_ttft_seconds = 0;
  double mean_tpot_seconds = 0;
  bool identical_outputs = false;  // every stream generated the same token ids
  double output_tokens_per_s() const {
    return wall_seconds > 0 ? completion_tokens / wall_seconds : 0;
  }
  double decode_tokens_per_s() const {
    return decode_seconds > 0 ? decode_tokens / decode_seconds : 0;
  }
};

// Errors: the first failed request's status, naming its stream.
// REQUIRES: every entry of `streams` >= 1.
absl::StatusOr<std::vector<ConcurrencyRow>> RunConcurrencySweep(Engine& engine,
                                                                const BenchRequest& request,
                                                                const std::vector<int>& streams,
                                                                bool same_prompt);

// One object per row, with each tokens/s figure also as a ratio to the row of
// one stream when the sweep has it.
nlohmann::json ConcurrencyJson(const std::vector<ConcurrencyRow>& rows);

}  // namespace vismoe::bench

#endif  // VISMOE_ENGINE_BENCH_CONCURRENCY_SWEEP_H_
