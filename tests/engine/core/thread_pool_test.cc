// ThreadPool: every index runs exactly once in contiguous chunks that depend
// only on the arguments; concurrent and nested callers all finish; a pool
// comes and goes while its workers spin or sleep.
#include "engine/core/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace vismoe {
namespace {

using Chunks = std::vector<std::pair<int64_t, int64_t>>;

// The chunks one call ran, sorted; EXPECTs every index exactly once.
Chunks RunOnce(ThreadPool& pool, int64_t n, int64_t min_chunk) {
  std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
  std::mutex mu;
  Chunks chunks;
  pool.ParallelFor(n, min_chunk, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) seen[static_cast<size_t>(i)].fetch_add(1);
    std::lock_guard<std::mutex> lock(mu);
    chunks.emplace_back(begin, end);
  });
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(seen[static_cast<size_t>(i)].load(), 1) << i;
  std::sort(chunks.begin(), chunks.end());
  int64_t at = 0;
  for (const auto& [begin, end] : chunks) {
    EXPECT_EQ(begin, at);
    EXPECT_GE(end - begin, std::min(n, min_chunk)) << "chunk [" << begin << ", " << end << ")";
    at = end;
  }
  EXPECT_EQ(at, n);
  return chunks;
}

TEST(ThreadPoolTest, EveryIndexOnceInChunksFixedByTheArguments) {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int64_t n : {0, 1, 5, 64, 1000}) {
      for (int64_t min_chunk : {1, 3, 16, 2000}) {
        SCOPED_TRACE(::testing::Message() << threads << " threads, n " << n << ", min " << min_chunk);
        const Chunks first = RunOnce(pool, n, min_chunk);
        EXPECT_EQ(RunOnce(pool, n, min_chunk), first);
        EXPECT_LE(first.size(), static_cast<size_t>(4 * threads));
      }
    }
  }
}

TEST(ThreadPoolTest, ConcurrentAndNestedCallersAllFinish) {
  ThreadPool pool(3);
  constexpr int kCallers = 4;
  constexpr int kCalls = 300;
  std::vector<int64_t> sums(kCallers, 0);
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&pool, &sums, c] {
      for (int call = 0; call < kCalls; ++call) {
        std::atomic<int64_t> sum{0};
        pool.ParallelFor(8, 1, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) {
            // A nested call from inside a chunk (a kernel calling a kernel).
            pool.ParallelFor(16, 2, [&](int64_t b, int64_t e) { sum.fetch_add(e - b); });
          }
        });
        sums[c] += sum.load();
      }
    });
  }
  for (auto& t : callers) t.join();
  for (int c = 0; c < kCallers; ++c) EXPECT_EQ(sums[c], int64_t{kCalls} * 8 * 16) << c;
}

TEST(ThreadPoolTest, DestroyedWhileWorkersSpinOrSleep) {
  for (int round = 0; round < 50; ++round) {
    ThreadPool pool(3);
    std::atomic<int64_t> count{0};
    pool.ParallelFor(100, 1, [&](int64_t b, int64_t e) { count.fetch_add(e - b); });
    EXPECT_EQ(count.load(), 100);
    // Every few rounds, let the workers go past spinning into sleep.
    if (round % 10 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace
}  // namespace vismoe
