// Micro benchmarks of the per-request and per-layer policy work, on the loaded
// model's shapes: token compression (random / saliency / affinity over N
// visual tokens with synthetic saliency and routing, N in {256, 1024, 4096})
// and expert prediction (history, router-lookahead on the checkpoint's real
// routers, mlp-lookahead on a random-weight MLP of the trainer's default
// shape). Each call is timed with steady_clock; calls repeat until
// `min_seconds` of timed work (at least 10 calls, at most 100000).
// Thread safety: runs on the calling thread.
#ifndef VISMOE_ENGINE_BENCH_MICRO_H_
#define VISMOE_ENGINE_BENCH_MICRO_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace vismoe::bench {

struct MicroResult {
  std::string name;
  int64_t calls = 0;
  double mean_us = 0;
  double p50_us = 0;
  double p99_us = 0;
};

struct MicroOptions {
  std::string model_path;
  double min_seconds = 0.2;  // timed work per benchmark
  double keep_ratio = 0.5;   // compressor beta
  int pinned_layers = 1;     // MoE layers whose routing the affinity compressor sees
  int prefetch_count = 0;    // B for Predict; 0 = the model's top-k
  int lookahead_window = 5;  // W of router-lookahead
  // Routers from seeded random weights of the config (as EngineOptions).
  bool synthetic_weights = false;
  uint64_t synthetic_seed = 0;
};

// Loads the config (and, for router-lookahead, the checkpoint's router weights)
// of options.model_path; errors name the file.
absl::StatusOr<std::vector<MicroResult>> RunMicroBenchmarks(const MicroOptions& options);

// name, calls, mean_us, p50_us, p99_us per entry.
nlohmann::json MicroJson(const std::vector<MicroResult>& results);

}  // namespace vismoe::bench

#endif  // VISMOE_ENGINE_BENCH_MICRO_H_
