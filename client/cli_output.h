// What vismoe-cli prints after a Generate call: the stats block and the
// --json object.
#ifndef VISMOE_CLIENT_CLI_OUTPUT_H_
#define VISMOE_CLIENT_CLI_OUTPUT_H_

#include <string>

#include "client/generate_call.h"
#include "nlohmann/json.hpp"
#include "vismoe/v1/inference.pb.h"

namespace vismoe::client {

// "eos", "length", "stop_string", "cancelled" or "unspecified".
std::string FinishReasonName(vismoe::v1::FinishReason reason);

// Multi-line human summary of the final message and client-side timings:
// finish reason, usage, timings, offload counters.
std::string FormatStats(const GenerateOutcome& outcome);

// {"text", "token_ids", "finish_reason", "request_id", "usage": {...},
//  "timings": {... server ..., "client_ttft_seconds", "client_total_seconds"},
//  "offload": {...}}. REQUIRES: outcome.has_final.
nlohmann::json OutcomeToJson(const GenerateOutcome& outcome);

// ModelInfo as a JSON object (field names as in the proto).
nlohmann::json ModelInfoToJson(const vismoe::v1::ModelInfo& info);

// ModelInfo as aligned "key: value" lines.
std::string FormatModelInfo(const vismoe::v1::ModelInfo& info);

}  // namespace vismoe::client

#endif  // VISMOE_CLIENT_CLI_OUTPUT_H_
