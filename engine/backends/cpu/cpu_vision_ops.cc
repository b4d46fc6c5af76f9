#include "engine/backends/cpu/cpu_vision_ops.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "engine/core/status_macros.h"
#include "engine/model/qwen3_vl_vision_tables.h"
#include "engine/ops/cpu/activations.h"
#include "engine/ops/cpu/attention.h"
#include "engine/ops/cpu/layer_norm.h"
#include "engine/ops/cpu/linear.h"

namespace vismoe::cpu {
namespace {

// One Forward on the host: hs [n, hidden] and the last block's patch saliency.
class CpuVisionStep final : public VisionStep {
 public:
  // REQUIRES: n == VisionStepRows(input).
  CpuVisionStep(const CpuVisionOps& ops, const VisionStepInput& in, int64_t n)
      : c_(ops.config()),
        w_(ops.weights()),
        pool_(ops.pool()),
        in_(in),
        n_(n),
        hs_(static_cast<size_t>(n_ * c_.hidden_size)),
        saliency_(static_cast<size_t>(n_), 0.0f) {
    const int64_t pd = static_cast<int64_t>(in.patches.size()) / n_;
    Linear(pool_, in.patches.data(), n_, pd, w_.patch_w, &w_.patch_b, hs_.data());
    for (size_t i = 0; i < hs_.size(); ++i) hs_[i] += in.position[i];
  }

  absl::Status Attention(int block, bool saliency) override;
  absl::Status Mlp(int block) override;
  absl::Status Merge(int which, std::vector<float>* out) override;
  absl::Status Finish(std::vector<float>* patch_saliency) override {
    *patch_saliency = saliency_;
    return absl::OkStatus();
  }
  absl::StatusOr<const float*> HostResidual() override { return hs_.data(); }

 private:
  // rotate_half rotary on q and k of every head of qkv [n, 3 * hidden], in place.
  void Rotary(std::vector<float>& qkv) const;

  const VisionConfig& c_;
  const VisionWeights& w_;
  ThreadPool* pool_;
  const VisionStepInput in_;
  const int64_t n_;
  std::vector<float> hs_;
  std::vector<float> saliency_;
};

void CpuVisionStep::Rotary(std::vector<float>& qkv) const {
  const int64_t hd = c_.hidden_size;
  const int heads = c_.num_heads;
  const int64_t head_dim = hd / heads;
  const int64_t half = head_dim / 2;
  ParallelFor(pool_, n_, 64, [&](int64_t begin, int64_t end) {
    std::vector<float> tmp(static_cast<size_t>(head_dim));
    for (int64_t r = begin; r < end; ++r) {
      const float* c = in_.cos.data() + r * head_dim;
      const float* s = in_.sin.data() + r * head_dim;
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
}

absl::Status CpuVisionStep::Attention(int block, bool saliency) {
  VISMOE_RETURN_IF_ERROR(CheckVisionIndex("block", block, w_.blocks.size()));
  const VisionBlockWeights& b = w_.blocks[block];
  const int64_t hd = c_.hidden_size;
  std::vector<float> h(static_cast<size_t>(n_ * hd));
  LayerNorm(pool_, hs_.data(), n_, hd, b.norm1_w, b.norm1_b, c_.layer_norm_eps, h.data());
  std::vector<float> qkv(static_cast<size_t>(n_ * 3 * hd));
  Linear(pool_, h.data(), n_, hd, b.qkv_w, &b.qkv_b, qkv.data());
  Rotary(qkv);
  // Bidirectional attention within each frame.
  AttentionShape shape;
  shape.num_heads = c_.num_heads;
  shape.num_kv_heads = c_.num_heads;
  shape.head_dim = static_cast<int>(hd / c_.num_heads);
  shape.q_row_stride = 3 * hd;
  shape.kv_row_stride = 3 * hd;
  int64_t start = 0;
  for (const GridThw& g : in_.grids) {
    const int64_t frame = g.h * g.w;
    for (int64_t t = 0; t < g.t; ++t, start += frame) {
      const float* base = qkv.data() + start * 3 * hd;
      cpu::Attention(pool_, shape, base, frame, base + hd, base + 2 * hd, frame,
                     /*causal=*/false, /*q_pos0=*/0, h.data() + start * hd,
                     saliency ? saliency_.data() + start : nullptr);
    }
  }
  std::vector<float> o(static_cast<size_t>(n_ * hd));
  Linear(pool_, h.data(), n_, hd, b.proj_w, &b.proj_b, o.data());
  for (size_t i = 0; i < hs_.size(); ++i) hs_[i] += o[i];
  return absl::OkStatus();
}

absl::Status CpuVisionStep::Mlp(int block) {
  VISMOE_RETURN_IF_ERROR(CheckVisionIndex("block", block, w_.blocks.size()));
  const VisionBlockWeights& b = w_.blocks[block];
  const int64_t hd = c_.hidden_size;
  const int64_t inter = c_.intermediate_size;
  std::vector<float> h(static_cast<size_t>(n_ * hd));
  LayerNorm(pool_, hs_.data(), n_, hd, b.norm2_w, b.norm2_b, c_.layer_norm_eps, h.data());
  std::vector<float> mid(static_cast<size_t>(n_ * inter));
  Linear(pool_, h.data(), n_, hd, b.fc1_w, &b.fc1_b, mid.data());
  if (c_.hidden_act == "gelu") {
    GeluErfInPlace(pool_, mid.data(), n_ * inter);
  } else {
    GeluTanhInPlace(pool_, mid.data(), n_ * inter);
  }
  std::vector<float> o(static_cast<size_t>(n_ * hd));
  Linear(pool_, mid.data(), n_, inter, b.fc2_w, &b.fc2_b, o.data());
  for (size_t i = 0; i < hs_.size(); ++i) hs_[i] += o[i];
  return absl::OkStatus();
}

absl::Status CpuVisionStep::Merge(int which, std::vector<float>* out) {
  if (which != kFinalMerger) {
    VISMOE_RETURN_IF_ERROR(CheckVisionIndex("DeepStack merger", which, w_.deepstack.size()));
  }
  const VisionMergerWeights& m = which == kFinalMerger ? w_.merger : w_.deepstack[which];
  const int64_t hd = c_.hidden_size;
  const int64_t unit = int64_t{c_.spatial_merge_size} * c_.spatial_merge_size;
  const int64_t mh = hd * unit;
  const int64_t rows = n_ / unit;
  std::vector<float> h(static_cast<size_t>(n_ * hd));
  // Consecutive `unit` patch rows form one merged row, so both norms act on
  // the same contiguous buffer, just with different row widths.
  if (which == kFinalMerger) {
    LayerNorm(pool_, hs_.data(), n_, hd, m.norm_w, m.norm_b, c_.layer_norm_eps, h.data());
  } else {
    LayerNorm(pool_, hs_.data(), rows, mh, m.norm_w, m.norm_b, c_.layer_norm_eps, h.data());
  }
  std::vector<float> mid(static_cast<size_t>(rows * mh));
  Linear(pool_, h.data(), rows, mh, m.fc1_w, &m.fc1_b, mid.data());
  GeluErfInPlace(pool_, mid.data(), rows * mh);  // nn.GELU(): exact
  out->resize(static_cast<size_t>(rows * c_.out_hidden_size));
  Linear(pool_, mid.data(), rows, mh, m.fc2_w, &m.fc2_b, out->data());
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<CpuVisionOps>> CpuVisionOps::Create(const ModelConfig& config,
                                                                   const Checkpoint& checkpoint,
                                                                   ThreadPool* pool) {
  VISMOE_RETURN_IF_ERROR(CheckVisionConfig(config, "CpuVisionOps"));
  VISMOE_ASSIGN_OR_RETURN(VisionWeights w, VisionWeights::Load(config, checkpoint));
  const VisionConfig& vc = config.vision;
  // The Conv3d as a Linear [hidden, patch_dim].
  w.patch_w.shape = {vc.hidden_size,
                     int64_t{vc.in_channels} * vc.temporal_patch_size * vc.patch_size *
                         vc.patch_size};
  return std::unique_ptr<CpuVisionOps>(new CpuVisionOps(vc, std::move(w), pool));
}

absl::StatusOr<std::unique_ptr<VisionStep>> CpuVisionOps::BeginStep(
    const VisionStepInput& input) const {
  VISMOE_ASSIGN_OR_RETURN(const int64_t n, VisionStepRows(config_, input));
  return std::unique_ptr<VisionStep>(new CpuVisionStep(*this, input, n));
}

}  // namespace vismoe::cpu
