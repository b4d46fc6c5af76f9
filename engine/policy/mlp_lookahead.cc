#include "engine/policy/mlp_lookahead.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/core/tensor.h"
#include "engine/model/safetensors_file.h"
#include "engine/model/safetensors_writer.h"

namespace vismoe {
namespace {

// BatchNorm with running statistics, then ReLU (dropout is off at inference).
void BnRelu(const MlpLayer& l, float eps, float* x) {
  for (int o = 0; o < l.out; ++o) {
    const float v =
        l.bn_gamma[o] * (x[o] - l.bn_mean[o]) / std::sqrt(l.bn_var[o] + eps) + l.bn_beta[o];
    x[o] = std::max(v, 0.0f);
  }
}

constexpr const char* kLayers[] = {"l1", "l2", "lo"};

}  // namespace

void MlpLinear(const MlpLayer& l, const float* x, float* out) {
  for (int o = 0; o < l.out; ++o) {
    const float* w = l.w.data() + static_cast<size_t>(o) * l.in;
    float s = l.b[o];
    for (int i = 0; i < l.in; ++i) s += w[i] * x[i];
    out[o] = s;
  }
}

std::vector<float> MlpLookahead::Predict(absl::Span<const float> x) const {
  std::vector<float> h1(w_.l1.out), h2(w_.l2.out), y(w_.lo.out);
  MlpLinear(w_.l1, x.data(), h1.data());
  BnRelu(w_.l1, w_.bn_eps, h1.data());
  MlpLinear(w_.l2, h1.data(), h2.data());
  BnRelu(w_.l2, w_.bn_eps, h2.data());
  MlpLinear(w_.lo, h2.data(), y.data());
  return y;
}

std::vector<std::pair<std::string, TensorView>> MlpLookahead::Tensors() const {
  std::vector<std::pair<std::string, TensorView>> t;
  const MlpLayer* layers[] = {&w_.l1, &w_.l2, &w_.lo};
  for (int k = 0; k < 3; ++k) {
    const MlpLayer& l = *layers[k];
    const std::string p = absl::StrCat("mlp.", kLayers[k], ".");
    auto add = [&](const char* name, const std::vector<float>& v, Shape shape) {
      t.push_back({p + name, TensorView{v.data(), DType::kF32, std::move(shape)}});
    };
    add("w", l.w, {l.out, l.in});
    add("b", l.b, {l.out});
    if (k < 2) {
      add("bn_gamma", l.bn_gamma, {l.out});
      add("bn_beta", l.bn_beta, {l.out});
      add("bn_mean", l.bn_mean, {l.out});
      add("bn_var", l.bn_var, {l.out});
    }
  }
  return t;
}

absl::Status MlpLookahead::Save(const std::string& path) const {
  return WriteSafetensors(path, Tensors(),
                          {{"kind", "mlp-lookahead"}, {"bn_eps", absl::StrCat(w_.bn_eps)}});
}

absl::StatusOr<MlpLookahead> MlpLookahead::Load(const std::string& path) {
  auto file = SafetensorsFile::Open(path);
  if (!file.ok()) return file.status();
  float bn_eps = 1e-5f;
  const auto& md = (*file)->metadata();
  if (auto it = md.find("bn_eps"); it != md.end())
    bn_eps = std::strtof(it->second.c_str(), nullptr);
  return FromFile(**file, bn_eps);
}

absl::StatusOr<MlpLookahead> MlpLookahead::FromFile(const SafetensorsFile& file, float bn_eps) {
  const std::string& path = file.path();
  MlpLookaheadWeights w;
  w.bn_eps = bn_eps;
  MlpLayer* layers[] = {&w.l1, &w.l2, &w.lo};
  int prev_out = -1;
  for (int k = 0; k < 3; ++k) {
    MlpLayer& l = *layers[k];
    const std::string p = absl::StrCat("mlp.", kLayers[k], ".");
    auto wt = file.Get(p + "w");
    if (!wt.ok()) return wt.status();
    if (wt->rank() != 2 || (prev_out >= 0 && wt->dim(1) != prev_out)) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": ", p, "w has shape ", wt->ShapeString(), ", expected [out, ", prev_out, "]"));
    }
    l.out = static_cast<int>(wt->dim(0));
    l.in = static_cast<int>(wt->dim(1));
    prev_out = l.out;
    auto read = [&](const char* name, int64_t n, std::vector<float>* v) -> absl::Status {
      auto tv = file.Get(p + name);
      if (!tv.ok()) return tv.status();
      if (tv->numel() != n) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, ": ", p, name, " has shape ", tv->ShapeString(), ", expected ", n, " values"));
      }
      v->resize(n);
      ToFloat(tv->dtype, tv->data, n, v->data());
      return absl::OkStatus();
    };
    absl::Status st = read("w", int64_t{l.out} * l.in, &l.w);
    if (st.ok()) st = read("b", l.out, &l.b);
    if (st.ok() && k < 2) st = read("bn_gamma", l.out, &l.bn_gamma);
    if (st.ok() && k < 2) st = read("bn_beta", l.out, &l.bn_beta);
    if (st.ok() && k < 2) st = read("bn_mean", l.out, &l.bn_mean);
    if (st.ok() && k < 2) st = read("bn_var", l.out, &l.bn_var);
    if (!st.ok()) return st;
  }
  return MlpLookahead(std::move(w));
}

}  // namespace vismoe
