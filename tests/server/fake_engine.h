// FakeEngine: a deterministic stand-in for vismoe::Engine in server tests.
// Prepare() counts one token per 4 bytes of text and 16 per image; Generate() emits max_new_tokens
// deltas "w<i> " (ids 100+i), sleeping step_delay between steps and polling cancellation; it can be
// held at the start of Generate until Release() to fill the workers deterministically.
//
// Thread safety: all methods may be called from any thread.
#ifndef VISMOE_TESTS_SERVER_FAKE_ENGINE_H_
#define VISMOE_TESTS_SERVER_FAKE_ENGINE_H_

#include <algorithm>
#include <atomic>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "engine/api/engine.h"

namespace vismoe::testing {

class FakeEngine : public Engine {
 public:
  FakeEngine() {
    info_.model_type = "fake";
    info_.model_path = "/fake";
    info_.backend = "cpu";
    info_.num_layers = 2;
    info_.num_experts = 4;
    info_.experts_per_token = 2;
    info_.hidden_size = 8;
    info_.vocab_size = 1000;
    info_.max_context_tokens = 4096;
    info_.has_vision = true;
  }

  const ModelInfo& info() const override { return info_; }

  // One token per 4 bytes of text (at least 1 per part), 16 per image.
  absl::StatusOr<std::unique_ptr<PreparedRequest>> Prepare(
      const GenerateRequest& request) override {
    prepares_.fetch_add(1);
    absl::StatusOr<int> n = Count(request);
    if (!n.ok()) return n.status();
    return std::unique_ptr<PreparedRequest>(new Prepared(request, *n));
  }

  using Engine::Generate;
  absl::StatusOr<GenerateResult> Generate(const PreparedRequest& prepared,
                                          const GenerateCallbacks& callbacks) override {
    const GenerateRequest& request = prepared.request();
    active_.fetch_add(1);
    {
      absl::MutexLock lock(&mu_);
      ++started_;
      auto released = [this, &callbacks]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !hold_ || (callbacks.is_cancelled && callbacks.is_cancelled());
      };
      while (!released())
        mu_.AwaitWithTimeout(absl::Condition(&hold_released_), absl::Milliseconds(5));
    }
    GenerateResult result;
    result.finish_reason = FinishReason::kLength;
    result.usage.prompt_tokens = prepared.prompt_tokens();
    for (int i = 0; i < request.sampling.max_new_tokens; ++i) {
      if (callbacks.is_cancelled && callbacks.is_cancelled()) {
        result.finish_reason = FinishReason::kCancelled;
        break;
      }
      absl::SleepFor(step_delay);
      TokenDelta d;
      (i < reasoning_tokens.load() ? d.reasoning : d.text) = absl::StrCat("w", i, " ");
      d.token_ids = {100 + i};
      result.text += d.text;
      result.reasoning += d.reasoning;
      result.token_ids.push_back(100 + i);
      if (callbacks.on_delta && !callbacks.on_delta(d)) {
        result.finish_reason = FinishReason::kCancelled;
        break;
      }
    }
    result.usage.completion_tokens = static_cast<int>(result.token_ids.size());
    result.offload.cache_queries = 10;
    result.offload.cache_hits = 5;
    active_.fetch_sub(1);
    return result;
  }

  // While held, Generate waits at its start (or until cancelled).
  void Hold() {
    absl::MutexLock lock(&mu_);
    hold_ = true;
    hold_released_ = false;
  }
  void Release() {
    absl::MutexLock lock(&mu_);
    hold_ = false;
    hold_released_ = true;
  }
  int started() {
    absl::MutexLock lock(&mu_);
    return started_;
  }
  int active() const { return active_.load(); }
  int prepares() const { return prepares_.load(); }

  absl::Duration step_delay = absl::Milliseconds(1);
  // The first tokens are reasoning (TokenDelta::reasoning), as a harmony model's.
  std::atomic<int> reasoning_tokens{0};

 private:
  class Prepared final : public PreparedRequest {
   public:
    Prepared(const GenerateRequest& r, int n) : PreparedRequest(r, n, 0.0) {}
  };

  static absl::StatusOr<int> Count(const GenerateRequest& request) {
    int n = 0;
    for (const ChatMessage& m : request.messages) {
      for (const ContentPart& p : m.content) {
        if (p.kind == ContentPart::Kind::kImage) {
          if (p.image_index < 0 || p.image_index >= static_cast<int>(request.images.size())) {
            return absl::InvalidArgumentError("bad image index");
          }
          n += 16;
        } else {
          n += std::max<int>(1, static_cast<int>(p.text.size()) / 4);
        }
      }
    }
    return n;
  }

  ModelInfo info_;
  std::atomic<int> active_{0};
  std::atomic<int> prepares_{0};
  absl::Mutex mu_;
  bool hold_ ABSL_GUARDED_BY(mu_) = false;
  bool hold_released_ ABSL_GUARDED_BY(mu_) = false;
  int started_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace vismoe::testing

#endif  // VISMOE_TESTS_SERVER_FAKE_ENGINE_H_
