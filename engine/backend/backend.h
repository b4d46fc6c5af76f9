// Backend: one compute backend (cpu, cuda) as the engine sees it -- whether it
// can run on this machine, and the pieces of a model it builds: the decoder's
// ops, the vision tower's ops, the offload device (host and device memory, copies)
// and the device memory those need beyond weights and KV cache. Backends are
// found by name in the registry (engine/backends/registry.h), so the engine
// names no backend and compiles no #ifdef.
//
// Thread safety: implementations are stateless; every method may be called
// from any thread.
#ifndef VISMOE_ENGINE_BACKEND_BACKEND_H_
#define VISMOE_ENGINE_BACKEND_BACKEND_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "engine/backend/decoder_ops.h"
#include "engine/backend/vision_ops.h"
#include "engine/core/dtype.h"
#include "engine/core/stats_sink.h"
#include "engine/core/thread_pool.h"
#include "engine/model/checkpoint.h"
#include "engine/model/model_config.h"
#include "engine/offload/copy_backend.h"
#include "engine/offload/device_allocator.h"
#include "engine/offload/host_expert_store.h"

namespace vismoe {

struct BackendOptions {
  ThreadPool* pool = nullptr;  // the CPU backend's kernels (not owned; null = caller thread)
  int device = 0;              // device ordinal (cuda)
  // The most rows one decoder step carries (every running sequence's chunk
  // together), and the most tokens of one prompt, so the most visual tokens
  // the vision tower encodes at once: size device scratch (cuda).
  int64_t max_tokens_per_step = 4096;
  int64_t max_prompt_tokens = 4096;
  // CPU backend: pinned MoE layers go through DecoderStep::DeviceMoe
  // (HostDeferredMoe), the protocol of a device backend's hit path (tests).
  bool cpu_deferred_moe = false;
  // Device backends: time each op family of every step and report it to
  // `stats` (StatsSink::OnDeviceStep; profiling, costs some host time).
  bool device_op_timing = false;
  StatsSink* stats = nullptr;  // not owned; may be null
  // Experts quantised to FP8 at load (--expert_dtype=fp8): a device backend
  // that widens them before its GEMMs reserves the room (cuda).
  bool fp8_experts = false;
};

// What the offload runtime moves experts with on this backend. Null members
// mean host memory and memcpy (the CPU backend).
struct OffloadDeviceParts {
  std::unique_ptr<HostAllocator> host_allocator;
  std::unique_ptr<DeviceAllocator> device_allocator;
  std::unique_ptr<CopyBackend> copy;
  // The dtype the decoder reads experts in; unset = as the checkpoint stores
  // them. BF16 widens float experts and keeps block-scaled ones as stored
  // (ExpertFormat::FromWeights): the decoder widens those itself.
  std::optional<DType> expert_dtype;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // "cpu" or "cuda".
  virtual const char* name() const = 0;
  // A one-line description of the device this backend would run on, or why
  // it cannot run here (Unavailable / Unimplemented, naming the cause).
  virtual absl::StatusOr<std::string> Probe() const = 0;
  // True when the decoder reads experts from device memory only, so it runs
  // behind the offload provider even without a memory budget.
  virtual bool experts_in_device_memory() const = 0;
  // OK when this backend runs `config`'s model; Unimplemented naming what it
  // lacks otherwise (the "auto" choice then takes the CPU backend).
  virtual absl::Status Runs(const ModelConfig& config) const = 0;
  // OK when this backend's path for `config` has run against the reference
  // on real hardware; FailedPrecondition saying what has not otherwise. The
  // "auto" choice takes only a verified backend; naming the backend runs an
  // unverified path with a warning. REQUIRES: Runs(config) is OK.
  virtual absl::Status Verified(const ModelConfig& /*config*/) const { return absl::OkStatus(); }

  virtual absl::StatusOr<std::unique_ptr<DecoderOps>> CreateDecoderOps(
      const ModelConfig& config, const Checkpoint& checkpoint,
      const BackendOptions& options) const = 0;
  // REQUIRES: config.has_vision.
  virtual absl::StatusOr<std::unique_ptr<VisionOps>> CreateVisionOps(
      const ModelConfig& config, const Checkpoint& checkpoint,
      const BackendOptions& options) const = 0;
  virtual absl::StatusOr<OffloadDeviceParts> CreateOffloadDevice(
      const BackendOptions& options) const = 0;
  // Device bytes the decoder allocates beyond its weights and KV cache (the
  // memory plan's activation reservation); 0 on the host.
  virtual int64_t DecoderActivationBytes(const ModelConfig& config,
                                         const BackendOptions& options) const = 0;
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_BACKEND_BACKEND_H_
