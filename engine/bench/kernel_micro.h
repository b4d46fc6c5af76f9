// Micro benchmarks of the CPU matrix kernels (cpu::Linear, cpu::LinearTransposed)
// on the decoder's real shapes, read from a model's config.json: the attention
// projections, the router, the per-expert (gate/up/down) and fused
// (gate_up [H, 2I] / down [I, H], transposed) expert matrices and the LM head,
// for F32, F16 and BF16 weights, and the block-scaled F8_E4M3 (128 x 128
// F32 scales) and MXFP4 (e8m0 scales per 32 inputs) on the [out, in] shapes,
// at 1 row (decode) and `prefill_rows` rows.
// Each entry times, in the same run, the fp32 reference (the pre-#20 kernel,
// LinearReference) and the fast kernel on every path the CPU has, and reports
// the speedup over the reference, GB/s of weights streamed and GFLOP/s.
// Weights are random and cycled through enough copies to exceed the last-level
// cache, so decode figures are memory-bound like a real step. The machine's
// read bandwidth (one streaming sum per thread over 256 MiB) is measured
// alongside as the ceiling for the GB/s column.
// Thread safety: runs on the calling thread plus its own pool.
#ifndef VISMOE_ENGINE_BENCH_KERNEL_MICRO_H_
#define VISMOE_ENGINE_BENCH_KERNEL_MICRO_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace vismoe::bench {

struct KernelMicroOptions {
  std::string model_path;     // config.json is read from here
  double min_seconds = 0.2;   // timed work per kernel variant
  int num_threads = 0;        // 0: hardware concurrency
  int prefill_rows = 128;
  std::vector<std::string> dtypes = {"BF16", "F16", "F32"};  // also F8_E4M3, MXFP4
};

// {"threads", "read_bandwidth_gbps", "kernels": [{name, shape, dtype, rows,
// reference_us, <path>_us, <path>_speedup, <path>_weight_gbps,
// <path>_gflops, ...}]}.
absl::StatusOr<nlohmann::json> RunKernelMicroBenchmarks(const KernelMicroOptions& options);

}  // namespace vismoe::bench

#endif  // VISMOE_ENGINE_BENCH_KERNEL_MICRO_H_
