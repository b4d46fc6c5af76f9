// Cancellation does not wait for slow copies (issue #37, item 4): with the
// copy engine at 1 byte/s every offloaded expert takes hours to arrive, so a
// step blocks in its first copy wait. Two requests batched together whose
// callers give up (is_cancelled turns true, as a client cancel or a deadline
// does in the server) end with finish reason "cancelled" as soon as the
// last one gives up -- the step leaves the copy wait -- and the engine then
// serves the next request the same way: nothing stayed blocked or held.
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "engine/api/engine.h"
#include "gtest/gtest.h"
#include "tests/testing/paths.h"

namespace vismoe {
namespace {

using Clock = std::chrono::steady_clock;

GenerateRequest Text(const char* prompt) {
  GenerateRequest r;
  ChatMessage m;
  m.role = "user";
  ContentPart p;
  p.text = prompt;
  m.content.push_back(p);
  r.messages.push_back(m);
  r.sampling.max_new_tokens = 8;
  return r;
}

// Generate, cancelled by its caller `after` from the call.
struct Call {
  absl::StatusOr<GenerateResult> result = absl::UnknownError("not run");
  double seconds = 0;
};
Call CancelledAfter(Engine& engine, const char* prompt, std::chrono::milliseconds after) {
  const Clock::time_point start = Clock::now();
  GenerateCallbacks cb;
  cb.is_cancelled = [start, after] { return Clock::now() - start > after; };
  Call c;
  c.result = engine.Generate(Text(prompt), cb);
  c.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return c;
}

TEST(EngineCancelCopyTest, CancelledStepsLeaveTheirCopyWait) {
  EngineOptions o;
  o.model_path = testing::TinyModelDir();
  o.backend = "cpu";
  o.num_threads = 1;
  o.max_context_tokens = 512;
  o.gpu_memory_budget_bytes = 11 << 20;
  o.offload.pinned_layers = 0;
  o.offload.copy_bandwidth_bytes_per_s = 1;
  auto engine = Engine::Create(o);
  ASSERT_TRUE(engine.ok()) << engine.status();
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(round);
    Call a, b;
    std::thread ta(
        [&] { a = CancelledAfter(**engine, "Hi there", std::chrono::milliseconds(300)); });
    std::thread tb([&] { b = CancelledAfter(**engine, "Hello", std::chrono::milliseconds(600)); });
    ta.join();
    tb.join();
    for (const Call* c : {&a, &b}) {
      ASSERT_TRUE(c->result.ok()) << c->result.status();
      EXPECT_EQ(c->result->finish_reason, FinishReason::kCancelled);
      // Hours of copying otherwise; 20 ms polls and scheduling here.
      EXPECT_LT(c->seconds, 5.0);
    }
  }
}

}  // namespace
}  // namespace vismoe
