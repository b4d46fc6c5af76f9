// Turns a PromptSpec (text + images) into the wire request.
#ifndef VISMOE_CLIENT_REQUEST_BUILDER_H_
#define VISMOE_CLIENT_REQUEST_BUILDER_H_

#include <string>

#include "client/request_set.h"
#include "vismoe/v1/inference.pb.h"

namespace vismoe::client {

// A request with an optional system message and one user message holding the
// images (in order) followed by the prompt text. `sampling` and `policy` are
// copied; spec.max_new_tokens > 0 overrides sampling.max_new_tokens.
vismoe::v1::GenerateRequest BuildGenerateRequest(const PromptSpec& spec,
                                                 const vismoe::v1::SamplingParams& sampling,
                                                 const vismoe::v1::PolicyOverrides& policy,
                                                 const std::string& request_id);

}  // namespace vismoe::client

#endif  // VISMOE_CLIENT_REQUEST_BUILDER_H_
