// TransferEngine: the copy stream of the offload runtime. A priority queue of
// pending host->device expert copies drained back-to-back by one copy thread
// (highest priority first, FIFO among equals). Each copy moves one expert
// block (contiguous, or gathered from its tensors' places): through Options::backend when set (CUDA: cudaMemcpyAsync on
// its own copy stream, see copy_backend.h), else by memcpy (CPU backend).
// With bandwidth_bytes_per_s > 0 a copy of B bytes takes at least
// B / bandwidth seconds, so stalls and overlap are real and testable without
// a GPU (0 = as fast as the copy goes).
// Completion: each request's on_done(OkStatus) runs on the copy thread after
// its bytes are in place; on_done(Cancelled) when cancelled (Cancel, or still
// queued at Shutdown); on_done(the backend's error) when the backend's Copy
// failed (counted in Stats::failed; the first failure is logged), so the
// owner can tell a shutdown from a broken copy. on_done must not call back
// into the TransferEngine.
// Thread safety: all methods may be called from any thread.
// Ownership: owns the copy thread; the destructor shuts down and joins.
#ifndef VISMOE_ENGINE_OFFLOAD_TRANSFER_ENGINE_H_
#define VISMOE_ENGINE_OFFLOAD_TRANSFER_ENGINE_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "engine/offload/copy_backend.h"

namespace vismoe {

class TransferEngine {
 public:
  struct Options {
    double bandwidth_bytes_per_s = 0;  // 0 = unthrottled
    bool start_paused = false;         // queue only until Resume() (tests)
    // Borrowed; must outlive the engine. Null = memcpy (CPU backend).
    CopyBackend* backend = nullptr;
  };
  struct Request {
    const void* src = nullptr;
    void* dst = nullptr;
    size_t bytes = 0;  // the whole copy's (stats and throttle)
    // When not empty, the copy gathers these pieces into dst instead of
    // copying `bytes` from src (an expert served from the mapped checkpoint).
    std::vector<CopySegment> segments;
    double priority = 0;  // higher first
    std::function<void(const absl::Status& copied)> on_done;
  };
  struct Stats {
    uint64_t copies = 0;
    uint64_t bytes = 0;
    uint64_t cancelled = 0;
    uint64_t failed = 0;      // backend Copy errors; neither in copies nor bytes
    double busy_seconds = 0;  // wall time of completed copies (throttle included)
  };

  explicit TransferEngine(Options options);
  ~TransferEngine();
  TransferEngine(const TransferEngine&) = delete;
  TransferEngine& operator=(const TransferEngine&) = delete;

  // Queues a copy and returns its ticket (> 0). After Shutdown() the request
  // is cancelled at once (on_done(false) on the calling thread).
  uint64_t Submit(Request request);
  // Removes a still-queued request (on_done(false) on the calling thread);
  // false when it already started, finished or never existed.
  bool Cancel(uint64_t ticket);
  void Resume();
  // Blocks until nothing is queued or copying.
  void WaitIdle();
  // Cancels everything queued, lets the running copy finish, joins. Idempotent.
  void Shutdown();

  Stats stats() const;
  // bytes / busy_seconds so far; 0 before the first copy.
  double MeasuredBandwidth() const;
  size_t queued() const;

 private:
  // Copies one request's bytes (all its segments) through the backend or memcpy.
  absl::Status CopyOne(const Request& r);
  struct Entry {
    uint64_t ticket;
    Request request;
  };
  void Run();

  const Options options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;       // work arrived / resumed / stopping
  std::condition_variable idle_cv_;  // queue drained
  std::vector<Entry> queue_;         // guarded by mu_
  bool paused_;                      // guarded by mu_
  bool stopping_ = false;            // guarded by mu_
  bool busy_ = false;                // guarded by mu_
  uint64_t next_ticket_ = 1;         // guarded by mu_
  Stats stats_;                      // guarded by mu_
  std::thread thread_;
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_OFFLOAD_TRANSFER_ENGINE_H_
