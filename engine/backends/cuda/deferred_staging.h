// DeferredStaging: where the CUDA decode step leaves what the host is to see
// of a layer it ran with DecoderStep::DeviceMoe (a DeferredLayer): a region of
// page-locked host memory per decoder layer, mapped into the device, and an
// event per layer recorded behind the layer's last write to it. The routing
// kernel writes the top-k ids straight into the region (no copy is
// launched); an observed layer's scores and activation rows are copied there
// on the stream. The host reads a region once its event has completed, a
// layer or more behind the device.
// Thread safety: none; used under the decoder ops' step lock.
// Ownership: owns the host memory and the events.
#ifndef VISMOE_ENGINE_BACKENDS_CUDA_DEFERRED_STAGING_H_
#define VISMOE_ENGINE_BACKENDS_CUDA_DEFERRED_STAGING_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend/decoder_ops.h"
#include "engine/device/cuda/device.h"
#include "engine/device/cuda/types.h"
#include "engine/model/model_config.h"

namespace vismoe::cuda {

class DeferredStaging {
 public:
  // One layer's region. Host addresses; ids_device is the device's address
  // of `ids`, for the kernel that writes them.
  struct Region {
    int32_t* ids = nullptr;  // [rows, top_k]
    int32_t* ids_device = nullptr;
    float* weights = nullptr;  // [rows, top_k]
    float* logits = nullptr;   // [rows, E]
    Bf16* residual = nullptr;  // [rows, hidden] each
    Bf16* normed = nullptr;
    Bf16* moe_out = nullptr;
  };

  // Regions of `max_rows` rows for every layer of `c`.
  static absl::StatusOr<DeferredStaging> Create(const TextConfig& c, int64_t max_rows);
  DeferredStaging() = default;
  DeferredStaging(DeferredStaging&&) = default;
  DeferredStaging& operator=(DeferredStaging&&) = default;

  int64_t max_rows() const { return max_rows_; }
  Region region(int layer) const;
  // The layer's writes of `rows` rows (scores and rows too when `observed`)
  // are queued on `stream`: records its event (`in_graph`: the stream is being
  // captured, and each launch of the graph records it).
  absl::Status Record(int layer, int64_t rows, bool observed, StreamHandle stream,
                      bool in_graph = false);
  // The same staging, its writes and event in a graph launched later (a
  // replayed step): what Take will find once the graph has run.
  absl::Status Mark(int layer, int64_t rows, bool observed);
  // Whether Take(layer) would not wait. FailedPrecondition when nothing of
  // the layer is staged.
  absl::StatusOr<bool> Ready(int layer) const;
  // Waits for the layer's event and hands its region over as host fp32;
  // the pointers stay valid until the next Take. The layer is then unstaged.
  absl::StatusOr<DeferredLayer> Take(int layer);
  // Forgets whatever is staged and not taken (a step that ended early).
  // REQUIRES: no queued work writes a region any more.
  void Reset() { rows_.assign(rows_.size(), -1); }

 private:
  int num_experts_ = 0;
  int top_k_ = 0;
  int64_t hidden_ = 0;
  int64_t max_rows_ = 0;
  size_t region_bytes_ = 0;
  size_t off_weights_ = 0, off_logits_ = 0, off_residual_ = 0, off_normed_ = 0, off_out_ = 0;
  PinnedHostBuffer host_;  // mapped
  std::vector<Event> done_;
  std::vector<int64_t> rows_;                       // per layer: rows staged, -1 = none
  std::vector<char> observed_;                      // per layer
  std::vector<float> residual_, normed_, moe_out_;  // Take's fp32 rows
};

}  // namespace vismoe::cuda

#endif  // VISMOE_ENGINE_BACKENDS_CUDA_DEFERRED_STAGING_H_
