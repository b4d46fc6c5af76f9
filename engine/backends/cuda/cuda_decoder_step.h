// CudaDecoderStep: one forward step of CudaDecoderOps (cuda_decoder_ops.h):
// the step's device buffers, carved from the ops' scratch arena, and the
// host state that follows the rows through compression. Its MoE ops live in
// cuda_decoder_step_moe.cc, its CUDA graphs in cuda_decoder_step_graph.cc.
//
// Two ways through a MoE layer:
// - host-driven (Route + Experts; prefill, offloaded layers, expert
//   skipping): the routing comes to the host, the ExpertProvider hands out
//   experts, StreamExpertLauncher launches grouped GEMMs as they are ready;
// - DeviceMoe (pinned layers of decode-sized steps): router, top-k,
//   permutation, every expert's SwiGLU over the layer's PinnedLayerTables
//   table and the weighted sum run as five launches with no host in the
//   loop; the ids land in DeferredStaging and the host reads them a layer or
//   more behind. With every layer pinned a decode step waits for the device
//   once, for its tokens (DrawTokens) or logits.
// Decode steps (one row per sequence) defer their ops and run them as a
// captured CUDA graph, recorded once and replayed while the decoder calls the
// same ops (step_graphs.h; cuda_decoder_step_graph.cc); the host then
// launches one graph instead of hundreds of kernels.
// Thread safety: one thread; holds the ops' lock for its life (the stream,
// scratch, tables and staging are the ops').
// Ownership: borrows the ops, the KV caches and their pools.
#ifndef VISMOE_ENGINE_BACKENDS_CUDA_CUDA_DECODER_STEP_H_
#define VISMOE_ENGINE_BACKENDS_CUDA_CUDA_DECODER_STEP_H_

#include <cstdint>
#include <mutex>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend/decoder_ops.h"
#include "engine/backends/cuda/cuda_decoder_ops.h"
#include "engine/backends/cuda/device_kv_pool.h"
#include "engine/backends/cuda/op_timer.h"
#include "engine/backends/cuda/step_graphs.h"
#include "engine/backends/cuda/stream_expert_launcher.h"
#include "engine/offload/expert_batch_runner.h"
#include "engine/ops/cuda/activations.h"
#include "engine/ops/cuda/moe_decode.h"
#include "engine/ops/cuda/moe_router.h"

namespace vismoe::cuda {

class CudaDecoderStep final : public DecoderStep {
 public:
  CudaDecoderStep(const CudaDecoderOps& ops, std::vector<KvCache*> caches,
                  std::vector<DeviceKvPool*> pools, std::vector<int64_t> seq_rows,
                  std::unique_lock<std::mutex> lock);
  ~CudaDecoderStep() override;

  absl::Status Begin(const StepInput& in);
  absl::Status KeepRows(absl::Span<const int64_t> kept, absl::Span<const int64_t> positions,
                        absl::Span<const int64_t> visual_rows) override;
  absl::Status Norm(int layer, NormSite site) override;
  absl::Status Attention(int layer) override;
  absl::Status Route(int layer, bool with_scores, RouterResult* routing) override;
  absl::Status Experts(int layer, Phase phase, const RouterResult& routing,
                       ExpertProvider* experts) override;
  absl::Status AddMoeOutput() override;
  absl::Status DenseMlp(int layer) override;
  absl::Status AddDeepStack(int layer) override;
  absl::Status Logits(bool all_rows, std::vector<float>* logits) override;
  // Final norm, LM head and an argmax kernel per chunk of sequences; the ids
  // land in mapped host memory: one wait, a few bytes back.
  absl::Status DrawTokens(absl::Span<const TokenDraw> draws, std::vector<int>* tokens) override;
  absl::StatusOr<const float*> HostRows(StepRows which) override;
  // Decode-sized steps (<= kMaxDecodeRows rows) of a pinned layer whose
  // experts PinnedLayerTables can table.
  bool PrepareDeviceMoe(int layer, ExpertProvider* experts) override;
  absl::Status DeviceMoe(int layer, Phase phase, ExpertProvider* experts, bool observed) override;
  absl::StatusOr<bool> DeferredReady(int layer) override;
  absl::StatusOr<DeferredLayer> TakeDeferred(int layer) override;

 private:
  enum class Mode { kDirect, kRecord, kReplay };
  // The ops a graph may hold, launched now (Run defers them in a graph step).
  absl::Status BeginNow();
  absl::Status NormNow(int layer, NormSite site);
  absl::Status AttentionNow(int layer);
  // Multi-head latent attention (cuda_decoder_step_mla.cc): AttentionNow for
  // TextConfig::mla.
  absl::Status LatentAttentionNow(int layer);
  absl::Status AllocateLatent(int64_t n);
  // y (+)= the shared experts of `layer` on x (DeepSeek; `accumulate`: added
  // to y, else y is set); nothing without.
  absl::Status SharedExperts(int layer, bool accumulate);
  absl::Status NormRope(const CudaDecoderOps::Layer& w);
  absl::Status DenseMlpNow(int layer);
  absl::Status DeviceMoeNow(int layer, ExpertProvider* experts, bool observed);
  // DeepSeek's router settings of `layer` (MoeRouterGroup).
  GroupRouting GroupRoutingOf(int layer) const;
  // ---- CUDA graphs of decode steps (cuda_decoder_step_graph.cc) ----
  // One row per sequence, all in one pool, no visual rows, DeviceMoe
  // possible, graphs on and ops not timed.
  bool GraphEligible(const StepInput& in) const;
  // Writes the step's inputs (positions, ids, each layer's cache length, the
  // block tables) into the ops' page-locked input block and points the
  // kernels' inputs at its device copy in the scratch.
  absl::Status StageInputs(const StepInput& in);
  // Launches `op` now, or defers it (recording, or replaying while it equals
  // the recorded op at its place; else the deferred ops are launched first).
  absl::Status Run(const StepOp& op);
  absl::Status Execute(const StepOp& op);
  // Before any op a graph cannot hold: launches what was deferred -- the
  // replayed graph, a graph captured now, or op by op.
  absl::Status Flush();
  absl::Status RunDeferredNow();

  absl::Status Allocate(int64_t n);
  absl::Status UploadVisual(const StepInput& in);
  // Device index lists of the visual rows still in the step (DeepStack).
  absl::Status SetVisualRows(absl::Span<const int64_t> visual_rows);
  absl::Status UploadPositions(absl::Span<const int64_t> positions);
  absl::Status UploadRopeScales(absl::Span<const int64_t> positions);
  // Each sequence's block table, into its pool's tables() (tables_).
  absl::Status UploadBlockTables();
  // Expert skipping on the device: zeroes the permuted rows and the combine
  // weights of the skipped slots.
  absl::Status ZeroSkippedSlots(const RouterResult& r);
  // The commit miss policy rewrote some tokens' experts and weights on the
  // host: uploads both and rebuilds the permutation from them.
  absl::Status UploadCommittedRouting(const RouterResult& r);
  // Host fp32 copy of `count` device bf16 values (waits for the stream).
  absl::Status DownloadF32(const Bf16* src, int64_t count, std::vector<float>* out) const;
  // The last row of each sequence, gathered into the scratch (Logits).
  absl::StatusOr<const Bf16*> LastRows();
  // The LM head's fp32 logits of rows [r, r + m) of `src` into `out`.
  absl::Status LmHead(const Bf16* src, int64_t r, int64_t m, Bf16* normed, float* out);
  // Marks the start of an op family (Options::op_timing; otherwise nothing).
  void Time(OpTimer::Family family);

  const CudaDecoderOps& ops_;
  const TextConfig& c_;
  std::vector<KvCache*> caches_;        // one per sequence
  std::vector<DeviceKvPool*> pools_;    // each cache's pool
  std::vector<const int32_t*> tables_;  // each cache's block table on the device
  std::vector<int64_t> seq_rows_;       // rows of each sequence in flight
  std::unique_lock<std::mutex> lock_;
  StreamHandle st_;
  const int64_t h_;
  DeviceArena& scratch() const { return ops_.scratch_; }

  int64_t n_ = 0;                 // rows in flight
  int64_t rows_in_ = 0;           // rows the step began with
  Bf16* hs_ = nullptr;            // [n, H] residual stream
  Bf16* x_ = nullptr;             // [n, H] normed input of a block
  Bf16* y_ = nullptr;             // [n, H] MoE output
  Bf16* qkv_ = nullptr;           // [n, qd + 2 kvd]
  Bf16* attn_ = nullptr;          // [n, qd]
  // Latent attention's (null without TextConfig::mla): the q_lora rows, q
  // [n, heads * (nope + rope)], the new cache rows [n, rank + rope], the
  // heads' outputs [n, heads * v], and the fp32 absorbed queries and attended
  // latents of kLatentChunkRows rows [chunk, heads, rank].
  struct Latent {
    Bf16 *qa = nullptr, *q = nullptr, *ckv = nullptr, *out = nullptr;
    float *q_abs = nullptr, *o_lat = nullptr;
  } mla_;
  int64_t* positions_ = nullptr;  // device [3][n]
  // LongRoPE: each sequence's rope length (StepSequence) and the rows'
  // mscale, device [n] (null without LongRoPE) and its host source.
  std::vector<int64_t> rope_lengths_;
  float* rope_scales_ = nullptr;
  std::vector<float> rope_scales_host_;
  // Routing and the permuted MoE rows.
  float* router_logits_ = nullptr;  // [n, E]
  int32_t* top_experts_ = nullptr;  // [n, k]
  float* top_weights_ = nullptr;    // [n, k]
  int32_t *counts_ = nullptr, *offsets_ = nullptr, *row_token_ = nullptr, *slot_row_ = nullptr;
  Bf16 *xp_ = nullptr, *gate_up_ = nullptr, *act_ = nullptr, *yp_ = nullptr;
  // DeviceMoe's: the active experts and the fp32 SwiGLU and expert outputs
  // (null in steps over kMaxDecodeRows rows).
  MoeDecodeRouting decode_routing_;
  float* decode_act_ = nullptr;  // [n * k, I]
  float* decode_out_ = nullptr;  // [n * k, H]
  // DeepStack features on the device [num_visual, H] each, and which visual
  // feature row goes to which row of hs.
  std::vector<const Bf16*> deepstack_;
  int32_t* ds_src_ = nullptr;  // device: visual index of each kept visual row
  int32_t* ds_dst_ = nullptr;  // device: its row in hs
  int64_t ds_count_ = 0;
  Bf16* ds_tmp_ = nullptr;               // [num_visual, H]
  std::vector<float> host_rows_;         // HostRows' copy
  std::vector<float> skip_weights_;      // source of ZeroSkippedSlots' upload; outlives the copy
  std::vector<int32_t> commit_experts_;  // sources of UploadCommittedRouting's copies
  std::vector<float> commit_weights_;
  HostExpertBuffers host_experts_;  // experts computed on the host
  Bf16* widen_ = nullptr;           // FP8 experts widened to bf16 (the first MoE layer allocates)
  // Slabs the last host-driven MoE layer still reads: released once the
  // stream is known to be past them (ReleaseHeld), before the provider's
  // next call, instead of a wait at the end of every layer.
  HeldExperts held_;
  void ReleaseHeld() { held_.ReleaseAll(); }

  // CUDA graphs (step_graphs.h).
  Mode mode_ = Mode::kDirect;
  std::vector<StepOp> deferred_;       // ops called and not launched yet
  const StepGraph* replay_ = nullptr;  // kReplay: the graph replayed
  StepGraphKey key_;
  bool capturing_ = false;  // executing deferred ops into a graph
  // The staged inputs of a graph-eligible step: host (page-locked) and
  // device blocks and the kernels' views of the device one.
  struct Staged {
    void* host = nullptr;
    void* device = nullptr;
    size_t bytes = 0;
    int32_t* ids = nullptr;       // device [n]
    int32_t* kv_start = nullptr;  // device [sequences][layers]: rows cached before the step
  } staged_;
};

}  // namespace vismoe::cuda

#endif  // VISMOE_ENGINE_BACKENDS_CUDA_CUDA_DECODER_STEP_H_
