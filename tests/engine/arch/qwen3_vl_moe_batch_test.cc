// ForwardBatch on the CPU reference backend: several sequences in one step
// give each sequence exactly (bit for bit) what Forward gives it alone --
// logits, KV cache rows and what its observer sees -- for text prefills of
// different lengths over different prefixes, decode tokens, image prefills
// with DeepStack (one or several in the step), token compression in one entry
// and all-row logits in another; each MoE layer asks the expert provider once
// per step for the union of the batch's experts, also behind the offload
// runtime at a small budget. A bad entry fails the whole step and advances no
// cache.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/arch/qwen3_vl_moe.h"
#include "engine/core/thread_pool.h"
#include "engine/model/checkpoint.h"
#include "engine/model/model_config.h"
#include "engine/offload/memory_plan.h"
#include "engine/offload/offload_expert_provider.h"
#include "engine/offload/resident_expert_provider.h"
#include "gtest/gtest.h"
#include "tests/testing/paths.h"
#include "tests/testing/tiny_decoder.h"
#include "tests/testing/reference_math.h"

namespace vismoe {
namespace {

using testing::Pattern;

// Records what an observer is shown, to compare a sequence alone and batched.
class Recorder final : public RouterObserver {
 public:
  void OnRouting(Phase phase, int layer, const float* hidden, const RouterResult& r) override {
    log_.push_back({static_cast<int>(phase), layer, r.n});
    experts_.insert(experts_.end(), r.experts.begin(), r.experts.end());
    weights_.insert(weights_.end(), r.weights.begin(), r.weights.end());
    logits_.insert(logits_.end(), r.logits.begin(), r.logits.end());
    hidden_.insert(hidden_.end(), hidden, hidden + r.n * hidden_size_);
  }
  void OnPostAttention(Phase, int layer, const float* residual, int64_t n) override {
    log_.push_back({-1, layer, n});
    hidden_.insert(hidden_.end(), residual, residual + n * hidden_size_);
  }
  void OnMoeOutput(Phase, int layer, const float* out, int64_t n) override {
    log_.push_back({-2, layer, n});
    hidden_.insert(hidden_.end(), out, out + n * hidden_size_);
  }
  explicit Recorder(int64_t hidden_size) : hidden_size_(hidden_size) {}
  bool operator==(const Recorder& o) const {
    return log_ == o.log_ && experts_ == o.experts_ && weights_ == o.weights_ &&
           logits_ == o.logits_ && hidden_ == o.hidden_;
  }

 private:
  const int64_t hidden_size_;
  std::vector<std::vector<int64_t>> log_;
  std::vector<int> experts_;
  std::vector<float> weights_, logits_, hidden_;
};

// Counts how often a layer's experts are asked for within one BeginLayer.
class CountingProvider final : public ExpertProvider {
 public:
  explicit CountingProvider(ExpertProvider* inner) : inner_(inner) {}
  absl::StatusOr<std::vector<int>> BeginLayer(Phase phase, int layer,
                                              absl::Span<const int> experts) override {
    ++begin_layer_calls;
    return inner_->BeginLayer(phase, layer, experts);
  }
  absl::StatusOr<ExpertWeights> Acquire(int layer, int expert) override {
    ++acquires;
    return inner_->Acquire(layer, expert);
  }
  void Release(int layer, int expert) override { inner_->Release(layer, expert); }
  bool Ready(int layer, int expert) override { return inner_->Ready(layer, expert); }
  void EndLayer(int layer) override { inner_->EndLayer(layer); }

  int begin_layer_calls = 0;
  int acquires = 0;

 private:
  ExpertProvider* inner_;
};

// One sequence: a text prefix already in its cache, then the step under test.
struct Seq {
  std::vector<int> prefix;
  std::vector<int> tokens;
  int num_visual = 0;  // image tokens among `tokens` get visual rows
  bool compress = false;
  bool all_logits = false;
  Phase phase = Phase::kPrefill;
};

// A sequence's state and its step's input (buffers live here).
struct SeqRun {
  std::unique_ptr<KvCache> cache;
  std::vector<int> tokens;
  std::vector<float> visual;
  std::vector<std::vector<float>> deepstack;
  DecoderInput input;
  std::vector<float> logits;
  std::unique_ptr<Recorder> recorder;
};

class BatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(testing::LoadTinyDecoder(&pool_, &config_, &ckpt_, &model_, &resident_));
  }

  std::vector<int> Text(int n, int salt) const {
    std::vector<int> ids(n);
    for (int i = 0; i < n; ++i) ids[i] = (31 * (i + salt) + 7) % 900;
    return ids;
  }
  // Text, then `visual` image tokens, then text.
  std::vector<int> WithImage(int before, int visual, int after, int salt) const {
    std::vector<int> ids = Text(before, salt);
    ids.insert(ids.end(), visual, config_.image_token_id);
    const std::vector<int> tail = Text(after, salt + 1);
    ids.insert(ids.end(), tail.begin(), tail.end());
    return ids;
  }

  // Prefills the prefix alone and prepares the step's input.
  std::unique_ptr<SeqRun> Prepare(const Seq& s, int salt, ExpertProvider* experts) {
    auto run = std::make_unique<SeqRun>();
    run->cache = model_->NewKvCache(256);
    if (!s.prefix.empty()) {
      DecoderInput in;
      in.tokens = s.prefix;
      std::vector<float> ignored;
      EXPECT_TRUE(model_->Forward(in, run->cache.get(), experts, &ignored).ok());
    }
    const int64_t h = config_.text.hidden_size;
    DecoderInput& in = run->input;
    run->tokens = s.tokens;
    in.tokens = run->tokens;
    in.phase = s.phase;
    in.all_logits = s.all_logits;
    if (s.num_visual > 0) {
      run->visual = Pattern(s.num_visual * h, salt, 0.5f);
      for (size_t k = 0; k < config_.vision.deepstack_visual_indexes.size(); ++k) {
        run->deepstack.push_back(Pattern(s.num_visual * h, salt * 10 + k, 0.25f));
      }
      in.visual_embeds = run->visual.data();
      in.num_visual = s.num_visual;
      for (const auto& d : run->deepstack) in.deepstack.push_back(d.data());
    }
    if (s.compress) {
      const int64_t n = static_cast<int64_t>(s.tokens.size());
      in.compress_before_layer = 1;
      in.select_kept_rows = [n]() -> absl::StatusOr<std::vector<int64_t>> {
        std::vector<int64_t> kept;
        for (int64_t r = 0; r < n; ++r) {
          if (r % 3 != 1) kept.push_back(r);
        }
        return kept;
      };
    }
    run->recorder = std::make_unique<Recorder>(h);
    in.observer = run->recorder.get();
    return run;
  }

  // Each sequence alone, then all in one batch; everything must match.
  void ExpectBatchMatchesAlone(const std::vector<Seq>& seqs, ExpertProvider* experts) {
    std::vector<std::unique_ptr<SeqRun>> alone, batched;
    CountingProvider alone_counting(experts);
    for (size_t i = 0; i < seqs.size(); ++i) {
      alone.push_back(Prepare(seqs[i], static_cast<int>(i) + 1, experts));
      ASSERT_TRUE(model_->Forward(alone.back()->input, alone.back()->cache.get(), &alone_counting,
                                  &alone.back()->logits)
                      .ok());
    }
    std::vector<DecoderBatchEntry> entries;
    for (size_t i = 0; i < seqs.size(); ++i) {
      batched.push_back(Prepare(seqs[i], static_cast<int>(i) + 1, experts));
      entries.push_back({&batched.back()->input, batched.back()->cache.get(),
                         &batched.back()->logits});
    }
    CountingProvider counting(experts);
    ASSERT_TRUE(model_->ForwardBatch(entries, &counting).ok());
    // One BeginLayer per MoE layer for the whole step, each expert acquired once.
    int moe_layers = 0;
    for (int l = 0; l < config_.text.num_hidden_layers; ++l) moe_layers += config_.text.IsMoeLayer(l);
    EXPECT_EQ(counting.begin_layer_calls, moe_layers);
    // Experts that several sequences route to are fetched once for all of them.
    EXPECT_LT(counting.acquires, alone_counting.acquires);

    for (size_t i = 0; i < seqs.size(); ++i) {
      SCOPED_TRACE(::testing::Message() << "sequence " << i);
      const SeqRun& a = *alone[i];
      const SeqRun& b = *batched[i];
      ASSERT_EQ(b.logits.size(), a.logits.size());
      EXPECT_EQ(std::memcmp(b.logits.data(), a.logits.data(), a.logits.size() * sizeof(float)), 0);
      EXPECT_EQ(b.cache->length(), a.cache->length());
      for (int l = 0; l < config_.text.num_hidden_layers; ++l) {
        ASSERT_EQ(b.cache->layer_length(l), a.cache->layer_length(l)) << "layer " << l;
        const size_t bytes = static_cast<size_t>(a.cache->row_elems()) * sizeof(float);
        for (int64_t t = 0; t < a.cache->layer_length(l); ++t) {
          ASSERT_EQ(std::memcmp(b.cache->KeyRow(l, t), a.cache->KeyRow(l, t), bytes), 0)
              << "keys, layer " << l << " row " << t;
          ASSERT_EQ(std::memcmp(b.cache->ValueRow(l, t), a.cache->ValueRow(l, t), bytes), 0)
              << "values, layer " << l << " row " << t;
        }
      }
      EXPECT_TRUE(*b.recorder == *a.recorder) << "the observer saw something else";
    }
  }

  ThreadPool pool_{2};
  ModelConfig config_;
  std::unique_ptr<Checkpoint> ckpt_;
  std::unique_ptr<Qwen3VlMoeModel> model_;
  std::unique_ptr<ResidentExpertProvider> resident_;
};

TEST_F(BatchTest, TextPrefillsAndDecodeTokens) {
  ExpectBatchMatchesAlone({{{}, Text(9, 1)},
                           {Text(5, 2), Text(1, 3), 0, false, false, Phase::kDecode},
                           {Text(12, 4), Text(6, 5)},
                           {Text(3, 6), Text(1, 7), 0, false, false, Phase::kDecode}},
                          resident_.get());
}

TEST_F(BatchTest, OneImagePrefillAmongTextAndDecode) {
  ExpectBatchMatchesAlone({{Text(4, 1), Text(1, 2), 0, false, false, Phase::kDecode},
                           {{}, WithImage(3, 8, 4, 3), 8},
                           {{}, Text(7, 4)}},
                          resident_.get());
}

TEST_F(BatchTest, SeveralImagesCompressionAndAllLogits) {
  ExpectBatchMatchesAlone({{{}, WithImage(2, 8, 3, 1), 8, /*compress=*/true},
                           {Text(4, 2), Text(1, 3), 0, false, false, Phase::kDecode},
                           {{}, WithImage(5, 4, 2, 4), 4, false, /*all_logits=*/true},
                           {{}, Text(6, 5), 0, false, /*all_logits=*/true}},
                          resident_.get());
}

TEST_F(BatchTest, BehindTheOffloadRuntimeAtASmallBudget) {
  const std::string prefix = Qwen3VlMoeModel::TextPrefix(config_);
  auto sizes = MeasureModelSizes(*ckpt_, config_.text, prefix);
  ASSERT_TRUE(sizes.ok()) << sizes.status();
  MemoryPlanOptions po;
  po.pinned_layers = 0;
  po.budget_bytes = sizes->resident_bytes + 3 * sizes->expert_bytes;  // three slabs
  auto plan = MakeMemoryPlan(*sizes, po);
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto offload = OffloadExpertProvider::Create(*resident_, config_.text, *plan, OffloadOptions(),
                                               nullptr);
  ASSERT_TRUE(offload.ok()) << offload.status();
  ExpectBatchMatchesAlone({{{}, WithImage(3, 8, 2, 1), 8, /*compress=*/true},
                           {Text(6, 2), Text(1, 3), 0, false, false, Phase::kDecode},
                           {{}, Text(10, 4)}},
                          offload->get());
}

TEST_F(BatchTest, ABadEntryFailsTheStepAndAdvancesNoCache) {
  auto good = Prepare({{}, Text(5, 1)}, 1, resident_.get());
  auto bad = Prepare({{}, Text(4, 2)}, 2, resident_.get());
  bad->tokens[2] = config_.text.vocab_size;  // out of the vocabulary
  std::vector<DecoderBatchEntry> entries = {{&good->input, good->cache.get(), &good->logits},
                                            {&bad->input, bad->cache.get(), &bad->logits}};
  absl::Status s = model_->ForwardBatch(entries, resident_.get());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(good->cache->length(), 0);
  EXPECT_EQ(bad->cache->length(), 0);

  // Two entries on one cache would write the same rows.
  entries = {{&good->input, good->cache.get(), &good->logits},
             {&good->input, good->cache.get(), &bad->logits}};
  s = model_->ForwardBatch(entries, resident_.get());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(good->cache->length(), 0);
  EXPECT_EQ(model_->ForwardBatch({}, resident_.get()).code(), absl::StatusCode::kInvalidArgument);

  // The step still runs once the batch is valid.
  entries = {{&good->input, good->cache.get(), &good->logits}};
  s = model_->ForwardBatch(entries, resident_.get());
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(good->cache->length(), 5);
}

}  // namespace
}  // namespace vismoe
