// Visual question answering sets for the accuracy runner (vismoe-eval).
#ifndef VISMOE_CLIENT_EVAL_SET_H_
#define VISMOE_CLIENT_EVAL_SET_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/jsonl.h"
#include "client/media_type.h"

namespace vismoe::client {

// One question with its reference answer.
struct EvalItem {
  int line = 0;      // line in the source file
  ImageInput image;  // empty bytes for a text-only question
  std::string question;
  std::vector<std::string> choices;  // multiple choice when non-empty
  std::string answer;                // letter or choice text, or free-form answer
  std::string category;              // "default" when absent
};

// Parses records of the form
//   {"image": "a.png", "question": "...", "choices": ["..", ..], "answer": "..",
//    "category": ".."}
// ("image", "choices" and "category" optional). The image path is relative to
// `source` unless absolute. Errors read "<source>:<line>: ...".
absl::StatusOr<std::vector<EvalItem>> ParseEvalRecords(const std::vector<JsonlRecord>& records,
                                                       const std::string& source);

// ReadJsonlFile + ParseEvalRecords.
absl::StatusOr<std::vector<EvalItem>> LoadEvalSet(const std::string& path);

// The prompt sent for `item`: the question, then for multiple choice the
// lettered options and an instruction to answer with the letter; for other
// questions an instruction to answer with a single word or phrase.
std::string BuildEvalPrompt(const EvalItem& item);

}  // namespace vismoe::client

#endif  // VISMOE_CLIENT_EVAL_SET_H_
