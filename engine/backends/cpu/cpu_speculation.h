// CpuSpeculation: the CPU backend's speculative execution inside one forward
// step (engine/core/speculative_execution.h; DecoderStep::ArmSpeculation).
// Where it runs: on the forward thread, in the time Experts(from_layer) would
// spend blocked on a copy -- before acquiring an expert that is not Ready(),
// it computes one unit of the target layer (an expert over its predicted
// rows, weights pinned by AcquireIfResident) and looks again, until the
// expert is ready or no unit can run; then it acquires (and blocks) as
// always. So it only fills idle time; the one delay it can add is the unit
// still running when the copy lands (counted as overrun).
//
// Thread safety: none; owned by one CpuDecoderStep, used by its thread.
// Ownership: borrows the weights, the pool and the providers it is handed.
#ifndef VISMOE_ENGINE_BACKENDS_CPU_CPU_SPECULATION_H_
#define VISMOE_ENGINE_BACKENDS_CPU_CPU_SPECULATION_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/backend/decoder_ops.h"
#include "engine/core/speculative_execution.h"
#include "engine/core/thread_pool.h"
#include "engine/model/model_config.h"
#include "engine/model/text_weights.h"
#include "engine/offload/expert_provider.h"

namespace vismoe::cpu {

class CpuSpeculation {
 public:
  using Clock = std::chrono::steady_clock;

  CpuSpeculation(const TextConfig& config, const TextWeights& weights, ThreadPool* pool)
      : c_(config), w_(weights), pool_(pool) {}

  void Arm(const SpeculationPlan& plan);
  // The step's rows changed (token compression): what was armed is dropped.
  void Reset() { states_.clear(); }

  // Around Acquire(layer, expert) in Experts(layer). Before: when speculation
  // is armed from `layer` or targets it and the expert is not Ready, the
  // wait starts (from `layer`: units run on `hs`, the step's residual rows,
  // until it is ready or none can run). After: the wait ends.
  struct Wait {
    bool waiting = false;
    Clock::time_point start;
  };
  Wait BeforeAcquire(int layer, int expert, ExpertProvider* experts, const float* hs);
  void AfterAcquire(int layer, const Wait& wait);

  // At the target layer: true when compute there is timed (speculation was
  // armed for it); the output computed ahead for (row, expert), or null.
  bool Timed(int layer) const { return Target(layer) != nullptr; }
  void AddCompute(int layer, double seconds);
  const float* Output(int layer, int64_t row, int expert);
  const SpeculationRecord* Record(int layer) const;

 private:
  struct State {
    int from = -1;
    std::vector<float> d;  // [hidden] or empty
    bool planned = false;
    std::vector<float> q;  // [rows, hidden]: the quasi-hidden states
    std::vector<SpeculationUnit> units;
    std::vector<char> ran;                 // per unit
    std::vector<std::vector<float>> outs;  // per record.pairs entry, [hidden]
    SpeculationRecord record;
  };

  State* From(int layer);
  State* Target(int layer) const;
  // The quasi-hidden states, the target router's top-k on them and the units.
  void Plan(State& s, const float* hs, ExpertProvider* experts);
  // Runs the first unit whose weights are usable now; false when none is.
  bool RunOne(State& s, ExpertProvider* experts, double* seconds);
  void Store(State& s, int expert, int64_t row, const float* out, double seconds);

  const TextConfig& c_;
  const TextWeights& w_;
  ThreadPool* pool_;
  std::vector<std::unique_ptr<State>> states_;  // pointers stay valid for the step
  std::vector<float> xs_, ys_;
};

}  // namespace vismoe::cpu

#endif  // VISMOE_ENGINE_BACKENDS_CPU_CPU_SPECULATION_H_
