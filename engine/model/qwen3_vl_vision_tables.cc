#include "engine/model/qwen3_vl_vision_tables.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

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

}  // namespace

absl::Status CheckVisionConfig(const ModelConfig& config, const char* who) {
  if (!config.has_vision) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": the config has no vision_config"));
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
  return absl::OkStatus();
}

absl::StatusOr<int64_t> CheckVisionInput(const VisionConfig& config, int64_t patch_dim,
                                         size_t patch_values, absl::Span<const GridThw> grids,
                                         std::vector<int64_t>* tokens_per_image) {
  const int merge = config.spatial_merge_size;
  const int64_t unit = int64_t{merge} * merge;
  tokens_per_image->clear();
  int64_t n = 0;
  for (size_t i = 0; i < grids.size(); ++i) {
    const GridThw& g = grids[i];
    if (g.t < 1 || g.h < 1 || g.w < 1 || g.h % merge != 0 || g.w % merge != 0) {
      return absl::InvalidArgumentError(absl::StrCat("vision: image ", i, " grid (", g.t, ", ", g.h,
                                                     ", ", g.w, ") is not a positive ",
                                                     "multiple of the merge size ", merge));
    }
    n += g.num_patches();
    tokens_per_image->push_back(g.num_patches() / unit);
  }
  if (static_cast<int64_t>(patch_values) != n * patch_dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "vision: got ", patch_values, " patch values, the grids need ", n, " x ", patch_dim));
  }
  return n;
}

void AddVisionPositionEmbedding(const VisionConfig& config, const TensorView& pos_embed,
                                absl::Span<const GridThw> grids, float* x) {
  const int64_t side = static_cast<int64_t>(std::lround(std::sqrt(config.num_position_embeddings)));
  const int64_t hd = config.hidden_size;
  const int merge = config.spatial_merge_size;
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
          ToFloat(pos_embed.dtype, pos_embed.Row(hi[a] * side + wi[b]).data, e.size(), e.data());
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

void VisionRotaryTables(const VisionConfig& config, absl::Span<const GridThw> grids,
                        std::vector<float>* cos, std::vector<float>* sin) {
  const int64_t head_dim = config.hidden_size / config.num_heads;
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
        PatchRowCol(i, g.w, config.spatial_merge_size, &row, &col);
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

void MergePatchSaliency(const float* patch_saliency, int64_t num_tokens, int64_t unit,
                        std::vector<float>* saliency) {
  saliency->assign(static_cast<size_t>(num_tokens), 0.0f);
  for (int64_t j = 0; j < num_tokens; ++j) {
    float s = 0.0f;
    for (int64_t u = 0; u < unit; ++u) s += patch_saliency[j * unit + u];
    (*saliency)[j] = s / static_cast<float>(unit);
  }
}

}  // namespace vismoe
