// OpTimer: where a CUDA decoder step spends the device's time, per op
// family, from timing events recorded on the compute stream where each op
// starts (opt-in, BackendOptions::device_op_timing: each record costs the
// host a microsecond or two, so TPOT measured with it is a little worse). A
// family's time is the stream's time from the start of its op to the start
// of the next, so the gaps where the device waits for the host's next launch
// count to the op before them: the sum is the step's whole device time.
// Totals go to a StatsSink once per step (StatsSink::OnDeviceStep).
// Thread safety: none; used by the step holding the ops' lock.
// Ownership: owns its events; borrows the sink.
#ifndef VISMOE_ENGINE_BACKENDS_CUDA_OP_TIMER_H_
#define VISMOE_ENGINE_BACKENDS_CUDA_OP_TIMER_H_

#include <array>
#include <cstddef>
#include <vector>

#include "absl/status/status.h"
#include "engine/core/stats_sink.h"
#include "engine/device/cuda/device.h"
#include "engine/device/cuda/types.h"

namespace vismoe::cuda {

class OpTimer {
 public:
  enum class Family { kEmbed, kNorm, kAttention, kRouter, kExperts, kDenseMlp, kLogits, kOther };
  static constexpr size_t kFamilies = 8;
  static const char* Name(Family family);

  explicit OpTimer(StatsSink* sink) : sink_(sink) {}

  // The op family `family` starts here on `stream`.
  void Mark(Family family, StreamHandle stream);
  // Ends a step of `rows` rows: waits for the stream, adds up the intervals
  // and reports them. Forgets the step's marks whatever happens.
  absl::Status Finish(StreamHandle stream, int64_t rows);

 private:
  StatsSink* sink_;
  std::vector<Event> events_;  // grows to the most marks of a step, then reused
  std::vector<Family> marks_;  // this step's, one per used event
};

}  // namespace vismoe::cuda

#endif  // VISMOE_ENGINE_BACKENDS_CUDA_OP_TIMER_H_
