// HostComputeCost: the cost model behind the cpu miss policy
// (engine/policy/host_experts.md). It learns how long the host's kernels take
// to compute one expert over m routed tokens from measured computations, and
// weighs that against how long copying the expert to the device would take.
//
// Times are kept per power-of-two band of m (1, 2-3, 4-7, ...), each band a
// moving average of its samples' rows and seconds. The estimate for m
// interpolates linearly between the nearest bands below and above m; above
// every band it scales the highest by m / rows (proportional, an
// over-estimate where reading the weights dominates, so the policy errs
// towards copying); below every band it takes the lowest (fewer rows take no
// longer).
// Thread safety: none; the owner serialises calls.
// Ownership: plain value.
#ifndef VISMOE_ENGINE_OFFLOAD_HOST_COMPUTE_COST_H_
#define VISMOE_ENGINE_OFFLOAD_HOST_COMPUTE_COST_H_

#include <array>
#include <cstdint>
#include <optional>

namespace vismoe {

class HostComputeCost {
 public:
  static constexpr int kBands = 32;
  // Weight of a new sample in its band's moving average.
  static constexpr double kSmoothing = 0.25;

  // One host computation of an expert over `tokens` rows that took `seconds`.
  // Samples with tokens < 1 or a non-finite / negative time are ignored.
  void Record(int64_t tokens, double seconds);
  // Estimated seconds for one expert over `tokens` rows; nullopt before the
  // first sample.
  std::optional<double> EstimateSeconds(int64_t tokens) const;
  // The decision for one missed expert of `tokens` rows whose copy would take
  // `copy_seconds`: compute it on the host when the estimate is lower. Without
  // a sample, only a one-row expert goes to the host (the cheapest
  // computation to learn from); with copy_seconds <= 0 (bandwidth unknown)
  // none does.
  bool PreferHost(int64_t tokens, double copy_seconds) const;
  int64_t samples() const { return samples_; }

 private:
  struct Band {
    double rows = 0;
    double seconds = 0;
    int64_t samples = 0;
  };
  static int BandOf(int64_t tokens);

  std::array<Band, kBands> bands_{};
  int64_t samples_ = 0;
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_OFFLOAD_HOST_COMPUTE_COST_H_
