// CudaDecoderOps: the DecoderOps of the CUDA backend -- the computation of the
// CPU reference (engine/backends/cpu/cpu_decoder_ops.h) with bf16 activations
// and fp32 accumulation, every op an engine/ops/cuda kernel or a cuBLAS GEMM
// on one compute stream.
//
// Memory (DESIGN.md): every non-expert text weight (TextWeights) is converted
// to bf16 and uploaded once at Create (the resident region); the per-step
// scratch (hidden states, q/k/v, the permuted MoE rows, logits) is one device
// arena sized for Options::max_tokens_per_step and reset at each step, so a
// step never allocates; the KV caches' rows live in a DeviceKvPool (one
// device allocation, made when the pool is created), read and written
// through each cache's block table. Experts come from the
// ExpertProvider and must be device-resident (the OffloadExpertProvider built
// with the CUDA allocators and copy backend: pinned prefix + slabs), bf16 or
// block-scaled (FP8, MXFP4: widened per group on the host-driven path, FP8
// read as it is by DeviceMoe's kernels).
//
// MoE per layer, two ways (cuda_decoder_step.h):
// - Pinned layers of decode-sized steps (DecoderStep::DeviceMoe): the router
//   GEMM, one routing kernel (top-k, permutation, the active experts; the ids
//   written straight into mapped host memory), one kernel for every selected
//   expert's gate/up + SwiGLU and one for their down projections over a
//   device table of the layer's expert weights (PinnedLayerTables), and the
//   weighted sum added to the residual stream -- no host round trip; the
//   host reads the routing later (DeferredStaging) for the provider's
//   counters and the observers.
// - Otherwise (prefill, offloaded layers, expert skipping): router GEMM ->
//   top-k on device -> one small device-to-host copy of the routing (the
//   provider and the observers run on the host) -> tokens permuted so each
//   expert's rows are contiguous -> the experts through RunExpertBatches
//   (engine/offload/expert_batch_runner.h): acquired in the provider's order
//   and launched in batches -- one grouped GEMM for gate_up, SwiGLU, one
//   grouped GEMM for down -- as soon as the next expert is not Ready(), so
//   compute overlaps the copies still in flight; a slab is released only
//   after an event recorded behind its batch has completed (the provider may
//   hand a released slab to the next copy) -> weighted sum per token in slot
//   order.
// Sampling happens on the device (DrawTokens: the argmax, or TokenPicker's
// draw in DrawTokenRows): a decode step of pinned layers waits for the
// device once and copies a few bytes per sequence.
//
// Host execution (miss policy cpu, static host layers; engine/policy/
// host_experts.md): an expert the provider puts on the host has its permuted
// rows copied device->host before the layer launches anything, is computed
// by the CPU kernels (engine/ops/cpu, fp32 over the bf16 host store, on
// Options::host_pool) on the step's thread while the device computes the
// batches launched before it, and its bf16 output is copied into its rows of
// the permuted output, where the device's would have been; the weighted sum
// then runs as usual.
// Differences from the CPU reference, by design: bf16 activations and KV cache
// (transformers on a GPU runs bf16 too), slot-order instead of expert-order
// summation of the top-k outputs.
// Thread safety: immutable after Create(); steps are serialised (one stream,
// one scratch arena): a DecoderStep holds the ops' lock for its life.
// Ownership: owns its device weights, scratch, stream, events and cuBLAS
// handle; the Checkpoint is read only during Create.
#ifndef VISMOE_ENGINE_BACKENDS_CUDA_CUDA_DECODER_OPS_H_
#define VISMOE_ENGINE_BACKENDS_CUDA_CUDA_DECODER_OPS_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend/decoder_ops.h"
#include "engine/backends/cuda/deferred_staging.h"
#include "engine/backends/cuda/op_timer.h"
#include "engine/backends/cuda/pinned_layer_tables.h"
#include "engine/backends/cuda/step_graphs.h"
#include "engine/backends/cuda/stream_expert_launcher.h"
#include "engine/core/stats_sink.h"
#include "engine/core/thread_pool.h"
#include "engine/device/cuda/device.h"
#include "engine/device/cuda/types.h"
#include "engine/model/arch_spec.h"
#include "engine/model/checkpoint.h"
#include "engine/model/model_config.h"
#include "engine/model/text_weights.h"
#include "engine/ops/cuda/gemm.h"
#include "engine/ops/cuda/latent_attention.h"

namespace vismoe::cuda {

// The latent attention's shape of `c` (all zero without TextConfig::mla).
LatentShape LatentShapeOf(const TextConfig& c);
// The widest per-row intermediate a step computes: the routed experts of a
// token, a dense MLP or the shared experts.
int64_t StepInterRows(const TextConfig& c);

class CudaDecoderOps final : public DecoderOps {
 public:
  struct Options {
    int device = 0;
    // The most tokens one step may carry (the prefill of the longest
    // prompt): sizes the scratch arena.
    int64_t max_tokens_per_step = 4096;
    // Kernel threads of the experts computed on the host (not owned; null =
    // the step's thread only).
    ThreadPool* host_pool = nullptr;
    // Time each op family with CUDA events (OpTimer) and report each step's
    // times to `stats` (not owned; may be null).
    bool op_timing = false;
    StatsSink* stats = nullptr;
    // Experts quantised to FP8 at load (--expert_dtype=fp8), widened as an
    // FP8 checkpoint's are.
    bool fp8_experts = false;
    // Sampled tokens drawn on the device (DrawTokenRows). Off until the gpu
    // tests have run it on a GPU: sampled steps then copy their logits back
    // and draw on the host. VISMOE_CUDA_DEVICE_SAMPLING=1 also turns it on.
    bool device_sampling = false;
  };
  // all_logits: [16, vocab] fp32 at a time.
  static constexpr int64_t kLogitRowsPerChunk = 16;
  // FP8 experts widened to bf16 at a time (StreamExpertLauncher).
  static constexpr int kWidenSlots = 2;

  // Step rows the latent attention's fp32 query and latent buffers hold at a
  // time (a longer step runs in chunks).
  static constexpr int64_t kLatentChunkRows = 256;

  // OK when these ops run `config`'s family; Unimplemented naming what they
  // lack otherwise.
  static absl::Status Runs(const ModelConfig& config);
  // OK unless `config` takes a path of these ops that no GPU has run yet
  // (Backend::Verified): q/k norms other than Qwen3's per-head ones,
  // clip_qkv, sliding windows, attention sinks and biases, YaRN, LongRoPE,
  // LayerNorm, the lm_head bias, GPT-OSS's, PhiMoE's and DeepSeek's routers,
  // GPT-OSS's experts, latent attention and shared experts.
  static absl::Status Verified(const ModelConfig& config);
  // Checks the config, uploads the weights (errors name the tensor), creates
  // the stream, events, cuBLAS handle and scratch. kUnavailable without a
  // device; kResourceExhausted when the device cannot hold them.
  static absl::StatusOr<std::unique_ptr<CudaDecoderOps>> Create(const ModelConfig& config,
                                                                const Checkpoint& checkpoint,
                                                                const Options& options);
  CudaDecoderOps(const CudaDecoderOps&) = delete;
  CudaDecoderOps& operator=(const CudaDecoderOps&) = delete;
  ~CudaDecoderOps() override;

  // Device bytes of the per-step scratch for `max_tokens` tokens (and the
  // widening scratch of Options::fp8_experts).
  static int64_t ScratchBytes(const ModelConfig& config, int64_t max_tokens,
                              bool fp8_experts = false);
  // Everything the decoder allocates on the device beyond its weights as
  // stored and KV cache: the scratch, the cuBLAS workspace, the grouped-GEMM
  // pointer table, and an FP8 checkpoint's widened non-expert weights (the
  // memory plan's activation reservation).
  static int64_t ActivationBytes(const ModelConfig& config, int64_t max_tokens,
                                 bool fp8_experts = false);

  const char* name() const override { return "cuda"; }
  // InvalidArgument over Options::max_tokens_per_step.
  absl::Status CheckStepSize(int64_t tokens) const override;
  // A DeviceKvPool.
  absl::StatusOr<std::unique_ptr<KvPool>> CreateKvPool(int64_t blocks,
                                                       int64_t block_tokens) const override;
  // Also InvalidArgument when a cache's pool is not a DeviceKvPool or the
  // step has more DeepStack features than the config declares.
  using DecoderOps::BeginStep;
  absl::StatusOr<std::unique_ptr<DecoderStep>> BeginStep(const StepInput& input) const override;

  int64_t weight_bytes() const { return static_cast<int64_t>(weights_.size()); }
  // Decode steps launched as a CUDA graph so far, and graphs captured
  // (step_graphs.h; tests and logs).
  int64_t graph_launches() const { return graph_launches_; }
  int64_t graphs_captured() const { return graphs_captured_; }
  int64_t scratch_bytes() const { return static_cast<int64_t>(scratch_.capacity()); }

 private:
  friend class CudaDecoderStep;
  struct Layer {
    const Bf16* input_norm = nullptr;
    const Bf16* post_norm = nullptr;
    // NormKind::kLayerNorm (PhiMoE): the norms' biases; null otherwise.
    const Bf16* input_norm_bias = nullptr;
    const Bf16* post_norm_bias = nullptr;
    // q, k and v stacked: one [qd + 2 kvd, H] GEMM gives the fused qkv rows.
    const Bf16* qkv = nullptr;
    const Bf16* o = nullptr;
    const Bf16 *q_norm = nullptr, *k_norm = nullptr;
    const Bf16* router = nullptr;
    const Bf16 *gate_proj = nullptr, *up_proj = nullptr, *down_proj = nullptr;
    // attention_bias: q, k and v's stacked [qd + 2 kvd], and o's [H]; null without.
    const Bf16* qkv_bias = nullptr;
    const Bf16* o_bias = nullptr;
    const float* sinks = nullptr;        // [heads] fp32 sink logits (GPT-OSS), or null
    const float* router_bias = nullptr;  // [E] fp32 (GPT-OSS), or null
    // GPT-OSS's experts: their biases (clamped_experts_[layer] points here).
    const Bf16* experts_gate_up_bias = nullptr;  // [E, 2I]
    const Bf16* experts_down_bias = nullptr;     // [E, H]
    // Multi-head latent attention (TextConfig::mla; qkv is null then): q_proj
    // or q_b_proj, q_a_proj and its norm (q_lora_rank > 0), kv_a_proj_with_mqa
    // and its norm, kv_b_proj; the a-projections' biases (attention_bias).
    const Bf16 *q = nullptr, *q_a = nullptr, *q_a_bias = nullptr, *q_a_norm = nullptr;
    const Bf16 *kv_a = nullptr, *kv_a_bias = nullptr, *kv_a_norm = nullptr, *kv_b = nullptr;
    // DeepSeek's shared experts: one SwiGLU MLP of n_shared_experts * I; null without.
    const Bf16 *shared_gate = nullptr, *shared_up = nullptr, *shared_down = nullptr;
  };

  CudaDecoderOps() = default;
  absl::Status UploadWeights(const ModelConfig& config, const Checkpoint& checkpoint);
  void KeepClampedExperts(const TextWeights& w);
  static int64_t WidenedWeightBytes(const ModelConfig& config);
  absl::Status SetUpDeviceMoe(const Options& options);

  ModelConfig config_;
  bool renormalize_topk_ = true;
  QkNormScope qk_norm_ = QkNormScope::kPerHead;
  RouterKind router_ = RouterKind::kSoftmaxTopK;
  NormKind norm_ = NormKind::kRms;
  float rope_scale_ = 1.0f;  // YaRN's attention factor on cos / sin
  const Bf16* final_norm_bias_ = nullptr;  // LayerNorm only
  const float* lm_head_bias_ = nullptr;    // [vocab] fp32 (PhiMoE), or null
  // GPT-OSS (TextConfig::clamped_swiglu): per layer, the experts' biases
  // (device, and host fp32 for experts computed on the host) and activation;
  // empty otherwise.
  std::vector<StreamExpertLauncher::ClampedExperts> clamped_experts_;
  std::vector<std::vector<float>> host_expert_biases_;  // per layer: [E, 2I] then [E, H]
  int device_ = 0;
  int64_t max_tokens_ = 0;
  DeviceBuffer weights_;  // every non-expert text tensor, bf16
  const Bf16* embed_ = nullptr;
  const Bf16* final_norm_ = nullptr;
  const Bf16* lm_head_ = nullptr;
  const float* inv_freq_ = nullptr;  // [head_dim / 2], inside weights_
  std::vector<Layer> layers_;
  std::vector<int> mrope_section_;  // 3 entries, or empty (plain RoPE)

  mutable std::mutex mu_;  // held by the live DecoderStep: the members below are per step
  mutable Stream stream_;
  mutable std::vector<Event> expert_done_;  // one per expert batch of a layer (tickets)
  mutable Event host_rows_ready_;           // the host experts' rows have reached the host
  ThreadPool* host_pool_ = nullptr;
  bool device_moe_ = false;                  // MoeDecodeSupports the config
  bool widen_experts_ = false;  // block-scaled experts (FP8, MXFP4) are widened per group
  mutable PinnedLayerTables pinned_tables_;  // DeviceMoe's expert tables
  mutable DeferredStaging staging_;          // DeviceMoe's host view
  mutable PinnedHostBuffer greedy_ids_;      // mapped: DrawTokens' ids
  mutable PinnedHostBuffer token_draws_;     // mapped: DrawTokens' DeviceTokenDraw per row
  mutable std::unique_ptr<OpTimer> timer_;   // Options::op_timing
  // CUDA graphs of decode steps (step_graphs.h); VISMOE_CUDA_GRAPHS=0 turns
  // them off.
  bool graphs_enabled_ = true;
  bool device_sampling_ = false;  // Options::device_sampling
  mutable bool graph_capture_failed_ = false;
  mutable StepGraphs graphs_;
  mutable PinnedHostBuffer step_inputs_;  // the staged inputs of a graph step
  mutable int64_t graph_launches_ = 0;
  mutable int64_t graphs_captured_ = 0;
  DeviceBuffer blas_workspace_;  // declared before blas_: outlives the handle bound to it
  mutable std::unique_ptr<Blas> blas_;
  mutable DeviceArena scratch_{nullptr, 0};  // owns its block once Create sets it
};

}  // namespace vismoe::cuda

#endif  // VISMOE_ENGINE_BACKENDS_CUDA_CUDA_DECODER_OPS_H_
