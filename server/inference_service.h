// InferenceServiceImpl: the gRPC face of the daemon (callback API). It
// authenticates, validates, converts protos, and hands the work to the
// Scheduler; it never runs model code on a gRPC thread.
//
// Generate streams TokenDelta messages and then one FinalResult, with flow
// control: one write in flight at a time; deltas produced meanwhile wait in a
// small buffer, and beyond kMaxPendingDeltas they are coalesced into the last
// one, so a slow reader never blocks the engine and memory stays bounded by
// the request's own output.
//
// Generate is served through a generic callback service (generate_service()),
// as a bidi stream on the wire: gRPC's server-streaming handler reads one
// message and silently drops any other, while a request must be exactly one
// message followed by the client's half-close. A second message is
// INVALID_ARGUMENT and nothing is started; the work starts at the half-close,
// which standard clients send with the message itself.
//
// Until Attach() is called (the model is loading) every call gets
// UNAVAILABLE "model is loading".
//
// Both methods receive their request as raw bytes and parse it themselves
// (server/request_bytes.h), so an unparsable body is INVALID_ARGUMENT naming
// the problem and is counted in vismoe_requests_total; replies are sent as
// serialized messages of the proto's types.
//
// Thread safety: gRPC calls the methods concurrently; Attach may race them.
// Ownership: borrows everything passed to Attach and the metrics; they must
// outlive the grpc::Server that serves this service.
#ifndef VISMOE_SERVER_INFERENCE_SERVICE_H_
#define VISMOE_SERVER_INFERENCE_SERVICE_H_

#include <atomic>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "engine/api/engine.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/grpcpp.h"
#include "server/image_decoder.h"
#include "server/request_validator.h"
#include "server/scheduler.h"
#include "server/serving_backend.h"
#include "vismoe/v1/inference.grpc.pb.h"

namespace vismoe {
class ServerMetrics;
}  // namespace vismoe

namespace vismoe::server {

using RawInferenceService = v1::InferenceService::WithGenericMethod_Generate<
    v1::InferenceService::WithRawCallbackMethod_GetModelInfo<v1::InferenceService::Service>>;

class InferenceServiceImpl;

// Serves every method gRPC has no registered handler for: Generate (see
// InferenceServiceImpl), and UNIMPLEMENTED for any other name.
class GenerateService final : public grpc::CallbackGenericService {
 public:
  explicit GenerateService(InferenceServiceImpl* service) : service_(service) {}
  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* ctx) override;

 private:
  InferenceServiceImpl* const service_;
};

class InferenceServiceImpl final : public RawInferenceService {
 public:
  static constexpr int kMaxPendingDeltas = 8;

  struct Options {
    std::string api_key;      // "" = no authentication
    v1::ServerLimits limits;  // reported by GetModelInfo
  };

  // The pieces that exist once the model is loaded. All borrowed.
  using Backend = ServingBackend;

  // `metrics` may be null.
  InferenceServiceImpl(const Options& options, ServerMetrics* metrics);

  // REQUIRES: every pointer of `backend` non-null. Called once.
  void Attach(const Backend& backend);

  // The handler of Generate, for ServerBuilder::RegisterCallbackGenericService.
  // Its stream takes one serialized v1::GenerateRequest and carries serialized
  // v1::GenerateResponse messages back.
  grpc::CallbackGenericService* generate_service() { return &generate_service_; }
  static constexpr char kGenerateMethod[] = "/vismoe.v1.InferenceService/Generate";
  // `request`: a serialized v1::GetModelInfoRequest; `response` receives a
  // serialized v1::ModelInfo.
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* context,
                                         const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) override;

  // OK, or UNAUTHENTICATED when an API key is configured and the call's
  // metadata lacks it ("authorization: Bearer <key>" or "x-api-key: <key>").
  absl::Status Authenticate(const grpc::CallbackServerContext& context) const;

  // Returns false while the model is loading.
  bool GetBackend(Backend* backend) const;
  ServerMetrics* metrics() const { return metrics_; }

 private:
  // The ModelInfo reply, or why there is none (auth, loading, bad request).
  absl::StatusOr<v1::ModelInfo> ModelInfoFor(const grpc::CallbackServerContext& context,
                                             const grpc::ByteBuffer& request) const;

  const Options options_;
  ServerMetrics* const metrics_;
  GenerateService generate_service_{this};
  mutable absl::Mutex mu_;
  Backend backend_ ABSL_GUARDED_BY(mu_);
  bool attached_ ABSL_GUARDED_BY(mu_) = false;
};

// Converts the engine result into the final stream message.
v1::FinalResult ToFinalResult(const GenerateResult& result, double queue_seconds,
                              double total_seconds, const std::string& request_id);

}  // namespace vismoe::server

#endif  // VISMOE_SERVER_INFERENCE_SERVICE_H_
