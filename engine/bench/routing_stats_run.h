// --routing_stats: runs the request set once more with a RoutingStatsRecorder
// (engine/calibrate/routing_stats.h) watching the forward pass, sampling at
// `temperature` with a fixed seed per request (greedy decoding on synthetic
// weights falls into short token cycles that no real text has), and reports
// the statistics of decode tokens, of text-only prefills and of image
// prefills (mostly visual rows) separately.
// Thread safety: runs on the calling thread.
#ifndef VISMOE_ENGINE_BENCH_ROUTING_STATS_RUN_H_
#define VISMOE_ENGINE_BENCH_ROUTING_STATS_RUN_H_

#include <vector>

#include "absl/status/statusor.h"
#include "engine/api/engine.h"
#include "engine/bench/request_set.h"
#include "nlohmann/json.hpp"

namespace vismoe::bench {

// {"temperature", "decode", "prefill_text", "prefill_image"}: each a
// RoutingStatsJson (absent when no request had that part).
absl::StatusOr<nlohmann::json> RunRoutingStats(Engine& engine,
                                               const std::vector<BenchRequest>& requests,
                                               float temperature);

// One line per part: repeat, reuse, LRU and Belady at 40%.
std::string RoutingStatsTable(const nlohmann::json& stats);

}  // namespace vismoe::bench

#endif  // VISMOE_ENGINE_BENCH_ROUTING_STATS_RUN_H_
