#include "tests/testing/greedy_decode.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "engine/runtime/sampler.h"
#include "gtest/gtest.h"
#include "tests/testing/paths.h"

namespace vismoe::testing {

nlohmann::json TextCases() {
  std::ifstream in(FixturesDir() + "/golden/text_cases.json");
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str(), nullptr, false);
}

std::vector<std::vector<float>> GreedyLogits(const TextDecoder& model, ExpertProvider* experts,
                                             const std::vector<int>& ids, int decode_steps,
                                             RouterObserver* observer, std::vector<int>* tokens,
                                             const std::function<void()>& after_prompt) {
  std::vector<std::vector<float>> out;
  auto created = model.CreateKvCache(static_cast<int64_t>(ids.size()) + decode_steps + 1);
  EXPECT_TRUE(created.ok()) << created.status();
  if (!created.ok()) return out;
  std::unique_ptr<KvCache> cache = *std::move(created);
  DecoderInput input;
  input.tokens = ids;
  input.all_logits = true;
  input.observer = observer;
  std::vector<float> logits;
  absl::Status st = model.Forward(input, cache.get(), experts, &logits);
  EXPECT_TRUE(st.ok()) << st;
  out.push_back(logits);
  if (st.ok() && after_prompt) after_prompt();
  const int vocab = static_cast<int>(logits.size() / ids.size());
  for (int i = 0; i < decode_steps && st.ok(); ++i) {
    const int tok = Sampler::Argmax(absl::MakeConstSpan(logits).subspan(logits.size() - vocab));
    if (tokens != nullptr) tokens->push_back(tok);
    DecoderInput step;
    step.tokens = absl::MakeConstSpan(&tok, 1);
    step.phase = Phase::kDecode;
    step.observer = observer;
    st = model.Forward(step, cache.get(), experts, &logits);
    EXPECT_TRUE(st.ok()) << st;
    out.push_back(logits);
  }
  return out;
}

bool BitIdentical(const std::vector<std::vector<float>>& a,
                  const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].size() != b[i].size() ||
        std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0) {
      return false;
    }
  }
  return true;
}

void ExpectGreedyAgrees(const std::vector<std::vector<float>>& ref,
                        const std::vector<int>& ref_tokens,
                        const std::vector<std::vector<float>>& got,
                        const std::vector<int>& got_tokens, int vocab, float rel_tol) {
  ASSERT_EQ(ref.size(), got.size());
  for (size_t step = 0; step < ref.size(); ++step) {
    SCOPED_TRACE(::testing::Message() << "step " << step);
    ASSERT_EQ(ref[step].size(), got[step].size());
    float largest = 0, worst = 0;
    for (float v : ref[step]) largest = std::max(largest, std::fabs(v));
    const float tol = rel_tol * largest;
    for (size_t i = 0; i < ref[step].size(); ++i) {
      worst = std::max(worst, std::fabs(ref[step][i] - got[step][i]));
    }
    EXPECT_LE(worst, tol) << "max |logit diff| " << worst << " vs tolerance " << tol;
    if (step >= ref_tokens.size() || step >= got_tokens.size()) break;
    if (ref_tokens[step] != got_tokens[step]) {
      // A flipped near-tie: the reference's own margin between the two must be small.
      const float* last = ref[step].data() + ref[step].size() - vocab;
      const float margin = last[ref_tokens[step]] - last[got_tokens[step]];
      EXPECT_LE(margin, tol) << "reference token " << ref_tokens[step] << ", token "
                             << got_tokens[step] << ": reference margin " << margin;
      return;  // the sequences differ from here on
    }
  }
}

}  // namespace vismoe::testing
