// Fuzzes the request path from raw protobuf bytes (server/request_bytes.h,
// server/request_validator.h): the bytes, split into two gRPC slices, are
// parsed as a vismoe.v1.GenerateRequest and validated with the server's
// default options and image limits, as InferenceService does for each call.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "server/request_bytes.h"
#include "spdlog/spdlog.h"
#include "tests/fuzz/default_validator.h"
#include "vismoe/v1/inference.pb.h"

namespace vismoe::server {
namespace {

void Fuzz(const char* data, size_t size) {
  // Two slices, so messages that straddle a slice boundary are read too.
  const size_t half = size / 2;
  grpc::Slice slices[2] = {grpc::Slice(data, half), grpc::Slice(data + half, size - half)};
  const grpc::ByteBuffer bytes(slices, 2);
  v1::GenerateRequest proto;
  if (!ParseRequestBytes(bytes, &proto).ok()) return;
  absl::StatusOr<ValidatedRequest> validated = DefaultValidator().Validate(proto);
  if (!validated.ok()) {
    // Every refusal is InvalidArgument (the service maps it to the client's fault).
    if (!absl::IsInvalidArgument(validated.status())) std::abort();
    return;
  }
  const GenerateRequest& req = validated->request;
  if (req.messages.empty() || req.sampling.max_new_tokens <= 0) std::abort();
  for (const ChatMessage& m : req.messages) {
    for (const ContentPart& p : m.content) {
      if (p.kind == ContentPart::Kind::kImage &&
          (p.image_index < 0 || p.image_index >= static_cast<int>(validated->image_data.size()))) {
        std::abort();
      }
    }
  }
}

}  // namespace
}  // namespace vismoe::server

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  vismoe::server::InstallProtobufLogRouting();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  vismoe::server::Fuzz(reinterpret_cast<const char*>(data), size);
  return 0;
}
