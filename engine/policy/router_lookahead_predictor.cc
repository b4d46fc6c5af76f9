#include "engine/policy/router_lookahead_predictor.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/backends/cpu/cpu_family_ops.h"
#include "engine/core/status_macros.h"
#include "engine/model/arch_spec.h"
#include "engine/ops/cpu/layer_norm.h"
#include "engine/ops/cpu/linear.h"
#include "engine/ops/cpu/moe.h"
#include "engine/ops/cpu/rms_norm.h"
#include "engine/policy/top_scores.h"

namespace vismoe {
namespace {

absl::StatusOr<std::vector<float>> ReadFloat(const Checkpoint& ckpt, const std::string& name,
                                             const Shape& shape) {
  VISMOE_ASSIGN_OR_RETURN(TensorView v, ckpt.Get(name, shape));
  std::vector<float> out(static_cast<size_t>(v.numel()));
  ToFloat(v.dtype, v.data, out.size(), out.data());
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RouterLookaheadPredictor>> RouterLookaheadPredictor::Create(
    const ModelConfig& config, const Checkpoint& checkpoint, int window,
    absl::Span<const float> default_vectors) {
  const TextConfig& c = config.text;
  if (window < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("router-lookahead: lookahead window must be >= 0, got ", window));
  }
  const size_t want = static_cast<size_t>(c.num_hidden_layers) * c.hidden_size;
  if (!default_vectors.empty() && default_vectors.size() != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        "router-lookahead: default vectors have ", default_vectors.size(), " values, expected ",
        want, " (", c.num_hidden_layers, " layers x hidden ", c.hidden_size, ")"));
  }
  std::unique_ptr<RouterLookaheadPredictor> p(new RouterLookaheadPredictor());
  p->num_experts_ = c.num_experts;
  p->top_k_ = c.num_experts_per_tok;
  p->hidden_ = c.hidden_size;
  p->eps_ = c.rms_norm_eps;
  p->window_ = window;
  p->default_vectors_.assign(default_vectors.begin(), default_vectors.end());
  p->moe_index_.assign(c.num_hidden_layers, -1);
  p->router_.resize(c.num_hidden_layers);
  p->norm_.resize(c.num_hidden_layers);
  p->cache_.resize(c.num_hidden_layers);
  VISMOE_ASSIGN_OR_RETURN(const std::vector<TensorSpec> specs, ExpectedTensors(config));
  VISMOE_ASSIGN_OR_RETURN(const ArchSpec spec, ArchSpec::For(config));
  p->layer_norm_ = spec.norm == NormKind::kLayerNorm;
  p->norm_bias_.resize(c.num_hidden_layers);
  p->spec_ = spec;
  p->text_ = c;
  p->router_bias_.resize(c.num_hidden_layers);
  int m = 0;
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    if (!c.IsMoeLayer(l)) continue;
    p->moe_index_[l] = m++;
    const TensorSpec* router = FindTensor(specs, WeightRole::kRouter, l);
    const TensorSpec* norm = FindTensor(specs, WeightRole::kPostNorm, l);
    if (router == nullptr || norm == nullptr) {
      return absl::InternalError(absl::StrCat("tensor list: layer ", l, " has no router or norm"));
    }
    VISMOE_ASSIGN_OR_RETURN(p->router_[l], ReadFloat(checkpoint, router->name, router->shape));
    VISMOE_ASSIGN_OR_RETURN(p->norm_[l], ReadFloat(checkpoint, norm->name, norm->shape));
    if (const TensorSpec* rb = FindTensor(specs, WeightRole::kRouterBias, l); rb != nullptr) {
      VISMOE_ASSIGN_OR_RETURN(p->router_bias_[l], ReadFloat(checkpoint, rb->name, rb->shape));
    }
    if (p->layer_norm_) {
      const TensorSpec* bias = FindTensor(specs, WeightRole::kPostNormBias, l);
      if (bias == nullptr) return absl::InternalError("tensor list: a LayerNorm without bias");
      VISMOE_ASSIGN_OR_RETURN(p->norm_bias_[l], ReadFloat(checkpoint, bias->name, bias->shape));
    }
  }
  return p;
}

void RouterLookaheadPredictor::BeginRequest() {
  last_layer_ = -1;
  rows_.clear();
  num_rows_ = 0;
  for (auto& s : cache_) s.clear();
}

void RouterLookaheadPredictor::OnPostAttention(Phase /*phase*/, int layer, const float* residual,
                                               int64_t n) {
  if (layer < 0 || layer >= static_cast<int>(moe_index_.size()) || moe_index_[layer] < 0 ||
      n <= 0) {
    return;
  }
  const int64_t h = hidden_;
  const int64_t m = std::min<int64_t>(n, kMaxRows);
  rows_.resize(static_cast<size_t>(m * h));
  const float* d =
      default_vectors_.empty() ? nullptr : default_vectors_.data() + static_cast<size_t>(layer) * h;
  for (int64_t i = 0; i < m; ++i) {
    const float* src = residual + (i * n / m) * h;  // evenly spread over the rows
    float* dst = rows_.data() + i * h;
    for (int64_t k = 0; k < h; ++k) dst[k] = d == nullptr ? src[k] : src[k] + d[k];
  }
  num_rows_ = m;
  last_layer_ = layer;
  for (auto& s : cache_) s.clear();
}

std::vector<double> RouterLookaheadPredictor::Scores(int target) const {
  const int64_t h = hidden_, m = num_rows_;
  const int e = num_experts_;
  std::vector<float> q(static_cast<size_t>(m * h));
  const TensorView norm{norm_[target].data(), DType::kF32, {h}};
  const TensorView router{router_[target].data(), DType::kF32, {e, h}};
  // The same kernels as the forward pass, so target = the observed layer with
  // d = 0 reproduces its routing bit for bit (the top-k of the router's
  // softmax: PhiMoE's sparsemixer picks the same two experts).
  if (layer_norm_) {
    const TensorView bias{norm_bias_[target].data(), DType::kF32, {h}};
    cpu::LayerNorm(nullptr, rows_.data(), m, h, norm, bias, eps_, q.data());
  } else {
    cpu::RmsNorm(nullptr, rows_.data(), m, h, norm, eps_, q.data());
  }
  if (spec_.router == RouterKind::kDeepseekSoftmax ||
      spec_.router == RouterKind::kDeepseekSigmoid ||
      spec_.router == RouterKind::kTopKSoftmaxBiased) {
    return FamilyScores(target, q.data(), router);
  }
  std::vector<double> score(e, 0.0);
  std::vector<float> logits(static_cast<size_t>(m) * e);
  cpu::Linear(nullptr, q.data(), m, h, router, nullptr, logits.data());
  std::vector<float> p(e), val(top_k_);
  std::vector<int> idx(top_k_);
  for (int64_t t = 0; t < m; ++t) {
    const float* l = logits.data() + t * e;
    const float mx = *std::max_element(l, l + e);
    float sum = 0;
    for (int i = 0; i < e; ++i) {
      p[i] = std::exp(l[i] - mx);
      sum += p[i];
    }
    for (int i = 0; i < e; ++i) p[i] /= sum;
    cpu::TopK(p.data(), e, top_k_, idx.data(), val.data());
    for (int j = 0; j < top_k_; ++j) score[idx[j]] += val[j];
  }
  for (double& s : score) s /= static_cast<double>(m);
  return score;
}

std::vector<double> RouterLookaheadPredictor::FamilyScores(int target, const float* q,
                                                           const TensorView& router) const {
  const int e = num_experts_;
  DecoderLayerWeights w;  // the router's two tensors are all FamilyRoute reads
  w.router = router;
  w.router_bias = {router_bias_[target].data(), DType::kF32, {e}};
  RouterResult r;
  cpu::FamilyRoute(nullptr, spec_, text_, q, num_rows_, hidden_, w, &r);
  std::vector<double> score(e, 0.0);
  for (size_t i = 0; i < r.experts.size(); ++i) score[r.experts[i]] += r.weights[i];
  for (double& s : score) s /= static_cast<double>(num_rows_);
  return score;
}

std::vector<std::pair<int, double>> RouterLookaheadPredictor::Predict(int target, int count) {
  if (last_layer_ < 0 || target < 0 || target >= static_cast<int>(moe_index_.size()) ||
      moe_index_[target] < 0 || count <= 0) {
    return {};
  }
  const int ahead = moe_index_[target] - moe_index_[last_layer_];
  if (ahead < 0 || ahead > window_) return {};
  if (cache_[target].empty()) cache_[target] = Scores(target);
  return TopScores(cache_[target], count);
}

}  // namespace vismoe
