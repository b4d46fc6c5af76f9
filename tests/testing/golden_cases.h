// Reading the transformers goldens (tests/fixtures/golden/*_cases.json) in
// tests: the JSON file, and a case's chat turned into an engine request.
#ifndef VISMOE_TESTS_TESTING_GOLDEN_CASES_H_
#define VISMOE_TESTS_TESTING_GOLDEN_CASES_H_

#include <string>

#include "engine/api/request.h"
#include "nlohmann/json.hpp"

namespace vismoe::testing {

// The whole file as text; empty when it is missing.
std::string ReadTextFile(const std::string& path);

// The parsed file; a discarded value when it is missing or not JSON.
nlohmann::json ReadJsonFile(const std::string& path);

// A text-only request of the case's "messages" (each {"role", "content"
// string}), greedy, at most `max_new_tokens` tokens.
GenerateRequest TextRequestFromCase(const nlohmann::json& c, int max_new_tokens);

}  // namespace vismoe::testing

#endif  // VISMOE_TESTS_TESTING_GOLDEN_CASES_H_
