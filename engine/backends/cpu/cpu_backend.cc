#include "engine/backends/cpu/cpu_backend.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "engine/backends/cpu/cpu_decoder_ops.h"
#include "engine/backends/cpu/cpu_vision_ops.h"
#include "engine/core/status_macros.h"

namespace vismoe::cpu {

absl::StatusOr<std::string> CpuBackend::Probe() const {
  return absl::StrCat("CPU, ", std::thread::hardware_concurrency(), " hardware threads");
}

absl::StatusOr<std::unique_ptr<DecoderOps>> CpuBackend::CreateDecoderOps(
    const ModelConfig& config, const Checkpoint& checkpoint, const BackendOptions& options) const {
  VISMOE_ASSIGN_OR_RETURN(
      std::unique_ptr<CpuDecoderOps> ops,
      CpuDecoderOps::Create(config, checkpoint, options.pool, options.cpu_deferred_moe));
  return std::unique_ptr<DecoderOps>(std::move(ops));
}

absl::StatusOr<std::unique_ptr<VisionOps>> CpuBackend::CreateVisionOps(
    const ModelConfig& config, const Checkpoint& checkpoint, const BackendOptions& options) const {
  VISMOE_ASSIGN_OR_RETURN(std::unique_ptr<CpuVisionOps> ops,
                          CpuVisionOps::Create(config, checkpoint, options.pool));
  return std::unique_ptr<VisionOps>(std::move(ops));
}

absl::StatusOr<OffloadDeviceParts> CpuBackend::CreateOffloadDevice(const BackendOptions&) const {
  return OffloadDeviceParts{};  // host memory and memcpy
}

}  // namespace vismoe::cpu
