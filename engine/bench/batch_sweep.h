// Batch sweep: what batching several sequences in one decoder step buys on the
// loaded model, below the server (TextDecoder::ForwardBatch on the CPU
// backend, experts behind the offload runtime at the given budget). For each
// batch size B: B text prompts are prefilled one by one, then B sequences
// decode `steps` greedy tokens together; reported per B are decode tokens/s,
// step time and the expert bytes copied per generated token (one copy of an
// expert serves every sequence of the step that routes to it). With
// per-sequence preload on, each sequence's preload starts right after its
// prefill (as in the engine), so the B sequences share the slab cache by the
// preload quota; the preload copies count in the decode's bytes. Timed with
// steady_clock on the calling thread's pool.
// Thread safety: runs on the calling thread.
#ifndef VISMOE_ENGINE_BENCH_BATCH_SWEEP_H_
#define VISMOE_ENGINE_BENCH_BATCH_SWEEP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/synthetic_routing.h"
#include "engine/offload/offload_options.h"
#include "nlohmann/json.hpp"

namespace vismoe::bench {

struct BatchSweepOptions {
  std::string model_path;
  bool synthetic_weights = false;
  uint64_t synthetic_seed = 0;
  SyntheticRouting synthetic_routing = SyntheticRouting::kRandom;
  // The engine's memory plan: 0 = every expert resident (nothing copied);
  // else the budget less a KV cache of kv_cache_tokens, as the engine reserves.
  int64_t budget_bytes = 0;
  int pinned_layers = -1;  // -1 = chosen by the plan
  // Eviction, copy throttle and per-sequence preload of the offload runtime
  // (its prefetch and pinned_layers are ignored: no predictor runs here).
  OffloadOptions offload;
  int64_t kv_cache_tokens = 4096;
  std::vector<int> batch_sizes;
  int prompt_tokens = 32;
  int decode_steps = 16;
  int num_threads = 0;  // 0 = all cores
};

struct BatchSweepRow {
  int batch = 0;
  int64_t tokens = 0;  // decode tokens generated
  double seconds = 0;  // decode wall time
  uint64_t bytes_h2d = 0;      // expert bytes copied while decoding (preload copies included)
  uint64_t preload_bytes = 0;  // of those, copied by the sequences' preloads
  uint64_t preload_used = 0;   // preloaded experts the decode steps used
  double tokens_per_s() const { return seconds > 0 ? tokens / seconds : 0; }
  double bytes_per_token() const { return tokens > 0 ? static_cast<double>(bytes_h2d) / tokens : 0; }
};

// Errors name the file or the bad option.
absl::StatusOr<std::vector<BatchSweepRow>> RunBatchSweep(const BatchSweepOptions& options);

// batch, tokens, seconds, tokens_per_s, ms_per_step, bytes_h2d, bytes_per_token,
// preload_bytes, preload_used per row.
nlohmann::json BatchSweepJson(const std::vector<BatchSweepRow>& rows, int decode_steps);

}  // namespace vismoe::bench

#endif  // VISMOE_ENGINE_BENCH_BATCH_SWEEP_H_
