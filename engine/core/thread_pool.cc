#include "engine/core/thread_pool.h"

#include <algorithm>

namespace vismoe {
namespace {

// Polls before a worker sleeps, and before a caller waiting for its last
// chunks yields: a few tens of microseconds, longer than the gap between two
// kernels of one step and far shorter than a scheduler time slice.
constexpr int kSpinPolls = 20000;
constexpr int kWaitPollsBeforeYield = 2000;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

// One ParallelFor. Workers hold a reference, so a late worker that finds
// every chunk claimed touches only this object, never `fn` (whose caller may
// have returned: a caller returns only after all chunks ran).
struct ThreadPool::Job {
  const std::function<void(int64_t, int64_t)>* fn;
  int64_t n;
  int64_t chunks;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};

  // Claims and runs chunks until none is left.
  void RunChunks() {
    for (;;) {
      const int64_t c = next.fetch_add(1, std::memory_order_relaxed);
      if (c >= chunks) return;
      (*fn)(n * c / chunks, n * (c + 1) / chunks);
      done.fetch_add(1, std::memory_order_release);
    }
  }
};

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) num_threads = static_cast<int>(std::thread::hardware_concurrency());
  num_threads = std::max(num_threads, 1);
  for (int i = 0; i + 1 < num_threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    generation_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

std::shared_ptr<ThreadPool::Job> ThreadPool::NextJob(uint64_t& seen) {
  for (int i = 0; i < kSpinPolls && generation_.load(std::memory_order_acquire) == seen; ++i) {
    CpuRelax();
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (generation_.load(std::memory_order_relaxed) == seen && !stop_) {
    ++sleepers_;
    cv_.wait(lock, [&] { return stop_ || generation_.load(std::memory_order_relaxed) != seen; });
    --sleepers_;
  }
  if (stop_) return nullptr;
  seen = generation_.load(std::memory_order_relaxed);
  return job_;
}

void ThreadPool::WorkerLoop() {
  uint64_t seen = 0;
  while (std::shared_ptr<Job> job = NextJob(seen)) job->RunChunks();
}

void ThreadPool::ParallelFor(int64_t n, int64_t min_chunk,
                             const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  min_chunk = std::max<int64_t>(min_chunk, 1);
  const int64_t max_chunks = std::max<int64_t>(1, n / min_chunk);
  const int64_t chunks = std::min<int64_t>(max_chunks, static_cast<int64_t>(size()) * 4);
  if (chunks <= 1 || workers_.empty()) {
    fn(0, n);
    return;
  }
  auto job = std::make_shared<Job>();
  job->fn = &fn;
  job->n = n;
  job->chunks = chunks;
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = job;
    generation_.fetch_add(1, std::memory_order_release);
    wake = sleepers_ > 0;
  }
  if (wake) cv_.notify_all();
  job->RunChunks();
  for (int polls = 0; job->done.load(std::memory_order_acquire) < chunks; ++polls) {
    if (polls < kWaitPollsBeforeYield) {
      CpuRelax();
    } else {
      std::this_thread::yield();
    }
  }
}

}  // namespace vismoe
