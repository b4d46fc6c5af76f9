// The JSON report of one vismoe-bench configuration, and the two numbers it
// needs besides the run itself: the size of one expert (for missed bytes) and
// the copy bandwidth measured through the same copy engine and throttle
// (for the bound max(compute, missed bytes / bandwidth)).
// Thread safety: free functions.
#ifndef VISMOE_ENGINE_BENCH_REPORT_H_
#define VISMOE_ENGINE_BENCH_REPORT_H_

#include <cstdint>
#include <string>

#include "engine/bench/run_summary.h"
#include "nlohmann/json.hpp"

namespace vismoe::bench {

// Bytes of one routed expert of the checkpoint (of the synthetic weights of
// its config.json when `synthetic_weights`); 0 when it cannot be measured.
int64_t ExpertBytes(const std::string& model_path, bool synthetic_weights);

// Bytes/s of the offload copy path of backend `backend_name` ("cpu",
// "cuda"), measured over 16 copies of one expert through a TransferEngine
// over the backend's own offload device parts (cuda: pinned host -> device
// on its copy stream; cpu: the memcpy engine at `throttle`, 0 = unthrottled).
// Errors (no device) give 0.
double MeasureCopyBandwidth(const std::string& backend_name, double throttle, int64_t block_bytes);

// Bytes of the *.safetensors files in `model_path` (0 when there are none);
// with `synthetic_weights`, the bytes of the weights generated in memory from
// its config.json instead, so peak RSS compares with the weights either way.
int64_t CheckpointBytes(const std::string& model_path, bool synthetic_weights = false);

// The process's peak resident set so far (getrusage), in bytes.
int64_t PeakRssBytes();

// Counters and sums are per run of the request set (means over --repeat runs;
// plain integers when runs == 1); latencies are means per request; ratios come
// from the sums. Fields are listed in engine/bench/README.md.
nlohmann::json SummaryJson(const RunSummary& s, int64_t expert_bytes, double measured_bandwidth);

}  // namespace vismoe::bench

#endif  // VISMOE_ENGINE_BENCH_REPORT_H_
