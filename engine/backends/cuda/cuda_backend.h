// CudaBackend: the CUDA backend (bf16 activations on one NVIDIA GPU, experts
// in device memory behind the offload provider, copies on their own stream
// from page-locked host memory). Available when a device answers the probe.
// Thread safety: stateless.
#ifndef VISMOE_ENGINE_BACKENDS_CUDA_CUDA_BACKEND_H_
#define VISMOE_ENGINE_BACKENDS_CUDA_CUDA_BACKEND_H_

#include "engine/backend/backend.h"

namespace vismoe::cuda {

class CudaBackend final : public Backend {
 public:
  const char* name() const override { return "cuda"; }
  absl::StatusOr<std::string> Probe() const override;
  bool experts_in_device_memory() const override { return true; }
  absl::Status Runs(const ModelConfig& config) const override;
  absl::Status Verified(const ModelConfig& config) const override;
  absl::StatusOr<std::unique_ptr<DecoderOps>> CreateDecoderOps(
      const ModelConfig& config, const Checkpoint& checkpoint,
      const BackendOptions& options) const override;
  absl::StatusOr<std::unique_ptr<VisionOps>> CreateVisionOps(
      const ModelConfig& config, const Checkpoint& checkpoint,
      const BackendOptions& options) const override;
  absl::StatusOr<OffloadDeviceParts> CreateOffloadDevice(
      const BackendOptions& options) const override;
  int64_t DecoderActivationBytes(const ModelConfig& config,
                                 const BackendOptions& options) const override;
};

}  // namespace vismoe::cuda

#endif  // VISMOE_ENGINE_BACKENDS_CUDA_CUDA_BACKEND_H_
