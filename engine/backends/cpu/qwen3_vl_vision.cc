#include "engine/backends/cpu/qwen3_vl_vision.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/model/qwen3_vl_vision_tables.h"
#include "engine/model/vision_weights.h"
#include "engine/ops/cpu/activations.h"
#include "engine/ops/cpu/attention.h"
#include "engine/ops/cpu/layer_norm.h"
#include "engine/ops/cpu/linear.h"

namespace vismoe {
absl::StatusOr<std::unique_ptr<Qwen3VlVisionModel>> Qwen3VlVisionModel::Create(
    const ModelConfig& config, const Checkpoint& checkpoint, ThreadPool* pool) {
  VISMOE_RETURN_IF_ERROR(CheckVisionConfig(config, "Qwen3VlVisionModel"));
  VISMOE_ASSIGN_OR_RETURN(VisionWeights w, VisionWeights::Load(config, checkpoint));
  std::unique_ptr<Qwen3VlVisionModel> m(new Qwen3VlVisionModel(config.vision, pool));
  m->patch_w_ = w.patch_w;
  m->patch_w_.shape = {config.vision.hidden_size, m->patch_dim()};  // the Conv3d as a Linear
  m->patch_b_ = w.patch_b;
  m->pos_embed_ = w.pos_embed;
  m->blocks_ = std::move(w.blocks);
  m->merger_ = w.merger;
  m->deepstack_ = std::move(w.deepstack);
  return m;
}

int64_t Qwen3VlVisionModel::patch_dim() const {
  return int64_t{config_.in_channels} * config_.temporal_patch_size * config_.patch_size *
         config_.patch_size;
}

void Qwen3VlVisionModel::RunBlock(const Block& b, absl::Span<const GridThw> grids,
                                  const std::vector<float>& cos, const std::vector<float>& sin,
                                  int64_t n, float* x, float* patch_saliency) const {
  const int64_t hd = config_.hidden_size;
  const int heads = config_.num_heads;
  const int64_t head_dim = hd / heads;
  const int64_t half = head_dim / 2;
  std::vector<float> h(static_cast<size_t>(n * hd));
  cpu::LayerNorm(pool_, x, n, hd, b.norm1_w, b.norm1_b, config_.layer_norm_eps, h.data());
  std::vector<float> qkv(static_cast<size_t>(n * 3 * hd));
  cpu::Linear(pool_, h.data(), n, hd, b.qkv_w, &b.qkv_b, qkv.data());
  // rotate_half rotary on q and k of every head, in place.
  ParallelFor(pool_, n, 64, [&](int64_t begin, int64_t end) {
    std::vector<float> tmp(static_cast<size_t>(head_dim));
    for (int64_t r = begin; r < end; ++r) {
      const float* c = cos.data() + r * head_dim;
      const float* s = sin.data() + r * head_dim;
      for (int part = 0; part < 2; ++part) {
        for (int hh = 0; hh < heads; ++hh) {
          float* v = qkv.data() + r * 3 * hd + part * hd + hh * head_dim;
          for (int64_t d = 0; d < head_dim; ++d) {
            const float rot = d < half ? -v[d + half] : v[d - half];
            tmp[d] = v[d] * c[d] + rot * s[d];
          }
          std::copy(tmp.begin(), tmp.end(), v);
        }
      }
    }
  });
  // Bidirectional attention within each frame.
  cpu::AttentionShape shape;
  shape.num_heads = heads;
  shape.num_kv_heads = heads;
  shape.head_dim = static_cast<int>(head_dim);
  shape.q_row_stride = 3 * hd;
  shape.kv_row_stride = 3 * hd;
  int64_t start = 0;
  for (const GridThw& g : grids) {
    const int64_t frame = g.h * g.w;
    for (int64_t t = 0; t < g.t; ++t, start += frame) {
      const float* base = qkv.data() + start * 3 * hd;
      cpu::Attention(pool_, shape, base, frame, base + hd, base + 2 * hd, frame,
                     /*causal=*/false, /*q_pos0=*/0, h.data() + start * hd,
                     patch_saliency == nullptr ? nullptr : patch_saliency + start);
    }
  }
  std::vector<float> o(static_cast<size_t>(n * hd));
  cpu::Linear(pool_, h.data(), n, hd, b.proj_w, &b.proj_b, o.data());
  for (int64_t i = 0; i < n * hd; ++i) x[i] += o[i];

  cpu::LayerNorm(pool_, x, n, hd, b.norm2_w, b.norm2_b, config_.layer_norm_eps, h.data());
  const int64_t inter = config_.intermediate_size;
  std::vector<float> mid(static_cast<size_t>(n * inter));
  cpu::Linear(pool_, h.data(), n, hd, b.fc1_w, &b.fc1_b, mid.data());
  if (config_.hidden_act == "gelu") {
    cpu::GeluErfInPlace(pool_, mid.data(), n * inter);
  } else {
    cpu::GeluTanhInPlace(pool_, mid.data(), n * inter);
  }
  cpu::Linear(pool_, mid.data(), n, inter, b.fc2_w, &b.fc2_b, o.data());
  for (int64_t i = 0; i < n * hd; ++i) x[i] += o[i];
}

void Qwen3VlVisionModel::RunMerger(const Merger& m, bool postshuffle_norm, const float* x,
                                   int64_t n, float* out) const {
  const int64_t hd = config_.hidden_size;
  const int64_t unit = int64_t{config_.spatial_merge_size} * config_.spatial_merge_size;
  const int64_t mh = hd * unit;
  const int64_t rows = n / unit;
  std::vector<float> h(static_cast<size_t>(n * hd));
  // Consecutive `unit` patch rows form one merged row, so both norms act on
  // the same contiguous buffer, just with different row widths.
  if (postshuffle_norm) {
    cpu::LayerNorm(pool_, x, rows, mh, m.norm_w, m.norm_b, config_.layer_norm_eps, h.data());
  } else {
    cpu::LayerNorm(pool_, x, n, hd, m.norm_w, m.norm_b, config_.layer_norm_eps, h.data());
  }
  std::vector<float> mid(static_cast<size_t>(rows * mh));
  cpu::Linear(pool_, h.data(), rows, mh, m.fc1_w, &m.fc1_b, mid.data());
  cpu::GeluErfInPlace(pool_, mid.data(), rows * mh);  // nn.GELU(): exact
  cpu::Linear(pool_, mid.data(), rows, mh, m.fc2_w, &m.fc2_b, out);
}

absl::StatusOr<VisionOutput> Qwen3VlVisionModel::Forward(absl::Span<const float> patches,
                                                         absl::Span<const GridThw> grids) const {
  const int merge = config_.spatial_merge_size;
  const int64_t unit = int64_t{merge} * merge;
  const int64_t pd = patch_dim();
  VisionOutput out;
  out.out_hidden = config_.out_hidden_size;
  VISMOE_ASSIGN_OR_RETURN(
      const int64_t n, CheckVisionInput(config_, pd, patches.size(), grids, &out.tokens_per_image));
  const int64_t hd = config_.hidden_size;
  std::vector<float> x(static_cast<size_t>(n * hd));
  cpu::Linear(pool_, patches.data(), n, pd, patch_w_, &patch_b_, x.data());
  AddVisionPositionEmbedding(config_, pos_embed_, grids, x.data());
  std::vector<float> cos, sin;
  VisionRotaryTables(config_, grids, &cos, &sin);

  out.num_tokens = n / unit;
  const int64_t out_size = out.num_tokens * config_.out_hidden_size;
  out.deepstack.assign(deepstack_.size(), std::vector<float>());
  std::vector<float> patch_saliency(static_cast<size_t>(n), 0.0f);
  for (int i = 0; i < config_.depth; ++i) {
    const bool last = i + 1 == config_.depth;
    RunBlock(blocks_[i], grids, cos, sin, n, x.data(), last ? patch_saliency.data() : nullptr);
    for (size_t k = 0; k < deepstack_.size(); ++k) {
      if (config_.deepstack_visual_indexes[k] != i) continue;
      out.deepstack[k].resize(static_cast<size_t>(out_size));
      RunMerger(deepstack_[k], /*postshuffle_norm=*/true, x.data(), n, out.deepstack[k].data());
    }
  }
  out.embeds.resize(static_cast<size_t>(out_size));
  RunMerger(merger_, /*postshuffle_norm=*/false, x.data(), n, out.embeds.data());
  MergePatchSaliency(patch_saliency.data(), out.num_tokens, unit, &out.saliency);
  return out;
}

}  // namespace vismoe
