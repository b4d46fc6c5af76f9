#include "engine/arch/qwen3_vl_moe.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/backends/cpu/cpu_decoder_ops.h"
#include "engine/core/status_macros.h"
#include "engine/model/arch_spec.h"

namespace vismoe {

absl::StatusOr<std::unique_ptr<Qwen3VlMoeModel>> Qwen3VlMoeModel::Create(
    const ModelConfig& config, std::unique_ptr<DecoderOps> ops) {
  VISMOE_RETURN_IF_ERROR(ArchSpec::For(config).status());
  if (ops == nullptr) return absl::InvalidArgumentError("Qwen3VlMoeModel: no backend ops");
  return std::unique_ptr<Qwen3VlMoeModel>(new Qwen3VlMoeModel(config, std::move(ops)));
}

absl::StatusOr<std::unique_ptr<Qwen3VlMoeModel>> Qwen3VlMoeModel::Create(
    const ModelConfig& config, const Checkpoint& checkpoint, ThreadPool* pool) {
  VISMOE_ASSIGN_OR_RETURN(std::unique_ptr<cpu::CpuDecoderOps> ops,
                          cpu::CpuDecoderOps::Create(config, checkpoint, pool));
  return Create(config, std::move(ops));
}

std::string Qwen3VlMoeModel::TextPrefix(const ModelConfig& config) {
  absl::StatusOr<ArchSpec> spec = ArchSpec::For(config);
  return spec.ok() ? spec->text_prefix : "model.";
}

std::unique_ptr<KvCache> Qwen3VlMoeModel::NewKvCache(int64_t capacity) const {
  absl::StatusOr<std::unique_ptr<KvCache>> cache = ops_->CreateKvCache(capacity);
  return cache.ok() ? std::move(*cache) : nullptr;
}

absl::StatusOr<Qwen3VlMoeModel::StepState> Qwen3VlMoeModel::Plan(const DecoderInput& input,
                                                                 const KvCache& cache) const {
  const TextConfig& c = config_.text;
  StepState s;
  s.n = static_cast<int64_t>(input.tokens.size());
  const int64_t n = s.n;
  if (n == 0) return absl::InvalidArgumentError("Forward: no tokens");
  VISMOE_RETURN_IF_ERROR(ops_->CheckStepSize(n));
  VISMOE_RETURN_IF_ERROR(cache.CheckRoom(n));
  s.positions = input.positions;
  if (s.positions.empty()) {
    s.positions.resize(3 * n);
    for (int a = 0; a < 3; ++a) {
      for (int64_t i = 0; i < n; ++i) s.positions[a * n + i] = cache.length() + i;
    }
  } else if (static_cast<int64_t>(s.positions.size()) != 3 * n) {
    return absl::InvalidArgumentError(
        absl::StrCat("Forward: positions has ", s.positions.size(), " entries, expected 3 * ", n));
  }
  for (int64_t t = 0; t < n; ++t) {
    const int id = input.tokens[t];
    if (id < 0 || id >= c.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Forward: token id ", id, " outside the vocabulary [0, ", c.vocab_size, ")"));
    }
    if (input.visual_embeds != nullptr && id == config_.image_token_id) s.visual_rows.push_back(t);
  }
  if (input.visual_embeds != nullptr &&
      static_cast<int64_t>(s.visual_rows.size()) != input.num_visual) {
    return absl::InvalidArgumentError(absl::StrCat("Forward: ", s.visual_rows.size(),
                                                   " image tokens but ", input.num_visual,
                                                   " visual embeddings"));
  }
  if (static_cast<int64_t>(input.deepstack.size()) > c.num_hidden_layers) {
    return absl::InvalidArgumentError("Forward: more DeepStack features than decoder layers");
  }
  return s;
}

absl::Status Qwen3VlMoeModel::Compress(const DecoderInput& input, StepState& s,
                                       DecoderStep& step) const {
  VISMOE_ASSIGN_OR_RETURN(const std::vector<int64_t> kept, input.select_kept_rows());
  const int64_t old_n = s.n;
  const int64_t m = static_cast<int64_t>(kept.size());
  if (m == 0) return absl::InvalidArgumentError("Forward: token compression kept no rows");
  for (int64_t i = 0; i < m; ++i) {
    if (kept[i] < 0 || kept[i] >= old_n || (i > 0 && kept[i] <= kept[i - 1])) {
      return absl::InvalidArgumentError(absl::StrCat("Forward: kept row ", kept[i], " at index ", i,
                                                     " is out of [0, ", old_n,
                                                     ") or not strictly ascending"));
    }
  }
  std::vector<int64_t> new_row(old_n, -1);
  std::vector<int64_t> positions(3 * m);
  for (int64_t i = 0; i < m; ++i) {
    new_row[kept[i]] = i;
    for (int a = 0; a < 3; ++a) positions[a * m + i] = s.positions[a * old_n + kept[i]];
  }
  for (int64_t& r : s.visual_rows) r = r < 0 ? -1 : new_row[r];
  s.positions = std::move(positions);
  s.n = m;
  return step.KeepRows(kept, s.positions, s.visual_rows);
}

absl::Status Qwen3VlMoeModel::Moe(const DecoderInput& input, int layer, const StepState& s,
                                  DecoderStep& step, ExpertProvider* experts) const {
  RouterObserver* observer = input.observer;
  RouterResult routing;
  VISMOE_RETURN_IF_ERROR(step.Route(layer, observer != nullptr, &routing));
  for (int id : routing.experts) {
    if (id < 0 || id >= config_.text.num_experts) {
      return absl::InternalError(absl::StrCat("router returned expert ", id, " at layer ", layer));
    }
  }
  if (observer != nullptr) {
    VISMOE_ASSIGN_OR_RETURN(const float* hidden, step.HostRows(StepRows::kNormed));
    observer->OnRouting(input.phase, layer, hidden, routing);
  }
  VISMOE_RETURN_IF_ERROR(step.Experts(layer, input.phase, routing, experts));
  if (observer != nullptr) {
    VISMOE_ASSIGN_OR_RETURN(const float* out, step.HostRows(StepRows::kMoeOutput));
    observer->OnMoeOutput(input.phase, layer, out, s.n);
  }
  return step.AddMoeOutput();
}

absl::Status Qwen3VlMoeModel::Layer(const DecoderInput& input, int layer, const StepState& s,
                                    DecoderStep& step, ExpertProvider* experts) const {
  const bool moe = config_.text.IsMoeLayer(layer);
  VISMOE_RETURN_IF_ERROR(step.Norm(layer, NormSite::kInput));
  VISMOE_RETURN_IF_ERROR(step.Attention(layer));  // hs += attention
  if (moe && input.observer != nullptr) {
    VISMOE_ASSIGN_OR_RETURN(const float* residual, step.HostRows(StepRows::kResidual));
    input.observer->OnPostAttention(input.phase, layer, residual, s.n);
  }
  VISMOE_RETURN_IF_ERROR(step.Norm(layer, NormSite::kPostAttention));
  if (moe) {
    VISMOE_RETURN_IF_ERROR(Moe(input, layer, s, step, experts));  // hs += MoE
  } else {
    VISMOE_RETURN_IF_ERROR(step.DenseMlp(layer));  // hs += MLP
  }
  if (layer < static_cast<int>(input.deepstack.size()) && input.deepstack[layer] != nullptr) {
    VISMOE_RETURN_IF_ERROR(step.AddDeepStack(layer));
  }
  return absl::OkStatus();
}

absl::Status Qwen3VlMoeModel::Forward(const DecoderInput& input, KvCache* cache,
                                      ExpertProvider* experts, std::vector<float>* logits) const {
  VISMOE_ASSIGN_OR_RETURN(StepState s, Plan(input, *cache));
  const int64_t n_in = s.n;
  StepInput in;
  in.tokens = input.tokens;
  in.positions = s.positions;
  in.visual_rows = s.visual_rows;
  in.visual_embeds = input.visual_embeds;
  in.deepstack = input.deepstack;
  VISMOE_ASSIGN_OR_RETURN(std::unique_ptr<DecoderStep> step, ops_->BeginStep(in, cache));
  bool compressed = false;
  for (int l = 0; l < config_.text.num_hidden_layers; ++l) {
    if (input.is_cancelled && input.is_cancelled()) return absl::CancelledError("cancelled");
    if (input.select_kept_rows && l == input.compress_before_layer) {
      VISMOE_RETURN_IF_ERROR(Compress(input, s, *step));
      compressed = true;
    }
    VISMOE_RETURN_IF_ERROR(Layer(input, l, s, *step, experts));
  }
  // A backend's asynchronous errors surface in Logits at the latest: the cache
  // advances only after it.
  VISMOE_RETURN_IF_ERROR(step->Logits(input.all_logits, logits));
  if (compressed) {
    cache->Advance(n_in, input.compress_before_layer, s.n);
  } else {
    cache->Advance(n_in);
  }
  return absl::OkStatus();
}

}  // namespace vismoe
