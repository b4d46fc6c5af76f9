#include "engine/backends/cuda/cuda_backend.h"

#include "absl/strings/str_cat.h"
#include "engine/backends/cuda/cuda_decoder_ops.h"
#include "engine/backends/cuda/cuda_vision_ops.h"
#include "engine/core/status_macros.h"
#include "engine/device/cuda/cuda_copy_backend.h"
#include "engine/device/cuda/cuda_device_allocator.h"
#include "engine/device/cuda/device.h"
#include "engine/device/cuda/pinned_host_allocator.h"

namespace vismoe::cuda {

absl::StatusOr<std::string> CudaBackend::Probe() const {
  VISMOE_ASSIGN_OR_RETURN(const DeviceInfo device, ProbeCudaDevice(0));
  return absl::StrCat("CUDA device ", device.Summary());
}

absl::Status CudaBackend::Runs(const ModelConfig& config) const {
  return CudaDecoderOps::Runs(config);
}

absl::Status CudaBackend::Verified(const ModelConfig& config) const {
  return CudaDecoderOps::Verified(config);
}

absl::StatusOr<std::unique_ptr<DecoderOps>> CudaBackend::CreateDecoderOps(
    const ModelConfig& config, const Checkpoint& checkpoint, const BackendOptions& options) const {
  CudaDecoderOps::Options o;
  o.device = options.device;
  o.max_tokens_per_step = options.max_tokens_per_step;
  o.host_pool = options.pool;  // experts computed on the host
  o.op_timing = options.device_op_timing;
  o.stats = options.stats;
  o.fp8_experts = options.fp8_experts;
  VISMOE_ASSIGN_OR_RETURN(std::unique_ptr<CudaDecoderOps> ops,
                          CudaDecoderOps::Create(config, checkpoint, o));
  return std::unique_ptr<DecoderOps>(std::move(ops));
}

absl::StatusOr<std::unique_ptr<VisionOps>> CudaBackend::CreateVisionOps(
    const ModelConfig& config, const Checkpoint& checkpoint, const BackendOptions& options) const {
  // A prompt holds at most max_prompt_tokens visual tokens, each merge^2 patches.
  const int64_t merge = config.vision.spatial_merge_size;
  CudaVisionOps::Options o;
  o.device = options.device;
  o.max_patches = merge * merge * options.max_prompt_tokens;
  VISMOE_ASSIGN_OR_RETURN(std::unique_ptr<CudaVisionOps> ops,
                          CudaVisionOps::Create(config, checkpoint, o));
  return std::unique_ptr<VisionOps>(std::move(ops));
}

absl::StatusOr<OffloadDeviceParts> CudaBackend::CreateOffloadDevice(
    const BackendOptions& options) const {
  OffloadDeviceParts parts;
  VISMOE_ASSIGN_OR_RETURN(parts.copy, CudaCopyBackend::Create(options.device));
  parts.host_allocator = std::make_unique<PinnedHostAllocator>();
  parts.device_allocator = std::make_unique<CudaDeviceAllocator>(options.device);
  parts.expert_dtype = DType::kBF16;  // the CUDA decoder's experts are bf16 whatever the file holds
  return parts;
}

int64_t CudaBackend::DecoderActivationBytes(const ModelConfig& config,
                                            const BackendOptions& options) const {
  return CudaDecoderOps::ActivationBytes(config, options.max_tokens_per_step, options.fp8_experts);
}

}  // namespace vismoe::cuda
