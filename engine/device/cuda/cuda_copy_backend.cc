#include "engine/device/cuda/cuda_copy_backend.h"

#include <cuda_runtime_api.h>

#include <utility>

#include "engine/device/cuda/cuda_status.h"

namespace vismoe::cuda {

absl::StatusOr<std::unique_ptr<CudaCopyBackend>> CudaCopyBackend::Create(int device) {
  VISMOE_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  absl::StatusOr<Stream> stream = Stream::Create();
  if (!stream.ok()) return stream.status();
  absl::StatusOr<Event> done = Event::Create(/*timing=*/false);
  if (!done.ok()) return done.status();
  return std::unique_ptr<CudaCopyBackend>(
      new CudaCopyBackend(device, *std::move(stream), *std::move(done)));
}

absl::Status CudaCopyBackend::Copy(void* dst, const void* src, size_t bytes) {
  // The copy thread is not the thread that ran Create(); the current device is
  // per thread, so make ours current (a cheap host-side check per copy).
  int current = -1;
  VISMOE_CUDA_RETURN_IF_ERROR(cudaGetDevice(&current));
  if (current != device_) VISMOE_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  VISMOE_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_.get()));
  cudaError_t err = cudaEventRecord(done_.get(), stream_.get());
  const char* call = "cudaEventRecord(done_.get(), stream_.get())";
  if (err == cudaSuccess) {
    // Waits for this stream's work only (the device's schedule flags decide
    // spin or yield; the copy thread has nothing else to do meanwhile).
    err = cudaEventSynchronize(done_.get());
    call = "cudaEventSynchronize(done_.get())";
  }
  if (err != cudaSuccess) {
    absl::Status st = CudaErrorToStatus(err, call, __FILE__, __LINE__);
    // The copy is queued: do not return (and let the caller hand `dst` to
    // anything else) while it may still be writing there.
    (void)cudaStreamSynchronize(stream_.get());
    (void)cudaGetLastError();
    return st;
  }
  return absl::OkStatus();
}

}  // namespace vismoe::cuda
