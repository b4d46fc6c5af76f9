#include "server/scheduler.h"

#include <atomic>
#include <functional>
#include <memory>
#include <thread>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/fake_engine.h"

namespace vismoe::server {
namespace {

using ::testing::HasSubstr;

// Records what the scheduler reported for one job.
struct Outcome {
  absl::Notification done;
  absl::Status status;
  GenerateResult result;
  double queue_seconds = -1;
  std::atomic<int> deltas{0};
  std::atomic<bool> cancel{false};
};

// A prepared request as the fake engine takes it.
class TestPrepared final : public PreparedRequest {
 public:
  explicit TestPrepared(GenerateRequest r) : PreparedRequest(std::move(r), 1, 0.0) {}
};

// `during_prepare`, when set, runs inside prepare() (to observe or hold it).
std::unique_ptr<SchedulerJob> MakeJob(Outcome* out, int max_new_tokens,
                                      absl::Status prepare_status = absl::OkStatus(),
                                      std::function<void()> during_prepare = nullptr) {
  auto job = std::make_unique<SchedulerJob>();
  job->prepare = [=](const std::function<absl::Status()>& /*cancel_status*/)
      -> absl::StatusOr<std::unique_ptr<PreparedRequest>> {
    if (during_prepare) during_prepare();
    if (!prepare_status.ok()) return prepare_status;
    GenerateRequest r;
    r.messages.push_back({"user", {ContentPart{ContentPart::Kind::kText, "hello", -1}}});
    r.sampling.max_new_tokens = max_new_tokens;
    return std::unique_ptr<PreparedRequest>(new TestPrepared(std::move(r)));
  };
  job->on_delta = [out](const TokenDelta&) {
    out->deltas.fetch_add(1);
    return true;
  };
  job->cancel_status = [out] {
    return out->cancel.load() ? absl::CancelledError("cancelled by test") : absl::OkStatus();
  };
  job->on_done = [out](absl::StatusOr<GenerateResult> r, double queue_seconds) {
    out->status = r.status();
    if (r.ok()) out->result = *r;
    out->queue_seconds = queue_seconds;
    out->done.Notify();
  };
  return job;
}

void WaitUntil(const std::function<bool()>& cond) {
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (!cond()) {
    ASSERT_LT(absl::Now(), deadline) << "condition not reached in 20 s";
    absl::SleepFor(absl::Milliseconds(2));
  }
}

TEST(SchedulerTest, CreateValidatesOptions) {
  testing::FakeEngine engine;
  EXPECT_FALSE(Scheduler::Create({1, 1}, nullptr, nullptr).ok());
  EXPECT_FALSE(Scheduler::Create({-1, 1}, &engine, nullptr).ok());
  EXPECT_FALSE(Scheduler::Create({1, 0}, &engine, nullptr).ok());
  EXPECT_FALSE(Scheduler::Create({1, 1, /*preparers=*/0}, &engine, nullptr).ok());
}

TEST(SchedulerTest, RunsJobsAndStreamsDeltas) {
  testing::FakeEngine engine;
  auto scheduler = std::move(*Scheduler::Create({4, 2}, &engine, nullptr));
  Outcome a, b;
  ASSERT_TRUE(scheduler->Submit(MakeJob(&a, 5)).ok());
  ASSERT_TRUE(scheduler->Submit(MakeJob(&b, 3)).ok());
  a.done.WaitForNotification();
  b.done.WaitForNotification();
  EXPECT_TRUE(a.status.ok()) << a.status;
  EXPECT_EQ(a.deltas.load(), 5);
  EXPECT_EQ(a.result.token_ids.size(), 5u);
  EXPECT_EQ(b.deltas.load(), 3);
  EXPECT_GE(a.queue_seconds, 0);
  WaitUntil([&] { return scheduler->running() == 0; });
}

TEST(SchedulerTest, PrepareErrorIsReported) {
  testing::FakeEngine engine;
  auto scheduler = std::move(*Scheduler::Create({4, 1}, &engine, nullptr));
  Outcome a;
  ASSERT_TRUE(scheduler->Submit(MakeJob(&a, 5, absl::InvalidArgumentError("bad image"))).ok());
  a.done.WaitForNotification();
  EXPECT_EQ(a.status, absl::InvalidArgumentError("bad image"));
  EXPECT_EQ(engine.started(), 0);
}

TEST(SchedulerTest, FullQueueIsResourceExhaustedImmediately) {
  testing::FakeEngine engine;
  engine.Hold();
  auto scheduler =
      std::move(*Scheduler::Create({/*max_queue=*/1, /*workers=*/1}, &engine, nullptr));
  Outcome running, queued, rejected;
  ASSERT_TRUE(scheduler->Submit(MakeJob(&running, 2)).ok());
  WaitUntil([&] { return engine.started() == 1; });
  ASSERT_TRUE(scheduler->Submit(MakeJob(&queued, 2)).ok());
  EXPECT_EQ(scheduler->queue_depth(), 1);
  absl::Status s = scheduler->Submit(MakeJob(&rejected, 2));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(s.message()), HasSubstr("queue full"));
  EXPECT_FALSE(rejected.done.HasBeenNotified());  // no callback for a rejected job
  engine.Release();
  running.done.WaitForNotification();
  queued.done.WaitForNotification();
  EXPECT_TRUE(running.status.ok());
  EXPECT_TRUE(queued.status.ok());
  EXPECT_GT(queued.queue_seconds, 0);
}

TEST(SchedulerTest, ZeroQueueStillAcceptsWhenAWorkerIsIdle) {
  testing::FakeEngine engine;
  auto scheduler = std::move(*Scheduler::Create({0, 1}, &engine, nullptr));
  Outcome a;
  ASSERT_TRUE(scheduler->Submit(MakeJob(&a, 1)).ok());
  a.done.WaitForNotification();
  EXPECT_TRUE(a.status.ok());
}

TEST(SchedulerTest, CancellationFreesTheWorker) {
  testing::FakeEngine engine;
  engine.step_delay = absl::Milliseconds(2);
  auto scheduler = std::move(*Scheduler::Create({4, 1}, &engine, nullptr));
  Outcome slow, next;
  ASSERT_TRUE(scheduler->Submit(MakeJob(&slow, 1000000)).ok());
  WaitUntil([&] { return slow.deltas.load() > 2; });
  slow.cancel = true;
  slow.done.WaitForNotification();
  EXPECT_EQ(slow.status.code(), absl::StatusCode::kCancelled);
  ASSERT_TRUE(scheduler->Submit(MakeJob(&next, 2)).ok());
  next.done.WaitForNotification();
  EXPECT_TRUE(next.status.ok());
  WaitUntil([&] { return scheduler->running() == 0 && engine.active() == 0; });
}

TEST(SchedulerTest, CancelledWhileQueuedNeverReachesTheEngine) {
  testing::FakeEngine engine;
  engine.Hold();
  auto scheduler = std::move(*Scheduler::Create({4, 1}, &engine, nullptr));
  Outcome first, second;
  ASSERT_TRUE(scheduler->Submit(MakeJob(&first, 1)).ok());
  WaitUntil([&] { return engine.started() == 1; });
  ASSERT_TRUE(scheduler->Submit(MakeJob(&second, 1)).ok());
  second.cancel = true;
  engine.Release();
  second.done.WaitForNotification();
  first.done.WaitForNotification();  // second ends in preparation, maybe before first
  EXPECT_EQ(second.status.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(engine.started(), 1);
}

TEST(SchedulerTest, DrainFinishesInFlightThenRejects) {
  testing::FakeEngine engine;
  engine.step_delay = absl::Milliseconds(2);
  auto scheduler = std::move(*Scheduler::Create({4, 1}, &engine, nullptr));
  Outcome a, b;
  ASSERT_TRUE(scheduler->Submit(MakeJob(&a, 20)).ok());
  ASSERT_TRUE(scheduler->Submit(MakeJob(&b, 20)).ok());
  scheduler->Drain(absl::Seconds(30));
  ASSERT_TRUE(a.done.HasBeenNotified());
  ASSERT_TRUE(b.done.HasBeenNotified());
  EXPECT_TRUE(a.status.ok()) << a.status;
  EXPECT_TRUE(b.status.ok()) << b.status;
  EXPECT_EQ(b.deltas.load(), 20);
  Outcome late;
  absl::Status s = scheduler->Submit(MakeJob(&late, 1));
  EXPECT_EQ(s, absl::UnavailableError("server shutting down"));
  scheduler->Drain(absl::Seconds(1));  // idempotent
}

TEST(SchedulerTest, DrainTimeoutCancelsRunningAndQueued) {
  testing::FakeEngine engine;
  engine.step_delay = absl::Milliseconds(2);
  auto scheduler = std::move(*Scheduler::Create({4, 1}, &engine, nullptr));
  Outcome running, queued;
  ASSERT_TRUE(scheduler->Submit(MakeJob(&running, 1000000)).ok());
  WaitUntil([&] { return running.deltas.load() > 0; });
  ASSERT_TRUE(scheduler->Submit(MakeJob(&queued, 5)).ok());
  const absl::Time start = absl::Now();
  scheduler->Drain(absl::Milliseconds(50));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  ASSERT_TRUE(running.done.HasBeenNotified());
  ASSERT_TRUE(queued.done.HasBeenNotified());
  EXPECT_EQ(running.status, absl::UnavailableError("server shutting down"));
  EXPECT_EQ(queued.status, absl::UnavailableError("server shutting down"));
  EXPECT_EQ(engine.active(), 0);
}

// Preparation runs on its own threads: the next request is prepared while the
// engine is busy with the current one, and only as far ahead as there are
// workers (prepared requests hold their pixels).
TEST(SchedulerTest, PreparesTheNextJobWhileTheEngineRuns) {
  testing::FakeEngine engine;
  engine.Hold();
  // One preparer: with two, b and c could both be in preparation at once
  // (the bound counts prepared jobs, not jobs being prepared).
  auto scheduler =
      std::move(*Scheduler::Create({4, /*workers=*/1, /*preparers=*/1}, &engine, nullptr));
  std::atomic<int> prepared{0};
  auto count = [&] { prepared.fetch_add(1); };
  Outcome a, b, c;
  ASSERT_TRUE(scheduler->Submit(MakeJob(&a, 2, absl::OkStatus(), count)).ok());
  WaitUntil([&] { return engine.started() == 1; });
  ASSERT_TRUE(scheduler->Submit(MakeJob(&b, 2, absl::OkStatus(), count)).ok());
  ASSERT_TRUE(scheduler->Submit(MakeJob(&c, 2, absl::OkStatus(), count)).ok());
  WaitUntil([&] { return prepared.load() == 2; });  // b, while a holds the engine
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(prepared.load(), 2) << "c must wait: one prepared job per worker";
  EXPECT_EQ(engine.started(), 1);
  EXPECT_EQ(scheduler->queue_depth(), 2);
  engine.Release();
  for (Outcome* o : {&a, &b, &c}) {
    o->done.WaitForNotification();
    EXPECT_TRUE(o->status.ok()) << o->status;
  }
  EXPECT_EQ(prepared.load(), 3);
  EXPECT_EQ(engine.started(), 3);
}

// A slow preparation (a huge image, a long text) holds one preparer, not the
// engine: with two preparers a later request is prepared and answered first.
TEST(SchedulerTest, ASlowPreparationDoesNotBlockTheEngine) {
  testing::FakeEngine engine;
  auto scheduler =
      std::move(*Scheduler::Create({4, /*workers=*/1, /*preparers=*/2}, &engine, nullptr));
  absl::Notification slow_started, release_slow;
  Outcome slow, fast;
  ASSERT_TRUE(scheduler
                  ->Submit(MakeJob(&slow, 2, absl::OkStatus(),
                                   [&] {
                                     slow_started.Notify();
                                     release_slow.WaitForNotification();
                                   }))
                  .ok());
  slow_started.WaitForNotification();
  ASSERT_TRUE(scheduler->Submit(MakeJob(&fast, 3)).ok());
  fast.done.WaitForNotification();
  EXPECT_TRUE(fast.status.ok()) << fast.status;
  EXPECT_EQ(fast.deltas.load(), 3);
  EXPECT_FALSE(slow.done.HasBeenNotified());
  release_slow.Notify();
  slow.done.WaitForNotification();
  EXPECT_TRUE(slow.status.ok()) << slow.status;
}

// Requests whose images take long to decode hold every preparer; a text-only
// request still gets prepared (by the text lane) and answered meanwhile.
TEST(SchedulerTest, SlowImagesDoNotHoldUpATextOnlyRequest) {
  testing::FakeEngine engine;
  auto scheduler =
      std::move(*Scheduler::Create({8, /*workers=*/2, /*preparers=*/2}, &engine, nullptr));
  absl::Notification release_images;
  std::atomic<int> decoding{0};
  Outcome images[2], text;
  for (Outcome& o : images) {
    ASSERT_TRUE(scheduler
                    ->Submit(MakeJob(&o, 2, absl::OkStatus(),
                                     [&] {
                                       decoding.fetch_add(1);
                                       release_images.WaitForNotification();
                                     }))
                    .ok());
  }
  WaitUntil([&] { return decoding.load() == 2; });
  std::unique_ptr<SchedulerJob> job = MakeJob(&text, 3);
  job->text_only = true;
  ASSERT_TRUE(scheduler->Submit(std::move(job)).ok());
  const bool answered = text.done.WaitForNotificationWithTimeout(absl::Seconds(20));
  release_images.Notify();  // before any assertion can return
  ASSERT_TRUE(answered) << "the text-only request waited for the image requests";
  EXPECT_TRUE(text.status.ok()) << text.status;
  EXPECT_EQ(text.deltas.load(), 3);
  for (Outcome& o : images) {
    o.done.WaitForNotification();
    EXPECT_TRUE(o.status.ok()) << o.status;
  }
}

// A drain that times out while a job is still being prepared ends that job
// with UNAVAILABLE once its preparation returns; it never reaches the engine.
TEST(SchedulerTest, DrainTimeoutEndsAJobBeingPrepared) {
  testing::FakeEngine engine;
  auto scheduler = std::move(*Scheduler::Create({4, 1}, &engine, nullptr));
  absl::Notification started, release;
  Outcome a;
  ASSERT_TRUE(scheduler
                  ->Submit(MakeJob(&a, 2, absl::OkStatus(),
                                   [&] {
                                     started.Notify();
                                     release.WaitForNotification();
                                   }))
                  .ok());
  started.WaitForNotification();
  std::thread drain([&] { scheduler->Drain(absl::Milliseconds(20)); });
  absl::SleepFor(absl::Milliseconds(100));  // past the drain timeout
  release.Notify();
  drain.join();
  ASSERT_TRUE(a.done.HasBeenNotified());
  EXPECT_EQ(a.status, absl::UnavailableError("server shutting down"));
  EXPECT_EQ(engine.started(), 0);
}

}  // namespace
}  // namespace vismoe::server
