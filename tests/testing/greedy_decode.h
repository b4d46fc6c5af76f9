// Shared by the offload parity tests: the golden text cases, a greedy
// prompt-then-decode run of the decoder against any ExpertProvider, and a
// bit-for-bit comparison of the logits two runs produced.
#ifndef VISMOE_TESTS_TESTING_GREEDY_DECODE_H_
#define VISMOE_TESTS_TESTING_GREEDY_DECODE_H_

#include <functional>
#include <vector>

#include "engine/arch/qwen3_vl_moe.h"
#include "nlohmann/json.hpp"

namespace vismoe::testing {

// tests/fixtures/golden/text_cases.json (discarded JSON when unreadable).
nlohmann::json TextCases();

// Prompt logits (every position) then `decode_steps` greedy steps' logits,
// with `observer` (may be null) on every step; the greedy tokens go to
// `tokens` when given; `after_prompt` (when set) runs between the prompt and
// the first decode step, as the engine starts a sequence's preload there.
// Forward errors are test failures.
std::vector<std::vector<float>> GreedyLogits(const TextDecoder& model, ExpertProvider* experts,
                                             const std::vector<int>& ids, int decode_steps,
                                             RouterObserver* observer = nullptr,
                                             std::vector<int>* tokens = nullptr,
                                             const std::function<void()>& after_prompt = {});

// Same shapes and the same bytes (memcmp), step by step.
bool BitIdentical(const std::vector<std::vector<float>>& a,
                  const std::vector<std::vector<float>>& b);

// A bf16 backend's greedy run against the fp32 CPU reference's, step by step
// up to their first divergence: each step's logits within `rel_tol` of the
// reference's largest magnitude, and where the tokens differ, the
// reference's own margin between the two choices within that tolerance (a
// flipped near-tie). Failures are gtest expectations.
void ExpectGreedyAgrees(const std::vector<std::vector<float>>& ref,
                        const std::vector<int>& ref_tokens,
                        const std::vector<std::vector<float>>& got,
                        const std::vector<int>& got_tokens, int vocab, float rel_tol);

}  // namespace vismoe::testing

#endif  // VISMOE_TESTS_TESTING_GREEDY_DECODE_H_
