// Qwen3VlMoeModel: the text decoder of Qwen3-VL-MoE (model_type qwen3_vl_moe)
// and of the text-only Qwen3-MoE (qwen3_moe), written once over a backend's
// DecoderOps (engine/backend/decoder_ops.h); weight names and family quirks
// come from engine/model/arch_spec.h.
//
// Per layer: h += o_proj(Attn(RoPE(q_norm(q)), RoPE(k_norm(k)), v)) on
// RMSNorm(h); h += MoE(RMSNorm(h)) (or the dense SwiGLU MLP for mlp_only
// layers); final RMSNorm; lm_head (or the tied embedding). Interleaved M-RoPE
// when the config has an mrope_section, plain RoPE otherwise. Visual embeddings
// replace the embeddings of image-pad tokens; DeepStack feature k is added to
// the visual rows after decoder layer k. Experts come from an ExpertProvider.
// This class owns what is the same on every backend: input validation,
// positions, visual rows, token compression, DeepStack bookkeeping, the
// observer calls and the KV cache protocol -- for one sequence or a batch of
// them in one step (rows concatenated; each sequence's rows attend over its
// own cache).
//
// Thread safety: immutable after Create(); Forward() may run concurrently on
// different KV caches (as far as the ops allow: see the backend).
// Ownership: owns its ops.
#ifndef VISMOE_ENGINE_ARCH_QWEN3_VL_MOE_H_
#define VISMOE_ENGINE_ARCH_QWEN3_VL_MOE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/arch/text_decoder.h"
#include "engine/backend/decoder_ops.h"
#include "engine/core/thread_pool.h"
#include "engine/model/arch_spec.h"
#include "engine/model/checkpoint.h"
#include "engine/model/model_config.h"

namespace vismoe {

class Qwen3VlMoeModel final : public TextDecoder {
 public:
  // The decoder over `ops` (which hold the weights). InvalidArgument for an
  // unsupported model_type.
  static absl::StatusOr<std::unique_ptr<Qwen3VlMoeModel>> Create(const ModelConfig& config,
                                                                 std::unique_ptr<DecoderOps> ops);
  // On the CPU reference backend, weights read from `checkpoint` (errors name
  // the tensor); `pool` may be null.
  static absl::StatusOr<std::unique_ptr<Qwen3VlMoeModel>> Create(const ModelConfig& config,
                                                                 const Checkpoint& checkpoint,
                                                                 ThreadPool* pool);
  Qwen3VlMoeModel(const Qwen3VlMoeModel&) = delete;
  Qwen3VlMoeModel& operator=(const Qwen3VlMoeModel&) = delete;

  // "model.language_model." or "model.": where the text weights live
  // (ArchSpec::text_prefix; "model." for a model_type the spec does not know).
  static std::string TextPrefix(const ModelConfig& config);
  // Where the routed experts are (ArchSpec::experts; the Qwen names under
  // "model." for a model_type the spec does not know).
  static ExpertNaming Experts(const ModelConfig& config);

  // CreateKvCache for callers that know it cannot fail (the CPU backend);
  // null when it does.
  std::unique_ptr<KvCache> NewKvCache(int64_t capacity) const;

  absl::Status Forward(const DecoderInput& input, KvCache* cache, ExpertProvider* experts,
                       std::vector<float>* logits) const override;
  absl::Status ForwardBatch(absl::Span<const DecoderBatchEntry> batch,
                            ExpertProvider* experts) const override;
  absl::StatusOr<std::unique_ptr<KvCache>> CreateKvCache(int64_t capacity) const override {
    return ops_->CreateKvCache(capacity);
  }
  absl::StatusOr<std::unique_ptr<KvPool>> CreateKvPool(int64_t blocks,
                                                       int64_t block_tokens) const override {
    return ops_->CreateKvPool(blocks, block_tokens);
  }
  const ModelConfig& config() const override { return config_; }
  const char* backend() const override { return ops_->name(); }
  bool supports_speculative_execution() const override { return ops_->supports_speculation(); }

 private:
  // The host side of one sequence in a step: its rows in flight, their
  // positions and where its visual tokens are (rows local to the sequence).
  struct StepState {
    int64_t n = 0;
    int64_t n_in = 0;                  // rows the step started with
    std::vector<int64_t> positions;    // [3][n]
    std::vector<int64_t> visual_rows;  // row of each visual token, -1 once dropped
    bool compressed = false;
  };
  // The whole step: one StepState per entry and what the ops see.
  struct Batch;

  Qwen3VlMoeModel(const ModelConfig& config, std::unique_ptr<DecoderOps> ops,
                  bool renormalize_topk);

  absl::StatusOr<StepState> Plan(const DecoderInput& input, const KvCache& cache) const;
  // Validates the batch and builds the step's concatenated input.
  absl::Status PlanBatch(absl::Span<const DecoderBatchEntry> entries, Batch& b) const;
  // Token compression of the entries that compress before `layer`.
  absl::Status Compress(int layer, Batch& b, DecoderStep& step, ExpertProvider* experts) const;
  absl::Status Layer(int layer, Batch& b, DecoderStep& step, ExpertProvider* experts) const;
  absl::Status Moe(int layer, Batch& b, DecoderStep& step, ExpertProvider* experts) const;
  // The entries' observers' per-row hooks (OnPostAttention, OnMoeOutput) and
  // OnRouting, each entry with its rows of the step's.
  void ObserveRows(int layer, const Batch& b, const float* rows,
                   void (RouterObserver::*hook)(Phase, int, const float*, int64_t)) const;
  void ObserveRouting(int layer, const Batch& b, const float* hidden,
                      const RouterResult& routing) const;
  // Pinned layers without the host (DecoderStep::DeviceMoe): whether `layer`
  // runs so in this step -- a pinned layer on a backend that can, with no
  // entry skipping experts or speculating. The host sees such layers later,
  // in order (DrainDeferred), before anything that depends on what it saw:
  // the next layer routed on the host, token compression, the logits.
  bool DeviceMoeAt(int layer, const Batch& b, DecoderStep& step, ExpertProvider* experts) const;
  // Hands the deferred layers to the observers and the provider in layer
  // order: all of them (`wait`), or those the device has finished.
  absl::Status DrainDeferred(Batch& b, DecoderStep& step, ExpertProvider* experts, bool wait) const;
  absl::Status SeeDeferred(int layer, const Batch& b, const DeferredLayer& d,
                           ExpertProvider* experts) const;
  // Marks the slots expert skipping drops, per entry that asks for it (its
  // visual rows use tau_visual, the others tau_text).
  void SkipExperts(int layer, const Batch& b, RouterResult* routing) const;
  // True when `in`'s rows at `layer` run under the commit miss policy: a
  // decode step, except the first MoE layer of the first one.
  bool CommitsAt(const DecoderInput& in, int layer) const;
  // Applies the commit miss policy to the entries that commit at `layer`,
  // against the provider's availability of the layer's experts.
  void Commit(int layer, const Batch& b, ExpertProvider* experts, RouterResult* routing) const;
  // Speculative execution: arms the step to compute the next MoE layer's
  // experts ahead for the decode rows of the entries that speculate (none
  // while rows may still be compressed away).
  absl::Status ArmSpeculation(int layer, const Batch& b, DecoderStep& step) const;
  // At a target layer: marks the slots whose output was computed ahead
  // (before the experts run), then each entry's share of the times (after).
  void MatchSpeculation(const SpeculationRecord& record, const Batch& b,
                        RouterResult* routing) const;
  void AccountSpeculation(const SpeculationRecord& record, const Batch& b,
                          const RouterResult& routing) const;
  // Splits the step's logits over the entries.
  absl::Status Logits(Batch& b, DecoderStep& step) const;

  ModelConfig config_;
  std::unique_ptr<DecoderOps> ops_;
  bool renormalize_topk_ = true;  // ArchSpec::renormalize_topk
  int first_moe_layer_ = -1;
  std::vector<int> next_moe_layer_;  // per decoder layer: the next MoE layer, or -1
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_ARCH_QWEN3_VL_MOE_H_
