// The request sets the load generator replays: a JSONL file, one request a
// line, or the built-in synthetic set (generated images, fixed prompts).
#ifndef VISMOE_CLIENT_REQUEST_SET_H_
#define VISMOE_CLIENT_REQUEST_SET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/jsonl.h"
#include "client/media_type.h"

namespace vismoe::client {

// One request to send: a user prompt with images in front of the text.
struct PromptSpec {
  std::string system;              // optional system message
  std::string prompt;              // user text
  std::vector<ImageInput> images;  // sent before the text, in order
  int max_new_tokens = 0;          // 0 = the runner's default
};

// Parses records of the form
//   {"prompt": "...", "images": ["a.png", ...], "max_new_tokens": 32, "system": "..."}
// ("images", "max_new_tokens" and "system" optional). Image paths are relative
// to `source` (the JSONL file) unless absolute; images are read now so that a
// missing file fails before any request is sent. Errors read
// "<source>:<line>: <field>: ...".
absl::StatusOr<std::vector<PromptSpec>> ParseRequestRecords(const std::vector<JsonlRecord>& records,
                                                            const std::string& source);

// ReadJsonlFile + ParseRequestRecords.
absl::StatusOr<std::vector<PromptSpec>> LoadRequestSet(const std::string& path);

// The built-in set: `count` requests cycling through a few prompts, each with
// zero, one or two generated PNG images of varied sizes (width and height
// between 64 and 256, multiples of 32). Deterministic for a given `seed`.
std::vector<PromptSpec> MakeSyntheticRequestSet(int count, uint64_t seed);

}  // namespace vismoe::client

#endif  // VISMOE_CLIENT_REQUEST_SET_H_
