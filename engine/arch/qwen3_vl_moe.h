// Qwen3VlMoeModel: the text decoder of Qwen3-VL-MoE (model_type qwen3_vl_moe,
// weights under "model.language_model.") and of the text-only Qwen3-MoE
// (model_type qwen3_moe, weights under "model."), on the CPU reference backend.
//
// Per layer: h += o_proj(Attn(RoPE(q_norm(q)), RoPE(k_norm(k)), v)) on
// RMSNorm(h); h += MoE(RMSNorm(h)) (or the dense SwiGLU MLP for mlp_only
// layers); final RMSNorm; lm_head (or the tied embedding). Interleaved M-RoPE
// when the config has an mrope_section, plain RoPE otherwise. Visual embeddings
// replace the embeddings of image-pad tokens; DeepStack feature k is added to
// the visual rows after decoder layer k. Experts come from an ExpertProvider.
//
// Thread safety: the model is immutable after Create(); Forward() may run
// concurrently on different KV caches, but each call uses the shared pool.
// Ownership: weight views point into the Checkpoint, which must outlive the
// model; the pool is not owned.
#ifndef VISMOE_ENGINE_ARCH_QWEN3_VL_MOE_H_
#define VISMOE_ENGINE_ARCH_QWEN3_VL_MOE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/arch/text_decoder.h"
#include "engine/core/tensor.h"
#include "engine/core/thread_pool.h"
#include "engine/model/checkpoint.h"
#include "engine/model/model_config.h"
#include "engine/offload/expert_provider.h"
#include "engine/ops/cpu/moe.h"
#include "engine/ops/cpu/rope.h"
#include "engine/runtime/kv_cache.h"
#include "engine/runtime/stats_sink.h"

namespace vismoe {

// Sees each MoE layer's routing (the token compressor and the expert
// predictors use it). Called on the forward thread before the experts run.
class RouterObserver {
 public:
  virtual ~RouterObserver() = default;
  // `hidden` [n, hidden_size] is the MoE block's input (post-attention RMSNorm).
  virtual void OnRouting(Phase phase, int layer, const float* hidden,
                         const cpu::RouterResult& routing) = 0;
  // `residual` [n, hidden_size]: the residual stream after attention (the
  // post-attention RMSNorm's input) of MoE layer `layer`; called right before
  // OnRouting. The router-lookahead predictor builds the quasi-hidden state
  // (paper 004, section 3.2) from it.
  virtual void OnPostAttention(Phase /*phase*/, int /*layer*/, const float* /*residual*/,
                               int64_t /*n*/) {}
  // `out` [n, hidden_size]: MoE layer `layer`'s output, before the residual add
  // (calibration averages it into the layer's default vector d_l).
  virtual void OnMoeOutput(Phase /*phase*/, int /*layer*/, const float* /*out*/, int64_t /*n*/) {}
  // The request's static visual summary h_v (VisMMOE Eq. 6, [hidden_size]):
  // the engine calls it before prefill (mean over every visual token) and again
  // after compression (mean over the kept ones). Never called for text-only requests.
  virtual void OnVisualSummary(absl::Span<const float> /*summary*/) {}
};

// The new tokens of one forward step.
struct DecoderInput {
  absl::Span<const int> tokens;
  // Row-major [3][n] (t, h, w) absolute positions of the new tokens. Empty
  // means text positions cache_length + i on every axis.
  std::vector<int64_t> positions;
  // [num_visual, hidden] rows that replace the embeddings of the tokens equal
  // to image_token_id, in order; num_visual must equal their count.
  const float* visual_embeds = nullptr;
  int64_t num_visual = 0;
  // DeepStack: deepstack[k] [num_visual, hidden] is added to the visual rows
  // after decoder layer k.
  std::vector<const float*> deepstack;
  Phase phase = Phase::kPrefill;
  // Token compression (VisMMOE 3.2): when set, called once, right before
  // decoder layer `compress_before_layer` runs (after the pinned prefix), and
  // returns the rows of the new tokens to keep: strictly ascending, in [0, n),
  // non-empty. The other rows leave the hidden states; layers >=
  // compress_before_layer store only the kept rows in their KV cache (the step
  // ends with KvCache::Advance(n, compress_before_layer, kept)). Kept tokens
  // keep their positions. With all_logits, logits are those of the kept rows.
  std::function<absl::StatusOr<std::vector<int64_t>>()> select_kept_rows;
  int compress_before_layer = 0;
  bool all_logits = false;             // logits of every new token, else only the last
  RouterObserver* observer = nullptr;  // optional
  std::function<bool()> is_cancelled;  // optional; polled between layers
};

class Qwen3VlMoeModel final : public TextDecoder {
 public:
  // Loads and shape-checks every text weight. Errors name the tensor.
  static absl::StatusOr<std::unique_ptr<Qwen3VlMoeModel>> Create(const ModelConfig& config,
                                                                 const Checkpoint& checkpoint,
                                                                 ThreadPool* pool);
  Qwen3VlMoeModel(const Qwen3VlMoeModel&) = delete;
  Qwen3VlMoeModel& operator=(const Qwen3VlMoeModel&) = delete;

  // "model.language_model." or "model.": where the text weights live.
  static std::string TextPrefix(const ModelConfig& config);

  // A KV cache sized for this model.
  std::unique_ptr<KvCache> NewKvCache(int64_t capacity) const;

  // Runs the new tokens through the decoder, appending to `cache`, and writes
  // logits [tokens or 1, vocab] into `logits`. InvalidArgument for bad input
  // (token id out of range, visual count mismatch, position shape),
  // ResourceExhausted when the cache is full, Cancelled when is_cancelled
  // fired (the cache is then left unchanged in length).
  absl::Status Forward(const DecoderInput& input, KvCache* cache, ExpertProvider* experts,
                       std::vector<float>* logits) const override;

  absl::StatusOr<std::unique_ptr<KvCache>> CreateKvCache(int64_t capacity) const override {
    return NewKvCache(capacity);
  }
  const ModelConfig& config() const override { return config_; }
  const char* backend() const override { return "cpu"; }

 private:
  struct Layer {
    TensorView input_norm, post_norm;
    TensorView q, k, v, o;
    TensorView q_bias, k_bias, v_bias, o_bias;  // empty unless attention_bias
    TensorView q_norm, k_norm;
    bool moe = false;
    TensorView router;                         // [E, H]
    TensorView gate_proj, up_proj, down_proj;  // dense MLP layers
  };

  Qwen3VlMoeModel(const ModelConfig& config, ThreadPool* pool) : config_(config), pool_(pool) {}

  void Attention(int layer, const Layer& w, const std::vector<float>& x, int64_t n,
                 const cpu::RopeTable& rope, KvCache* cache, std::vector<float>* out) const;
  absl::Status Moe(const DecoderInput& input, int layer, const Layer& w,
                   const std::vector<float>& x, int64_t n, ExpertProvider* experts,
                   std::vector<float>* out) const;

  // Token compression: keeps rows `kept` of hs [n, hidden], positions [3][n]
  // and remaps visual_rows (dropped ones become -1); n becomes kept.size().
  absl::Status KeepRows(const std::vector<int64_t>& kept, int64_t* n, std::vector<float>* hs,
                        std::vector<int64_t>* positions, std::vector<int64_t>* visual_rows) const;

  ModelConfig config_;
  ThreadPool* pool_;
  TensorView embed_;
  TensorView final_norm_;
  TensorView lm_head_;
  std::vector<Layer> layers_;
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_ARCH_QWEN3_VL_MOE_H_
