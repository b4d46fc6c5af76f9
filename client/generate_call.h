// One streaming Generate call, measured on the client side.
#ifndef VISMOE_CLIENT_GENERATE_CALL_H_
#define VISMOE_CLIENT_GENERATE_CALL_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "client/channel.h"
#include "grpcpp/support/status.h"
#include "vismoe/v1/inference.grpc.pb.h"

namespace vismoe::client {

// What came back from one call. `status` is OK only when the stream ended
// cleanly with a final message.
struct GenerateOutcome {
  grpc::Status status;
  std::string text;                // concatenated deltas
  std::string reasoning;           // concatenated deltas' reasoning (reasoning models)
  std::vector<int32_t> token_ids;  // concatenated deltas
  bool has_final = false;
  vismoe::v1::FinalResult final_result;
  double ttft_seconds = -1;  // call start -> first delta with token ids; -1 if none
  double total_seconds = 0;  // call start -> stream finished
  // Mean time between tokens after the first: (total - ttft) / (tokens - 1);
  // -1 with fewer than two tokens.
  double tpot_seconds = -1;
};

// Called for each delta as it arrives (on the calling thread).
using DeltaCallback = std::function<void(const vismoe::v1::TokenDelta&)>;

// Sends `request` and reads the stream to its end, bounded by `timeout`
// (deadline). Never throws; a stream that ends without a final message is
// reported as INTERNAL.
GenerateOutcome RunGenerate(vismoe::v1::InferenceService::StubInterface* stub,
                            const ConnectionOptions& options,
                            const vismoe::v1::GenerateRequest& request, absl::Duration timeout,
                            const DeltaCallback& on_delta);

}  // namespace vismoe::client

#endif  // VISMOE_CLIENT_GENERATE_CALL_H_
