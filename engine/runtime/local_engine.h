// LocalEngine: the Engine of this process (engine/api/engine.h): one model,
// its requests batched by a step thread (engine/runtime/batch_loop.h), on the
// backend the registry picks. engine.cc builds it (start-up) and runs
// requests; local_engine_requests.cc holds a request's own checks and its
// policy overrides resolved against the engine's settings.
// Thread safety: Prepare and Generate may be called from any thread; the
// step thread owns the model, providers and KV pool.
// Ownership: owns everything it loads; the step thread is joined first on
// destruction.
#ifndef VISMOE_ENGINE_RUNTIME_LOCAL_ENGINE_H_
#define VISMOE_ENGINE_RUNTIME_LOCAL_ENGINE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/api/engine.h"
#include "engine/arch/text_decoder.h"
#include "engine/arch/vision_tower.h"
#include "engine/backend/backend.h"
#include "engine/backend/kv_pool.h"
#include "engine/core/commit_miss_policy.h"
#include "engine/core/expert_skipping.h"
#include "engine/core/speculative_execution.h"
#include "engine/core/thread_pool.h"
#include "engine/model/chat_template.h"
#include "engine/model/checkpoint.h"
#include "engine/model/harmony_reply.h"
#include "engine/model/image_preprocessor.h"
#include "engine/model/model_config.h"
#include "engine/model/tokenizer.h"
#include "engine/offload/offload_expert_provider.h"
#include "engine/offload/resident_expert_provider.h"
#include "engine/policy/calibration_profile.h"
#include "engine/policy/sequence_preload.h"
#include "engine/policy/token_compressor.h"
#include "engine/runtime/batch_loop.h"
#include "engine/runtime/model_runner.h"
#include "engine/runtime/prompt_builder.h"
#include "engine/runtime/step_scheduler.h"

namespace vismoe {

class LocalEngine final : public Engine {
 public:
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const EngineOptions& options);

  const ModelInfo& info() const override { return info_; }
  absl::StatusOr<std::unique_ptr<PreparedRequest>> Prepare(const GenerateRequest& request) override;
  using Engine::Generate;
  absl::StatusOr<GenerateResult> Generate(const PreparedRequest& prepared,
                                          const GenerateCallbacks& callbacks) override;

 private:
  LocalEngine() = default;
  // Create's steps, in order: the files of the checkpoint directory; the
  // backend's vision tower, decoder, offload device, and the KV pool (returns
  // the device activation bytes); the expert provider (resident, or the offload
  // runtime with its predictor); where token compression runs; ModelInfo.
  absl::Status LoadFiles();
  // LoadFiles' DeepSeek-VL2 part: its conversation format's ids and end token.
  absl::Status LoadVl2Prompting();
  absl::StatusOr<int64_t> LoadModel(const Backend& backend);
  absl::Status SetUpExperts(const Backend& backend, int64_t activation_bytes,
                            const CalibrationProfile* profile);
  absl::Status SetUpCompression();
  // FailedPrecondition, naming `setting`, when compressor `co` reads the
  // routing of MoE layers before the compression and none runs there.
  absl::Status CheckCompressionRouting(const TokenCompressorOptions& co,
                                       absl::string_view setting) const;
  void FillInfo();
  // The request's own checks (messages, sampling), before its prompt is built.
  static absl::Status CheckRequest(const GenerateRequest& request);
  // The request's token compression, checked; and the request's predictor,
  // which must be the engine's.
  absl::StatusOr<TokenCompressorOptions> RequestCompression(const GenerateRequest& request) const;
  // Create's last step: the step scheduler, model runner and the step thread.
  void StartLoop();
  // The KV pool's size in tokens.
  int64_t KvTokens() const;
  // The expert counters since the last call (the step thread's only).
  OffloadStats TakeStepStats();
  // A sequence's preload (engine/policy/sequence_preload.h), or null when
  // preload is off or every expert is resident.
  std::unique_ptr<SequencePreload> MakePreload() const;
  // One start-up line when preload is on: what it keeps, or that it has
  // nothing to do (no offload runtime).
  void LogPreload() const;
  // The request's expert skipping: the engine's, with the request's overrides.
  absl::StatusOr<std::optional<ExpertSkipping>> RequestSkipping(
      const GenerateRequest& request) const;
  // The request's miss policy: the engine's, with the request's overrides;
  // a commit rule, or nullopt to fetch.
  absl::StatusOr<std::optional<CommitMissPolicy>> RequestCommit(
      const GenerateRequest& request) const;
  // The commit rule `rule` (resolved from the settings named by `names`)
  // needs prefetch predictions wherever experts are offloaded.
  absl::Status CheckCommitHasPredictor(const std::optional<CommitMissPolicy>& rule,
                                       const std::string& name) const;
  // Speculative execution's settings (the profile's default vectors), or a
  // start-up error on a backend without it.
  absl::Status SetUpSpeculation(const CalibrationProfile* profile);

  EngineOptions options_;
  ModelInfo info_;
  ModelConfig config_;
  std::vector<int> eos_ids_;
  std::optional<HarmonyTokens> harmony_;  // a harmony model's (GPT-OSS), else none
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<Checkpoint> checkpoint_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ChatTemplate> template_;
  std::unique_ptr<ImagePreprocessor> preprocessor_;  // null without vision
  std::unique_ptr<PromptBuilder> prompts_;
  std::unique_ptr<VisionTower> vision_;  // null without vision
  std::unique_ptr<TextDecoder> model_;
  std::unique_ptr<ResidentExpertProvider> experts_;
  // The backend's memory and copy path (null members on the CPU backend);
  // declared before offload_, which borrows them, so they outlive it.
  OffloadDeviceParts device_parts_;
  std::unique_ptr<OffloadExpertProvider> offload_;   // null = everything resident
  RouterObserver* predictor_ = nullptr;              // offload_'s predictor, or null
  ExpertProvider* provider_ = nullptr;               // offload_ or experts_
  int compress_layer_ = 0;                           // decoder layer token compression runs before
  std::optional<SkipCalibration> skip_calibration_;  // the profile's, for per-request rules
  std::optional<CommitCalibration> commit_calibration_;  // likewise
  std::optional<SpeculativeExecution> speculative_;      // nullopt = off
  uint64_t last_queries_ = 0;  // experts_->queries() at the last TakeStepStats
  // Every sequence's KV rows: allocated once, at start-up (the memory plan's
  // KV region), handed out in blocks.
  std::unique_ptr<KvPool> kv_pool_;
  std::unique_ptr<StepScheduler> scheduler_;
  std::unique_ptr<ModelRunner> runner_;
  // Last, so that it is destroyed (its thread joined) before what it uses.
  std::unique_ptr<BatchLoop> loop_;
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_RUNTIME_LOCAL_ENGINE_H_
