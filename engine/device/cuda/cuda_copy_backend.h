// CudaCopyBackend: the TransferEngine's copy stream on the CUDA backend. Each
// Copy() issues one cudaMemcpyAsync (host->device) on the backend's own
// non-blocking stream, records a pre-created event after it and waits on that
// event, so the copy thread blocks until exactly this copy is done while the
// compute stream keeps running: nothing here synchronises the device or any
// other stream. The stream and the event are created once in Create(), never
// on the hot path.
// Memory contract: `dst` must be device memory from the offload DeviceArena
// (cuda::CudaDeviceAllocator) and `src` page-locked host memory (the host
// expert store built through cuda::PinnedHostAllocator). A pageable `src`
// still copies correctly, but cudaMemcpyAsync then degrades to a staged,
// host-synchronous copy through a driver bounce buffer (lower bandwidth).
// Thread safety: Copy() from one thread at a time (the TransferEngine's copy
// thread); stream() from any thread.
// Ownership: owns its stream and event; destroy it after the TransferEngine
// that borrows it has shut down.
#ifndef VISMOE_ENGINE_DEVICE_CUDA_CUDA_COPY_BACKEND_H_
#define VISMOE_ENGINE_DEVICE_CUDA_CUDA_COPY_BACKEND_H_

#include <cstddef>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/offload/copy_backend.h"
#include "engine/device/cuda/device.h"
#include "engine/device/cuda/types.h"

namespace vismoe::cuda {

class CudaCopyBackend final : public CopyBackend {
 public:
  // Makes `device` current on the calling thread and creates the copy stream
  // and its completion event there. Errors name the failing CUDA call
  // (kUnavailable when there is no device).
  static absl::StatusOr<std::unique_ptr<CudaCopyBackend>> Create(int device = 0);
  CudaCopyBackend(const CudaCopyBackend&) = delete;
  CudaCopyBackend& operator=(const CudaCopyBackend&) = delete;

  // Blocks until the `bytes` are on the device. Errors name the failing call;
  // after an error the destination holds no usable copy.
  absl::Status Copy(void* dst, const void* src, size_t bytes) override;
  const char* name() const override { return "cuda-h2d"; }

  // The copy stream, e.g. to order device work after it with an event.
  StreamHandle stream() const { return stream_.get(); }
  int device() const { return device_; }

 private:
  CudaCopyBackend(int device, Stream stream, Event done)
      : device_(device), stream_(std::move(stream)), done_(std::move(done)) {}

  int device_;
  Stream stream_;
  Event done_;  // recorded after each copy; timing disabled (cheaper)
};

}  // namespace vismoe::cuda

#endif  // VISMOE_ENGINE_DEVICE_CUDA_CUDA_COPY_BACKEND_H_
