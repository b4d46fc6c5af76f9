#include "engine/arch/qwen3_vl_vision.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/ops/cpu/activations.h"
#include "engine/ops/cpu/attention.h"
#include "engine/ops/cpu/layer_norm.h"
#include "engine/ops/cpu/linear.h"

namespace vismoe {
namespace {

// transformers' Qwen3-VL vision config default (rope_parameters.rope_theta);
// published config.json files do not carry it.
constexpr double kVisionRopeTheta = 10000.0;

// Patch (row, col) of the i-th patch of one frame, in merge-block order
// (block_row, block_col, in_row, in_col) as the processor emits them.
void PatchRowCol(int64_t i, int64_t w, int merge, int64_t* row, int64_t* col) {
  const int64_t blocks_w = w / merge;
  const int64_t in_col = i % merge;
  const int64_t in_row = (i / merge) % merge;
  const int64_t block_col = (i / (merge * merge)) % blocks_w;
  const int64_t block_row = i / (int64_t{merge} * merge * blocks_w);
  *row = block_row * merge + in_row;
  *col = block_col * merge + in_col;
}

class WeightReader {
 public:
  WeightReader(const Checkpoint& ckpt, const std::string& prefix) : ckpt_(ckpt), prefix_(prefix) {}
  absl::Status Read(const std::string& name, const Shape& shape, TensorView* out) const {
    auto t = ckpt_.Get(prefix_ + name, shape);
    if (!t.ok()) return t.status();
    *out = *t;
    return absl::OkStatus();
  }

 private:
  const Checkpoint& ckpt_;
  const std::string& prefix_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Qwen3VlVisionModel>> Qwen3VlVisionModel::Create(
    const ModelConfig& config, const Checkpoint& checkpoint, ThreadPool* pool,
    const std::string& prefix) {
  if (!config.has_vision) {
    return absl::InvalidArgumentError("Qwen3VlVisionModel: the config has no vision_config");
  }
  const VisionConfig& vc = config.vision;
  const int64_t hd = vc.hidden_size;
  if (vc.num_heads < 1 || hd % vc.num_heads != 0 || (hd / vc.num_heads) % 4 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "vision_config: head_dim = hidden_size / num_heads must be a multiple of 4, got ", hd,
        " / ", vc.num_heads));
  }
  if (vc.spatial_merge_size < 1) {
    return absl::InvalidArgumentError("vision_config.spatial_merge_size must be >= 1");
  }
  std::unique_ptr<Qwen3VlVisionModel> m(new Qwen3VlVisionModel(vc, pool));
  const WeightReader r(checkpoint, prefix);
  const int64_t inter = vc.intermediate_size;
  const int64_t mh = hd * vc.spatial_merge_size * vc.spatial_merge_size;
  const int64_t out = vc.out_hidden_size;
  VISMOE_RETURN_IF_ERROR(r.Read(
      "patch_embed.proj.weight",
      {hd, vc.in_channels, vc.temporal_patch_size, vc.patch_size, vc.patch_size}, &m->patch_w_));
  m->patch_w_.shape = {hd, m->patch_dim()};  // the Conv3d as a Linear
  VISMOE_RETURN_IF_ERROR(r.Read("patch_embed.proj.bias", {hd}, &m->patch_b_));
  VISMOE_RETURN_IF_ERROR(
      r.Read("pos_embed.weight", {vc.num_position_embeddings, hd}, &m->pos_embed_));
  m->blocks_.resize(vc.depth);
  for (int i = 0; i < vc.depth; ++i) {
    Block& b = m->blocks_[i];
    const std::string p = absl::StrCat("blocks.", i, ".");
    VISMOE_RETURN_IF_ERROR(r.Read(p + "norm1.weight", {hd}, &b.norm1_w));
    VISMOE_RETURN_IF_ERROR(r.Read(p + "norm1.bias", {hd}, &b.norm1_b));
    VISMOE_RETURN_IF_ERROR(r.Read(p + "norm2.weight", {hd}, &b.norm2_w));
    VISMOE_RETURN_IF_ERROR(r.Read(p + "norm2.bias", {hd}, &b.norm2_b));
    VISMOE_RETURN_IF_ERROR(r.Read(p + "attn.qkv.weight", {3 * hd, hd}, &b.qkv_w));
    VISMOE_RETURN_IF_ERROR(r.Read(p + "attn.qkv.bias", {3 * hd}, &b.qkv_b));
    VISMOE_RETURN_IF_ERROR(r.Read(p + "attn.proj.weight", {hd, hd}, &b.proj_w));
    VISMOE_RETURN_IF_ERROR(r.Read(p + "attn.proj.bias", {hd}, &b.proj_b));
    VISMOE_RETURN_IF_ERROR(r.Read(p + "mlp.linear_fc1.weight", {inter, hd}, &b.fc1_w));
    VISMOE_RETURN_IF_ERROR(r.Read(p + "mlp.linear_fc1.bias", {inter}, &b.fc1_b));
    VISMOE_RETURN_IF_ERROR(r.Read(p + "mlp.linear_fc2.weight", {hd, inter}, &b.fc2_w));
    VISMOE_RETURN_IF_ERROR(r.Read(p + "mlp.linear_fc2.bias", {hd}, &b.fc2_b));
  }
  auto read_merger = [&](const std::string& p, int64_t norm_dim, Merger* mg) -> absl::Status {
    VISMOE_RETURN_IF_ERROR(r.Read(p + "norm.weight", {norm_dim}, &mg->norm_w));
    VISMOE_RETURN_IF_ERROR(r.Read(p + "norm.bias", {norm_dim}, &mg->norm_b));
    VISMOE_RETURN_IF_ERROR(r.Read(p + "linear_fc1.weight", {mh, mh}, &mg->fc1_w));
    VISMOE_RETURN_IF_ERROR(r.Read(p + "linear_fc1.bias", {mh}, &mg->fc1_b));
    VISMOE_RETURN_IF_ERROR(r.Read(p + "linear_fc2.weight", {out, mh}, &mg->fc2_w));
    return r.Read(p + "linear_fc2.bias", {out}, &mg->fc2_b);
  };
  VISMOE_RETURN_IF_ERROR(read_merger("merger.", hd, &m->merger_));
  m->deepstack_.resize(vc.deepstack_visual_indexes.size());
  for (size_t k = 0; k < m->deepstack_.size(); ++k) {
    VISMOE_RETURN_IF_ERROR(
        read_merger(absl::StrCat("deepstack_merger_list.", k, "."), mh, &m->deepstack_[k]));
  }
  return m;
}

int64_t Qwen3VlVisionModel::patch_dim() const {
  return int64_t{config_.in_channels} * config_.temporal_patch_size * config_.patch_size *
         config_.patch_size;
}

void Qwen3VlVisionModel::AddPositionEmbedding(absl::Span<const GridThw> grids, float* x) const {
  const int64_t side =
      static_cast<int64_t>(std::lround(std::sqrt(config_.num_position_embeddings)));
  const int64_t hd = config_.hidden_size;
  const int merge = config_.spatial_merge_size;
  std::vector<float> row_buf(static_cast<size_t>(hd));
  std::vector<float> e(static_cast<size_t>(hd));
  // Bilinear, align_corners: src = i * (side - 1) / max(n - 1, 1) in fp32, as
  // transformers' get_vision_interpolation_indices_and_weights.
  auto taps = [side](int64_t i, int64_t n, int64_t idx[2], float wt[2]) {
    const float src =
        static_cast<float>(i * (side - 1)) / static_cast<float>(std::max<int64_t>(n - 1, 1));
    const float fl = std::floor(src);
    for (int o = 0; o < 2; ++o) {
      idx[o] = std::min<int64_t>(std::max<int64_t>(static_cast<int64_t>(fl) + o, 0), side - 1);
      wt[o] = std::max(0.0f, 1.0f - std::fabs(src - fl - static_cast<float>(o)));
    }
  };
  int64_t base = 0;
  for (const GridThw& g : grids) {
    const int64_t frame = g.h * g.w;
    for (int64_t i = 0; i < frame; ++i) {
      int64_t row, col;
      PatchRowCol(i, g.w, merge, &row, &col);
      int64_t hi[2], wi[2];
      float hw[2], ww[2];
      taps(row, g.h, hi, hw);
      taps(col, g.w, wi, ww);
      std::fill(row_buf.begin(), row_buf.end(), 0.0f);
      for (int a = 0; a < 2; ++a) {
        for (int b = 0; b < 2; ++b) {
          const float wgt = hw[a] * ww[b];
          ToFloat(pos_embed_.dtype, pos_embed_.Row(hi[a] * side + wi[b]).data, e.size(), e.data());
          for (int64_t d = 0; d < hd; ++d) row_buf[d] += e[d] * wgt;
        }
      }
      for (int64_t t = 0; t < g.t; ++t) {
        float* xr = x + (base + t * frame + i) * hd;
        for (int64_t d = 0; d < hd; ++d) xr[d] += row_buf[d];
      }
    }
    base += g.t * frame;
  }
}

void Qwen3VlVisionModel::RotaryTables(absl::Span<const GridThw> grids, std::vector<float>* cos,
                                      std::vector<float>* sin) const {
  const int64_t head_dim = config_.hidden_size / config_.num_heads;
  const int64_t quarter = head_dim / 4;  // frequencies per axis
  std::vector<float> inv_freq(static_cast<size_t>(quarter));
  for (int64_t j = 0; j < quarter; ++j) {
    const float expo = static_cast<float>(2 * j) / static_cast<float>(head_dim / 2);
    inv_freq[j] = 1.0f / static_cast<float>(std::pow(kVisionRopeTheta, static_cast<double>(expo)));
  }
  int64_t n = 0;
  for (const GridThw& g : grids) n += g.num_patches();
  cos->assign(static_cast<size_t>(n * head_dim), 0.0f);
  sin->assign(static_cast<size_t>(n * head_dim), 0.0f);
  int64_t r = 0;
  for (const GridThw& g : grids) {
    for (int64_t t = 0; t < g.t; ++t) {
      for (int64_t i = 0; i < g.h * g.w; ++i, ++r) {
        int64_t row, col;
        PatchRowCol(i, g.w, config_.spatial_merge_size, &row, &col);
        float* c = cos->data() + r * head_dim;
        float* s = sin->data() + r * head_dim;
        // Layout [row freqs | col freqs] repeated twice (rotate_half pairs).
        for (int64_t j = 0; j < quarter; ++j) {
          const float fr = static_cast<float>(row) * inv_freq[j];
          const float fc = static_cast<float>(col) * inv_freq[j];
          for (int64_t rep = 0; rep < 2; ++rep) {
            c[rep * 2 * quarter + j] = std::cos(fr);
            s[rep * 2 * quarter + j] = std::sin(fr);
            c[rep * 2 * quarter + quarter + j] = std::cos(fc);
            s[rep * 2 * quarter + quarter + j] = std::sin(fc);
          }
        }
      }
    }
  }
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
  int64_t n = 0;
  for (size_t i = 0; i < grids.size(); ++i) {
    const GridThw& g = grids[i];
    if (g.t < 1 || g.h < 1 || g.w < 1 || g.h % merge != 0 || g.w % merge != 0) {
      return absl::InvalidArgumentError(absl::StrCat("vision: image ", i, " grid (", g.t, ", ", g.h,
                                                     ", ", g.w, ") is not a positive ",
                                                     "multiple of the merge size ", merge));
    }
    n += g.num_patches();
    out.tokens_per_image.push_back(g.num_patches() / unit);
  }
  if (static_cast<int64_t>(patches.size()) != n * pd) {
    return absl::InvalidArgumentError(absl::StrCat("vision: got ", patches.size(),
                                                   " patch values, the grids need ", n, " x ", pd));
  }
  const int64_t hd = config_.hidden_size;
  std::vector<float> x(static_cast<size_t>(n * hd));
  cpu::Linear(pool_, patches.data(), n, pd, patch_w_, &patch_b_, x.data());
  AddPositionEmbedding(grids, x.data());
  std::vector<float> cos, sin;
  RotaryTables(grids, &cos, &sin);

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
  out.saliency.assign(static_cast<size_t>(out.num_tokens), 0.0f);
  for (int64_t j = 0; j < out.num_tokens; ++j) {
    float s = 0.0f;
    for (int64_t u = 0; u < unit; ++u) s += patch_saliency[j * unit + u];
    out.saliency[j] = s / static_cast<float>(unit);
  }
  return out;
}

}  // namespace vismoe
