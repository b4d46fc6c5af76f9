// Continuous batching end to end on the CPU backend (tiny Qwen3-VL-MoE): a
// request's greedy tokens in a batch equal its tokens when run alone -- text
// and image requests joining at different steps, prompts prefilled in chunks
// (visual rows split across chunks), one image request with token
// compression (prefilled whole), one cancelled mid-way -- resident, under
// an offload budget, and with a KV pool too small for all of them
// (preemption).
#include "engine/runtime/batch_loop.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "engine/api/engine.h"
#include "engine/arch/qwen3_vl_moe.h"
#include "engine/model/checkpoint.h"
#include "engine/model/model_config.h"
#include "engine/offload/memory_plan.h"
#include "gtest/gtest.h"
#include "tests/testing/greedy_decode.h"
#include "tests/testing/image_request.h"
#include "tests/testing/paths.h"

namespace vismoe {
namespace {

// Records what the engine's step thread reports about its steps.
class StepSink final : public NullStatsSink {
 public:
  void OnSchedulerStep(int sequences, int64_t tokens) override {
    absl::MutexLock lock(&mu_);
    max_batch_ = std::max(max_batch_, sequences);
    ++steps_;
    (void)tokens;
  }
  void SetKvBlocks(int64_t used, int64_t total) override {
    absl::MutexLock lock(&mu_);
    max_used_ = std::max(max_used_, used);
    last_used_ = used;
    total_ = total;
  }
  void OnPreemption() override {
    absl::MutexLock lock(&mu_);
    ++preemptions_;
  }
  int preemptions() {
    absl::MutexLock lock(&mu_);
    return preemptions_;
  }
  int max_batch() {
    absl::MutexLock lock(&mu_);
    return max_batch_;
  }
  int64_t last_used() {
    absl::MutexLock lock(&mu_);
    return last_used_;
  }
  int64_t max_used() {
    absl::MutexLock lock(&mu_);
    return max_used_;
  }

 private:
  absl::Mutex mu_;
  int max_batch_ = 0;
  int steps_ = 0;
  int64_t max_used_ = 0, last_used_ = 0, total_ = 0;
  int preemptions_ = 0;
};

struct Job {
  GenerateRequest request;
  bool cancel = false;  // cancelled after its fourth delta
};

// The golden text cases, an image request, and the image request with
// affinity compression at keep ratio 0.5; one text request is cancelled.
std::vector<Job> Jobs() {
  std::vector<Job> jobs;
  const nlohmann::json cases = testing::TextCases();
  int i = 0;
  for (const auto& c : cases) {
    Job j;
    for (const auto& m : c["messages"]) {
      ChatMessage msg;
      msg.role = m["role"].get<std::string>();
      ContentPart part;
      part.text = m["content"].get<std::string>();
      msg.content.push_back(part);
      j.request.messages.push_back(msg);
    }
    j.request.sampling.max_new_tokens = 10 + 3 * i++;
    jobs.push_back(j);
  }
  jobs[1].cancel = true;
  Job image{testing::PatternImageRequest(14)};
  jobs.insert(jobs.begin() + 2, image);
  Job compressed{testing::PatternImageRequest(12)};
  compressed.request.policy.token_compressor = "affinity";
  compressed.request.policy.keep_ratio = 0.5f;
  jobs.push_back(compressed);
  return jobs;
}

EngineOptions BaseOptions() {
  EngineOptions o;
  o.model_path = testing::TinyModelDir();
  o.backend = "cpu";
  o.num_threads = 2;
  o.max_context_tokens = 256;
  o.kv_cache_tokens = 1024;
  return o;
}

// Each job alone, one after another.
std::vector<GenerateResult> RunAlone(Engine* engine, const std::vector<Job>& jobs) {
  std::vector<GenerateResult> out;
  for (const Job& j : jobs) {
    absl::StatusOr<GenerateResult> r = engine->Generate(j.request, {});
    EXPECT_TRUE(r.ok()) << r.status();
    out.push_back(r.ok() ? *r : GenerateResult{});
  }
  return out;
}

// What a request streamed: its deltas' text and ids, concatenated.
struct Streamed {
  std::string text;
  std::vector<int> ids;
};

// All jobs at once: job i is submitted once the jobs before it have streamed
// 2 * i deltas in all, so they join at different steps. What each streamed
// goes to `streamed` when given.
std::vector<absl::StatusOr<GenerateResult>> RunTogether(Engine* engine,
                                                        const std::vector<Job>& jobs,
                                                        std::vector<Streamed>* streamed = nullptr) {
  if (streamed != nullptr) streamed->assign(jobs.size(), {});
  std::atomic<int> deltas{0};
  std::vector<absl::StatusOr<GenerateResult>> out(jobs.size(), absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < jobs.size(); ++i) {
    threads.emplace_back([&, i] {
      const absl::Time deadline = absl::Now() + absl::Seconds(60);
      while (deltas.load() < static_cast<int>(2 * i) && absl::Now() < deadline) {
        absl::SleepFor(absl::Milliseconds(1));
      }
      std::atomic<int> mine{0};
      GenerateCallbacks cb;
      cb.on_delta = [&, i](const TokenDelta& d) {
        deltas.fetch_add(1);
        mine.fetch_add(1);
        if (streamed != nullptr) {
          (*streamed)[i].text += d.text;
          (*streamed)[i].ids.insert((*streamed)[i].ids.end(), d.token_ids.begin(),
                                    d.token_ids.end());
        }
        return true;
      };
      if (jobs[i].cancel) cb.is_cancelled = [&] { return mine.load() >= 4; };
      out[i] = engine->Generate(jobs[i].request, cb);
    });
  }
  for (std::thread& t : threads) t.join();
  return out;
}

void ExpectSameAsAlone(const std::vector<Job>& jobs, const std::vector<GenerateResult>& alone,
                       const std::vector<absl::StatusOr<GenerateResult>>& together) {
  for (size_t i = 0; i < jobs.size(); ++i) {
    ASSERT_TRUE(together[i].ok()) << "job " << i << ": " << together[i].status();
    const GenerateResult& r = *together[i];
    if (jobs[i].cancel) {
      EXPECT_EQ(r.finish_reason, FinishReason::kCancelled) << "job " << i;
      ASSERT_LT(r.token_ids.size(), alone[i].token_ids.size()) << "job " << i;
      EXPECT_TRUE(std::equal(r.token_ids.begin(), r.token_ids.end(), alone[i].token_ids.begin()))
          << "job " << i << ": the cancelled request's tokens are not a prefix of its own";
      continue;
    }
    EXPECT_EQ(r.token_ids, alone[i].token_ids) << "job " << i;
    EXPECT_EQ(r.text, alone[i].text) << "job " << i;
    EXPECT_EQ(r.finish_reason, alone[i].finish_reason) << "job " << i;
    EXPECT_EQ(r.usage.visual_tokens_after, alone[i].usage.visual_tokens_after) << "job " << i;
    EXPECT_GT(r.offload.cache_queries, 0u) << "job " << i;
  }
}

TEST(BatchLoopTest, BatchedRequestsMatchTheirRunsAloneResident) {
  const std::vector<Job> jobs = Jobs();
  EngineOptions alone_o = BaseOptions();
  alone_o.max_running_sequences = 1;
  auto alone_engine = Engine::Create(alone_o);
  ASSERT_TRUE(alone_engine.ok()) << alone_engine.status();
  const std::vector<GenerateResult> alone = RunAlone(alone_engine->get(), jobs);

  StepSink sink;
  EngineOptions o = BaseOptions();
  o.max_running_sequences = 4;
  o.max_step_tokens = 16;  // every prompt is prefilled in chunks (the compressed one whole)
  o.stats = &sink;
  auto engine = Engine::Create(o);
  ASSERT_TRUE(engine.ok()) << engine.status();
  ExpectSameAsAlone(jobs, alone, RunTogether(engine->get(), jobs));
  EXPECT_GT(sink.max_batch(), 1) << "the requests never ran in one step";
  EXPECT_GT(sink.max_used(), 0);
  EXPECT_EQ(sink.last_used(), 0) << "KV blocks still reserved after every request ended";
  // Run alone on the batching engine too: identical.
  const std::vector<GenerateResult> again = RunAlone(engine->get(), {jobs[0]});
  EXPECT_EQ(again[0].token_ids, alone[0].token_ids);
}

TEST(BatchLoopTest, BatchedRequestsMatchTheirRunsAloneUnderAnOffloadBudget) {
  const std::vector<Job> jobs = Jobs();
  EngineOptions o = BaseOptions();
  auto config = ModelConfig::Load(o.model_path);
  auto ckpt = Checkpoint::Open(o.model_path);
  ASSERT_TRUE(config.ok() && ckpt.ok());
  auto sizes = MeasureModelSizes(**ckpt, config->text, Qwen3VlMoeModel::TextPrefix(*config));
  ASSERT_TRUE(sizes.ok()) << sizes.status();
  const TextConfig& t = config->text;
  const int64_t kv_bytes =
      2 * int64_t{t.num_hidden_layers} * t.num_key_value_heads * t.head_dim * o.kv_cache_tokens * 4;
  // The first MoE layer pinned (the affinity compressor reads its routing)
  // and 6 slabs for the other three: constant eviction.
  o.gpu_memory_budget_bytes =
      sizes->resident_bytes + kv_bytes + (t.num_experts + 6) * sizes->expert_bytes;
  o.offload.pinned_layers = 1;
  o.offload.prefetch = "history";
  o.offload.eviction = "lru";
  o.max_running_sequences = 1;
  auto alone_engine = Engine::Create(o);
  ASSERT_TRUE(alone_engine.ok()) << alone_engine.status();
  const std::vector<GenerateResult> alone = RunAlone(alone_engine->get(), jobs);

  o.max_running_sequences = 3;
  o.max_step_tokens = 24;
  auto engine = Engine::Create(o);
  ASSERT_TRUE(engine.ok()) << engine.status();
  const std::vector<absl::StatusOr<GenerateResult>> together = RunTogether(engine->get(), jobs);
  ExpectSameAsAlone(jobs, alone, together);
  uint64_t misses = 0;
  for (const auto& r : together) {
    if (r.ok()) misses += r->offload.cache_queries - r->offload.cache_hits;
  }
  EXPECT_GT(misses, 0u) << "the budget never evicted: the test does not exercise offload";
}

// A KV pool of one context (the smallest allowed) for up to 4 sequences:
// running sequences outgrow it and the youngest are preempted, recomputing
// their tokens when they run again. Their tokens and text are still those
// they get alone, and what they streamed is sent once.
TEST(BatchLoopTest, PreemptedRequestsMatchTheirRunsAlone) {
  std::vector<Job> jobs = Jobs();
  for (Job& j : jobs) j.request.sampling.max_new_tokens += 80;  // outgrow their first blocks
  EngineOptions alone_o = BaseOptions();
  alone_o.max_running_sequences = 1;
  auto alone_engine = Engine::Create(alone_o);
  ASSERT_TRUE(alone_engine.ok()) << alone_engine.status();
  const std::vector<GenerateResult> alone = RunAlone(alone_engine->get(), jobs);

  StepSink sink;
  EngineOptions o = BaseOptions();
  o.kv_cache_tokens = o.max_context_tokens;  // 16 blocks of 16 tokens
  o.max_running_sequences = 4;
  o.max_step_tokens = 16;
  o.stats = &sink;
  auto engine = Engine::Create(o);
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::vector<Streamed> streamed;
  const std::vector<absl::StatusOr<GenerateResult>> together =
      RunTogether(engine->get(), jobs, &streamed);
  ExpectSameAsAlone(jobs, alone, together);
  EXPECT_GT(sink.preemptions(), 0) << "the pool never ran out: the test does not preempt";
  EXPECT_GT(sink.max_batch(), 1);
  EXPECT_EQ(sink.last_used(), 0) << "KV blocks still held after every request ended";
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (jobs[i].cancel || !together[i].ok()) continue;
    EXPECT_EQ(streamed[i].text, together[i]->text) << "job " << i;
    EXPECT_EQ(streamed[i].ids, together[i]->token_ids) << "job " << i;
  }
}

// The youngest running sequence is the one preempted: here the image request
// with token compression, beside a long text request in a pool of one
// context. It compresses its prompt again when it runs again.
TEST(BatchLoopTest, APreemptedCompressedRequestMatchesItsRunAlone) {
  const std::vector<Job> all = Jobs();
  std::vector<Job> jobs = {all.front(), all.back()};
  ASSERT_TRUE(jobs[1].request.policy.token_compressor.has_value());
  jobs[0].request.sampling.max_new_tokens = 200;  // capped at the context
  jobs[1].request.sampling.max_new_tokens = 100;
  EngineOptions o = BaseOptions();
  o.max_context_tokens = 192;
  o.kv_cache_tokens = 192;
  o.max_running_sequences = 1;
  auto alone_engine = Engine::Create(o);
  ASSERT_TRUE(alone_engine.ok()) << alone_engine.status();
  const std::vector<GenerateResult> alone = RunAlone(alone_engine->get(), jobs);

  StepSink sink;
  o.max_running_sequences = 2;
  o.stats = &sink;
  auto engine = Engine::Create(o);
  ASSERT_TRUE(engine.ok()) << engine.status();
  // The image request is prepared (decoding, preprocessing) before the text
  // one starts, and submitted at the text one's second token, so it joins
  // early whatever the machine's load: both then outgrow the pool together.
  auto prepared = (*engine)->Prepare(jobs[1].request);
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  absl::Notification second_token;
  std::vector<absl::StatusOr<GenerateResult>> together(2, absl::UnknownError("not run"));
  std::thread image([&] {
    second_token.WaitForNotification();
    together[1] = (*engine)->Generate(**prepared, {});
  });
  int deltas = 0;
  GenerateCallbacks cb;
  cb.on_delta = [&](const TokenDelta&) {
    if (++deltas == 2) {
      second_token.Notify();
      absl::SleepFor(absl::Milliseconds(50));  // the step thread waits for its Submit
    }
    return true;
  };
  together[0] = (*engine)->Generate(jobs[0].request, cb);
  image.join();
  ExpectSameAsAlone(jobs, alone, together);
  EXPECT_GT(sink.preemptions(), 0) << "the pool never ran out: the test does not preempt";
  EXPECT_EQ(sink.last_used(), 0);
}

TEST(BatchLoopTest, AHugeMaxNewTokensIsCappedAtTheContext) {
  EngineOptions o = BaseOptions();
  o.kv_cache_tokens = 0;  // = max_context_tokens (256)
  auto engine = Engine::Create(o);
  ASSERT_TRUE(engine.ok()) << engine.status();
  const std::vector<Job> jobs = Jobs();
  GenerateRequest r = jobs[0].request;
  r.sampling.max_new_tokens = 100000;  // capped at the context: fits alone
  absl::StatusOr<GenerateResult> capped = (*engine)->Generate(r, {});
  ASSERT_TRUE(capped.ok()) << capped.status();
  EXPECT_EQ(capped->finish_reason, FinishReason::kLength);
  EXPECT_EQ(capped->usage.prompt_tokens + capped->usage.completion_tokens, 257)
      << "generation ends when the context is full (one token past the last cache row)";
}

TEST(BatchLoopTest, BadLimitsAreClearErrors) {
  EngineOptions o = BaseOptions();
  o.max_running_sequences = 0;
  EXPECT_EQ(Engine::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = BaseOptions();
  o.max_running_sequences = 8;
  o.max_step_tokens = 4;
  absl::Status st = Engine::Create(o).status();
  EXPECT_NE(st.message().find("max_step_tokens"), std::string::npos) << st;
  o = BaseOptions();
  o.kv_cache_tokens = 100;  // below max_context_tokens
  st = Engine::Create(o).status();
  EXPECT_NE(st.message().find("kv_cache_tokens"), std::string::npos) << st;
}

// BaseOptions under an offload budget: the first MoE layer pinned (the
// affinity compressor reads its routing) and 6 slabs for the other three:
// constant eviction. kv_cache_tokens > 0 replaces BaseOptions' KV pool (the
// budget covers that pool).
EngineOptions BudgetOptions(int64_t kv_cache_tokens = 0) {
  EngineOptions o = BaseOptions();
  if (kv_cache_tokens > 0) o.kv_cache_tokens = kv_cache_tokens;
  auto config = ModelConfig::Load(o.model_path);
  auto ckpt = Checkpoint::Open(o.model_path);
  EXPECT_TRUE(config.ok() && ckpt.ok());
  if (!config.ok() || !ckpt.ok()) return o;
  auto sizes = MeasureModelSizes(**ckpt, config->text, Qwen3VlMoeModel::TextPrefix(*config));
  EXPECT_TRUE(sizes.ok()) << sizes.status();
  if (!sizes.ok()) return o;
  const TextConfig& t = config->text;
  const int64_t kv_bytes =
      2 * int64_t{t.num_hidden_layers} * t.num_key_value_heads * t.head_dim * o.kv_cache_tokens * 4;
  o.gpu_memory_budget_bytes =
      sizes->resident_bytes + kv_bytes + (t.num_experts + 6) * sizes->expert_bytes;
  o.offload.pinned_layers = 1;
  o.offload.prefetch = "history";
  o.offload.eviction = "lru";
  return o;
}

// Counts what per-sequence preload reports.
class PreloadSink final : public NullStatsSink {
 public:
  void OnPreloadIssued(uint64_t n) override { issued += n; }
  void OnPreloadUsed(uint64_t n) override { used += n; }
  std::atomic<uint64_t> issued{0}, used{0};
};

// Per-sequence preload with several sequences sharing the slab cache (each
// keeping its quota of 6 slabs): every request's tokens are its tokens alone
// on an engine without preload, and the preloaded experts are used.
TEST(BatchLoopTest, PreloadKeepsBatchedTokensUnderAnOffloadBudget) {
  const std::vector<Job> jobs = Jobs();
  EngineOptions o = BudgetOptions();
  ASSERT_GT(o.gpu_memory_budget_bytes, 0);
  o.max_running_sequences = 1;
  auto alone_engine = Engine::Create(o);
  ASSERT_TRUE(alone_engine.ok()) << alone_engine.status();
  const std::vector<GenerateResult> alone = RunAlone(alone_engine->get(), jobs);

  PreloadSink sink;
  o.stats = &sink;
  o.max_running_sequences = 3;
  o.max_step_tokens = 24;
  o.offload.preload = "prefill-routing";
  o.offload.preload_share = 1.0;
  auto engine = Engine::Create(o);
  ASSERT_TRUE(engine.ok()) << engine.status();
  const std::vector<absl::StatusOr<GenerateResult>> together = RunTogether(engine->get(), jobs);
  ExpectSameAsAlone(jobs, alone, together);
  uint64_t issued = 0, used = 0;
  for (const auto& r : together) {
    if (!r.ok()) continue;
    issued += r->offload.preload_issued;
    used += r->offload.preload_used;
  }
  EXPECT_GT(issued, 0u);
  EXPECT_GT(used, 0u);
  EXPECT_LE(used, issued);
  EXPECT_EQ(sink.issued.load(), issued) << "the requests' shares sum to what the engine reported";
  EXPECT_EQ(sink.used.load(), used);
  // Preload on, run alone: also the same tokens.
  const std::vector<GenerateResult> again = RunAlone(engine->get(), {jobs[0], jobs[2]});
  EXPECT_EQ(again[0].token_ids, alone[0].token_ids);
  EXPECT_EQ(again[1].token_ids, alone[2].token_ids);
}

// Preload with preemption: a KV pool of one context for up to 4 sequences
// under an offload budget. A preempted sequence gives up its kept experts
// while it waits and preloads again after its prompt and tokens are prefilled
// again (SequencePreload::Suspend); its tokens are still its tokens alone.
TEST(BatchLoopTest, PreemptedSequencesWithPreloadMatchTheirRunsAlone) {
  std::vector<Job> jobs = Jobs();
  for (Job& j : jobs) j.request.sampling.max_new_tokens += 80;  // outgrow their first blocks
  EngineOptions o = BudgetOptions(/*kv_cache_tokens=*/BaseOptions().max_context_tokens);
  ASSERT_GT(o.gpu_memory_budget_bytes, 0);
  o.max_running_sequences = 1;
  auto alone_engine = Engine::Create(o);
  ASSERT_TRUE(alone_engine.ok()) << alone_engine.status();
  const std::vector<GenerateResult> alone = RunAlone(alone_engine->get(), jobs);

  StepSink sink;
  o.stats = &sink;
  o.max_running_sequences = 4;
  o.max_step_tokens = 16;
  o.offload.preload = "prefill-routing";
  o.offload.preload_share = 1.0;
  auto engine = Engine::Create(o);
  ASSERT_TRUE(engine.ok()) << engine.status();
  const std::vector<absl::StatusOr<GenerateResult>> together = RunTogether(engine->get(), jobs);
  ExpectSameAsAlone(jobs, alone, together);
  EXPECT_GT(sink.preemptions(), 0) << "the pool never ran out: the test does not preempt";
  EXPECT_EQ(sink.last_used(), 0) << "KV blocks still held after every request ended";
  uint64_t issued = 0;
  for (const auto& r : together) issued += r.ok() ? r->offload.preload_issued : 0;
  EXPECT_GT(issued, 0u);
}

}  // namespace
}  // namespace vismoe
