#include "engine/policy/sequence_preload.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace vismoe {

SequencePreload::SequencePreload(OffloadExpertProvider* provider, int num_layers, int num_experts,
                                 int experts_per_layer)
    : provider_(provider),
      num_layers_(std::max(num_layers, 0)),
      num_experts_(std::max(num_experts, 0)),
      experts_per_layer_(std::max(experts_per_layer, 1)),
      mass_(static_cast<size_t>(num_layers_) * num_experts_, 0.0),
      seen_(static_cast<size_t>(num_layers_), 0) {}

SequencePreload::~SequencePreload() { End(); }

void SequencePreload::OnRouting(Phase phase, int layer, const float* /*hidden*/,
                                const RouterResult& r) {
  if (phase != Phase::kPrefill || started_ || layer < 0 || layer >= num_layers_ || r.n <= 0 ||
      r.num_experts != num_experts_) {
    return;
  }
  double* mass = mass_.data() + static_cast<size_t>(layer) * num_experts_;
  const size_t e = static_cast<size_t>(num_experts_);
  if (r.logits.size() == static_cast<size_t>(r.n) * e) {
    std::vector<double> p(e);
    for (int64_t t = 0; t < r.n; ++t) {
      const float* row = r.logits.data() + t * e;
      const double top = *std::max_element(row, row + e);
      double sum = 0;
      for (size_t j = 0; j < e; ++j) sum += p[j] = std::exp(static_cast<double>(row[j]) - top);
      for (size_t j = 0; j < e; ++j) mass[j] += p[j] / sum;
    }
  } else {
    // No scores (a backend that kept them on the device): the top-k ids, each
    // routed slot one unit of mass.
    for (int id : r.experts) {
      if (id >= 0 && id < num_experts_) mass[id] += 1.0;
    }
  }
  seen_[layer] = 1;
}

std::vector<std::vector<int>> SequencePreload::Preferred() const {
  std::vector<std::vector<int>> out(num_layers_);
  std::vector<int> ids(num_experts_);
  for (int l = 0; l < num_layers_; ++l) {
    if (!seen_[l]) continue;
    const double* mass = mass_.data() + static_cast<size_t>(l) * num_experts_;
    std::iota(ids.begin(), ids.end(), 0);
    const int n = std::min(experts_per_layer_, num_experts_);
    std::partial_sort(ids.begin(), ids.begin() + n, ids.end(), [mass](int a, int b) {
      return mass[a] != mass[b] ? mass[a] > mass[b] : a < b;
    });
    out[l].assign(ids.begin(), ids.begin() + n);
  }
  return out;
}

void SequencePreload::Start() {
  if (started_ || ended_) return;
  started_ = true;
  if (std::none_of(seen_.begin(), seen_.end(), [](char s) { return s != 0; })) return;
  provider_->Preload(owner(), Preferred());
}

void SequencePreload::Suspend() {
  if (ended_) return;
  if (started_) provider_->EndPreload(owner());
  started_ = false;
  std::fill(mass_.begin(), mass_.end(), 0.0);
  std::fill(seen_.begin(), seen_.end(), 0);
}

void SequencePreload::End() {
  if (ended_) return;
  ended_ = true;
  if (started_) provider_->EndPreload(owner());
}

}  // namespace vismoe
