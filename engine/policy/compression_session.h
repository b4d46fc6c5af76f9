// CompressionSession: token compression (VisMMOE 3.2) for one request's
// prefill. It watches the pinned prefix as a RouterObserver (recording the
// top-k experts of every visual token in the MoE layers before
// `compress_before_layer`), then, as DecoderInput::select_kept_rows, runs the
// compressor once per image on that image's visual tokens and returns the rows
// to keep: every text row plus the kept visual rows. Visual rows marked as
// layout (VisionOutput::layout: DeepSeek-VL2's newlines and view separator)
// are always kept; the compressor ranks the others, and its keep ratio is of
// them. Every observer hook is passed on to an optional next observer.
//
// Thread safety: none; used by the one thread running the forward pass.
// Ownership: borrows the compressor, the token ids and the saliency, which
// must outlive the session; does not own `next`.
#ifndef VISMOE_ENGINE_POLICY_COMPRESSION_SESSION_H_
#define VISMOE_ENGINE_POLICY_COMPRESSION_SESSION_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/arch/qwen3_vl_moe.h"
#include "engine/model/model_config.h"
#include "engine/policy/token_compressor.h"

namespace vismoe {

// The decoder layer that compression runs before: the one after the last of
// the first `pinned_moe_layers` MoE layers (0 when pinned_moe_layers <= 0;
// the layer count when the prefix covers every MoE layer).
int CompressionLayer(const TextConfig& config, int pinned_moe_layers);

class CompressionSession final : public RouterObserver {
 public:
  // tokens: the prefill ids; visual rows are those equal to image_token_id.
  // tokens_per_image / saliency / layout: from VisionOutput, in image order
  // (layout may be empty: no layout rows).
  CompressionSession(const TokenCompressor* compressor, absl::Span<const int> tokens,
                     int image_token_id, absl::Span<const int64_t> tokens_per_image,
                     absl::Span<const float> saliency, int compress_before_layer,
                     RouterObserver* next = nullptr, absl::Span<const uint8_t> layout = {});
  CompressionSession(const CompressionSession&) = delete;
  CompressionSession& operator=(const CompressionSession&) = delete;

  // Hooks the session into a prefill input (observer, select_kept_rows and
  // compress_before_layer) and forgets the routing recorded so far (the
  // prefill may run again: a retried step). `in` must not be used after the
  // session dies.
  void Install(DecoderInput* in);

  void OnRouting(Phase phase, int layer, const float* hidden, const RouterResult& routing) override;
  // Passed on to `next` unchanged.
  void OnPostAttention(Phase phase, int layer, const float* residual, int64_t n) override {
    if (next_ != nullptr) next_->OnPostAttention(phase, layer, residual, n);
  }
  void OnMoeOutput(Phase phase, int layer, const float* out, int64_t n) override {
    if (next_ != nullptr) next_->OnMoeOutput(phase, layer, out, n);
  }
  void OnVisualSummary(absl::Span<const float> summary) override {
    if (next_ != nullptr) next_->OnVisualSummary(summary);
  }

  // Runs the compressor. InvalidArgument when the visual token count does not
  // match tokens_per_image (or saliency, or a non-empty layout) or the
  // compressor rejects its input.
  absl::StatusOr<std::vector<int64_t>> KeptRows();

  int64_t visual_before() const { return static_cast<int64_t>(visual_rows_.size()); }
  int64_t visual_after() const { return visual_after_; }
  double seconds() const { return seconds_; }
  // Indices (into the visual tokens, ascending) of the kept ones; valid after KeptRows().
  const std::vector<int64_t>& kept_visual() const { return kept_visual_; }

 private:
  const TokenCompressor* compressor_;
  absl::Span<const int> tokens_;
  std::vector<int64_t> tokens_per_image_;
  absl::Span<const float> saliency_;
  absl::Span<const uint8_t> layout_;
  int compress_before_layer_;
  RouterObserver* next_;
  std::vector<int64_t> visual_rows_;       // prompt row of each visual token
  std::vector<std::vector<int>> routing_;  // per recorded MoE layer: [num_visual, top_k]
  int top_k_ = 0;
  int num_experts_ = 0;
  int64_t visual_after_ = 0;
  std::vector<int64_t> kept_visual_;
  double seconds_ = 0;

  // The compressor's choice among one image's ranked rows (`first` its first
  // visual token): their indices within the image, ascending.
  absl::StatusOr<std::vector<int64_t>> SelectRanked(int64_t first,
                                                    const std::vector<int64_t>& ranked) const;
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_POLICY_COMPRESSION_SESSION_H_
