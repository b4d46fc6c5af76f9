// Test helper: an ExpertProvider over synthetic expert weights whose every
// element encodes (layer, expert, index), so a test can tell which expert a
// block holds and whether its bytes are complete. Also builds plans.
#ifndef VISMOE_TESTS_ENGINE_OFFLOAD_FAKE_EXPERT_SOURCE_H_
#define VISMOE_TESTS_ENGINE_OFFLOAD_FAKE_EXPERT_SOURCE_H_

#include <vector>

#include "engine/core/dtype.h"
#include "engine/model/model_config.h"
#include "engine/offload/expert_provider.h"
#include "engine/offload/memory_plan.h"

namespace vismoe {
namespace testing {

class FakeExpertSource final : public ExpertProvider {
 public:
  // All `num_layers` layers are MoE layers with `num_experts` experts, H x I.
  FakeExpertSource(int num_layers, int num_experts, int h, int i, ExpertWeights::Layout layout)
      : layers_(num_layers), experts_(num_experts), h_(h), i_(i), layout_(layout) {
    const size_t per = 3 * static_cast<size_t>(h) * i;
    data_.resize(static_cast<size_t>(num_layers) * num_experts * per);
    for (int l = 0; l < num_layers; ++l) {
      for (int e = 0; e < num_experts; ++e) {
        float* d = Data(l, e);
        for (size_t k = 0; k < per; ++k) d[k] = Value(l, e, k);
      }
    }
  }
  static float Value(int layer, int expert, size_t k) {
    return static_cast<float>(layer * 1000 + expert) + static_cast<float>(k % 97) / 128.0f;
  }
  TextConfig Config(int top_k) const {
    TextConfig c;
    c.hidden_size = h_;
    c.num_hidden_layers = layers_;
    c.moe_intermediate_size = i_;
    c.num_experts = experts_;
    c.num_experts_per_tok = top_k;
    return c;
  }
  ModelSizes Sizes() const {
    ModelSizes s;
    s.resident_bytes = 1000;
    s.expert_bytes = static_cast<int64_t>(3) * h_ * i_ * sizeof(float);
    s.num_experts = experts_;
    for (int l = 0; l < layers_; ++l) s.moe_layers.push_back(l);
    return s;
  }
  // Plan with `pinned` layers and `slabs` slabs.
  MemoryPlan Plan(int pinned, int slabs) const {
    const ModelSizes s = Sizes();
    MemoryPlanOptions o;
    o.pinned_layers = pinned;
    o.budget_bytes =
        s.resident_bytes + (static_cast<int64_t>(pinned) * experts_ + slabs) * s.expert_bytes;
    return *MakeMemoryPlan(s, o);
  }
  // True when `w` holds exactly expert (layer, expert)'s values.
  bool Holds(const ExpertWeights& w, int layer, int expert) const {
    std::vector<const TensorView*> parts;
    if (w.layout == ExpertWeights::Layout::kFusedTransposed) {
      parts = {&w.gate_up, &w.down};
    } else {
      parts = {&w.gate, &w.up, &w.down};
    }
    size_t k = 0;
    for (const TensorView* t : parts) {
      std::vector<float> f(static_cast<size_t>(t->numel()));
      ToFloat(t->dtype, t->data, f.size(), f.data());
      for (size_t j = 0; j < f.size(); ++j, ++k) {
        // Packed as another dtype: the value rounded once to it.
        float want = Value(layer, expert, k);
        if (t->dtype == DType::kBF16) want = Bf16ToFloat(FloatToBf16(want));
        if (t->dtype == DType::kF16) want = F16ToFloat(FloatToF16(want));
        if (f[j] != want) return false;
      }
    }
    return k == 3 * static_cast<size_t>(h_) * i_;
  }

  absl::StatusOr<std::vector<int>> BeginLayer(Phase, int, absl::Span<const int> e) override {
    return std::vector<int>(e.begin(), e.end());
  }
  absl::StatusOr<ExpertWeights> Acquire(int layer, int expert) override {
    float* d = Data(layer, expert);
    const int64_t hi = static_cast<int64_t>(h_) * i_;
    ExpertWeights w;
    w.layout = layout_;
    if (layout_ == ExpertWeights::Layout::kFusedTransposed) {
      w.gate_up = TensorView{d, DType::kF32, {h_, 2 * i_}};
      w.down = TensorView{d + 2 * hi, DType::kF32, {i_, h_}};
    } else {
      w.gate = TensorView{d, DType::kF32, {i_, h_}};
      w.up = TensorView{d + hi, DType::kF32, {i_, h_}};
      w.down = TensorView{d + 2 * hi, DType::kF32, {h_, i_}};
    }
    return w;
  }
  void Release(int, int) override {}
  void EndLayer(int) override {}
  // The views point into data_, which lives as long as the source: a test
  // turns this on to let HostExpertStore map them (mapped mode).
  bool views_outlive_release() const override { return stable_views; }
  bool stable_views = false;

 private:
  float* Data(int layer, int expert) {
    return data_.data() + (static_cast<size_t>(layer) * experts_ + expert) * 3 * h_ * i_;
  }
  int layers_, experts_, h_, i_;
  ExpertWeights::Layout layout_;
  std::vector<float> data_;
};

}  // namespace testing
}  // namespace vismoe

#endif  // VISMOE_TESTS_ENGINE_OFFLOAD_FAKE_EXPERT_SOURCE_H_
