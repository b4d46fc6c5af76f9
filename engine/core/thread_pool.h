// ThreadPool: a fixed set of worker threads for data-parallel CPU kernels.
//
// Thread safety: ParallelFor may be called from several threads at once; each
// call blocks until all of its chunks ran. The calling thread runs chunks too,
// so a pool of size 1 (or nullptr passed to the kernels) runs inline.
// Ownership: the pool owns its threads and joins them on destruction.
#ifndef VISMOE_ENGINE_CORE_THREAD_POOL_H_
#define VISMOE_ENGINE_CORE_THREAD_POOL_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

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
  void ParallelFor(int64_t n, int64_t min_chunk,
                   const std::function<void(int64_t, int64_t)>& fn);

 private:
  void WorkerLoop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;  // guarded by mu_
  bool stop_ = false;                        // guarded by mu_
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
