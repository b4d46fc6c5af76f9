// VismoeServer: assembles the daemon: metrics, gRPC server (optional TLS,
// message size limit, health service, reflection), the optional
// OpenAI-compatible HTTP API, image decoder, validator, scheduler and engine,
// in the start-up order the health checks promise:
//
//   Start()      listen; health NOT_SERVING (overall "" and the service;
//                HTTP /health 503)
//   LoadModel()  Engine::Create (slow), scheduler, attach; health SERVING
//   Shutdown()   health NOT_SERVING; stop accepting; drain in-flight requests
//                (both APIs) up to drain_timeout, then cancel the rest
//                (UNAVAILABLE "server shutting down"); stop the gRPC server
//                and the HTTP listener
//
// Thread safety: Shutdown may be called from any thread (a signal thread),
// also while LoadModel runs; Wait blocks until Shutdown completed.
// Ownership: owns everything it builds; tests may inject the engine factory.
#ifndef VISMOE_SERVER_SERVER_H_
#define VISMOE_SERVER_SERVER_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "engine/api/engine.h"
#include "grpcpp/grpcpp.h"
#include "server/http_api.h"
#include "server/image_decoder.h"
#include "server/inference_service.h"
#include "server/metrics.h"
#include "server/request_validator.h"
#include "server/scheduler.h"
#include "server/server_options.h"

namespace vismoe::server {

class VismoeServer {
 public:
  using EngineFactory =
      std::function<absl::StatusOr<std::unique_ptr<Engine>>(const EngineOptions&)>;

  // gRPC service name used by the health service.
  static constexpr const char* kServiceName = "vismoe.v1.InferenceService";

  // Builds and starts the gRPC server; the model is NOT loaded yet.
  // `factory` null = Engine::Create. Fails when a port cannot be bound or a
  // TLS file cannot be read.
  static absl::StatusOr<std::unique_ptr<VismoeServer>> Start(const ServerOptions& options,
                                                             EngineFactory factory = nullptr);
  ~VismoeServer();  // Shutdown() if not done yet
  VismoeServer(const VismoeServer&) = delete;
  VismoeServer& operator=(const VismoeServer&) = delete;

  // Loads the engine and starts serving. Cancelled if Shutdown() came first.
  absl::Status LoadModel();

  // Idempotent; see the class comment.
  void Shutdown();
  // Blocks until Shutdown() has finished.
  void Wait();

  int port() const { return port_; }  // bound gRPC port
  // Bound HTTP API port; 0 without --http_listen.
  int http_port() const { return http_ != nullptr ? http_->port() : 0; }
  int metrics_port() const { return metrics_->metrics_port(); }
  ServerMetrics* metrics() const { return metrics_.get(); }
  Scheduler* scheduler() const;  // null until LoadModel succeeded
  Engine* engine() const;        // null until LoadModel succeeded

 private:
  VismoeServer(const ServerOptions& options, EngineFactory factory);
  void SetServing(bool serving);

  const ServerOptions options_;
  const EngineFactory factory_;
  std::unique_ptr<ServerMetrics> metrics_;
  std::unique_ptr<ImageDecoder> decoder_;
  std::unique_ptr<RequestValidator> validator_;
  std::unique_ptr<InferenceServiceImpl> service_;
  std::unique_ptr<grpc::Server> grpc_server_;
  std::unique_ptr<HttpApi> http_;  // null without --http_listen
  int port_ = 0;

  mutable absl::Mutex mu_;
  std::unique_ptr<Engine> engine_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Scheduler> scheduler_ ABSL_GUARDED_BY(mu_);
  bool shutdown_started_ ABSL_GUARDED_BY(mu_) = false;
  bool shutdown_done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Mutex load_mu_;  // serialises LoadModel against Shutdown's teardown
};

}  // namespace vismoe::server

#endif  // VISMOE_SERVER_SERVER_H_
