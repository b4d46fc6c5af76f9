// Qwen3VlMoeCudaModel: the Qwen3-VL-MoE / Qwen3-MoE text decoder on the CUDA
// backend -- the computation of the CPU reference (engine/arch/qwen3_vl_moe.h)
// with bf16 activations and fp32 accumulation, every op an engine/ops/cuda
// kernel or a cuBLAS GEMM on one compute stream.
//
// Memory (DESIGN.md): every non-expert text weight is converted to bf16 and
// uploaded once at Create (the resident region); the per-step scratch (hidden
// states, q/k/v, the permuted MoE rows, logits) is one device arena sized for
// Options::max_tokens_per_step and reset at each step, so Forward never
// allocates; the KV cache is a DeviceKvCache. Experts come from the
// ExpertProvider and must be device-resident bf16 (the OffloadExpertProvider
// built with the CUDA allocators and copy backend: pinned prefix + slabs).
//
// MoE per layer: router GEMM (fp32 logits) -> top-k on device -> one small
// device-to-host copy of the routing (the provider and the observers run on
// the host) -> tokens permuted so each expert's rows are contiguous -> the
// experts through RunExpertBatches (engine/offload/expert_batch_runner.h):
// acquired in the provider's order and launched in batches -- one grouped
// GEMM for gate_up, SwiGLU, one grouped GEMM for down -- as soon as the next
// expert is not Ready(), so with everything resident a layer's experts are
// three launches and compute overlaps the copies still in flight; a slab is
// released only after an event recorded behind its batch has completed (the
// provider may hand a released slab to the next copy) -> weighted sum per
// token in slot order.
//
// Differences from the CPU reference, by design: bf16 activations and KV cache
// (transformers on a GPU runs bf16 too), slot-order instead of expert-order
// summation of the top-k outputs; attention_bias checkpoints are refused.
// Thread safety: immutable after Create(); Forward() calls are serialised
// internally (one stream, one scratch arena).
// Ownership: owns its device weights, scratch, stream, events and cuBLAS
// handle; the Checkpoint is read only during Create.
#ifndef VISMOE_ENGINE_ARCH_CUDA_QWEN3_VL_MOE_CUDA_H_
#define VISMOE_ENGINE_ARCH_CUDA_QWEN3_VL_MOE_CUDA_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/arch/cuda/device_kv_cache.h"
#include "engine/arch/qwen3_vl_moe.h"
#include "engine/arch/text_decoder.h"
#include "engine/model/checkpoint.h"
#include "engine/model/model_config.h"
#include "engine/ops/cuda/device.h"
#include "engine/ops/cuda/gemm.h"
#include "engine/ops/cuda/types.h"

namespace vismoe::cuda {

class Qwen3VlMoeCudaModel final : public TextDecoder {
 public:
  struct Options {
    int device = 0;
    // The most tokens one Forward may carry (the prefill of the longest
    // prompt): sizes the scratch arena.
    int64_t max_tokens_per_step = 4096;
  };

  // Checks the config, uploads the weights (errors name the tensor), creates
  // the stream, events, cuBLAS handle and scratch. kUnavailable without a
  // device; kResourceExhausted when the device cannot hold them.
  static absl::StatusOr<std::unique_ptr<Qwen3VlMoeCudaModel>> Create(const ModelConfig& config,
                                                                     const Checkpoint& checkpoint,
                                                                     const Options& options);
  Qwen3VlMoeCudaModel(const Qwen3VlMoeCudaModel&) = delete;
  Qwen3VlMoeCudaModel& operator=(const Qwen3VlMoeCudaModel&) = delete;
  ~Qwen3VlMoeCudaModel() override;

  // Device bytes of the per-step scratch for `max_tokens` tokens.
  static int64_t ScratchBytes(const ModelConfig& config, int64_t max_tokens);
  // Everything the decoder allocates on the device beyond its weights and KV
  // cache: the scratch, the cuBLAS workspace and the grouped-GEMM pointer
  // table (the memory plan's activation reservation).
  static int64_t ActivationBytes(const ModelConfig& config, int64_t max_tokens);

  absl::StatusOr<std::unique_ptr<KvCache>> CreateKvCache(int64_t capacity) const override;
  // The contract of Qwen3VlMoeModel::Forward. Also InvalidArgument when
  // `cache` is not a DeviceKvCache or the step has more tokens than
  // max_tokens_per_step; experts from the provider must be bf16 device memory.
  absl::Status Forward(const DecoderInput& input, KvCache* cache, ExpertProvider* experts,
                       std::vector<float>* logits) const override;
  const ModelConfig& config() const override { return config_; }
  const char* backend() const override { return "cuda"; }

  int64_t weight_bytes() const { return static_cast<int64_t>(weights_.size()); }
  int64_t scratch_bytes() const { return static_cast<int64_t>(scratch_.capacity()); }

 private:
  struct Layer {
    const Bf16* input_norm = nullptr;
    const Bf16* post_norm = nullptr;
    const Bf16 *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr;
    const Bf16 *q_norm = nullptr, *k_norm = nullptr;
    bool moe = false;
    const Bf16* router = nullptr;
    const Bf16 *gate_proj = nullptr, *up_proj = nullptr, *down_proj = nullptr;
  };
  struct Step;  // one Forward's buffers and host-side state (the .cc)

  Qwen3VlMoeCudaModel() = default;
  absl::Status ForwardLocked(const DecoderInput& input, DeviceKvCache* cache,
                             ExpertProvider* experts, std::vector<float>* logits) const;
  absl::Status Attention(int layer, Step& s, DeviceKvCache* cache) const;
  absl::Status Moe(const DecoderInput& input, int layer, Step& s, ExpertProvider* experts) const;
  absl::Status RunExperts(const DecoderInput& input, int layer, Step& s,
                          const std::vector<int32_t>& offsets, const std::vector<int>& active,
                          ExpertProvider* experts) const;
  absl::Status DenseMlp(int layer, Step& s) const;
  absl::Status KeepRows(const std::vector<int64_t>& kept, Step& s) const;
  absl::Status Logits(const DecoderInput& input, Step& s, std::vector<float>* logits) const;
  // Host fp32 copy of `count` device bf16 values (waits for the stream).
  absl::Status DownloadF32(const Bf16* src, int64_t count, std::vector<float>* out) const;

  ModelConfig config_;
  int device_ = 0;
  int64_t max_tokens_ = 0;
  DeviceBuffer weights_;  // every non-expert text tensor, bf16
  const Bf16* embed_ = nullptr;
  const Bf16* final_norm_ = nullptr;
  const Bf16* lm_head_ = nullptr;
  const float* inv_freq_ = nullptr;  // [head_dim / 2], inside weights_
  std::vector<Layer> layers_;
  std::vector<int> mrope_section_;  // 3 entries, or empty (plain RoPE)

  mutable std::mutex mu_;  // serialises Forward: the members below are per step
  mutable Stream stream_;
  mutable std::vector<Event> expert_done_;  // one per expert batch of a layer (tickets)
  DeviceBuffer blas_workspace_;  // declared before blas_: outlives the handle bound to it
  mutable std::unique_ptr<Blas> blas_;
  mutable DeviceArena scratch_{nullptr, 0};  // owns its block once Create sets it
};

}  // namespace vismoe::cuda

#endif  // VISMOE_ENGINE_ARCH_CUDA_QWEN3_VL_MOE_CUDA_H_
