#include "engine/backends/cpu/cpu_speculation.h"

#include <algorithm>
#include <utility>

#include "engine/backends/cpu/cpu_family_ops.h"
#include "engine/model/arch_spec.h"
#include "engine/ops/cpu/moe.h"
#include "engine/ops/cpu/rms_norm.h"

namespace vismoe::cpu {
namespace {

double Since(CpuSpeculation::Clock::time_point start) {
  return std::chrono::duration<double>(CpuSpeculation::Clock::now() - start).count();
}

}  // namespace

void CpuSpeculation::Arm(const SpeculationPlan& plan) {
  auto s = std::make_unique<State>();
  s->from = plan.from_layer;
  s->record.layer = plan.target_layer;
  s->record.rows.assign(plan.rows.begin(), plan.rows.end());
  if (plan.default_vector != nullptr) {
    s->d.assign(plan.default_vector, plan.default_vector + c_.hidden_size);
  }
  states_.push_back(std::move(s));
}

CpuSpeculation::State* CpuSpeculation::From(int layer) {
  for (auto& s : states_) {
    if (s->from == layer) return s.get();
  }
  return nullptr;
}

CpuSpeculation::State* CpuSpeculation::Target(int layer) const {
  for (const auto& s : states_) {
    if (s->record.layer == layer) return s.get();
  }
  return nullptr;
}

const SpeculationRecord* CpuSpeculation::Record(int layer) const {
  const State* s = Target(layer);
  return s != nullptr ? &s->record : nullptr;
}

CpuSpeculation::Wait CpuSpeculation::BeforeAcquire(int layer, int expert, ExpertProvider* experts,
                                                   const float* hs) {
  Wait wait;
  if (states_.empty()) return wait;  // off: not even a Ready() call
  State* from = From(layer);
  if ((from == nullptr && Target(layer) == nullptr) || experts->Ready(layer, expert)) return wait;
  wait.waiting = true;
  wait.start = Clock::now();
  if (from == nullptr) return wait;
  if (!from->planned) Plan(*from, hs, experts);
  double seconds = 0;
  while (RunOne(*from, experts, &seconds)) {
    if (experts->Ready(layer, expert)) {
      // The copy landed at some point during that unit: at most its length late.
      from->record.overrun += seconds;
      break;
    }
  }
  return wait;
}

void CpuSpeculation::AfterAcquire(int layer, const Wait& wait) {
  if (!wait.waiting) return;
  const double seconds = Since(wait.start);
  if (State* from = From(layer); from != nullptr) from->record.wait_before += seconds;
  if (State* target = Target(layer); target != nullptr) target->record.wait_at_target += seconds;
}

void CpuSpeculation::AddCompute(int layer, double seconds) {
  if (State* s = Target(layer); s != nullptr) s->record.compute += seconds;
}

const float* CpuSpeculation::Output(int layer, int64_t row, int expert) {
  State* s = Target(layer);
  if (s == nullptr) return nullptr;
  const SpeculatedPair* p = s->record.Find(row, expert);
  if (p == nullptr) return nullptr;
  return s->outs[static_cast<size_t>(p - s->record.pairs.data())].data();
}

void CpuSpeculation::Plan(State& s, const float* hs, ExpertProvider* experts) {
  s.planned = true;
  const int target = s.record.layer;
  const int64_t h = c_.hidden_size;
  const int64_t m = static_cast<int64_t>(s.record.rows.size());
  std::vector<float> r(static_cast<size_t>(m * h));
  for (int64_t i = 0; i < m; ++i) {
    const float* src = hs + s.record.rows[i] * h;
    float* dst = r.data() + i * h;
    for (int64_t k = 0; k < h; ++k) dst[k] = s.d.empty() ? src[k] : src[k] + s.d[k];
  }
  const DecoderLayerWeights& lw = w_.layers[target];
  s.q.resize(r.size());
  FamilyNorm(pool_, w_.spec, r.data(), m, h, lw.post_norm, lw.post_norm_bias, c_.rms_norm_eps,
             s.q.data());
  RouterResult predicted;
  FamilyRoute(pool_, w_.spec, c_, s.q.data(), m, h, lw, &predicted);
  s.units = PlanSpeculation(predicted, experts->Availability(target));
  s.ran.assign(s.units.size(), 0);
}

bool CpuSpeculation::RunOne(State& s, ExpertProvider* experts, double* seconds) {
  const int target = s.record.layer;
  const int64_t h = c_.hidden_size;
  for (size_t u = 0; u < s.units.size(); ++u) {
    if (s.ran[u]) continue;
    const SpeculationUnit& unit = s.units[u];
    absl::StatusOr<ExpertWeights> weights = experts->AcquireIfResident(target, unit.expert);
    if (!weights.ok()) continue;  // not there yet: maybe at the next look
    const auto start = Clock::now();
    const int64_t m = static_cast<int64_t>(unit.rows.size());
    xs_.resize(m * h);
    ys_.resize(m * h);
    for (int64_t i = 0; i < m; ++i) {
      std::copy_n(s.q.data() + unit.rows[i] * h, h, xs_.data() + i * h);
    }
    const std::optional<ClampedSwigluExpert> oss =
        FamilyExpertExtras(c_, w_.layers[target], unit.expert);
    ExpertForward(pool_, *weights, xs_.data(), m, h, c_.moe_intermediate_size, ys_.data(),
                  oss.has_value() ? &*oss : nullptr);
    experts->ReleaseResident(target, unit.expert);
    s.ran[u] = 1;
    *seconds = Since(start);
    for (int64_t i = 0; i < m; ++i) {
      Store(s, unit.expert, s.record.rows[unit.rows[i]], ys_.data() + i * h, *seconds / m);
    }
    return true;
  }
  return false;
}

void CpuSpeculation::Store(State& s, int expert, int64_t row, const float* out, double seconds) {
  std::vector<SpeculatedPair>& pairs = s.record.pairs;
  auto it =
      std::lower_bound(pairs.begin(), pairs.end(), std::pair<int64_t, int>(row, expert),
                       [](const SpeculatedPair& p, const std::pair<int64_t, int>& key) {
                         return p.row != key.first ? p.row < key.first : p.expert < key.second;
                       });
  const size_t at = static_cast<size_t>(it - pairs.begin());
  pairs.insert(it, SpeculatedPair{row, expert, seconds});
  s.outs.insert(s.outs.begin() + static_cast<std::ptrdiff_t>(at),
                std::vector<float>(out, out + c_.hidden_size));
}

}  // namespace vismoe::cpu
