// Every op of VisionOps, on every compiled backend that can run here, over a
// table of vision configs and image grids: the vision counterpart of
// backend_ops_test.cc. Each backend is checked op by op against a plain
// double-precision reference written here from the math (fp32 kernels with an
// fp32 tolerance, bf16 backends with a bf16-scaled one): the embedding, each
// block's attention and MLP halves (the residual stream after each), every
// DeepStack merger and the final merger, and the last block's patch saliency.
// Bad step inputs and indexes are InvalidArgument. A backend whose probe fails
// here (cuda without a GPU) is reported as skipped.
#include <algorithm>
#include <cmath>
#include <memory>
#include <numbers>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/backend/vision_ops.h"
#include "engine/backends/registry.h"
#include "engine/core/dtype.h"
#include "engine/model/checkpoint.h"
#include "engine/model/model_config.h"
#include "engine/model/qwen3_vl_vision_tables.h"
#include "engine/model/synthetic_weights.h"
#include "engine/model/vision_weights.h"
#include "gtest/gtest.h"
#include "tests/testing/paths.h"
#include "tests/testing/reference_math.h"

namespace vismoe {
namespace {

using testing::AsDouble;
using testing::MatMulT;
using testing::ExpectClose;
using testing::Pattern;

struct Model {
  std::string name;
  ModelConfig config;
  std::unique_ptr<Checkpoint> ckpt;
};

// The tiny fixture as published (tanh GELU, DeepStack after blocks 1-3) and a
// synthetic variant with the exact (erf) GELU and one DeepStack merger.
std::vector<Model> Models() {
  std::vector<Model> out;
  const std::string dir = testing::FixturesDir() + "/tiny-qwen3-vl-moe";
  auto config = ModelConfig::Load(dir);
  auto ckpt = Checkpoint::Open(dir);
  EXPECT_TRUE(config.ok() && ckpt.ok());
  if (!config.ok() || !ckpt.ok()) return out;
  out.push_back({"tiny-qwen3-vl-moe", *config, *std::move(ckpt)});
  ModelConfig erf = *config;
  erf.vision.hidden_act = "gelu";
  erf.vision.deepstack_visual_indexes = {0};
  auto synth = SynthesizeCheckpoint(erf, 11, nullptr, "synthetic:erf");
  EXPECT_TRUE(synth.ok()) << synth.status();
  if (synth.ok()) out.push_back({"synthetic-erf-gelu", erf, *std::move(synth)});
  return out;
}

// ---- The reference ----------------------------------------------------------

std::vector<double> LayerNormRows(const std::vector<double>& x, int64_t dim, const TensorView& w,
                                  const TensorView& b, double eps) {
  const std::vector<double> wd = AsDouble(w), bd = AsDouble(b);
  std::vector<double> y(x.size());
  for (size_t r = 0; r < x.size() / dim; ++r) {
    const double* v = x.data() + r * dim;
    double mean = 0, var = 0;
    for (int64_t d = 0; d < dim; ++d) mean += v[d];
    mean /= dim;
    for (int64_t d = 0; d < dim; ++d) var += (v[d] - mean) * (v[d] - mean);
    const double inv = 1.0 / std::sqrt(var / dim + eps);
    for (int64_t d = 0; d < dim; ++d) y[r * dim + d] = (v[d] - mean) * inv * wd[d] + bd[d];
  }
  return y;
}

double Gelu(double v, bool exact) {
  if (exact) return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
  const double k = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * v * (1.0 + std::tanh(k * (v + 0.044715 * v * v * v)));
}

// The math of one vision step, in double, over the same VisionWeights.
class ReferenceStep {
 public:
  ReferenceStep(const VisionConfig& c, const VisionWeights& w, const VisionStepInput& in)
      : c_(c), w_(w), in_(in), n_(static_cast<int64_t>(in.position.size()) / c.hidden_size) {
    const std::vector<double> p(in.patches.begin(), in.patches.end());
    hs_ = MatMulT(p, n_, static_cast<int64_t>(in.patches.size()) / n_, w.patch_w, w.patch_b);
    for (size_t i = 0; i < hs_.size(); ++i) hs_[i] += in.position[i];
    saliency_.assign(n_, 0.0);
  }

  void Attention(int block, bool saliency);
  void Mlp(int block) {
    const VisionBlockWeights& b = w_.blocks[block];
    const int64_t hd = c_.hidden_size, inter = c_.intermediate_size;
    std::vector<double> mid = MatMulT(
        LayerNormRows(hs_, hd, b.norm2_w, b.norm2_b, c_.layer_norm_eps), n_, hd, b.fc1_w, b.fc1_b);
    for (double& v : mid) v = Gelu(v, c_.hidden_act == "gelu");
    const std::vector<double> o = MatMulT(mid, n_, inter, b.fc2_w, b.fc2_b);
    for (size_t i = 0; i < hs_.size(); ++i) hs_[i] += o[i];
  }
  std::vector<double> Merge(int which) const {
    const VisionMergerWeights& m = which == kFinalMerger ? w_.merger : w_.deepstack[which];
    const int64_t unit = int64_t{c_.spatial_merge_size} * c_.spatial_merge_size;
    const int64_t mh = c_.hidden_size * unit;
    const int64_t norm_dim = which == kFinalMerger ? c_.hidden_size : mh;
    std::vector<double> mid =
        MatMulT(LayerNormRows(hs_, norm_dim, m.norm_w, m.norm_b, c_.layer_norm_eps), n_ / unit, mh,
                m.fc1_w, m.fc1_b);
    for (double& v : mid) v = Gelu(v, /*exact=*/true);
    return MatMulT(mid, n_ / unit, mh, m.fc2_w, m.fc2_b);
  }
  const std::vector<double>& hs() const { return hs_; }
  const std::vector<double>& saliency() const { return saliency_; }

 private:
  const VisionConfig& c_;
  const VisionWeights& w_;
  const VisionStepInput& in_;
  const int64_t n_;
  std::vector<double> hs_;
  std::vector<double> saliency_;
};

void ReferenceStep::Attention(int block, bool saliency) {
  const VisionBlockWeights& b = w_.blocks[block];
  const int64_t hd = c_.hidden_size;
  const int heads = c_.num_heads;
  const int64_t dh = hd / heads, half = dh / 2;
  std::vector<double> qkv = MatMulT(
      LayerNormRows(hs_, hd, b.norm1_w, b.norm1_b, c_.layer_norm_eps), n_, hd, b.qkv_w, b.qkv_b);
  for (int64_t r = 0; r < n_; ++r) {  // rotate_half rotary on q and k
    for (int part = 0; part < 2; ++part) {
      for (int h = 0; h < heads; ++h) {
        double* v = qkv.data() + r * 3 * hd + part * hd + h * dh;
        std::vector<double> rot(dh);
        for (int64_t d = 0; d < dh; ++d) {
          const double other = d < half ? -v[d + half] : v[d - half];
          rot[d] = v[d] * in_.cos[r * dh + d] + other * in_.sin[r * dh + d];
        }
        std::copy(rot.begin(), rot.end(), v);
      }
    }
  }
  std::vector<double> attn(n_ * hd, 0.0);
  int64_t start = 0;
  for (const GridThw& g : in_.grids) {
    const int64_t f = g.h * g.w;
    for (int64_t t = 0; t < g.t; ++t, start += f) {
      for (int h = 0; h < heads; ++h) {
        for (int64_t q = start; q < start + f; ++q) {
          std::vector<double> s(f);
          for (int64_t j = 0; j < f; ++j) {
            double d = 0;
            for (int64_t e = 0; e < dh; ++e) {
              d += qkv[q * 3 * hd + h * dh + e] * qkv[(start + j) * 3 * hd + hd + h * dh + e];
            }
            s[j] = d / std::sqrt(static_cast<double>(dh));
          }
          const double mx = *std::max_element(s.begin(), s.end());
          double z = 0;
          for (double& e : s) z += (e = std::exp(e - mx));
          for (int64_t j = 0; j < f; ++j) {
            const double p = s[j] / z;
            if (saliency) saliency_[start + j] += p / (heads * f);
            for (int64_t e = 0; e < dh; ++e) {
              attn[q * hd + h * dh + e] += p * qkv[(start + j) * 3 * hd + 2 * hd + h * dh + e];
            }
          }
        }
      }
    }
  }
  const std::vector<double> o = MatMulT(attn, n_, hd, b.proj_w, b.proj_b);
  for (size_t i = 0; i < hs_.size(); ++i) hs_[i] += o[i];
}

// ---- Comparison -------------------------------------------------------------

// A step's host inputs for `grids`: pattern patches and position embeddings,
// the real rotary tables.
struct StepData {
  std::vector<GridThw> grids;
  std::vector<float> patches, position, cos, sin;
  VisionStepInput input() const {
    VisionStepInput in;
    in.patches = patches;
    in.grids = grids;
    in.position = position;
    in.cos = cos;
    in.sin = sin;
    return in;
  }
};

StepData MakeStep(const VisionConfig& c, std::vector<GridThw> grids) {
  StepData s;
  s.grids = std::move(grids);
  int64_t n = 0;
  for (const GridThw& g : s.grids) n += g.num_patches();
  const int64_t pd = int64_t{c.in_channels} * c.temporal_patch_size * c.patch_size * c.patch_size;
  s.patches = Pattern(n * pd, 1, 1.0f);
  s.position = Pattern(n * c.hidden_size, 2, 0.5f);
  VisionRotaryTables(c, s.grids, &s.cos, &s.sin);
  return s;
}

const Backend* FindBackend(const std::string& name, std::string* skip) {
  for (const Backend* b : RegisteredBackends()) {
    if (name != b->name()) continue;
    auto probe = b->Probe();
    if (probe.ok()) return b;
    *skip = "backend " + name + " cannot run here: " + probe.status().ToString();
    return nullptr;
  }
  *skip = "backend " + name + " is not compiled in";
  return nullptr;
}

void RunAndCompare(VisionOps& ops, const Model& m, const StepData& data, double rel) {
  const VisionConfig& c = m.config.vision;
  auto w = VisionWeights::Load(m.config, *m.ckpt);
  ASSERT_TRUE(w.ok()) << w.status();
  const VisionStepInput in = data.input();
  auto step = ops.BeginStep(in);
  ASSERT_TRUE(step.ok()) << step.status();
  ReferenceStep ref(c, *w, in);
  auto compare_hs = [&](const std::string& what) {
    auto got = (*step)->HostResidual();
    ASSERT_TRUE(got.ok()) << got.status();
    ExpectClose(*got, ref.hs(), rel, what);
  };
  compare_hs("embedding");
  std::vector<std::vector<float>> merged(c.deepstack_visual_indexes.size() + 1);
  std::vector<std::vector<double>> want(merged.size());
  for (int i = 0; i < c.depth; ++i) {
    SCOPED_TRACE(::testing::Message() << "block " << i);
    const bool last = i + 1 == c.depth;
    ASSERT_TRUE((*step)->Attention(i, last).ok());
    ref.Attention(i, last);
    compare_hs("attention");
    ASSERT_TRUE((*step)->Mlp(i).ok());
    ref.Mlp(i);
    compare_hs("MLP");
    for (size_t k = 0; k < c.deepstack_visual_indexes.size(); ++k) {
      if (c.deepstack_visual_indexes[k] != i) continue;
      ASSERT_TRUE((*step)->Merge(static_cast<int>(k), &merged[k]).ok());
      want[k] = ref.Merge(static_cast<int>(k));
    }
  }
  ASSERT_TRUE((*step)->Merge(kFinalMerger, &merged.back()).ok());
  want.back() = ref.Merge(kFinalMerger);
  std::vector<float> saliency;
  ASSERT_TRUE((*step)->Finish(&saliency).ok());
  for (size_t k = 0; k < merged.size(); ++k) {
    ASSERT_EQ(merged[k].size(), want[k].size()) << "merger " << k;
    ExpectClose(merged[k].data(), want[k], rel,
                k + 1 == merged.size() ? "final merger" : "DeepStack merger " + std::to_string(k));
  }
  ASSERT_EQ(saliency.size(), ref.saliency().size());
  ExpectClose(saliency.data(), ref.saliency(), rel, "patch saliency");
}

class VisionOpsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(VisionOpsTest, EveryOpMatchesTheReference) {
  std::string skip;
  const Backend* backend = FindBackend(GetParam(), &skip);
  if (backend == nullptr) GTEST_SKIP() << skip;
  // fp32 kernels against double; bf16 activations against double.
  const double rel = GetParam() == "cpu" ? 2e-4 : 4e-2;
  for (Model& m : Models()) {
    SCOPED_TRACE(m.name);
    auto ops = backend->CreateVisionOps(m.config, *m.ckpt, BackendOptions{});
    ASSERT_TRUE(ops.ok()) << ops.status();
    EXPECT_STREQ((*ops)->name(), backend->name());
    // One image; then a two-frame image between single frames (attention
    // stays within each frame).
    for (const auto& grids : {std::vector<GridThw>{{1, 4, 6}},
                              std::vector<GridThw>{{1, 2, 2}, {2, 4, 4}, {1, 6, 2}}}) {
      SCOPED_TRACE(::testing::Message() << grids.size() << " grids");
      RunAndCompare(**ops, m, MakeStep(m.config.vision, grids), rel);
    }
  }
}

TEST_P(VisionOpsTest, BadInputsAndIndexesAreInvalidArgument) {
  std::string skip;
  const Backend* backend = FindBackend(GetParam(), &skip);
  if (backend == nullptr) GTEST_SKIP() << skip;
  const std::vector<Model> models = Models();
  ASSERT_FALSE(models.empty());
  const Model& m = models.front();
  auto ops = backend->CreateVisionOps(m.config, *m.ckpt, BackendOptions{});
  ASSERT_TRUE(ops.ok()) << ops.status();
  const StepData data = MakeStep(m.config.vision, {{1, 4, 6}});

  StepData short_position = data;
  short_position.position.pop_back();
  EXPECT_EQ((*ops)->BeginStep(short_position.input()).status().code(),
            absl::StatusCode::kInvalidArgument);
  StepData no_grids = data;
  no_grids.grids.clear();
  EXPECT_EQ((*ops)->BeginStep(no_grids.input()).status().code(),
            absl::StatusCode::kInvalidArgument);

  auto step = (*ops)->BeginStep(data.input());
  ASSERT_TRUE(step.ok()) << step.status();
  const int depth = m.config.vision.depth;
  const int mergers = static_cast<int>(m.config.vision.deepstack_visual_indexes.size());
  std::vector<float> out;
  EXPECT_EQ((*step)->Attention(depth, false).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*step)->Mlp(-1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*step)->Merge(mergers, &out).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*step)->Merge(-2, &out).code(), absl::StatusCode::kInvalidArgument);
  // The step still works after the refusals.
  EXPECT_TRUE((*step)->Attention(0, true).ok());
  EXPECT_TRUE((*step)->Merge(kFinalMerger, &out).ok());
  std::vector<float> saliency;
  ASSERT_TRUE((*step)->Finish(&saliency).ok());
  EXPECT_EQ(out.size(), static_cast<size_t>(6 * m.config.vision.out_hidden_size));
  double sum = 0;
  for (float v : saliency) sum += v;
  EXPECT_NEAR(sum, 1.0, 1e-4) << "a frame's patches receive all of its attention";
}

INSTANTIATE_TEST_SUITE_P(Backends, VisionOpsTest, ::testing::Values("cpu", "cuda"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace vismoe
