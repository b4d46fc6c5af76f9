#include "engine/arch/deepseek_vl2_vision.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/ops/cpu/activations.h"
#include "engine/ops/cpu/attention.h"
#include "engine/ops/cpu/layer_norm.h"
#include "engine/ops/cpu/linear.h"

namespace vismoe {
absl::StatusOr<std::unique_ptr<DeepseekVl2Vision>> DeepseekVl2Vision::Create(
    const Vl2VisionConfig& c, const Checkpoint& ckpt, ThreadPool* pool) {
  std::unique_ptr<DeepseekVl2Vision> v(new DeepseekVl2Vision(c, pool));
  const int64_t w = c.width, p = c.patch_size, g = c.grid();
  auto get = [&](const std::string& name, const Shape& shape) { return ckpt.Get(name, shape); };
  VISMOE_ASSIGN_OR_RETURN(v->patch_w_, get("vision.patch_embed.proj.weight", {w, 3, p, p}));
  v->patch_w_.shape = {w, 3 * p * p};  // the convolution as one Linear over a flattened patch
  VISMOE_ASSIGN_OR_RETURN(v->patch_b_, get("vision.patch_embed.proj.bias", {w}));
  VISMOE_ASSIGN_OR_RETURN(const TensorView pos, get("vision.pos_embed", {1, g * g, w}));
  v->pos_.resize(static_cast<size_t>(pos.numel()));
  ToFloat(pos.dtype, pos.data, v->pos_.size(), v->pos_.data());
  VISMOE_ASSIGN_OR_RETURN(v->norm_w_, get("vision.norm.weight", {w}));
  VISMOE_ASSIGN_OR_RETURN(v->norm_b_, get("vision.norm.bias", {w}));
  for (int l = 0; l < c.layers; ++l) {
    const std::string b = absl::StrCat("vision.blocks.", l, ".");
    Block k;
    const int64_t f = c.mlp_dim;
    for (auto [name, shape, out] : {std::tuple{"norm1.weight", Shape{w}, &k.norm1_w},
                                    {"norm1.bias", Shape{w}, &k.norm1_b},
                                    {"attn.qkv.weight", Shape{3 * w, w}, &k.qkv_w},
                                    {"attn.qkv.bias", Shape{3 * w}, &k.qkv_b},
                                    {"attn.proj.weight", Shape{w, w}, &k.proj_w},
                                    {"attn.proj.bias", Shape{w}, &k.proj_b},
                                    {"norm2.weight", Shape{w}, &k.norm2_w},
                                    {"norm2.bias", Shape{w}, &k.norm2_b},
                                    {"mlp.fc1.weight", Shape{f, w}, &k.fc1_w},
                                    {"mlp.fc1.bias", Shape{f}, &k.fc1_b},
                                    {"mlp.fc2.weight", Shape{w, f}, &k.fc2_w},
                                    {"mlp.fc2.bias", Shape{w}, &k.fc2_b}}) {
      VISMOE_ASSIGN_OR_RETURN(*out, get(b + name, shape));
    }
    v->blocks_.push_back(k);
  }
  int64_t in = w * c.downsample * c.downsample;
  for (int i = 0; i < c.projector_depth; ++i) {
    const std::string name = absl::StrCat("projector.layers.", 2 * i);
    VISMOE_ASSIGN_OR_RETURN(TensorView weight, ckpt.Get(name + ".weight"));
    if (weight.rank() != 2 || weight.dim(1) != in ||
        (i + 1 == c.projector_depth && weight.dim(0) != c.n_embed)) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", name, ".weight' has shape ", weight.ShapeString(), " (input ",
                       in, ", output ", c.n_embed, " at the last layer)"));
    }
    VISMOE_ASSIGN_OR_RETURN(TensorView bias, get(name + ".bias", {weight.dim(0)}));
    v->proj_w_.push_back(weight);
    v->proj_b_.push_back(bias);
    in = weight.dim(0);
  }
  for (auto [name, out] :
       {std::pair{"image_newline", &v->newline_}, {"view_seperator", &v->separator_}}) {
    VISMOE_ASSIGN_OR_RETURN(const TensorView t, get(name, {c.n_embed}));
    out->resize(c.n_embed);
    ToFloat(t.dtype, t.data, out->size(), out->data());
  }
  return v;
}

void DeepseekVl2Vision::RunBlock(const Block& b, float* x, int64_t n, float* key_saliency) const {
  const int64_t w = config_.width, f = config_.mlp_dim;
  const int hd = static_cast<int>(w / config_.heads);
  std::vector<float> h(n * w), qkv(n * 3 * w), attn(n * w), mid(n * f);
  cpu::LayerNorm(pool_, x, n, w, b.norm1_w, b.norm1_b, config_.eps, h.data());
  cpu::Linear(pool_, h.data(), n, w, b.qkv_w, &b.qkv_b, qkv.data());
  cpu::AttentionShape shape;
  shape.num_heads = shape.num_kv_heads = config_.heads;
  shape.head_dim = hd;
  shape.q_row_stride = shape.kv_row_stride = 3 * w;  // rows of qkv: q, k, v thirds
  cpu::Attention(pool_, shape, qkv.data(), n, qkv.data() + w, qkv.data() + 2 * w, n,
                 /*causal=*/false, 0, attn.data(), key_saliency);
  cpu::Linear(pool_, attn.data(), n, w, b.proj_w, &b.proj_b, h.data());
  for (int64_t i = 0; i < n * w; ++i) x[i] += h[i];
  cpu::LayerNorm(pool_, x, n, w, b.norm2_w, b.norm2_b, config_.eps, h.data());
  cpu::Linear(pool_, h.data(), n, w, b.fc1_w, &b.fc1_b, mid.data());
  cpu::GeluTanhInPlace(pool_, mid.data(), n * f);
  cpu::Linear(pool_, mid.data(), n, f, b.fc2_w, &b.fc2_b, h.data());
  for (int64_t i = 0; i < n * w; ++i) x[i] += h[i];
}

absl::StatusOr<std::vector<float>> DeepseekVl2Vision::Encode(
    absl::Span<const float> tiles, std::vector<float>* patch_saliency) const {
  const int64_t s = config_.image_size, p = config_.patch_size, g = config_.grid();
  const int64_t w = config_.width, n = g * g, pd = 3 * p * p;
  const int64_t tile_floats = 3 * s * s;
  if (tiles.empty() || tiles.size() % tile_floats != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(tiles.size(), " values are not a whole number of ", s, "x", s, " tiles"));
  }
  const int64_t count = static_cast<int64_t>(tiles.size()) / tile_floats;
  std::vector<float> out(count * n * w), patches(n * pd), x(n * w);
  if (patch_saliency != nullptr) patch_saliency->assign(count * n, 0.0f);
  for (int64_t t = 0; t < count; ++t) {
    const float* tile = tiles.data() + t * tile_floats;
    // Patch (py, px) flattened as the convolution's weight: channel, row, column.
    for (int64_t py = 0; py < g; ++py) {
      for (int64_t px = 0; px < g; ++px) {
        float* dst = patches.data() + (py * g + px) * pd;
        for (int64_t c = 0; c < 3; ++c) {
          for (int64_t ky = 0; ky < p; ++ky) {
            const float* src = tile + (c * s + py * p + ky) * s + px * p;
            std::copy(src, src + p, dst + (c * p + ky) * p);
          }
        }
      }
    }
    cpu::Linear(pool_, patches.data(), n, pd, patch_w_, &patch_b_, x.data());
    for (int64_t i = 0; i < n * w; ++i) x[i] += pos_[i];
    for (size_t l = 0; l < blocks_.size(); ++l) {
      const bool last = l + 1 == blocks_.size() && patch_saliency != nullptr;
      RunBlock(blocks_[l], x.data(), n, last ? patch_saliency->data() + t * n : nullptr);
    }
    cpu::LayerNorm(pool_, x.data(), n, w, norm_w_, norm_b_, config_.eps, out.data() + t * n * w);
  }
  return out;
}

std::vector<float> DeepseekVl2Vision::Project(absl::Span<const float> features) const {
  const int64_t g = config_.grid(), w = config_.width, r = config_.downsample,
                side = config_.side();
  const int64_t n = g * g, tokens = side * side, unfolded = w * r * r;
  const int64_t count = static_cast<int64_t>(features.size()) / (n * w);
  std::vector<float> out(count * tokens * config_.n_embed);
  std::vector<float> x(tokens * unfolded);
  for (int64_t t = 0; t < count; ++t) {
    const float* f = features.data() + t * n * w;
    // Zero-padded at the bottom and right; feature c * r^2 + di * r + dj (F.unfold).
    std::fill(x.begin(), x.end(), 0.0f);
    for (int64_t ti = 0; ti < side; ++ti) {
      for (int64_t tj = 0; tj < side; ++tj) {
        float* dst = x.data() + (ti * side + tj) * unfolded;
        for (int64_t di = 0; di < r; ++di) {
          for (int64_t dj = 0; dj < r; ++dj) {
            const int64_t y = ti * r + di, xx = tj * r + dj;
            if (y >= g || xx >= g) continue;
            const float* src = f + (y * g + xx) * w;
            for (int64_t c = 0; c < w; ++c) dst[c * r * r + di * r + dj] = src[c];
          }
        }
      }
    }
    std::vector<float> h = x, next;
    int64_t in = unfolded;
    for (size_t k = 0; k < proj_w_.size(); ++k) {
      if (k > 0) cpu::GeluErfInPlace(pool_, h.data(), tokens * in);
      const int64_t o = proj_w_[k].dim(0);
      next.assign(tokens * o, 0.0f);
      cpu::Linear(pool_, h.data(), tokens, in, proj_w_[k], &proj_b_[k], next.data());
      h.swap(next);
      in = o;
    }
    std::copy(h.begin(), h.end(), out.begin() + t * tokens * config_.n_embed);
  }
  return out;
}

std::vector<int64_t> DeepseekVl2Vision::LayoutOrder(const Vl2Tiling& plan) const {
  const int64_t s = config_.side();
  std::vector<int64_t> order;
  auto token = [&](int64_t tile, int64_t r, int64_t c) { return (tile * s + r) * s + c; };
  auto global = [&] {
    for (int64_t r = 0; r < s; ++r) {
      for (int64_t c = 0; c < s; ++c) order.push_back(token(0, r, c));
      order.push_back(kNewline);
    }
  };
  auto local = [&] {
    const int64_t nw = plan.width_tiles;
    for (int64_t row = 0; row < plan.height_tiles * s; ++row) {
      for (int64_t col = 0; col < nw * s; ++col) {
        order.push_back(token(1 + (row / s) * nw + col / s, row % s, col % s));
      }
      order.push_back(kNewline);
    }
  };
  if (config_.global_view_head) {
    global();
    order.push_back(kSeparator);
    local();
  } else {
    local();
    order.push_back(kSeparator);
    global();
  }
  return order;
}

std::vector<float> DeepseekVl2Vision::Layout(absl::Span<const float> projected,
                                             const Vl2Tiling& plan) const {
  return Gather(projected, LayoutOrder(plan));
}

std::vector<float> DeepseekVl2Vision::Gather(absl::Span<const float> projected,
                                             absl::Span<const int64_t> order) const {
  const int64_t d = config_.n_embed;
  std::vector<float> out;
  for (const int64_t t : order) {
    const float* row = t == kNewline     ? newline_.data()
                       : t == kSeparator ? separator_.data()
                                         : projected.data() + t * d;
    out.insert(out.end(), row, row + d);
  }
  return out;
}

std::vector<float> DeepseekVl2Vision::TokenSaliency(const float* patch_saliency) const {
  const int64_t g = config_.grid(), r = config_.downsample, side = config_.side();
  std::vector<float> out(side * side, 0.0f);
  for (int64_t y = 0; y < g; ++y) {
    for (int64_t x = 0; x < g; ++x) out[(y / r) * side + x / r] += patch_saliency[y * g + x];
  }
  for (float& v : out) v /= static_cast<float>(r * r);
  return out;
}

int64_t DeepseekVl2Vision::patch_dim() const {
  return int64_t{3} * config_.image_size * config_.image_size;
}

absl::StatusOr<VisionOutput> DeepseekVl2Vision::Forward(absl::Span<const float> tiles,
                                                        absl::Span<const GridThw> grids) const {
  int64_t count = 0;
  for (const GridThw& g : grids) {
    if (g.t != 1 || g.h < 1 || g.w < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("an image's tile grid must be {1, height_tiles, width_tiles}, got {", g.t,
                       ", ", g.h, ", ", g.w, "}"));
    }
    count += 1 + g.h * g.w;
  }
  if (static_cast<int64_t>(tiles.size()) != count * patch_dim()) {
    return absl::InvalidArgumentError(absl::StrCat("tiles hold ", tiles.size(), " values, the ",
                                                   grids.size(), " images' ", count, " tiles ",
                                                   count * patch_dim()));
  }
  VisionOutput out;
  out.out_hidden = config_.n_embed;
  const int64_t per_tile = int64_t{config_.side()} * config_.side() * config_.n_embed;
  int64_t first = 0;
  for (const GridThw& g : grids) {
    const int64_t n = 1 + g.h * g.w;
    std::vector<float> patch_saliency;
    VISMOE_ASSIGN_OR_RETURN(
        const std::vector<float> features,
        Encode(tiles.subspan(first * patch_dim(), n * patch_dim()), &patch_saliency));
    const std::vector<float> projected = Project(features);
    Vl2Tiling plan;
    plan.width_tiles = static_cast<int>(g.w);
    plan.height_tiles = static_cast<int>(g.h);
    const std::vector<int64_t> order = LayoutOrder(plan);
    const std::vector<float> rows =
        Gather(absl::MakeConstSpan(projected).first(n * per_tile), order);
    out.embeds.insert(out.embeds.end(), rows.begin(), rows.end());
    std::vector<float> token_saliency;  // [n, side^2]
    const int64_t patches = int64_t{config_.grid()} * config_.grid();
    for (int64_t t = 0; t < n; ++t) {
      const std::vector<float> s = TokenSaliency(patch_saliency.data() + t * patches);
      token_saliency.insert(token_saliency.end(), s.begin(), s.end());
    }
    for (const int64_t t : order) {
      out.saliency.push_back(t < 0 ? 0.0f : token_saliency[t]);
      out.layout.push_back(t < 0 ? 1 : 0);
    }
    out.tokens_per_image.push_back(static_cast<int64_t>(rows.size()) / config_.n_embed);
    out.num_tokens += out.tokens_per_image.back();
    first += n;
  }
  return out;
}

}  // namespace vismoe
