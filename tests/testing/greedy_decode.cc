#include "tests/testing/greedy_decode.h"

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

}  // namespace vismoe::testing
