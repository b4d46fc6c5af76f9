#include "engine/device/cuda/device.h"

#include <cuda_runtime_api.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/device/cuda/cuda_status.h"

namespace vismoe::cuda {

namespace {

// For the destructors below: at process exit (objects of static storage
// duration, e.g. a test's shared fixture) the CUDA runtime may already be
// unloading, and the resource went with it -- no reason to abort the process
// at exit. Any other failure is a broken invariant.
void CheckRelease(cudaError_t err, const char* call, int line) {
  if (err == cudaSuccess || err == cudaErrorCudartUnloading || err == cudaErrorContextIsDestroyed) {
    return;
  }
  CudaCheckFailed(err, call, __FILE__, line);
}

}  // namespace

std::string DeviceInfo::Summary() const {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  return absl::StrFormat("%s (sm_%d%d, %d SMs, %.1f GiB, %.1f GiB free)", name, compute_major,
                         compute_minor, sm_count, static_cast<double>(total_memory_bytes) / kGiB,
                         static_cast<double>(free_memory_bytes) / kGiB);
}

absl::StatusOr<DeviceInfo> ProbeCudaDevice(int ordinal) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later probes start clean
    return absl::UnavailableError(absl::StrCat("no CUDA device: ", cudaGetErrorString(err)));
  }
  if (count == 0) return absl::UnavailableError("no CUDA device: cudaGetDeviceCount returned 0");
  if (ordinal < 0 || ordinal >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA device ordinal ", ordinal, " out of range: ", count, " device(s)"));
  }
  cudaDeviceProp prop{};
  VISMOE_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, ordinal));
  VISMOE_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal));
  DeviceInfo info;
  info.ordinal = ordinal;
  info.name = prop.name;
  info.sm_count = prop.multiProcessorCount;
  info.compute_major = prop.major;
  info.compute_minor = prop.minor;
  info.l2_cache_bytes = static_cast<size_t>(prop.l2CacheSize);
  info.max_shared_memory_per_block_optin = prop.sharedMemPerBlockOptin;
  VISMOE_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&info.free_memory_bytes, &info.total_memory_bytes));
  if (prop.major < 8) {
    return absl::FailedPreconditionError(absl::StrCat("CUDA device ", ordinal, " (", info.name,
                                                      ") is sm_", prop.major, prop.minor,
                                                      "; the bf16 kernels need sm_80 or newer"));
  }
  return info;
}

// ---- DeviceBuffer ------------------------------------------------------------
absl::StatusOr<DeviceBuffer> DeviceBuffer::Allocate(size_t bytes) {
  DeviceBuffer b;
  if (bytes == 0) return b;
  VISMOE_CUDA_RETURN_IF_ERROR(cudaMalloc(&b.data_, bytes));
  b.size_ = bytes;
  return b;
}
DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    Reset();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}
DeviceBuffer::~DeviceBuffer() { Reset(); }
void DeviceBuffer::Reset() {
  if (data_ != nullptr) CheckRelease(cudaFree(data_), "cudaFree(data_)", __LINE__);
  data_ = nullptr;
  size_ = 0;
}

// ---- PinnedHostBuffer ----------------------------------------------------------
absl::StatusOr<PinnedHostBuffer> PinnedHostBuffer::Allocate(size_t bytes, bool portable,
                                                            bool mapped) {
  PinnedHostBuffer b;
  if (bytes == 0) return b;
  unsigned flags = portable ? cudaHostAllocPortable : cudaHostAllocDefault;
  if (mapped) flags |= cudaHostAllocMapped;
  VISMOE_CUDA_RETURN_IF_ERROR(cudaHostAlloc(&b.data_, bytes, flags));
  b.size_ = bytes;
  if (mapped) VISMOE_CUDA_RETURN_IF_ERROR(cudaHostGetDevicePointer(&b.device_data_, b.data_, 0));
  return b;
}
PinnedHostBuffer::PinnedHostBuffer(PinnedHostBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)),
      device_data_(std::exchange(o.device_data_, nullptr)),
      size_(std::exchange(o.size_, 0)) {}
PinnedHostBuffer& PinnedHostBuffer::operator=(PinnedHostBuffer&& o) noexcept {
  if (this != &o) {
    Reset();
    data_ = std::exchange(o.data_, nullptr);
    device_data_ = std::exchange(o.device_data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}
PinnedHostBuffer::~PinnedHostBuffer() { Reset(); }
void PinnedHostBuffer::Reset() {
  if (data_ != nullptr) CheckRelease(cudaFreeHost(data_), "cudaFreeHost(data_)", __LINE__);
  data_ = nullptr;
  device_data_ = nullptr;
  size_ = 0;
}

// ---- GraphExec -----------------------------------------------------------------
absl::Status GraphExec::BeginCapture(StreamHandle stream) {
  VISMOE_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
  return absl::OkStatus();
}
absl::StatusOr<GraphExec> GraphExec::EndCapture(StreamHandle stream) {
  cudaGraph_t graph = nullptr;
  VISMOE_CUDA_RETURN_IF_ERROR(cudaStreamEndCapture(stream, &graph));
  GraphExec g;
  const cudaError_t st = cudaGraphInstantiate(&g.exec_, graph, 0);
  CheckRelease(cudaGraphDestroy(graph), "cudaGraphDestroy(graph)", __LINE__);
  VISMOE_CUDA_RETURN_IF_ERROR(st);
  return g;
}
GraphExec::GraphExec(GraphExec&& o) noexcept : exec_(std::exchange(o.exec_, nullptr)) {}
GraphExec& GraphExec::operator=(GraphExec&& o) noexcept {
  if (this != &o) {
    Reset();
    exec_ = std::exchange(o.exec_, nullptr);
  }
  return *this;
}
GraphExec::~GraphExec() { Reset(); }
void GraphExec::Reset() {
  if (exec_ != nullptr) CheckRelease(cudaGraphExecDestroy(exec_), "cudaGraphExecDestroy", __LINE__);
  exec_ = nullptr;
}
absl::Status GraphExec::Launch(StreamHandle stream) const {
  VISMOE_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(exec_, stream));
  return absl::OkStatus();
}

// ---- Stream --------------------------------------------------------------------
absl::StatusOr<Stream> Stream::Create(int priority) {
  Stream s;
  VISMOE_CUDA_RETURN_IF_ERROR(
      cudaStreamCreateWithPriority(&s.stream_, cudaStreamNonBlocking, priority));
  return s;
}
Stream::Stream(Stream&& o) noexcept : stream_(std::exchange(o.stream_, nullptr)) {}
Stream& Stream::operator=(Stream&& o) noexcept {
  if (this != &o) {
    Reset();
    stream_ = std::exchange(o.stream_, nullptr);
  }
  return *this;
}
Stream::~Stream() { Reset(); }
void Stream::Reset() {
  if (stream_ != nullptr) {
    CheckRelease(cudaStreamDestroy(stream_), "cudaStreamDestroy(stream_)", __LINE__);
  }
  stream_ = nullptr;
}
absl::Status Stream::Synchronize() const {
  VISMOE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}
absl::Status Stream::Wait(EventHandle event) const {
  VISMOE_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_, event, 0));
  return absl::OkStatus();
}

// ---- Event ---------------------------------------------------------------------
absl::StatusOr<Event> Event::Create(bool timing) {
  Event e;
  VISMOE_CUDA_RETURN_IF_ERROR(
      cudaEventCreateWithFlags(&e.event_, timing ? cudaEventDefault : cudaEventDisableTiming));
  return e;
}
Event::Event(Event&& o) noexcept : event_(std::exchange(o.event_, nullptr)) {}
Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    Reset();
    event_ = std::exchange(o.event_, nullptr);
  }
  return *this;
}
Event::~Event() { Reset(); }
void Event::Reset() {
  if (event_ != nullptr) {
    CheckRelease(cudaEventDestroy(event_), "cudaEventDestroy(event_)", __LINE__);
  }
  event_ = nullptr;
}
absl::Status Event::Record(StreamHandle stream) const {
  VISMOE_CUDA_RETURN_IF_ERROR(cudaEventRecord(event_, stream));
  return absl::OkStatus();
}
absl::Status Event::RecordInGraph(StreamHandle stream) const {
  VISMOE_CUDA_RETURN_IF_ERROR(cudaEventRecordWithFlags(event_, stream, cudaEventRecordExternal));
  return absl::OkStatus();
}
absl::Status Event::Synchronize() const {
  VISMOE_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(event_));
  return absl::OkStatus();
}
absl::StatusOr<bool> Event::Query() const {
  const cudaError_t err = cudaEventQuery(event_);
  if (err == cudaSuccess) return true;
  if (err == cudaErrorNotReady) {
    // Not an error, but it may be left as the thread's last error, where the
    // next launch check (cudaGetLastError) would take it for a failed launch.
    (void)cudaGetLastError();
    return false;
  }
  return CudaErrorToStatus(err, "cudaEventQuery", __FILE__, __LINE__);
}
absl::StatusOr<float> Event::ElapsedMs(const Event& start, const Event& end) {
  float ms = 0;
  VISMOE_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start.event_, end.event_));
  return ms;
}

// ---- DeviceArena ---------------------------------------------------------------
DeviceArena::DeviceArena(void* base, size_t capacity, size_t alignment)
    : base_(base), capacity_(capacity), alignment_(alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    CudaCheckFailed(cudaErrorInvalidValue, "DeviceArena alignment not a power of two", __FILE__,
                    __LINE__);
  }
}

absl::StatusOr<DeviceArena> DeviceArena::Create(size_t capacity, size_t alignment) {
  absl::StatusOr<DeviceBuffer> buf = DeviceBuffer::Allocate(capacity);
  if (!buf.ok()) return buf.status();
  DeviceArena arena(buf->data(), capacity, alignment);
  arena.owned_ = *std::move(buf);
  return arena;
}

absl::StatusOr<void*> DeviceArena::Allocate(size_t bytes) {
  const uintptr_t base = reinterpret_cast<uintptr_t>(base_);
  // Align the absolute address, so a borrowed base that is not aligned still works.
  const uintptr_t start = (base + used_ + alignment_ - 1) & ~(uintptr_t{alignment_} - 1);
  const size_t offset = static_cast<size_t>(start - base);
  if (offset > capacity_ || bytes > capacity_ - offset) {
    return absl::ResourceExhaustedError(absl::StrCat("DeviceArena: cannot allocate ", bytes,
                                                     " bytes: ", used_, " of ", capacity_,
                                                     " bytes in use"));
  }
  used_ = offset + bytes;
  if (used_ > high_water_) high_water_ = used_;
  return reinterpret_cast<void*>(start);
}

// ---- Copies --------------------------------------------------------------------
absl::Status CopyToDevice(void* dst, const void* host_src, size_t bytes) {
  VISMOE_CUDA_RETURN_IF_ERROR(cudaMemcpy(dst, host_src, bytes, cudaMemcpyHostToDevice));
  // From pageable memory cudaMemcpy may return before the DMA lands, and our
  // compute streams are non-blocking, so they would not wait for it.
  VISMOE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(nullptr));
  return absl::OkStatus();
}
absl::Status CopyToHost(void* host_dst, const void* src, size_t bytes) {
  VISMOE_CUDA_RETURN_IF_ERROR(cudaMemcpy(host_dst, src, bytes, cudaMemcpyDeviceToHost));
  return absl::OkStatus();
}
absl::Status CopyToDeviceAsync(void* dst, const void* host_src, size_t bytes, StreamHandle stream) {
  VISMOE_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream));
  return absl::OkStatus();
}
absl::Status CopyToHostAsync(void* host_dst, const void* src, size_t bytes, StreamHandle stream) {
  VISMOE_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream));
  return absl::OkStatus();
}
absl::Status MemsetAsync(void* dst, int value, size_t bytes, StreamHandle stream) {
  VISMOE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(dst, value, bytes, stream));
  return absl::OkStatus();
}
absl::Status SynchronizeDevice() {
  VISMOE_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  return absl::OkStatus();
}

}  // namespace vismoe::cuda
