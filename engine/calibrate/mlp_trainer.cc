#include "engine/calibrate/mlp_trainer.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"

namespace vismoe {
namespace {

// Adam state of one parameter vector.
struct AdamSlot {
  std::vector<float>* p;
  std::vector<float> g, m, v;
};

float Uniform(std::mt19937_64& rng) {
  return static_cast<float>(rng() >> 11) * (1.0f / 9007199254740992.0f);  // [0, 1)
}

void InitLayer(MlpLayer* l, int in, int out, bool bn, std::mt19937_64& rng) {
  l->in = in;
  l->out = out;
  l->w.resize(static_cast<size_t>(in) * out);
  const float bound = std::sqrt(6.0f / static_cast<float>(in + out));  // Glorot uniform
  for (float& w : l->w) w = (2 * Uniform(rng) - 1) * bound;
  l->b.assign(out, 0.0f);
  if (bn) {
    l->bn_gamma.assign(out, 1.0f);
    l->bn_beta.assign(out, 0.0f);
    l->bn_mean.assign(out, 0.0f);
    l->bn_var.assign(out, 1.0f);
  }
}

// Activations of one Linear-BN-ReLU-Dropout block for a batch.
struct BlockCache {
  std::vector<float> xhat, pre_relu, mask, out, inv_std;
};

void BlockForward(MlpLayer* l, const std::vector<float>& x, int n, float eps, float drop,
                  std::mt19937_64& rng, BlockCache* c) {
  const int o = l->out;
  std::vector<float> a(static_cast<size_t>(n) * o);
  for (int r = 0; r < n; ++r) MlpLinear(*l, x.data() + static_cast<size_t>(r) * l->in, &a[r * o]);
  c->xhat.resize(a.size());
  c->pre_relu.resize(a.size());
  c->mask.resize(a.size());
  c->out.resize(a.size());
  c->inv_std.resize(o);
  for (int j = 0; j < o; ++j) {
    double mu = 0, var = 0;
    for (int r = 0; r < n; ++r) mu += a[r * o + j];
    mu /= n;
    for (int r = 0; r < n; ++r) var += (a[r * o + j] - mu) * (a[r * o + j] - mu);
    var /= n;
    c->inv_std[j] = static_cast<float>(1.0 / std::sqrt(var + eps));
    l->bn_mean[j] = 0.9f * l->bn_mean[j] + 0.1f * static_cast<float>(mu);
    l->bn_var[j] = 0.9f * l->bn_var[j] + 0.1f * static_cast<float>(var);
    for (int r = 0; r < n; ++r) {
      const size_t i = static_cast<size_t>(r) * o + j;
      c->xhat[i] = (a[i] - static_cast<float>(mu)) * c->inv_std[j];
      c->pre_relu[i] = l->bn_gamma[j] * c->xhat[i] + l->bn_beta[j];
    }
  }
  for (size_t i = 0; i < a.size(); ++i) {
    c->mask[i] = Uniform(rng) < drop ? 0.0f : 1.0f / (1.0f - drop);
    c->out[i] = std::max(c->pre_relu[i], 0.0f) * c->mask[i];
  }
}

// Back through one Linear: accumulates dW, db and returns dx.
std::vector<float> LinearBackward(const MlpLayer& l, const std::vector<float>& x,
                                  const std::vector<float>& da, int n, std::vector<float>* dw,
                                  std::vector<float>* db) {
  std::vector<float> dx(static_cast<size_t>(n) * l.in, 0.0f);
  for (int r = 0; r < n; ++r) {
    for (int o = 0; o < l.out; ++o) {
      const float g = da[static_cast<size_t>(r) * l.out + o];
      if (g == 0.0f) continue;
      (*db)[o] += g;
      const float* xr = x.data() + static_cast<size_t>(r) * l.in;
      const float* w = l.w.data() + static_cast<size_t>(o) * l.in;
      float* dwr = dw->data() + static_cast<size_t>(o) * l.in;
      float* dxr = dx.data() + static_cast<size_t>(r) * l.in;
      for (int i = 0; i < l.in; ++i) {
        dwr[i] += g * xr[i];
        dxr[i] += g * w[i];
      }
    }
  }
  return dx;
}

// Back through Dropout-ReLU-BN: returns d(pre-BN activations).
std::vector<float> BlockBackward(const MlpLayer& l, const BlockCache& c,
                                 const std::vector<float>& dout, int n, std::vector<float>* dgamma,
                                 std::vector<float>* dbeta) {
  const int o = l.out;
  std::vector<float> dxhat(dout.size()), da(dout.size());
  for (size_t i = 0; i < dout.size(); ++i) {
    const float db = c.pre_relu[i] > 0 ? dout[i] * c.mask[i] : 0.0f;
    const int j = static_cast<int>(i % o);
    (*dgamma)[j] += db * c.xhat[i];
    (*dbeta)[j] += db;
    dxhat[i] = db * l.bn_gamma[j];
  }
  for (int j = 0; j < o; ++j) {
    float s1 = 0, s2 = 0;
    for (int r = 0; r < n; ++r) {
      s1 += dxhat[r * o + j];
      s2 += dxhat[r * o + j] * c.xhat[r * o + j];
    }
    for (int r = 0; r < n; ++r) {
      const size_t i = static_cast<size_t>(r) * o + j;
      da[i] = c.inv_std[j] / n * (n * dxhat[i] - s1 - c.xhat[i] * s2);
    }
  }
  return da;
}

}  // namespace

absl::StatusOr<MlpLookahead> TrainMlpLookahead(const std::vector<LookaheadSample>& samples,
                                               const MlpTrainOptions& opt, float* final_loss) {
  if (samples.size() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("mlp-lookahead training needs >= 2 samples, got ", samples.size()));
  }
  const int in = static_cast<int>(samples[0].x.size());
  const int e = static_cast<int>(samples[0].target.size());
  for (size_t i = 0; i < samples.size(); ++i) {
    if (static_cast<int>(samples[i].x.size()) != in ||
        static_cast<int>(samples[i].target.size()) != e) {
      return absl::InvalidArgumentError(
          absl::StrCat("mlp-lookahead sample ", i, " has ", samples[i].x.size(), " features / ",
                       samples[i].target.size(), " targets, sample 0 has ", in, " / ", e));
    }
  }
  std::mt19937_64 rng(opt.seed);
  MlpLookaheadWeights w;
  InitLayer(&w.l1, in, opt.hidden1, true, rng);
  InitLayer(&w.l2, opt.hidden1, opt.hidden2, true, rng);
  InitLayer(&w.lo, opt.hidden2, e, false, rng);
  std::vector<AdamSlot> slots;
  for (MlpLayer* l : {&w.l1, &w.l2, &w.lo}) {
    for (std::vector<float>* p : {&l->w, &l->b, &l->bn_gamma, &l->bn_beta}) {
      if (!p->empty())
        slots.push_back({p, {}, std::vector<float>(p->size()), std::vector<float>(p->size())});
    }
  }
  auto grad = [&](const std::vector<float>* p) -> std::vector<float>* {
    for (AdamSlot& s : slots) {
      if (s.p == p) return &s.g;
    }
    return nullptr;
  };
  std::vector<size_t> order(samples.size());
  std::iota(order.begin(), order.end(), size_t{0});
  int step = 0;
  float loss = 0;
  for (int epoch = 0; epoch < opt.epochs; ++epoch) {
    for (size_t i = order.size() - 1; i > 0; --i) std::swap(order[i], order[rng() % (i + 1)]);
    double epoch_loss = 0;
    size_t seen = 0;
    for (size_t start = 0; start + 2 <= order.size(); start += opt.batch_size) {
      const int n = static_cast<int>(std::min<size_t>(opt.batch_size, order.size() - start));
      if (n < 2) break;  // BatchNorm needs a batch
      std::vector<float> x(static_cast<size_t>(n) * in);
      for (int r = 0; r < n; ++r) {
        std::copy(samples[order[start + r]].x.begin(), samples[order[start + r]].x.end(),
                  x.begin() + static_cast<size_t>(r) * in);
      }
      BlockCache c1, c2;
      BlockForward(&w.l1, x, n, w.bn_eps, opt.dropout, rng, &c1);
      BlockForward(&w.l2, c1.out, n, w.bn_eps, opt.dropout, rng, &c2);
      std::vector<float> y(static_cast<size_t>(n) * e), dy(y.size());
      for (int r = 0; r < n; ++r) {
        MlpLinear(w.lo, c2.out.data() + static_cast<size_t>(r) * w.lo.in, &y[r * e]);
        const std::vector<float>& g = samples[order[start + r]].target;
        for (int k = 0; k < e; ++k) {
          const float z = y[r * e + k];
          // softplus(z) - g z, the stable BCE with logits.
          epoch_loss += std::max(z, 0.0f) + std::log1p(std::exp(-std::abs(z))) - g[k] * z;
          dy[r * e + k] = (1.0f / (1.0f + std::exp(-z)) - g[k]) / static_cast<float>(n * e);
        }
      }
      seen += static_cast<size_t>(n) * e;
      for (AdamSlot& s : slots) s.g.assign(s.p->size(), 0.0f);
      std::vector<float> d2 = LinearBackward(w.lo, c2.out, dy, n, grad(&w.lo.w), grad(&w.lo.b));
      std::vector<float> da2 =
          BlockBackward(w.l2, c2, d2, n, grad(&w.l2.bn_gamma), grad(&w.l2.bn_beta));
      std::vector<float> d1 = LinearBackward(w.l2, c1.out, da2, n, grad(&w.l2.w), grad(&w.l2.b));
      std::vector<float> da1 =
          BlockBackward(w.l1, c1, d1, n, grad(&w.l1.bn_gamma), grad(&w.l1.bn_beta));
      LinearBackward(w.l1, x, da1, n, grad(&w.l1.w), grad(&w.l1.b));
      ++step;
      const float b1 = 0.9f, b2 = 0.999f;
      const float c1b = 1 - std::pow(b1, step), c2b = 1 - std::pow(b2, step);
      for (AdamSlot& s : slots) {
        for (size_t i = 0; i < s.p->size(); ++i) {
          const float g = s.g[i] + opt.weight_decay * (*s.p)[i];
          s.m[i] = b1 * s.m[i] + (1 - b1) * g;
          s.v[i] = b2 * s.v[i] + (1 - b2) * g * g;
          (*s.p)[i] -= opt.learning_rate * (s.m[i] / c1b) / (std::sqrt(s.v[i] / c2b) + 1e-8f);
        }
      }
    }
    loss = seen == 0 ? 0.0f : static_cast<float>(epoch_loss / static_cast<double>(seen));
  }
  if (final_loss != nullptr) *final_loss = loss;
  return MlpLookahead(std::move(w));
}

}  // namespace vismoe
