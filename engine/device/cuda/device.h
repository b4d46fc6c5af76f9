// Device detection and the RAII resources of the CUDA backend: device and
// pinned host buffers, streams, events and the start-up DeviceArena from which
// the hot path carves memory (DESIGN.md: no cudaMalloc on the hot path).
#ifndef VISMOE_ENGINE_DEVICE_CUDA_DEVICE_H_
#define VISMOE_ENGINE_DEVICE_CUDA_DEVICE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/device/cuda/types.h"

namespace vismoe::cuda {

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int sm_count = 0;
  int compute_major = 0;
  int compute_minor = 0;
  size_t total_memory_bytes = 0;
  size_t free_memory_bytes = 0;
  size_t l2_cache_bytes = 0;
  size_t max_shared_memory_per_block_optin = 0;

  // "NVIDIA H100 (sm_90, 132 SMs, 79.1 GiB, 78.5 GiB free)".
  std::string Summary() const;
};

// Probes device `ordinal`. Fails with kUnavailable and a message carrying the
// CUDA error ("no CUDA device: <cudaGetErrorString>") when there is no usable
// device or driver; with kFailedPrecondition when the device is older than
// sm_80 (bf16 kernels need Ampere or newer). The caller logs one line and falls
// back to the CPU backend. On success the device is made current (cudaSetDevice).
absl::StatusOr<DeviceInfo> ProbeCudaDevice(int ordinal = 0);

// Owns one cudaMalloc allocation. Move-only; frees on destruction.
// Thread safety: none needed beyond the usual (the object is not shared).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  static absl::StatusOr<DeviceBuffer> Allocate(size_t bytes);
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  void* data() const { return data_; }
  size_t size() const { return size_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  void Reset();
  void* data_ = nullptr;
  size_t size_ = 0;
};

// Owns one cudaHostAlloc (page-locked) host allocation, the source of
// asynchronous host->device copies. Move-only.
class PinnedHostBuffer {
 public:
  PinnedHostBuffer() = default;
  // `portable`: pinned for every CUDA context (cudaHostAllocPortable).
  // `mapped`: also mapped into the device's address space, so kernels write
  // it directly (device_data(); a value is the host's to read once an event
  // recorded behind the writing kernel has completed).
  static absl::StatusOr<PinnedHostBuffer> Allocate(size_t bytes, bool portable = true,
                                                   bool mapped = false);
  PinnedHostBuffer(PinnedHostBuffer&& other) noexcept;
  PinnedHostBuffer& operator=(PinnedHostBuffer&& other) noexcept;
  PinnedHostBuffer(const PinnedHostBuffer&) = delete;
  PinnedHostBuffer& operator=(const PinnedHostBuffer&) = delete;
  ~PinnedHostBuffer();

  void* data() const { return data_; }
  size_t size() const { return size_; }
  // The device's address of a mapped buffer; null otherwise.
  void* device_data() const { return device_data_; }

 private:
  void Reset();
  void* data_ = nullptr;
  void* device_data_ = nullptr;
  size_t size_ = 0;
};

// Owns a non-blocking cudaStream_t. Move-only.
class Stream {
 public:
  Stream() = default;
  // Lower `priority` numbers are higher priority (CUDA convention); 0 = default.
  static absl::StatusOr<Stream> Create(int priority = 0);
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream();

  StreamHandle get() const { return stream_; }
  absl::Status Synchronize() const;
  // Makes later work on this stream wait for `event` (cudaStreamWaitEvent).
  absl::Status Wait(EventHandle event) const;

 private:
  void Reset();
  StreamHandle stream_ = nullptr;
};

// Owns a cudaEvent_t (timing disabled unless asked: cheaper to record). Move-only.
class Event {
 public:
  Event() = default;
  static absl::StatusOr<Event> Create(bool timing = false);
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event();

  EventHandle get() const { return event_; }
  absl::Status Record(StreamHandle stream) const;
  // Record on a stream being captured into a graph: becomes an event record
  // node, so each launch of the graph records the event for the host to wait
  // on (cudaEventRecordExternal).
  absl::Status RecordInGraph(StreamHandle stream) const;
  absl::Status Synchronize() const;
  // true when the recorded work is done; false while pending.
  absl::StatusOr<bool> Query() const;
  // Milliseconds between two recorded timing events.
  static absl::StatusOr<float> ElapsedMs(const Event& start, const Event& end);

 private:
  void Reset();
  EventHandle event_ = nullptr;
};

// An instantiated CUDA graph captured from a stream (cudaGraphExec_t):
// replaying a step's hundreds of launches costs the host one launch.
// Move-only; destroys the graph.
class GraphExec {
 public:
  GraphExec() = default;
  // Starts capturing `stream` (relaxed mode: the host may still make
  // synchronous calls on other streams meanwhile).
  static absl::Status BeginCapture(StreamHandle stream);
  // Ends the capture begun on `stream` and instantiates it; the capture is
  // ended (and dropped) also when this fails.
  static absl::StatusOr<GraphExec> EndCapture(StreamHandle stream);
  GraphExec(GraphExec&& other) noexcept;
  GraphExec& operator=(GraphExec&& other) noexcept;
  GraphExec(const GraphExec&) = delete;
  GraphExec& operator=(const GraphExec&) = delete;
  ~GraphExec();

  bool valid() const { return exec_ != nullptr; }
  absl::Status Launch(StreamHandle stream) const;

 private:
  void Reset();
  GraphExecHandle exec_ = nullptr;
};

// Bump allocator over one device region, carved at start-up so the hot path
// never calls cudaMalloc. Allocations are `alignment`-aligned (256 bytes by
// default: what cuBLAS and 16-byte vector loads want); Reset() frees all at
// once (per step scratch). Either owns its region (Create) or borrows one
// (the constructor; the arithmetic never dereferences the base, so any
// address range can be managed).
// Thread safety: not thread-safe; one arena per stream/thread.
class DeviceArena {
 public:
  static constexpr size_t kDefaultAlignment = 256;

  // Borrows [base, base + capacity). REQUIRES: alignment is a power of two.
  DeviceArena(void* base, size_t capacity, size_t alignment = kDefaultAlignment);
  // Allocates and owns a `capacity`-byte device region.
  static absl::StatusOr<DeviceArena> Create(size_t capacity, size_t alignment = kDefaultAlignment);
  DeviceArena(DeviceArena&&) noexcept = default;
  DeviceArena& operator=(DeviceArena&&) noexcept = default;
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;

  // kResourceExhausted (naming the request, used and capacity) when it does not fit.
  absl::StatusOr<void*> Allocate(size_t bytes);
  template <typename T>
  absl::StatusOr<T*> AllocateArray(size_t count) {
    absl::StatusOr<void*> p = Allocate(count * sizeof(T));
    if (!p.ok()) return p.status();
    return static_cast<T*>(*p);
  }
  void Reset() { used_ = 0; }

  void* base() const { return base_; }
  size_t capacity() const { return capacity_; }
  size_t used() const { return used_; }
  size_t high_water() const { return high_water_; }

 private:
  DeviceBuffer owned_;
  void* base_ = nullptr;
  size_t capacity_ = 0;
  size_t alignment_ = kDefaultAlignment;
  size_t used_ = 0;
  size_t high_water_ = 0;
};

// Copies (synchronous; for set-up and tests, not the hot path). CopyToDevice
// returns once the bytes are on the device, so any stream may read them.
absl::Status CopyToDevice(void* dst, const void* host_src, size_t bytes);
absl::Status CopyToHost(void* host_dst, const void* src, size_t bytes);
// Asynchronous copy on `stream`; the host side must be pinned to overlap.
absl::Status CopyToDeviceAsync(void* dst, const void* host_src, size_t bytes, StreamHandle stream);
absl::Status CopyToHostAsync(void* host_dst, const void* src, size_t bytes, StreamHandle stream);
absl::Status MemsetAsync(void* dst, int value, size_t bytes, StreamHandle stream);
absl::Status SynchronizeDevice();

}  // namespace vismoe::cuda

#endif  // VISMOE_ENGINE_DEVICE_CUDA_DEVICE_H_
