#include "client/generate_call.h"

#include <chrono>
#include <memory>

namespace vismoe::client {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

GenerateOutcome RunGenerate(vismoe::v1::InferenceService::StubInterface* stub,
                            const ConnectionOptions& options,
                            const vismoe::v1::GenerateRequest& request, absl::Duration timeout,
                            const DeltaCallback& on_delta) {
  GenerateOutcome out;
  grpc::ClientContext context;
  PrepareContext(options, timeout, &context);
  const auto start = std::chrono::steady_clock::now();
  std::unique_ptr<grpc::ClientReaderInterface<vismoe::v1::GenerateResponse>> reader =
      stub->Generate(&context, request);
  vismoe::v1::GenerateResponse response;
  bool extra_after_final = false;
  while (reader->Read(&response)) {
    if (response.has_delta()) {
      const vismoe::v1::TokenDelta& delta = response.delta();
      if (out.ttft_seconds < 0 && delta.token_ids_size() > 0)
        out.ttft_seconds = SecondsSince(start);
      out.text += delta.text();
      out.reasoning += delta.reasoning();
      out.token_ids.insert(out.token_ids.end(), delta.token_ids().begin(), delta.token_ids().end());
      if (out.has_final) extra_after_final = true;
      if (on_delta) on_delta(delta);
    } else if (response.has_final()) {
      if (out.has_final) extra_after_final = true;
      out.has_final = true;
      out.final_result = response.final();
    }
  }
  out.status = reader->Finish();
  out.total_seconds = SecondsSince(start);
  if (out.status.ok() && !out.has_final) {
    out.status = grpc::Status(grpc::StatusCode::INTERNAL,
                              "stream ended without a final message (protocol violation)");
  } else if (out.status.ok() && extra_after_final) {
    out.status = grpc::Status(grpc::StatusCode::INTERNAL,
                              "server sent messages after the final message (protocol violation)");
  }
  if (out.ttft_seconds >= 0 && out.token_ids.size() >= 2) {
    out.tpot_seconds =
        (out.total_seconds - out.ttft_seconds) / static_cast<double>(out.token_ids.size() - 1);
  }
  return out;
}

}  // namespace vismoe::client
