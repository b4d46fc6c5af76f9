#include "engine/policy/compression_session.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"

namespace vismoe {

int CompressionLayer(const TextConfig& config, int pinned_moe_layers) {
  if (pinned_moe_layers <= 0) return 0;
  int seen = 0;
  for (int l = 0; l < config.num_hidden_layers; ++l) {
    if (config.IsMoeLayer(l) && ++seen == pinned_moe_layers) return l + 1;
  }
  return config.num_hidden_layers;
}

CompressionSession::CompressionSession(const TokenCompressor* compressor,
                                       absl::Span<const int> tokens, int image_token_id,
                                       absl::Span<const int64_t> tokens_per_image,
                                       absl::Span<const float> saliency, int compress_before_layer,
                                       RouterObserver* next, absl::Span<const uint8_t> layout)
    : compressor_(compressor),
      tokens_(tokens),
      tokens_per_image_(tokens_per_image.begin(), tokens_per_image.end()),
      saliency_(saliency),
      layout_(layout),
      compress_before_layer_(compress_before_layer),
      next_(next) {
  for (size_t t = 0; t < tokens.size(); ++t) {
    if (tokens[t] == image_token_id) visual_rows_.push_back(static_cast<int64_t>(t));
  }
  visual_after_ = visual_before();
}

void CompressionSession::Install(DecoderInput* in) {
  routing_.clear();  // a prefill run again (a step retried) records afresh
  in->observer = this;
  in->compress_before_layer = compress_before_layer_;
  in->select_kept_rows = [this] { return KeptRows(); };
}

void CompressionSession::OnRouting(Phase phase, int layer, const float* hidden,
                                   const RouterResult& r) {
  // Rows are still the full prompt before compress_before_layer.
  if (phase == Phase::kPrefill && layer < compress_before_layer_ && compressor_->needs_routing() &&
      r.n == static_cast<int64_t>(tokens_.size())) {
    top_k_ = r.top_k;
    num_experts_ = r.num_experts;
    const int slot = static_cast<int>(routing_.size());
    std::vector<int>& rows = routing_.emplace_back(visual_rows_.size() * r.top_k);
    for (size_t i = 0; i < visual_rows_.size(); ++i) {
      for (int j = 0; j < r.top_k; ++j) {
        // (layer, expert) identity: experts of different layers are different weights.
        rows[i * r.top_k + j] = slot * r.num_experts + r.experts[visual_rows_[i] * r.top_k + j];
      }
    }
  }
  if (next_ != nullptr) next_->OnRouting(phase, layer, hidden, r);
}

absl::StatusOr<std::vector<int64_t>> CompressionSession::SelectRanked(
    int64_t first, const std::vector<int64_t>& ranked) const {
  if (ranked.empty()) return std::vector<int64_t>{};
  CompressionInput in;
  in.num_tokens = static_cast<int64_t>(ranked.size());
  std::vector<float> saliency;
  for (int64_t i : ranked) saliency.push_back(saliency_[first + i]);
  in.saliency = saliency;
  std::vector<int> experts;
  if (compressor_->needs_routing()) {
    const int slots = static_cast<int>(routing_.size());
    const int per_token = slots * top_k_;
    experts.assign(ranked.size() * per_token, 0);
    for (size_t k = 0; k < ranked.size(); ++k) {
      for (int s = 0; s < slots; ++s) {
        std::copy_n(routing_[s].data() + (first + ranked[k]) * top_k_, top_k_,
                    experts.data() + k * per_token + s * top_k_);
      }
    }
    in.active_experts = experts;
    in.experts_per_token = per_token;
  }
  VISMOE_ASSIGN_OR_RETURN(std::vector<int64_t> kept, compressor_->Select(in));
  for (int64_t& k : kept) k = ranked[k];
  return kept;
}

absl::StatusOr<std::vector<int64_t>> CompressionSession::KeptRows() {
  const auto start = std::chrono::steady_clock::now();
  int64_t total = 0;
  for (int64_t c : tokens_per_image_) total += c;
  if (total != visual_before() || static_cast<int64_t>(saliency_.size()) != total ||
      (!layout_.empty() && static_cast<int64_t>(layout_.size()) != total)) {
    return absl::InvalidArgumentError(
        absl::StrCat("token compression: ", visual_before(), " image tokens in the prompt, ", total,
                     " by tokens_per_image, ", saliency_.size(), " saliency entries, ",
                     layout_.size(), " layout entries"));
  }
  if (compressor_->needs_routing() && routing_.empty() && total > 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("token compressor '", compressor_->name(),
                     "' needs the routing of at least one pinned MoE layer before decoder layer ",
                     compress_before_layer_));
  }
  std::vector<bool> keep_row(tokens_.size(), true);
  for (int64_t r : visual_rows_) keep_row[r] = false;
  kept_visual_.clear();
  int64_t first = 0;
  for (int64_t count : tokens_per_image_) {
    std::vector<bool> keep(static_cast<size_t>(count), false);
    std::vector<int64_t> ranked;
    for (int64_t i = 0; i < count; ++i) {
      if (!layout_.empty() && layout_[first + i] != 0) {
        keep[i] = true;
      } else {
        ranked.push_back(i);
      }
    }
    VISMOE_ASSIGN_OR_RETURN(const std::vector<int64_t> kept, SelectRanked(first, ranked));
    for (int64_t i : kept) keep[i] = true;
    for (int64_t i = 0; i < count; ++i) {
      if (!keep[i]) continue;
      keep_row[visual_rows_[first + i]] = true;
      kept_visual_.push_back(first + i);
    }
    first += count;
  }
  std::vector<int64_t> rows;
  for (size_t t = 0; t < keep_row.size(); ++t) {
    if (keep_row[t]) rows.push_back(static_cast<int64_t>(t));
  }
  visual_after_ = static_cast<int64_t>(kept_visual_.size());
  seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return rows;
}

}  // namespace vismoe
