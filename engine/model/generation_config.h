// The end-of-sequence ids of a checkpoint: generation_config.json's
// eos_token_id, else config.json's (top level or text_config). An int or a
// list of ints.
// Thread safety: a free function.
#ifndef VISMOE_ENGINE_MODEL_GENERATION_CONFIG_H_
#define VISMOE_ENGINE_MODEL_GENERATION_CONFIG_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace vismoe {

// Absent everywhere: empty (generation then stops on length). InvalidArgument
// naming the file for a file that is not a JSON object or an ill-typed field.
absl::StatusOr<std::vector<int>> LoadEosIds(const std::string& dir);

}  // namespace vismoe

#endif  // VISMOE_ENGINE_MODEL_GENERATION_CONFIG_H_
