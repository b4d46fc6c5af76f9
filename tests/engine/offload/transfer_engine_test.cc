// TransferEngine: priority order, completion before use, cancellation,
// shutdown, and a throttle that makes a waiter stall (checked on counts and
// bytes, never on wall time).
#include "engine/offload/transfer_engine.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace vismoe {
namespace {

TEST(TransferEngineTest, DrainsByPriorityThenFifo) {
  TransferEngine te(TransferEngine::Options{0, /*start_paused=*/true});
  std::vector<char> src(8, 'x'), dst(8 * 6, 0);
  std::mutex mu;
  std::vector<int> done;
  const double prio[] = {1, 5, 3, 5, 0, 3};
  for (int i = 0; i < 6; ++i) {
    TransferEngine::Request r;
    r.src = src.data();
    r.dst = dst.data() + 8 * i;
    r.bytes = 8;
    r.priority = prio[i];
    r.on_done = [&, i](const absl::Status& copied) {
      ASSERT_TRUE(copied.ok()) << copied;
      // Completion comes after the bytes are in place.
      ASSERT_EQ(dst[8 * i + 7], 'x');
      std::lock_guard<std::mutex> lock(mu);
      done.push_back(i);
    };
    te.Submit(std::move(r));
  }
  EXPECT_EQ(te.queued(), 6u);
  te.Resume();
  te.WaitIdle();
  EXPECT_EQ(done, (std::vector<int>{1, 3, 2, 5, 0, 4}));
  const TransferEngine::Stats s = te.stats();
  EXPECT_EQ(s.copies, 6u);
  EXPECT_EQ(s.bytes, 48u);
  EXPECT_EQ(s.cancelled, 0u);
}

// A gathered copy puts each segment at its offset and counts the request's bytes.
TEST(TransferEngineTest, GathersSegmentsIntoTheirOffsets) {
  TransferEngine te(TransferEngine::Options{});
  const std::vector<char> a(5, 'a'), b(3, 'b');
  std::vector<char> dst(16, '.');
  TransferEngine::Request r;
  r.dst = dst.data();
  r.bytes = 16;
  r.segments = {{a.data(), 0, 5}, {b.data(), 8, 3}};
  absl::Status done = absl::UnknownError("not called");
  r.on_done = [&](const absl::Status& copied) { done = copied; };
  te.Submit(std::move(r));
  te.WaitIdle();
  EXPECT_TRUE(done.ok()) << done;
  EXPECT_EQ(std::string(dst.begin(), dst.end()), "aaaaa...bbb.....");
  EXPECT_EQ(te.stats().bytes, 16u);
}

TEST(TransferEngineTest, CancelAndShutdownReportNotCompleted) {
  TransferEngine te(TransferEngine::Options{0, /*start_paused=*/true});
  std::vector<char> src(4, 'y'), dst(4, 0);
  std::atomic<int> completed{0}, cancelled{0};
  auto make = [&] {
    TransferEngine::Request r;
    r.src = src.data();
    r.dst = dst.data();
    r.bytes = 4;
    r.on_done = [&](const absl::Status& copied) {
      if (copied.ok()) {
        ++completed;
      } else if (absl::IsCancelled(copied)) {
        ++cancelled;
      }
    };
    return r;
  };
  const uint64_t a = te.Submit(make());
  te.Submit(make());
  EXPECT_TRUE(te.Cancel(a));
  EXPECT_FALSE(te.Cancel(a));
  EXPECT_EQ(cancelled.load(), 1);
  te.Shutdown();  // the second is still queued (paused)
  EXPECT_EQ(cancelled.load(), 2);
  EXPECT_EQ(completed.load(), 0);
  EXPECT_EQ(dst[0], 0);
  te.Submit(make());  // after shutdown: cancelled at once
  EXPECT_EQ(cancelled.load(), 3);
  te.Shutdown();  // idempotent
  EXPECT_EQ(te.stats().cancelled, 3u);
}

// At 1 byte/s a 1000-byte copy is throttled for 1000 s; Shutdown does not
// wait that out (a server's drain would otherwise hang on it). The copied
// bytes are in place, so the copy reports done.
TEST(TransferEngineTest, ShutdownCutsTheThrottleShort) {
  TransferEngine te(TransferEngine::Options{1.0, false});
  std::vector<char> src(1000, 'q'), dst(1000, 0);
  TransferEngine::Request r;
  r.src = src.data();
  r.dst = dst.data();
  r.bytes = src.size();
  std::atomic<int> completed{0};
  r.on_done = [&](const absl::Status& copied) { completed += copied.ok() ? 1 : 0; };
  te.Submit(std::move(r));
  while (te.queued() != 0) absl::SleepFor(absl::Milliseconds(1));  // taken: copying or throttled
  absl::Notification shut;
  std::thread t([&] {
    te.Shutdown();
    shut.Notify();
  });
  const bool returned = shut.WaitForNotificationWithTimeout(absl::Seconds(60));
  if (!returned) t.detach();  // never returns: fail rather than hang
  ASSERT_TRUE(returned) << "Shutdown waited for the throttle";
  t.join();
  EXPECT_EQ(completed.load(), 1);
  EXPECT_EQ(dst.back(), 'q');
}

TEST(TransferEngineTest, ThrottledCopiesMakeTheWaiterStall) {
  // 64 KiB at 16 MiB/s: ~4 ms each; a waiter blocks until all four are done.
  TransferEngine te(TransferEngine::Options{16.0 * (1 << 20), false});
  std::vector<char> src(64 << 10, 'z'), dst(4 * (64 << 10), 0);
  std::mutex mu;
  std::condition_variable cv;
  int finished = 0;
  for (int i = 0; i < 4; ++i) {
    TransferEngine::Request r;
    r.src = src.data();
    r.dst = dst.data() + i * (64 << 10);
    r.bytes = 64 << 10;
    r.on_done = [&](const absl::Status& copied) {
      ASSERT_TRUE(copied.ok()) << copied;
      std::lock_guard<std::mutex> lock(mu);
      ++finished;
      cv.notify_all();
    };
    te.Submit(std::move(r));
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return finished == 4; });
  }
  EXPECT_EQ(dst.back(), 'z');
  te.WaitIdle();
  EXPECT_EQ(te.stats().bytes, 4u * (64 << 10));
  EXPECT_GT(te.MeasuredBandwidth(), 0);
  // The throttle bounds the measured rate (slack for sleep overshoot only helps).
  EXPECT_LE(te.MeasuredBandwidth(), 16.0 * (1 << 20) * 1.01);
}

}  // namespace
}  // namespace vismoe
