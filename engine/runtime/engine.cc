// Engine implementation (LocalEngine, engine/runtime/local_engine.h): start-up
// and the request path; a request's policy overrides are in
// local_engine_requests.cc. One model, its requests batched by a step thread
// (engine/runtime/batch_loop.h), on the backend the registry picks (engine/backends/registry.h):
// its DecoderOps under the one decoder of the family, its VisionOps under the
// one vision tower, and its offload device. Tokenizer, image preprocessing, sampling and the
// policies run on the host either way; a backend whose decoder reads experts from device memory
// always runs behind the offload provider (a plan that pins every MoE layer when no budget is
// given).
#include "engine/api/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/arch/deepseek_vl2_vision.h"
#include "engine/arch/qwen3_vl_moe.h"
#include "engine/arch/qwen3_vl_vision.h"
#include "engine/arch/text_decoder.h"
#include "engine/arch/vision_tower.h"
#include "engine/backend/backend.h"
#include "engine/backend/kv_pool.h"
#include "engine/backends/registry.h"
#include "engine/core/policy_names.h"
#include "engine/core/status_macros.h"
#include "engine/core/thread_pool.h"
#include "engine/model/chat_template.h"
#include "engine/model/checkpoint.h"
#include "engine/model/generation_config.h"
#include "engine/model/image_preprocessor.h"
#include "engine/model/model_config.h"
#include "engine/model/synthetic_weights.h"
#include "engine/model/tokenizer.h"
#include "engine/offload/expert_dtype.h"
#include "engine/offload/host_store_mode.h"
#include "engine/offload/memory_plan.h"
#include "engine/offload/offload_expert_provider.h"
#include "engine/offload/preload_set.h"
#include "engine/offload/resident_expert_provider.h"
#include "engine/policy/calibration_profile.h"
#include "engine/policy/compression_session.h"
#include "engine/policy/expert_predictor_factory.h"
#include "engine/policy/sequence_preload.h"
#include "engine/policy/token_compressor.h"
#include "engine/runtime/batch_loop.h"
#include "engine/runtime/local_engine.h"
#include "engine/runtime/local_prepared.h"
#include "engine/runtime/model_runner.h"
#include "engine/runtime/prompt_builder.h"
#include "engine/runtime/sampler.h"
#include "engine/runtime/sequence.h"
#include "engine/runtime/step_scheduler.h"
#include "spdlog/spdlog.h"

namespace vismoe {

const char* FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kEos:
      return "eos";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kStopString:
      return "stop";
    case FinishReason::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

namespace {

using Clock = std::chrono::steady_clock;

// Tokens a KV cache block holds (the pool's unit of admission and growth).
constexpr int64_t kKvBlockTokens = KvPool::kDefaultBlockTokens;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

absl::Status CheckOptions(const EngineOptions& options) {
  if (options.max_context_tokens < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_context_tokens must be >= 2, got ", options.max_context_tokens));
  }
  VISMOE_RETURN_IF_ERROR(CheckStepLimits({options.max_running_sequences, options.max_step_tokens}));
  VISMOE_RETURN_IF_ERROR(ParseExpertDType(options.offload.expert_dtype).status());
  if (options.kv_cache_tokens != 0 && options.kv_cache_tokens < options.max_context_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kv_cache_tokens (", options.kv_cache_tokens, ") must be 0 or >= max_context_tokens (",
        options.max_context_tokens, "), so that one full-length sequence fits"));
  }
  if (options.num_threads < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_threads must be >= 0 (0 = all cores), got ", options.num_threads));
  }
  // Checked here too: without a budget there is no offload provider to
  // refuse them (and nothing to preload).
  VISMOE_RETURN_IF_ERROR(CheckPreloadOptions(options.offload));
  VISMOE_RETURN_IF_ERROR(CheckExpertSkippingOptions(options.skipping, SkipOptionNames{}));
  return CheckCommitMissOptions(options.offload.miss_policy, options.commit, CommitOptionNames{});
}

// The calibration profile of the options, checked against the model; none
// when the options name none.
absl::StatusOr<std::optional<CalibrationProfile>> LoadProfile(const EngineOptions& options,
                                                              const ModelConfig& config) {
  if (options.calibration_profile.empty()) return std::nullopt;
  // Load's errors name the file and field; a profile for another model is
  // reported as that before its other fields are read.
  VISMOE_ASSIGN_OR_RETURN(CalibrationProfile profile,
                          CalibrationProfile::Load(options.calibration_profile, &config));
  spdlog::info("engine: calibration profile {} (mlp-lookahead {}, default vectors {})",
               options.calibration_profile, profile.mlp.has_value() ? "trained" : "absent",
               profile.default_vectors.empty() ? "absent" : "present");
  return profile;
}

// An end token outside the vocabulary can never be sampled: the model would
// never stop at its real end.
absl::Status CheckEosIds(const std::vector<int>& ids, int vocab_size, const std::string& where) {
  for (int id : ids) {
    if (id < 0 || id >= vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " ", id, " is outside the vocabulary [0, ", vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Engine>> LocalEngine::Create(const EngineOptions& options) {
  VISMOE_RETURN_IF_ERROR(CheckOptions(options));
  VISMOE_ASSIGN_OR_RETURN(BackendChoice choice, ChooseBackend(options.backend));
  if (options.backend != "cpu") spdlog::info("engine: {}", choice.line);
  std::unique_ptr<LocalEngine> e(new LocalEngine());
  e->options_ = options;
  VISMOE_RETURN_IF_ERROR(e->LoadFiles());
  absl::Status runs = choice.backend->Runs(e->config_);
  if (runs.ok()) {
    // "auto" takes a path that has run on real hardware; a named backend
    // runs it anyway, and says so.
    absl::Status verified = choice.backend->Verified(e->config_);
    if (options.offload.expert_dtype == "fp8" &&
        std::string_view(choice.backend->name()) != "cpu") {
      // FP8 experts widened before their GEMMs (as an FP8 checkpoint's are).
      verified = absl::FailedPreconditionError(absl::StrCat(
          verified.ok() ? "" : absl::StrCat(verified.message(), "; "), "expert_dtype=fp8 on the ",
          choice.backend->name(), " backend has not run on a GPU yet"));
    }
    if (!verified.ok()) {
      if (options.backend == "auto") {
        runs = verified;
      } else {
        spdlog::warn("engine: {}; running it as --backend={} asks", std::string(verified.message()),
                     options.backend);
      }
    }
  }
  if (!runs.ok()) {
    if (options.backend != "auto") return runs;
    // "auto" means the best backend that runs the model.
    VISMOE_ASSIGN_OR_RETURN(choice, ChooseBackend("cpu"));
    spdlog::info("engine: {}; running on the cpu backend", std::string(runs.message()));
  }
  VISMOE_ASSIGN_OR_RETURN(const int64_t activation_bytes, e->LoadModel(*choice.backend));
  VISMOE_ASSIGN_OR_RETURN(const std::optional<CalibrationProfile> profile,
                          LoadProfile(options, e->config_));
  VISMOE_RETURN_IF_ERROR(e->SetUpExperts(*choice.backend, activation_bytes,
                                         profile.has_value() ? &*profile : nullptr));
  VISMOE_RETURN_IF_ERROR(e->SetUpCompression());
  e->LogPreload();
  if (profile.has_value()) e->skip_calibration_ = profile->expert_skipping;
  // The default rule must resolve now (a start-up error, not every request's).
  VISMOE_ASSIGN_OR_RETURN(
      const std::optional<ExpertSkipping> skipping,
      ResolveExpertSkipping(options.skipping,
                            e->skip_calibration_ ? &*e->skip_calibration_ : nullptr,
                            e->config_.text.num_hidden_layers, SkipOptionNames{}));
  if (skipping.has_value()) {
    spdlog::info("engine: expert skipping dual-threshold (tau_text {}, tau_visual {}, alpha {})",
                 skipping->tau_text, skipping->tau_visual,
                 skipping->alpha.empty() ? "1 (no calibration)" : "calibrated");
  }
  if (profile.has_value()) e->commit_calibration_ = profile->commit_miss;
  VISMOE_ASSIGN_OR_RETURN(
      const std::optional<CommitMissPolicy> commit,
      ResolveCommitMiss(options.offload.miss_policy, options.commit,
                        e->commit_calibration_ ? &*e->commit_calibration_ : nullptr,
                        e->config_.text.num_experts_per_tok, CommitOptionNames{}));
  VISMOE_RETURN_IF_ERROR(e->CheckCommitHasPredictor(commit, "miss_policy"));
  if (commit.has_value()) {
    spdlog::info("engine: miss policy commit (certainty threshold {}, OWA {})", commit->threshold,
                 commit->owa()
                     ? absl::StrCat("alpha1 ", commit->owa_alpha1, ", alpha2 ", commit->owa_alpha2,
                                    ", trigger [", commit->owa_min_correct, ", ",
                                    commit->owa_max_correct, "]")
                     : std::string("off"));
  }
  VISMOE_RETURN_IF_ERROR(e->SetUpSpeculation(profile.has_value() ? &*profile : nullptr));
  e->FillInfo();
  e->StartLoop();
  return std::unique_ptr<Engine>(std::move(e));
}

absl::Status LocalEngine::LoadFiles() {
  const std::string& dir = options_.model_path;
  VISMOE_ASSIGN_OR_RETURN(config_, ModelConfig::Load(dir));
  const int max_positions = config_.text.max_position_embeddings;
  if (max_positions > 0 && options_.max_context_tokens > max_positions) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_context_tokens (", options_.max_context_tokens,
                     ") exceeds the model's max_position_embeddings (", max_positions, ", ", dir,
                     "/config.json)"));
  }
  VISMOE_ASSIGN_OR_RETURN(eos_ids_, LoadEosIds(dir));
  VISMOE_RETURN_IF_ERROR(CheckEosIds(eos_ids_, config_.text.vocab_size,
                                     dir + "/generation_config.json: eos_token_id"));
  pool_ = std::make_unique<ThreadPool>(options_.num_threads);
  if (options_.synthetic_weights) {
    VISMOE_ASSIGN_OR_RETURN(const SyntheticRouting routing,
                            ParseSyntheticRouting(options_.synthetic_routing));
    VISMOE_ASSIGN_OR_RETURN(checkpoint_,
                            SynthesizeCheckpoint(config_, options_.synthetic_seed, pool_.get(),
                                                 absl::StrCat("synthetic:", dir), routing));
  } else {
    VISMOE_ASSIGN_OR_RETURN(checkpoint_, Checkpoint::Open(dir));
  }
  VISMOE_ASSIGN_OR_RETURN(tokenizer_, Tokenizer::Load(dir));
  if (config_.model_type == "gpt_oss") {
    // Its replies are harmony messages: reasoning apart from the answer.
    harmony_ = HarmonyTokens::Find(*tokenizer_);
    if (harmony_.has_value()) spdlog::info("engine: harmony replies (reasoning apart)");
  }
  if (config_.vl2_vision.has_value()) return LoadVl2Prompting();
  VISMOE_ASSIGN_OR_RETURN(ChatTemplate tmpl, ChatTemplate::Load(dir, *tokenizer_, config_));
  spdlog::info("engine: chat template from {}", tmpl.source());
  template_ = std::make_unique<ChatTemplate>(std::move(tmpl));
  if (config_.has_vision) {
    VISMOE_ASSIGN_OR_RETURN(ImagePreprocessor pre, ImagePreprocessor::Create(dir));
    preprocessor_ = std::make_unique<ImagePreprocessor>(std::move(pre));
  }
  prompts_ = std::make_unique<PromptBuilder>(config_, tokenizer_.get(), template_.get(),
                                             preprocessor_.get(), options_.max_context_tokens);
  return absl::OkStatus();
}

// DeepSeek-VL2 ships no chat template and (often) no generation_config: its
// conversation format and end token are the published processor's.
absl::Status LocalEngine::LoadVl2Prompting() {
  const std::string& dir = options_.model_path;
  absl::StatusOr<Vl2SpecialIds> ids = Vl2SpecialIds::From(*tokenizer_);
  if (!ids.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, "/tokenizer.json: ", ids.status().message(), " (DeepSeek-VL2 needs it)"));
  }
  config_.image_token_id = ids->image;
  if (eos_ids_.empty()) eos_ids_ = {ids->eos};
  VISMOE_RETURN_IF_ERROR(CheckEosIds({ids->eos, ids->image, ids->bos}, config_.text.vocab_size,
                                     dir + "/tokenizer.json: the end, <image> or BOS token"));
  spdlog::info("engine: DeepSeek-VL2 conversation format (image token {}, end token {})",
               ids->image, eos_ids_.front());
  prompts_ = std::make_unique<PromptBuilder>(config_, tokenizer_.get(), nullptr, nullptr,
                                             options_.max_context_tokens, *ids);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> LocalEngine::LoadModel(const Backend& backend) {
  BackendOptions bo;
  bo.pool = pool_.get();
  bo.max_tokens_per_step =
      MaxStepRows(StepLimits{options_.max_running_sequences, options_.max_step_tokens},
                  options_.max_context_tokens, KvTokens());
  bo.max_prompt_tokens = options_.max_context_tokens;
  bo.device_op_timing = options_.device_op_timing;
  bo.stats = options_.stats;
  VISMOE_ASSIGN_OR_RETURN(const std::optional<DType> expert_dtype,
                          ParseExpertDType(options_.offload.expert_dtype));
  bo.fp8_experts = expert_dtype == DType::kF8E4M3;
  // Device memory beyond weights and KV cache (0 on the host); the towers'
  // weights are already in the plan's resident bytes (every non-expert tensor).
  int64_t activation_bytes =
      options_.offload.activation_bytes + backend.DecoderActivationBytes(config_, bo);
  if (config_.vl2_vision.has_value()) {
    // Its tower runs on the host's ops whatever the backend (the CUDA backend
    // has no SigLIP tower yet; its language model runs on either).
    VISMOE_ASSIGN_OR_RETURN(
        vision_, DeepseekVl2Vision::Create(*config_.vl2_vision, *checkpoint_, pool_.get()));
  } else if (config_.has_vision) {
    VISMOE_ASSIGN_OR_RETURN(std::unique_ptr<VisionOps> vision_ops,
                            backend.CreateVisionOps(config_, *checkpoint_, bo));
    VISMOE_ASSIGN_OR_RETURN(vision_, Qwen3VlVisionModel::Create(config_, std::move(vision_ops)));
    activation_bytes += vision_->device_scratch_bytes();
  }
  VISMOE_ASSIGN_OR_RETURN(std::unique_ptr<DecoderOps> ops,
                          backend.CreateDecoderOps(config_, *checkpoint_, bo));
  VISMOE_ASSIGN_OR_RETURN(model_, Qwen3VlMoeModel::Create(config_, std::move(ops)));
  VISMOE_ASSIGN_OR_RETURN(kv_pool_,
                          model_->CreateKvPool(KvTokens() / kKvBlockTokens, kKvBlockTokens));
  VISMOE_ASSIGN_OR_RETURN(device_parts_, backend.CreateOffloadDevice(bo));
  if (expert_dtype.has_value() && config_.text.clamped_swiglu.has_value()) {
    // Quantising at load splits gate_up into halves; GPT-OSS interleaves them.
    return absl::InvalidArgumentError(
        absl::StrCat("expert_dtype=fp8 is not supported for ", config_.model_type, " yet"));
  }
  if (expert_dtype.has_value()) device_parts_.expert_dtype = expert_dtype;
  VISMOE_ASSIGN_OR_RETURN(experts_,
                          ResidentExpertProvider::Create(*checkpoint_, config_.text,
                                                         Qwen3VlMoeModel::Experts(config_)));
  if (options_.stats != nullptr) options_.stats->SetMemoryRegion("kv_cache", kv_pool_->bytes());
  return activation_bytes;
}

absl::Status LocalEngine::SetUpExperts(const Backend& backend, int64_t activation_bytes,
                                       const CalibrationProfile* profile) {
  provider_ = experts_.get();
  // Built (and so validated) even when everything is resident, where it is unused.
  VISMOE_ASSIGN_OR_RETURN(std::unique_ptr<ExpertPredictor> predictor,
                          MakeExpertPredictor(options_.offload.prefetch, config_, *checkpoint_,
                                              options_.offload, profile));
  // A decoder that reads experts from device memory only always runs behind
  // the offload provider; without a budget, one that holds every expert.
  // Experts quantised at load live in the offload provider's memory, as
  // everything-pinned when there is no budget.
  const bool quantised = device_parts_.expert_dtype == DType::kF8E4M3;
  if (options_.gpu_memory_budget_bytes <= 0 && !backend.experts_in_device_memory() && !quantised) {
    if (options_.offload.host_moe_layers > 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "host_moe_layers=", options_.offload.host_moe_layers,
          " needs a GPU memory budget (gpu_memory_budget): without one every expert is resident "
          "and none is computed on the host"));
    }
    // Resident: every expert lookup is a hit (the offload provider reports its own).
    experts_->set_stats(options_.stats);
    return absl::OkStatus();
  }
  VISMOE_ASSIGN_OR_RETURN(ModelSizes sizes, MeasureModelSizes(*checkpoint_, config_.text,
                                                              Qwen3VlMoeModel::Experts(config_)));
  if (quantised && !sizes.moe_layers.empty()) {  // the plan counts packed FP8 experts
    VISMOE_ASSIGN_OR_RETURN(sizes.expert_bytes,
                            PackedExpertBytes(*experts_, sizes.moe_layers[0], DType::kF8E4M3));
  }
  MemoryPlanOptions po;
  po.budget_bytes = options_.gpu_memory_budget_bytes;
  po.pinned_layers = options_.offload.pinned_layers;
  po.activation_bytes = activation_bytes;
  po.kv_cache_bytes = kv_pool_->bytes();
  if (po.pinned_layers == -1 && profile != nullptr && !profile->pinned.cost.empty()) {
    po.profile = profile->pinned;  // Eq. 10 from the calibrated costs
  }
  if (po.budget_bytes <= 0) {
    po.budget_bytes =
        po.activation_bytes + po.kv_cache_bytes + sizes.resident_bytes +
        sizes.expert_bytes * sizes.num_experts * static_cast<int64_t>(sizes.moe_layers.size());
  }
  VISMOE_ASSIGN_OR_RETURN(MemoryPlan plan, MakeMemoryPlan(sizes, po));
  const OffloadDevice device{device_parts_.host_allocator.get(),
                             device_parts_.device_allocator.get(), device_parts_.copy.get(),
                             device_parts_.expert_dtype, HostMemoryAvailable()};
  VISMOE_ASSIGN_OR_RETURN(
      offload_, OffloadExpertProvider::Create(*experts_, config_.text, plan, options_.offload,
                                              options_.stats, std::move(predictor), device));
  // With every MoE layer pinned nothing is ever prefetched: feeding the
  // predictor would only bring each layer's rows to the host.
  predictor_ = plan.offloaded_layer_ids.empty() ? nullptr : offload_->observer();
  provider_ = offload_.get();
  if (options_.gpu_memory_budget_bytes > 0) {
    compress_layer_ = CompressionLayer(config_.text, plan.pinned_layers);
  }
  return absl::OkStatus();
}

// Without a budget, compression runs after about a fifth of the MoE layers
// (the paper pins 10 of Qwen3-VL's 48), or as many as the options say.
absl::Status LocalEngine::SetUpCompression() {
  VISMOE_RETURN_IF_ERROR(MakeTokenCompressor(options_.compression).status());
  if (options_.gpu_memory_budget_bytes <= 0) {
    int pinned = options_.compression_pinned_layers;
    int moe_layers = 0;
    for (int l = 0; l < config_.text.num_hidden_layers; ++l) {
      moe_layers += config_.text.IsMoeLayer(l) ? 1 : 0;
    }
    if (pinned < 0) pinned = std::max(1, (moe_layers + 2) / 5);
    compress_layer_ = CompressionLayer(config_.text, pinned);
  }
  // A default that cannot work here fails the start, not every request.
  return CheckCompressionRouting(options_.compression, "token_compressor");
}

absl::Status LocalEngine::CheckCompressionRouting(const TokenCompressorOptions& co,
                                                  absl::string_view setting) const {
  VISMOE_ASSIGN_OR_RETURN(std::unique_ptr<TokenCompressor> compressor, MakeTokenCompressor(co));
  if (!compressor->needs_routing()) return absl::OkStatus();
  for (int l = 0; l < compress_layer_; ++l) {
    if (config_.text.IsMoeLayer(l)) return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      setting, " \"", co.kind,
      "\" chooses tokens by the routing of the pinned MoE layers before it, and this server pins "
      "none: pin one (pinned_layers >= 1, or a calibration profile whose plan pins one) or choose "
      "saliency or random"));
}

void LocalEngine::FillInfo() {
  ModelInfo& i = info_;
  i.model_type = config_.model_type;
  i.model_path = options_.model_path;
  i.backend = model_->backend();
  i.num_layers = config_.text.num_hidden_layers;
  i.num_experts = config_.text.num_experts;
  i.experts_per_token = config_.text.num_experts_per_tok;
  i.hidden_size = config_.text.hidden_size;
  i.vocab_size = config_.text.vocab_size;
  i.max_context_tokens = options_.max_context_tokens;
  i.has_vision = config_.has_vision;
  if (offload_ != nullptr) {
    i.slab_bytes = offload_->plan().expert_bytes;
    i.num_slabs = offload_->plan().num_slabs;
    i.pinned_layers = offload_->plan().pinned_layers;
  }
  spdlog::info("engine: loaded {} ({} layers, {} experts top-{}) from {}", i.model_type,
               i.num_layers, i.num_experts, i.experts_per_token, i.model_path);
}

absl::Status LocalEngine::SetUpSpeculation(const CalibrationProfile* profile) {
  if (!options_.speculative_execution) return absl::OkStatus();
  if (!model_->supports_speculative_execution()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "speculative_execution runs on the cpu backend only (in the decode thread's copy "
        "waits); the ",
        model_->backend(), " backend has no side stream for it yet"));
  }
  SpeculativeExecution s;
  s.hidden_size = config_.text.hidden_size;
  if (profile != nullptr) s.default_vectors = profile->default_vectors;
  VISMOE_RETURN_IF_ERROR(
      ValidateSpeculativeExecution(s, config_.text.num_hidden_layers, "calibration_profile"));
  const bool offloaded = offload_ != nullptr && !offload_->plan().offloaded_layer_ids.empty();
  spdlog::info(
      "engine: speculative execution on (predicted input: quasi-hidden state, default "
      "vectors {}){}",
      s.default_vectors.empty() ? "zero: no calibration profile" : "from the profile",
      offloaded ? "" : "; every expert is resident, so nothing is computed ahead");
  speculative_ = std::move(s);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<PreparedRequest>> LocalEngine::Prepare(
    const GenerateRequest& request) {
  const Clock::time_point start = Clock::now();
  VISMOE_RETURN_IF_ERROR(CheckRequest(request));
  VISMOE_ASSIGN_OR_RETURN(Prompt prompt, prompts_->Build(request));
  VISMOE_ASSIGN_OR_RETURN(TokenCompressorOptions co, RequestCompression(request));
  VISMOE_ASSIGN_OR_RETURN(std::optional<ExpertSkipping> skipping, RequestSkipping(request));
  VISMOE_ASSIGN_OR_RETURN(std::optional<CommitMissPolicy> commit, RequestCommit(request));
  GenerateRequest kept = request;
  kept.images.clear();  // the patches hold them
  return std::unique_ptr<PreparedRequest>(
      new LocalPrepared(std::move(kept), std::move(prompt), std::move(co), std::move(skipping),
                        std::move(commit), Seconds(start, Clock::now())));
}

int64_t LocalEngine::KvTokens() const {
  const int64_t tokens =
      options_.kv_cache_tokens > 0 ? options_.kv_cache_tokens : options_.max_context_tokens;
  return (tokens + kKvBlockTokens - 1) / kKvBlockTokens * kKvBlockTokens;
}

OffloadStats LocalEngine::TakeStepStats() {
  if (offload_ != nullptr) return offload_->TakeRequestStats();
  OffloadStats s;  // resident: every expert lookup is a hit
  const uint64_t queries = experts_->queries();
  s.cache_queries = queries - last_queries_;
  s.cache_hits = s.cache_queries;
  last_queries_ = queries;
  return s;
}

void LocalEngine::StartLoop() {
  scheduler_ = std::make_unique<StepScheduler>(
      StepLimits{
          options_.max_running_sequences, options_.max_step_tokens,
          config_.text.longrope ? config_.text.longrope->original_max_position_embeddings : 0},
      kv_pool_.get());
  RunnerParts parts;
  parts.model = model_.get();
  parts.vision = vision_.get();
  parts.experts = provider_;
  parts.take_stats = [this] { return TakeStepStats(); };
  parts.stats = options_.stats;
  parts.image_token_id = config_.image_token_id;
  parts.compress_layer = compress_layer_;
  parts.speculative = speculative_.has_value() ? &*speculative_ : nullptr;
  runner_ = std::make_unique<ModelRunner>(std::move(parts));
  // A sequence that arrives at an idle engine starts the predictor afresh
  // and gets only its own counters, as a request running alone always did.
  loop_ = std::make_unique<BatchLoop>(scheduler_.get(), runner_.get(), kv_pool_.get(),
                                      options_.stats, [this] {
                                        TakeStepStats();
                                        if (offload_ != nullptr) offload_->BeginRequest();
                                      });
}

std::unique_ptr<SequencePreload> LocalEngine::MakePreload() const {
  if (offload_ == nullptr ||
      PolicyFromName<PreloadKind>(options_.offload.preload) != PreloadKind::kPrefillRouting) {
    return nullptr;
  }
  const TextConfig& t = config_.text;
  const int n = options_.offload.preload_experts > 0 ? options_.offload.preload_experts
                                                     : t.num_experts_per_tok;
  return std::make_unique<SequencePreload>(offload_.get(), t.num_hidden_layers, t.num_experts, n);
}

void LocalEngine::LogPreload() const {
  const OffloadOptions& o = options_.offload;
  if (PolicyFromName<PreloadKind>(o.preload) != PreloadKind::kPrefillRouting) return;
  if (offload_ == nullptr) {
    spdlog::info("engine: preload {} has nothing to do: every expert is resident", o.preload);
    return;
  }
  spdlog::info(
      "engine: preload {}: top {} experts per offloaded layer by prefill routing mass, "
      "kept for the sequence; running sequences keep at most {} of the {} slabs",
      o.preload, o.preload_experts > 0 ? o.preload_experts : config_.text.num_experts_per_tok,
      o.preload_share, offload_->plan().num_slabs);
}

absl::StatusOr<GenerateResult> LocalEngine::Generate(const PreparedRequest& prepared,
                                                     const GenerateCallbacks& callbacks) {
  const auto* p = dynamic_cast<const LocalPrepared*>(&prepared);
  if (p == nullptr) {
    return absl::InvalidArgumentError("Generate: the request was prepared by another engine");
  }
  // Prepare's time counts as this request's, as if it had run here.
  const Clock::time_point start =
      Clock::now() - std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(p->prepare_seconds()));
  Sequence seq(*p, callbacks, tokenizer_.get(), eos_ids_, harmony_ ? &*harmony_ : nullptr,
               predictor_, options_.max_context_tokens, kv_pool_.get(), start, MakePreload());
  seq.result.usage.prompt_tokens = p->prompt_tokens();
  loop_->Submit(&seq);
  seq.done.WaitForNotification();
  if (!seq.status.ok()) return seq.status;
  return std::move(seq.result);
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const EngineOptions& options) {
  return LocalEngine::Create(options);
}

}  // namespace vismoe
