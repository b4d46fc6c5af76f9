// StreamExpertLauncher: the device side of RunExpertBatches
// (engine/offload/expert_batch_runner.h) for one MoE layer of the CUDA
// decoder's host-driven path (prefill, offloaded layers): a batch is one
// grouped MoeExpertsGrouped call on the compute stream over the experts'
// blocks of permuted rows, and its ticket an event recorded behind it. An
// expert on the host: its rows are copied to the host in PrepareHost (ahead of
// every launch), computed by the CPU kernels in ComputeOnHost, and its output
// copied into its permuted rows on the stream.
// Thread safety: none; one layer of one step. Ownership: borrows everything.
#ifndef VISMOE_ENGINE_BACKENDS_CUDA_STREAM_EXPERT_LAUNCHER_H_
#define VISMOE_ENGINE_BACKENDS_CUDA_STREAM_EXPERT_LAUNCHER_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/core/thread_pool.h"
#include "engine/device/cuda/device.h"
#include "engine/device/cuda/types.h"
#include "engine/offload/expert_batch_runner.h"
#include "engine/ops/cuda/gemm.h"

namespace vismoe::cuda {

// Device expert pointers from an ExpertWeights view (which points into the
// offload arena on this backend); Unimplemented for a dtype other than bf16.
absl::StatusOr<DeviceExpert> ToDeviceExpert(const ExpertWeights& w, int layer, int expert);

// Host-side buffers of the experts a layer computes on the host, kept by the
// step so no layer allocates once they have grown.
struct HostExpertBuffers {
  std::vector<Bf16> x, y;     // the host experts' permuted rows and outputs, expert after expert
  std::vector<float> xf, yf;  // one expert's rows and output in fp32
};

class StreamExpertLauncher final : public ExpertBatchLauncher {
 public:
  StreamExpertLauncher(Blas& blas, const Stream& stream, const std::vector<Event>& events,
                       int layer, const std::vector<int32_t>& offsets, int64_t hidden,
                       int64_t inter, const Bf16* xp, Bf16* gate_up, Bf16* act, Bf16* yp)
      : blas_(blas),
        stream_(stream),
        events_(events),
        layer_(layer),
        offsets_(offsets),
        hidden_(hidden),
        inter_(inter),
        xp_(xp),
        gate_up_(gate_up),
        act_(act),
        yp_(yp) {}

  // What host execution needs: all borrowed from the ops and the step.
  void SetHost(ThreadPool* pool, const Event* rows_ready, HostExpertBuffers* buffers) {
    pool_ = pool;
    rows_ready_ = rows_ready;
    host_ = buffers;
  }
  // GPT-OSS's experts: the layer's biases, device bf16 [E, 2I] and [E, H] and
  // the same in host fp32 (for experts computed on the host), and the
  // clamped SwiGLU. All borrowed.
  struct ClampedExperts {
    ClampedSwigluAct act;
    const Bf16* gate_up_bias = nullptr;
    const Bf16* down_bias = nullptr;
    const float* host_gate_up_bias = nullptr;
    const float* host_down_bias = nullptr;
  };
  void SetClamped(const ClampedExperts* clamped) { clamped_ = clamped; }
  // FP8 and MXFP4 experts: widened to bf16 into `scratch` (`slots` experts of
  // ExpertScratchElems each) just before their GEMMs, `slots` at a time.
  static int64_t ExpertScratchElems(int64_t hidden, int64_t inter) { return 3 * hidden * inter; }
  void SetWidenScratch(Bf16* scratch, int slots) {
    widen_ = scratch;
    widen_slots_ = slots;
  }
  absl::Status PrepareHost(absl::Span<const int> experts) override;
  absl::Status ComputeOnHost(int expert, const ExpertWeights& weights) override;

  absl::Status Launch(absl::Span<const AcquiredExpert> batch, int ticket) override;
  absl::StatusOr<bool> Done(int ticket) override { return events_[ticket].Query(); }
  absl::Status Wait(int ticket) override { return events_[ticket].Synchronize(); }
  absl::Status Drain() override { return stream_.Synchronize(); }

 private:
  Blas& blas_;
  const Stream& stream_;
  const std::vector<Event>& events_;  // one per possible batch (per expert)
  const int layer_;
  const std::vector<int32_t>& offsets_;  // expert e owns permuted rows [off[e], off[e+1])
  const int64_t hidden_, inter_;
  const Bf16* xp_;
  Bf16 *gate_up_, *act_, *yp_;
  ThreadPool* pool_ = nullptr;
  const Event* rows_ready_ = nullptr;
  HostExpertBuffers* host_ = nullptr;
  const ClampedExperts* clamped_ = nullptr;
  Bf16* widen_ = nullptr;
  int widen_slots_ = 0;
  // `w` as bf16 device pointers: as they are, or widened into scratch slot
  // `slot` when block-scaled (FP8, per expert: gate, up, down).
  absl::StatusOr<DeviceExpert> DeviceWeights(const AcquiredExpert& a, int slot);
  absl::StatusOr<DeviceExpert> WidenMxfp4(const AcquiredExpert& a, int slot);
  std::vector<int64_t> host_row_;  // per expert: its first row in host_->x / y, or -1
  bool rows_on_host_ = false;      // rows_ready_ has been waited for
};

}  // namespace vismoe::cuda

#endif  // VISMOE_ENGINE_BACKENDS_CUDA_STREAM_EXPERT_LAUNCHER_H_
