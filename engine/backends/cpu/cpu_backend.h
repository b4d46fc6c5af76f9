// CpuBackend: the CPU reference backend (fp32 activations, weights read as
// stored, experts in host memory). Always available.
// Thread safety: stateless.
#ifndef VISMOE_ENGINE_BACKENDS_CPU_CPU_BACKEND_H_
#define VISMOE_ENGINE_BACKENDS_CPU_CPU_BACKEND_H_

#include "engine/backend/backend.h"

namespace vismoe::cpu {

class CpuBackend final : public Backend {
 public:
  const char* name() const override { return "cpu"; }
  absl::StatusOr<std::string> Probe() const override;
  bool experts_in_device_memory() const override { return false; }
  // The reference: every family the arch spec knows.
  absl::Status Runs(const ModelConfig&) const override { return absl::OkStatus(); }
  absl::StatusOr<std::unique_ptr<DecoderOps>> CreateDecoderOps(
      const ModelConfig& config, const Checkpoint& checkpoint,
      const BackendOptions& options) const override;
  absl::StatusOr<std::unique_ptr<VisionOps>> CreateVisionOps(
      const ModelConfig& config, const Checkpoint& checkpoint,
      const BackendOptions& options) const override;
  absl::StatusOr<OffloadDeviceParts> CreateOffloadDevice(
      const BackendOptions& options) const override;
  int64_t DecoderActivationBytes(const ModelConfig&, const BackendOptions&) const override {
    return 0;
  }
};

}  // namespace vismoe::cpu

#endif  // VISMOE_ENGINE_BACKENDS_CPU_CPU_BACKEND_H_
