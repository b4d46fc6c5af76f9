// Per-sequence preload through the Engine on the trained VQA model
// (tests/fixtures/vqa-qwen3-vl-moe) and fixed request sets from its eval set,
// under an 11 MiB budget (1 pinned MoE layer, 17 slabs), LRU, no prefetch:
// the answers are those of the engine without preload, token for token, and
// the bytes moved change in the direction engine/policy/preload.md measures:
//   * questions with long answers (captions, lists: ~9 and ~6.5 tokens): the
//     kept experts save more decode copies than the preload costs -- fewer
//     bytes in all, fewer copies during decode steps;
//   * one-word answers (one decode step): the preload's copies are not repaid
//     -- more bytes.
// Counts do not depend on timing (a copy in flight counts as a hit), so the
// comparisons are exact.
#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "engine/api/engine.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/image_file.h"
#include "tests/testing/paths.h"

namespace vismoe {
namespace {

// The first `count` eval questions of `categories`, in the eval's prompt format.
std::vector<GenerateRequest> EvalRequests(const std::vector<std::string>& categories, int count) {
  const std::string dir = testing::FixturesDir() + "/vqa-eval";
  std::ifstream in(dir + "/eval.jsonl");
  std::vector<GenerateRequest> out;
  std::string line;
  while (static_cast<int>(out.size()) < count && std::getline(in, line)) {
    const nlohmann::json q = nlohmann::json::parse(line);
    const std::string category = q["category"].get<std::string>();
    if (std::find(categories.begin(), categories.end(), category) == categories.end()) continue;
    GenerateRequest r;
    ChatMessage m;
    m.role = "user";
    if (q.contains("image") && q["image"].is_string()) {
      absl::StatusOr<RgbImage> image =
          testing::LoadImageFile(dir + "/" + q["image"].get<std::string>());
      EXPECT_TRUE(image.ok()) << image.status();
      if (!image.ok()) continue;
      r.images.push_back(*std::move(image));
      ContentPart part;
      part.kind = ContentPart::Kind::kImage;
      part.image_index = 0;
      m.content.push_back(part);
    }
    ContentPart text;
    text.text =
        q["question"].get<std::string>() + "\nAnswer the question using a single word or phrase.";
    m.content.push_back(text);
    r.messages.push_back(m);
    r.sampling.max_new_tokens = 16;
    out.push_back(std::move(r));
  }
  EXPECT_EQ(static_cast<int>(out.size()), count);
  return out;
}

struct SetTotals {
  std::vector<std::vector<int>> tokens;
  OffloadStats offload;
  int completion_tokens = 0;
};

SetTotals RunSet(const std::vector<GenerateRequest>& requests, bool preload) {
  EngineOptions o;
  o.model_path = testing::FixturesDir() + "/vqa-qwen3-vl-moe";
  o.backend = "cpu";
  o.num_threads = 1;
  o.max_context_tokens = 1024;
  o.gpu_memory_budget_bytes = int64_t{11} << 20;
  o.offload.pinned_layers = 1;
  o.offload.eviction = "lru";
  o.offload.prefetch = "none";
  if (preload) o.offload.preload = "prefill-routing";  // top-k = 4 per layer, share 0.5
  SetTotals t;
  auto engine = Engine::Create(o);
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (!engine.ok()) return t;
  for (const GenerateRequest& r : requests) {
    absl::StatusOr<GenerateResult> result = (*engine)->Generate(r, {});
    EXPECT_TRUE(result.ok()) << result.status();
    if (!result.ok()) continue;
    t.tokens.push_back(result->token_ids);
    t.offload.Add(result->offload);
    t.completion_tokens += result->usage.completion_tokens;
  }
  return t;
}

TEST(EnginePreloadTest, LongAnswersMoveFewerBytes) {
  const std::vector<GenerateRequest> requests = EvalRequests({"caption", "list"}, 24);
  const SetTotals off = RunSet(requests, false);
  const SetTotals on = RunSet(requests, true);
  ASSERT_EQ(on.tokens, off.tokens) << "preload changed an answer";
  EXPECT_GT(off.completion_tokens, 4 * 24) << "the set's premise: long answers";
  EXPECT_EQ(off.offload.preload_issued, 0u);
  EXPECT_GT(on.offload.preload_issued, 0u);
  EXPECT_GT(on.offload.preload_used, on.offload.preload_issued / 2);
  EXPECT_GT(on.offload.preload_kept_lookups, 0u);
  EXPECT_LT(on.offload.bytes_h2d, off.offload.bytes_h2d);
  // The saving is in the decode steps' demand misses: recalled lookups rise
  // by more than the preload's copies.
  const uint64_t missed_off = off.offload.prefetch_needed - off.offload.prefetch_recalled;
  const uint64_t missed_on = on.offload.prefetch_needed - on.offload.prefetch_recalled;
  EXPECT_EQ(on.offload.prefetch_needed, off.offload.prefetch_needed);
  EXPECT_GT(missed_off, missed_on + on.offload.preload_issued);
}

TEST(EnginePreloadTest, OneWordAnswersMoveMoreBytes) {
  const std::vector<GenerateRequest> requests = EvalRequests({"colour", "shape"}, 24);
  const SetTotals off = RunSet(requests, false);
  const SetTotals on = RunSet(requests, true);
  ASSERT_EQ(on.tokens, off.tokens) << "preload changed an answer";
  // One word each; EOS comes from the one decode step (and is not counted).
  EXPECT_EQ(off.completion_tokens, 24) << "the set's premise: one-word answers";
  EXPECT_GT(on.offload.preload_issued, 0u);
  EXPECT_GT(on.offload.bytes_h2d, off.offload.bytes_h2d);
}

}  // namespace
}  // namespace vismoe
