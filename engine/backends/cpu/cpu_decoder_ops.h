// CpuDecoderOps: the DecoderOps of the CPU reference backend. fp32 activations
// and KV cache, weights read as stored (BF16/F16/F32 views into the
// checkpoint) by the engine/ops/cpu kernels. This is the exact path: it
// matches transformers, and every other backend is compared against it.
//
// MoE: each (token, top-k slot) output is kept apart and the slots are summed
// per token in ascending expert order afterwards -- the order transformers
// accumulates in, independent of the order the provider hands experts out --
// so every memory budget gives bit-identical logits. Experts the provider
// reports Ready() with at most 16 rows each (decode) run side by side, one per
// pool thread with inline kernels: one weight stream per core and one hand-off
// per run, instead of the pool splitting each of an expert's three products.
// The kernels' per-output order does not depend on the split, so the bits do
// not either; the provider is still called from the step's thread only.
// Speculative execution (opt-in, lossy) runs in the forward thread's copy
// waits: engine/backends/cpu/cpu_speculation.h.
//
// Thread safety: immutable after Create(); steps may run concurrently on
// different KV caches (each step's kernels use the shared pool).
// Ownership: the weight views point into the Checkpoint, which must outlive
// the ops; the pool is not owned (null = the calling thread only).
#ifndef VISMOE_ENGINE_BACKENDS_CPU_CPU_DECODER_OPS_H_
#define VISMOE_ENGINE_BACKENDS_CPU_CPU_DECODER_OPS_H_

#include <memory>

#include "absl/status/statusor.h"
#include "engine/backend/decoder_ops.h"
#include "engine/core/thread_pool.h"
#include "engine/model/checkpoint.h"
#include "engine/model/model_config.h"
#include "engine/model/text_weights.h"

namespace vismoe::cpu {

class CpuDecoderOps final : public DecoderOps {
 public:
  // Loads and shape-checks every text weight (errors name the tensor).
  // `deferred_moe`: steps implement DeviceMoe for pinned layers with
  // HostDeferredMoe (engine/backend/host_deferred_moe.h), so the decoder
  // runs the protocol of a device backend's hit path here (tests); off, they
  // run every layer through Route and Experts.
  static absl::StatusOr<std::unique_ptr<CpuDecoderOps>> Create(const ModelConfig& config,
                                                               const Checkpoint& checkpoint,
                                                               ThreadPool* pool,
                                                               bool deferred_moe = false);

  const char* name() const override { return "cpu"; }
  bool supports_speculation() const override { return true; }
  // Host fp32 rows; InvalidArgument for a bad shape.
  absl::StatusOr<std::unique_ptr<KvPool>> CreateKvPool(int64_t blocks,
                                                       int64_t block_tokens) const override;
  using DecoderOps::BeginStep;
  absl::StatusOr<std::unique_ptr<DecoderStep>> BeginStep(const StepInput& input) const override;

  const ModelConfig& config() const { return config_; }
  const TextWeights& weights() const { return weights_; }
  ThreadPool* pool() const { return pool_; }
  bool deferred_moe() const { return deferred_moe_; }

 private:
  CpuDecoderOps(const ModelConfig& config, TextWeights weights, ThreadPool* pool)
      : config_(config), weights_(std::move(weights)), pool_(pool) {}

  ModelConfig config_;
  TextWeights weights_;
  ThreadPool* pool_;
  bool deferred_moe_ = false;
};

}  // namespace vismoe::cpu

#endif  // VISMOE_ENGINE_BACKENDS_CPU_CPU_DECODER_OPS_H_
