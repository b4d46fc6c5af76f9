// BenchSink: the StatsSink vismoe-bench hands the engine -- PhaseHitCounter's
// counts plus, with --device_op_timing, the device time of each op family per
// forward step (StatsSink::OnDeviceStep), kept apart for single-row steps
// (decode of one sequence: what TPOT is made of) and the others (prefill,
// batches).
// Thread safety: calls from any engine thread; Json() at any time.
#ifndef VISMOE_ENGINE_BENCH_DEVICE_OP_TIMES_H_
#define VISMOE_ENGINE_BENCH_DEVICE_OP_TIMES_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

#include "engine/bench/phase_hits.h"
#include "nlohmann/json.hpp"

namespace vismoe::bench {

class BenchSink final : public PhaseHitCounter {
 public:
  void OnDeviceStep(int64_t rows, double seconds, absl::Span<const DeviceOpTime> ops) override;
  // {"decode": {"steps", "step_ms", "ms": {family: mean ms per step}},
  //  "other": {...}}; null when nothing was timed.
  nlohmann::json Json() const;
  // The same as a table, one line per family (for stderr).
  std::string Table() const;

 private:
  struct Steps {
    int64_t steps = 0;
    double seconds = 0;                      // sum of step_seconds
    std::map<std::string, double> families;  // sum of seconds per family
  };
  mutable std::mutex mu_;
  Steps decode_, other_;  // guarded by mu_
};

}  // namespace vismoe::bench

#endif  // VISMOE_ENGINE_BENCH_DEVICE_OP_TIMES_H_
