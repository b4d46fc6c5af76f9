// ThreadPool: a fixed set of worker threads for data-parallel CPU kernels.
//
// A decoded token runs hundreds of ParallelFor calls (every matrix product,
// norm and attention of every layer and expert), each a fork/join of a few
// microseconds of work, so the join must cost far less than that: workers
// spin briefly on a job counter before they sleep, a job is published with
// one atomic store (a lock and a wake-up only for sleeping workers), chunks
// are claimed from a shared counter, and nothing is queued per chunk.
//
// Thread safety: ParallelFor may be called from several threads at once and
// from inside a running chunk; each call blocks until all of its chunks ran.
// The calling thread runs chunks too and can finish its job alone, so calls
// never wait on each other (workers move to the newest job), and a pool of
// size 1 (or nullptr passed to the kernels) runs inline.
// Ownership: the pool owns its threads and joins them on destruction.
#ifndef VISMOE_ENGINE_CORE_THREAD_POOL_H_
#define VISMOE_ENGINE_CORE_THREAD_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"

namespace vismoe {

class ThreadPool {
 public:
  // num_threads <= 0 means std::thread::hardware_concurrency().
  explicit ThreadPool(int num_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Splits [0, n) into contiguous chunks of at least `min_chunk` items and
  // calls fn(begin, end) for each, in parallel. Returns when all are done.
  // The chunks depend only on n, min_chunk and size(), never on timing.
  void ParallelFor(int64_t n, int64_t min_chunk,
                   const std::function<void(int64_t, int64_t)>& fn);

 private:
  struct Job;
  void WorkerLoop();
  // The job published after `seen`, waiting for it (spin, then sleep);
  // null when the pool stops.
  std::shared_ptr<Job> NextJob(uint64_t& seen);

  std::atomic<uint64_t> generation_{0};  // bumped (under mu_) per published job
  std::mutex mu_;
  std::condition_variable cv_;
  std::shared_ptr<Job> job_ ABSL_GUARDED_BY(mu_);  // the newest job
  int sleepers_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

// Runs fn over [0, n) on `pool`, or inline when pool is null.
inline void ParallelFor(ThreadPool* pool, int64_t n, int64_t min_chunk,
                        const std::function<void(int64_t, int64_t)>& fn) {
  if (pool == nullptr) {
    if (n > 0) fn(0, n);
    return;
  }
  pool->ParallelFor(n, min_chunk, fn);
}

}  // namespace vismoe

#endif  // VISMOE_ENGINE_CORE_THREAD_POOL_H_
