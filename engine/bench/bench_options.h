// BenchOptions: vismoe-bench's command line, validated, as plain values: the
// EngineOptions of the main run plus what the bench itself does (request set,
// repeats, ablation, micro benchmarks, report file). The absl flags are
// defined in bench_options.cc and read only there.
// Thread safety: plain values.
#ifndef VISMOE_ENGINE_BENCH_BENCH_OPTIONS_H_
#define VISMOE_ENGINE_BENCH_BENCH_OPTIONS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/api/engine.h"

namespace vismoe::bench {

struct BenchOptions {
  EngineOptions engine;             // the main run's engine (flags as given)
  double copy_bandwidth_limit = 0;  // bytes/s; 0 = unthrottled

  // Request set: --requests FILE.jsonl, or one --prompt with an optional --image.
  std::string requests_path;
  std::string prompt;
  std::string image_path;
  int synthetic_images = 0;         // generated images in the single request
  int synthetic_image_size = 448;
  int max_new_tokens = 32;  // default per request
  int repeat = 1;           // runs of the request set

  bool ablation = false;
  std::string ablation_predictor;  // resolved: never empty when ablation is on
  double keep_ratio = 0.5;         // beta of the compressing ablation rows

  bool micro = false;
  double micro_seconds = 0.2;  // minimum timed seconds per micro benchmark
  bool micro_kernels = false;  // CPU matrix kernels, reference vs fast (kernel_micro.h)
  std::vector<std::string> micro_kernel_dtypes = {"BF16", "F16", "F32"};

  // Batch sweep (batch_sweep.h): batch sizes, empty = off.
  std::vector<int> batch_sizes;
  std::vector<int> concurrency;  // stream counts of the concurrency sweep
  bool concurrency_same_prompt = false;
  bool routing_stats = false;
  double routing_stats_temperature = 1.0;
  int batch_prompt_tokens = 32;
  int batch_decode_steps = 16;

  std::string json_out;
};

// "24G" -> 24 * 2^30 (K/M/G/T suffixes, binary). False on junk or < 0.
bool ParseBytes(const std::string& s, double* out);

// Reads and validates the flags. InvalidArgument names the flag and value.
absl::StatusOr<BenchOptions> BenchOptionsFromFlags();

}  // namespace vismoe::bench

#endif  // VISMOE_ENGINE_BENCH_BENCH_OPTIONS_H_
