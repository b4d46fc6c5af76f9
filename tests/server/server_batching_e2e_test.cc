// End-to-end over loopback: concurrent streams share the engine's forward
// steps (continuous batching), and each stream gets exactly the tokens it gets
// alone, also when the KV pool runs out and streams are preempted; the
// scheduler's metrics show the batching, the preemptions and every KV block back.
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "server/metrics.h"
#include "server/server.h"
#include "tests/server/server_test_util.h"
#include "tests/testing/paths.h"

namespace vismoe::server {
namespace {

using vismoe::testing::MakeStub;
using vismoe::testing::RunGenerate;
using vismoe::testing::StreamResult;
using vismoe::testing::TextRequest;

// The value of the sample line starting with `prefix` in Prometheus text, or -1.
double Sample(const std::string& text, const std::string& prefix) {
  size_t at = text.find("\n" + prefix);
  if (at == std::string::npos) return -1;
  at = text.find(' ', at + 1 + prefix.size());
  return std::stod(text.substr(at + 1, text.find('\n', at + 1) - at - 1));
}

TEST(ServerBatchingE2eTest, ConcurrentStreamsBatchAndMatchTheirRunsAlone) {
  ServerOptions o = vismoe::testing::LoopbackOptions(vismoe::testing::TinyModelDir());
  o.backend = "cpu";
  o.workers = 4;
  o.max_step_tokens = 16;
  o.max_context_tokens = 512;
  o.kv_cache_tokens = 4096;
  auto server = VismoeServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();
  const absl::Status loaded = (*server)->LoadModel();
  ASSERT_TRUE(loaded.ok()) << loaded;
  auto stub = MakeStub((*server)->port());

  const std::vector<std::string> prompts = {"Hello", "The quick brown fox jumps over the dog",
                                            "1 2 3 4 5 6 7 8", "Write a poem about the sea",
                                            "What is the capital of France?", "abc"};
  std::vector<StreamResult> alone;
  for (const std::string& p : prompts) alone.push_back(RunGenerate(*stub, TextRequest(p, 24)));
  std::vector<StreamResult> together(prompts.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < prompts.size(); ++i) {
    threads.emplace_back(
        [&, i] { together[i] = RunGenerate(*stub, TextRequest(prompts[i], 24)); });
  }
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_TRUE(alone[i].status.ok()) << alone[i].status.error_message();
    ASSERT_TRUE(together[i].status.ok()) << together[i].status.error_message();
    EXPECT_EQ(together[i].token_ids, alone[i].token_ids) << prompts[i];
    EXPECT_EQ(together[i].text, alone[i].text) << prompts[i];
  }
  const std::string metrics = "\n" + (*server)->metrics()->Serialize();
  const double steps = Sample(metrics, "vismoe_batch_size_count");
  const double single = Sample(metrics, "vismoe_batch_size_bucket{le=\"1\"}");
  ASSERT_GT(steps, 0) << metrics;
  EXPECT_LT(single, steps) << "no step ran more than one sequence";
  EXPECT_EQ(Sample(metrics, "vismoe_kv_blocks{state=\"used\"}"), 0);
  EXPECT_EQ(Sample(metrics, "vismoe_kv_blocks{state=\"free\"}"), 4096 / 16);
  EXPECT_EQ(Sample(metrics, "vismoe_engine_sequences{state=\"running\"}"), 0);
}

// A KV pool of one short context for four streams that each fill it: the
// engine preempts (vismoe_preemptions_total counts it) and every stream still
// gets, once, exactly the text and tokens it gets alone.
TEST(ServerBatchingE2eTest, PreemptedStreamsMatchTheirRunsAloneAndAreCounted) {
  ServerOptions o = vismoe::testing::LoopbackOptions(vismoe::testing::TinyModelDir());
  o.backend = "cpu";
  o.workers = 4;
  o.max_step_tokens = 16;
  o.max_context_tokens = 128;
  o.kv_cache_tokens = 128;  // 8 blocks
  auto server = VismoeServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();
  const absl::Status loaded = (*server)->LoadModel();
  ASSERT_TRUE(loaded.ok()) << loaded;
  auto stub = MakeStub((*server)->port());

  const std::vector<std::string> prompts = {"Hello", "The quick brown fox jumps over the dog",
                                            "1 2 3 4 5 6 7 8", "Write a poem about the sea"};
  std::vector<StreamResult> alone;
  for (const std::string& p : prompts) alone.push_back(RunGenerate(*stub, TextRequest(p, 100)));
  std::vector<StreamResult> together(prompts.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < prompts.size(); ++i) {
    threads.emplace_back(
        [&, i] { together[i] = RunGenerate(*stub, TextRequest(prompts[i], 100)); });
  }
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_TRUE(alone[i].status.ok()) << alone[i].status.error_message();
    ASSERT_TRUE(together[i].status.ok()) << together[i].status.error_message();
    EXPECT_EQ(together[i].token_ids, alone[i].token_ids) << prompts[i];
    EXPECT_EQ(together[i].text, alone[i].text) << prompts[i];
  }
  const std::string metrics = "\n" + (*server)->metrics()->Serialize();
  EXPECT_GT(Sample(metrics, "vismoe_preemptions_total"), 0) << metrics;
  EXPECT_EQ(Sample(metrics, "vismoe_kv_blocks{state=\"used\"}"), 0);
  EXPECT_EQ(Sample(metrics, "vismoe_kv_blocks{state=\"free\"}"), 128 / 16);
}

}  // namespace
}  // namespace vismoe::server
