#include "server/server.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "server/request_bytes.h"
#include "server/tls_files.h"
#include "spdlog/spdlog.h"

namespace vismoe::server {

VismoeServer::VismoeServer(const ServerOptions& options, EngineFactory factory)
    : options_(options), factory_(std::move(factory)) {}

absl::StatusOr<std::unique_ptr<VismoeServer>> VismoeServer::Start(const ServerOptions& options,
                                                                  EngineFactory factory) {
  std::unique_ptr<VismoeServer> s(new VismoeServer(options, std::move(factory)));
  VISMOE_ASSIGN_OR_RETURN(s->metrics_, ServerMetrics::Create(options.metrics_listen));
  ImageDecoder::Options dec;
  dec.max_encoded_bytes = options.max_image_bytes;
  dec.max_pixels = options.max_image_pixels;
  dec.max_jpeg_scans = options.max_jpeg_scans;
  dec.num_threads = options.decode_threads;
  dec.apply_exif_orientation = options.apply_exif_orientation;
  VISMOE_ASSIGN_OR_RETURN(s->decoder_, ImageDecoder::Create(dec));

  RequestValidator::Options val;
  val.max_images = options.max_images;
  val.max_new_tokens_limit = options.max_new_tokens_limit;
  val.max_stop_strings = options.max_stop_strings;
  val.max_prompt_tokens = options.max_prompt_tokens;
  val.max_prompt_bytes = options.max_prompt_bytes;
  val.allow_special_tokens_in_text = options.allow_special_tokens_in_text;
  val.default_token_compressor = options.token_compressor;
  val.default_keep_ratio = options.keep_ratio;
  val.default_expert_predictor = options.expert_predictor;
  s->validator_ = std::make_unique<RequestValidator>(val, s->decoder_.get());

  InferenceServiceImpl::Options svc;
  svc.api_key = options.api_key;
  svc.limits.set_max_images(options.max_images);
  svc.limits.set_max_image_bytes(options.max_image_bytes);
  svc.limits.set_max_image_pixels(options.max_image_pixels);
  svc.limits.set_max_prompt_tokens(options.max_prompt_tokens);
  svc.limits.set_max_prompt_bytes(options.max_prompt_bytes);
  svc.limits.set_max_new_tokens(options.max_new_tokens_limit);
  svc.limits.set_max_message_bytes(options.max_message_bytes);
  s->service_ = std::make_unique<InferenceServiceImpl>(svc, s->metrics_.get());

  std::shared_ptr<grpc::ServerCredentials> creds;
  if (!options.tls_cert.empty()) {
    grpc::SslServerCredentialsOptions ssl;
    VISMOE_ASSIGN_OR_RETURN(TlsKeyPair files, LoadTlsKeyPair(options.tls_cert, options.tls_key));
    ssl.pem_key_cert_pairs.push_back({std::move(files.private_key), std::move(files.cert_chain)});
    creds = grpc::SslServerCredentials(ssl);
  } else {
    creds = grpc::InsecureServerCredentials();
  }

  InstallProtobufLogRouting();  // before any request is parsed
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen, creds, &s->port_);
  // Two daemons must not share a port silently (gRPC enables SO_REUSEPORT).
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(static_cast<int>(options.max_message_bytes));
  builder.RegisterService(s->service_.get());
  builder.RegisterCallbackGenericService(s->service_->generate_service());
  s->grpc_server_ = builder.BuildAndStart();
  if (s->grpc_server_ == nullptr || s->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.listen, " (address in use or invalid?)"));
  }
  if (!options.http_listen.empty()) {
    HttpApi::Options http;
    http.listen = options.http_listen;
    http.threads = options.http_threads;
    http.api_key = options.api_key;
    http.max_body_bytes = options.max_message_bytes;
    http.default_max_tokens = options.max_new_tokens_limit;
    http.request_timeout = options.http_request_timeout;
    http.model_name = ServedModelName(options);
    VISMOE_ASSIGN_OR_RETURN(s->http_, HttpApi::Start(http, s->metrics_.get()));
  }
  s->SetServing(false);
  spdlog::info("gRPC listening on {} (port {}, {}); health NOT_SERVING until the model is loaded",
               options.listen, s->port_, options.tls_cert.empty() ? "plaintext" : "TLS");
  if (!options.metrics_listen.empty()) {
    spdlog::info("Prometheus metrics on {} (port {})", options.metrics_listen,
                 s->metrics_->metrics_port());
  }
  return s;
}

VismoeServer::~VismoeServer() { Shutdown(); }

void VismoeServer::SetServing(bool serving) {
  if (http_ != nullptr) http_->SetServing(serving);
  if (grpc_server_ == nullptr) return;
  grpc::HealthCheckServiceInterface* health = grpc_server_->GetHealthCheckService();
  if (health == nullptr) return;
  health->SetServingStatus("", serving);
  health->SetServingStatus(kServiceName, serving);
}

absl::Status VismoeServer::LoadModel() {
  absl::MutexLock load_lock(&load_mu_);
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_started_) return absl::CancelledError("server is shutting down");
    if (engine_ != nullptr) return absl::FailedPreconditionError("model already loaded");
  }
  EngineOptions eo;
  eo.model_path = options_.model;
  eo.synthetic_weights = options_.synthetic_weights;
  eo.synthetic_seed = static_cast<uint64_t>(options_.synthetic_seed);
  eo.synthetic_routing = options_.synthetic_routing;
  if (eo.synthetic_weights) {
    spdlog::warn(
        "*** --synthetic_weights: serving RANDOM weights of {}'s config.json shapes (seed {}); "
        "every output is MEANINGLESS. For load tests and benchmarks only. ***",
        options_.model, options_.synthetic_seed);
  }
  eo.backend = options_.backend;
  eo.num_threads = options_.engine_threads;
  eo.gpu_memory_budget_bytes = options_.gpu_memory_budget;
  eo.max_context_tokens = options_.max_context_tokens;
  eo.max_running_sequences = options_.workers;
  eo.max_step_tokens = options_.max_step_tokens;
  eo.kv_cache_tokens = options_.kv_cache_tokens;
  eo.offload.pinned_layers = options_.pinned_layers;
  eo.offload.copy_bandwidth_bytes_per_s = static_cast<double>(options_.copy_bandwidth);
  eo.offload.eviction = options_.eviction;
  eo.offload.miss_policy = options_.miss_policy;
  eo.offload.host_experts = options_.host_experts;
  eo.offload.expert_dtype = options_.expert_dtype;
  eo.offload.host_moe_layers = options_.host_moe_layers;
  eo.offload.prefetch = options_.expert_predictor.empty() ? "none" : options_.expert_predictor;
  eo.offload.preload = options_.preload;
  eo.offload.preload_experts = options_.preload_experts;
  eo.offload.preload_share = options_.preload_share;
  eo.calibration_profile = options_.calibration_profile;
  if (!options_.token_compressor.empty()) eo.compression.kind = options_.token_compressor;
  if (options_.keep_ratio > 0) {
    // As WithKeepRatio (engine/policy/token_compressor.h): alpha follows beta down.
    eo.compression.beta = options_.keep_ratio;
    eo.compression.alpha = std::min(eo.compression.alpha, options_.keep_ratio);
  }
  eo.skipping.kind = options_.expert_skipping;
  eo.skipping.tau_text = static_cast<float>(options_.skip_tau_text);
  eo.skipping.tau_visual = static_cast<float>(options_.skip_tau_visual);
  eo.commit.threshold = static_cast<float>(options_.commit_threshold);
  eo.commit.owa_alpha1 = static_cast<float>(options_.commit_owa_alpha1);
  eo.commit.owa_alpha2 = static_cast<float>(options_.commit_owa_alpha2);
  eo.commit.owa_min_correct = options_.commit_owa_min_correct;
  eo.commit.owa_max_correct = options_.commit_owa_max_correct;
  eo.speculative_execution = options_.speculative_execution;
  eo.stats = metrics_.get();
  spdlog::info("loading model from {}", options_.model);
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<Engine>> engine = factory_ ? factory_(eo) : Engine::Create(eo);
  if (!engine.ok()) {
    return absl::Status(engine.status().code(), absl::StrCat("loading model ", options_.model, ": ",
                                                             engine.status().message()));
  }
  Scheduler::Options so;
  so.max_queue = options_.max_queue;
  so.workers = options_.workers;
  so.preparers = options_.prepare_threads;
  VISMOE_ASSIGN_OR_RETURN(std::unique_ptr<Scheduler> scheduler,
                          Scheduler::Create(so, engine->get(), metrics_.get()));
  const ModelInfo& info = (*engine)->info();
  metrics_->DeclareLayers(info.num_layers);
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_started_) return absl::CancelledError("server is shutting down");
    engine_ = std::move(*engine);
    scheduler_ = std::move(scheduler);
    const ServingBackend backend{engine_.get(), scheduler_.get(), validator_.get(), decoder_.get()};
    service_->Attach(backend);
    if (http_ != nullptr) http_->Attach(backend);
  }
  SetServing(true);
  spdlog::info("model {} ({}, {} layers, {} experts, backend {}) loaded in {}; SERVING",
               info.model_path, info.model_type, info.num_layers, info.num_experts, info.backend,
               absl::FormatDuration(absl::Now() - start));
  return absl::OkStatus();
}

void VismoeServer::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_started_) {
      mu_.Await(absl::Condition(&shutdown_done_));
      return;
    }
    shutdown_started_ = true;
  }
  spdlog::info("shutting down: health NOT_SERVING, draining for up to {}",
               absl::FormatDuration(options_.drain_timeout));
  // Stop admitting before health says NOT_SERVING, so no request accepted
  // after that can slip in. scheduler_ is only set while !shutdown_started_.
  if (Scheduler* s = scheduler(); s != nullptr) s->StopAccepting();
  SetServing(false);
  absl::MutexLock load_lock(&load_mu_);  // waits for a LoadModel in progress
  if (Scheduler* s = scheduler(); s != nullptr) s->Drain(options_.drain_timeout);
  // Every Generate call and chat completion has finished by now; this ends
  // unary calls and closes the listeners, both at once (an idle HTTP
  // connection may take HttpApi::kKeepAliveTimeout to let go).
  std::thread http_stop([this] {
    if (http_ != nullptr) http_->Stop();
  });
  if (grpc_server_ != nullptr) {
    grpc_server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    grpc_server_->Wait();
  }
  http_stop.join();
  spdlog::info("shutdown complete");
  absl::MutexLock lock(&mu_);
  shutdown_done_ = true;
}

void VismoeServer::Wait() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&shutdown_done_));
}

Scheduler* VismoeServer::scheduler() const {
  absl::MutexLock lock(&mu_);
  return scheduler_.get();
}

Engine* VismoeServer::engine() const {
  absl::MutexLock lock(&mu_);
  return engine_.get();
}

}  // namespace vismoe::server
