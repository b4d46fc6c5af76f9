// Sends every item of a VQA set to the server (greedy, short answers) and
// scores the answers.
#ifndef VISMOE_CLIENT_EVAL_RUNNER_H_
#define VISMOE_CLIENT_EVAL_RUNNER_H_

#include <atomic>
#include <cstdio>
#include <vector>

#include "absl/time/time.h"
#include "client/channel.h"
#include "client/eval_report.h"
#include "client/eval_set.h"
#include "vismoe/v1/inference.grpc.pb.h"

namespace vismoe::client {

struct EvalOptions {
  int concurrency = 1;  // requests in flight
  int max_new_tokens = 16;
  absl::Duration request_timeout = absl::Seconds(300);
  vismoe::v1::PolicyOverrides policy;
};

// Returns one outcome per item, in item order. `progress` (may be null) gets
// a live "\r[n/total]" line; `stop` (may be null) skips the remaining items,
// which are then reported as CANCELLED errors.
std::vector<EvalOutcome> RunEval(vismoe::v1::InferenceService::StubInterface* stub,
                                 const ConnectionOptions& connection,
                                 const std::vector<EvalItem>& items, const EvalOptions& options,
                                 std::FILE* progress, const std::atomic<bool>* stop);

}  // namespace vismoe::client

#endif  // VISMOE_CLIENT_EVAL_RUNNER_H_
