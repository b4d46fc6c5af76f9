// One sequence's own error in a batched step ends that sequence alone (issue
// #37): the others run the step again without it and produce exactly their
// tokens alone. BatchLoop + ModelRunner over the CPU tiny model, behind a
// decoder that makes chosen entries fail mid-step -- their token compression
// fails before decoder layer 1, after layer 0 ran for every sequence of the
// step and wrote its KV rows -- for one scripted sequence, and at random over
// many steps and seeds (a property test).
#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "engine/arch/qwen3_vl_moe.h"
#include "engine/model/generation_config.h"
#include "engine/model/tokenizer.h"
#include "engine/runtime/batch_loop.h"
#include "engine/runtime/local_prepared.h"
#include "engine/runtime/model_runner.h"
#include "engine/runtime/sequence.h"
#include "engine/runtime/step_scheduler.h"
#include "gtest/gtest.h"
#include "tests/testing/paths.h"
#include "tests/testing/tiny_decoder.h"

namespace vismoe {
namespace {

// The real decoder, except that entries `fail` picks fail mid-step with their
// own error (as a failing token compression would).
class FailingDecoder final : public TextDecoder {
 public:
  FailingDecoder(const TextDecoder* real, std::function<bool(const DecoderBatchEntry&)> fail)
      : real_(real), fail_(std::move(fail)) {}

  absl::Status ForwardBatch(absl::Span<const DecoderBatchEntry> batch,
                            ExpertProvider* experts) const override {
    std::vector<DecoderInput> inputs;
    inputs.reserve(batch.size());
    std::vector<DecoderBatchEntry> entries(batch.begin(), batch.end());
    for (DecoderBatchEntry& e : entries) {
      inputs.push_back(*e.input);
      if (batch.size() > 1 && fail_(e)) {
        ++failures;
        failed.push_back(e.cache);
        inputs.back().compress_before_layer = 1;
        inputs.back().select_kept_rows = []() -> absl::StatusOr<std::vector<int64_t>> {
          return absl::DataLossError("injected");
        };
      }
      e.input = &inputs.back();
    }
    return real_->ForwardBatch(entries, experts);
  }
  absl::Status Forward(const DecoderInput& input, KvCache* cache, ExpertProvider* experts,
                       std::vector<float>* logits) const override {
    return real_->Forward(input, cache, experts, logits);
  }
  absl::StatusOr<std::unique_ptr<KvCache>> CreateKvCache(int64_t capacity) const override {
    return real_->CreateKvCache(capacity);
  }
  absl::StatusOr<std::unique_ptr<KvPool>> CreateKvPool(int64_t blocks,
                                                       int64_t block_tokens) const override {
    return real_->CreateKvPool(blocks, block_tokens);
  }
  const ModelConfig& config() const override { return real_->config(); }
  const char* backend() const override { return real_->backend(); }

  mutable int failures = 0;
  mutable std::vector<const KvCache*> failed;  // the caches of the entries failed

 private:
  const TextDecoder* real_;
  std::function<bool(const DecoderBatchEntry&)> fail_;
};

struct Outcome {
  absl::Status status;
  std::vector<int> tokens;
};

class FailureIsolationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(testing::LoadTinyDecoder(&pool_, &config_, &ckpt_, &model_, &experts_));
    auto tok = Tokenizer::Load(testing::TinyModelDir());
    ASSERT_TRUE(tok.ok()) << tok.status();
    tokenizer_ = *std::move(tok);
    auto eos = LoadEosIds(testing::TinyModelDir());
    ASSERT_TRUE(eos.ok()) << eos.status();
    eos_ = *eos;
  }

  std::vector<int> Prompt(int n, int salt) const {
    std::vector<int> ids(n);
    for (int i = 0; i < n; ++i) ids[i] = (29 * (i + salt) + 5) % 900;
    return ids;
  }

  // Every prompt submitted at once to a BatchLoop over `decoder`; `caches`
  // gets each sequence's KV cache (what FailingDecoder sees) before it runs.
  std::vector<Outcome> Run(const TextDecoder& decoder, const std::vector<std::vector<int>>& prompts,
                           std::vector<const KvCache*>* caches = nullptr) {
    auto kv = decoder.CreateKvPool(64, 16);
    EXPECT_TRUE(kv.ok()) << kv.status();
    StepScheduler scheduler(StepLimits{8, 64}, kv->get());
    RunnerParts parts;
    parts.model = &decoder;
    parts.experts = experts_.get();
    parts.take_stats = [] { return OffloadStats{}; };
    parts.image_token_id = config_.image_token_id;
    ModelRunner runner(std::move(parts));
    std::vector<std::unique_ptr<LocalPrepared>> prepared;
    std::vector<std::unique_ptr<Sequence>> seqs;
    GenerateCallbacks callbacks;
    for (size_t i = 0; i < prompts.size(); ++i) {
      GenerateRequest request;
      request.sampling.max_new_tokens = 6 + static_cast<int>(prompts[i].size() % 3);
      vismoe::Prompt prompt;
      prompt.ids = prompts[i];
      prepared.push_back(std::make_unique<LocalPrepared>(request, prompt, TokenCompressorOptions{},
                                                         std::nullopt, std::nullopt, 0.0));
      seqs.push_back(std::make_unique<Sequence>(*prepared.back(), callbacks, tokenizer_.get(), eos_,
                                                nullptr, nullptr, 256, kv->get(),
                                                std::chrono::steady_clock::now()));
      if (caches != nullptr) caches->push_back(seqs.back()->cache.get());
    }
    {
      BatchLoop loop(&scheduler, &runner, kv->get(), nullptr, [] {});
      for (auto& s : seqs) loop.Submit(s.get());
      for (auto& s : seqs) s->done.WaitForNotification();
    }
    std::vector<Outcome> out;
    for (auto& s : seqs) out.push_back({s->status, s->result.token_ids});
    return out;
  }

  // Each prompt alone, through the real decoder.
  std::vector<Outcome> Alone(const std::vector<std::vector<int>>& prompts) {
    std::vector<Outcome> out;
    for (const auto& p : prompts) out.push_back(Run(*model_, {p})[0]);
    return out;
  }

  ThreadPool pool_{2};
  ModelConfig config_;
  std::unique_ptr<Checkpoint> ckpt_;
  std::unique_ptr<Qwen3VlMoeModel> model_;
  std::unique_ptr<ResidentExpertProvider> experts_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<int> eos_;
};

TEST_F(FailureIsolationTest, OneSequencesErrorEndsItAloneMidDecode) {
  std::vector<std::vector<int>> prompts;
  for (int i = 0; i < 5; ++i) prompts.push_back(Prompt(4 + 3 * i, i));
  const std::vector<Outcome> alone = Alone(prompts);
  // Sequence 2 fails at its second decode step, in a step with the others
  // (its cache, which the decoder sees, is known once Run has made it).
  std::vector<const KvCache*> caches;
  const int64_t victim_prompt = static_cast<int64_t>(prompts[2].size());
  FailingDecoder failing(model_.get(), [&](const DecoderBatchEntry& e) {
    return e.cache == caches[2] && e.cache->length() == victim_prompt + 1;
  });
  const std::vector<Outcome> together = Run(failing, prompts, &caches);
  EXPECT_EQ(failing.failures, 1);
  for (size_t i = 0; i < prompts.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "sequence " << i);
    if (i == 2) {
      EXPECT_EQ(together[i].status.code(), absl::StatusCode::kDataLoss) << together[i].status;
      EXPECT_EQ(together[i].status.message(), "injected");
      EXPECT_FALSE(FailedEntry(together[i].status).has_value()) << "the entry index leaked";
      continue;
    }
    ASSERT_TRUE(together[i].status.ok()) << together[i].status;
    EXPECT_EQ(together[i].tokens, alone[i].tokens);
  }
}

// Random sequences fail at random steps; every other sequence finishes with
// its tokens alone.
TEST_F(FailureIsolationTest, RandomFailuresNeverChangeTheOthersTokens) {
  std::vector<std::vector<int>> prompts;
  for (int i = 0; i < 6; ++i) prompts.push_back(Prompt(3 + 2 * i, 10 + i));
  const std::vector<Outcome> alone = Alone(prompts);
  int failed = 0, survived = 0;
  for (uint32_t seed = 1; seed <= 6; ++seed) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    std::mt19937 rng(seed);
    FailingDecoder failing(model_.get(), [&](const DecoderBatchEntry&) {
      return std::uniform_real_distribution<double>(0, 1)(rng) < 0.04;
    });
    std::vector<const KvCache*> caches;
    const std::vector<Outcome> together = Run(failing, prompts, &caches);
    for (size_t i = 0; i < prompts.size(); ++i) {
      SCOPED_TRACE(::testing::Message() << "sequence " << i);
      if (std::count(failing.failed.begin(), failing.failed.end(), caches[i]) > 0) {
        EXPECT_EQ(together[i].status.code(), absl::StatusCode::kDataLoss) << together[i].status;
        ++failed;
        continue;
      }
      ASSERT_TRUE(together[i].status.ok()) << together[i].status;
      EXPECT_EQ(together[i].tokens, alone[i].tokens);
      ++survived;
    }
  }
  EXPECT_GT(failed, 0) << "no failure was injected: the test shows nothing";
  EXPECT_GT(survived, failed);
}

}  // namespace
}  // namespace vismoe
