#include "engine/backends/cuda/cuda_decoder_ops.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/backends/cuda/device_kv_pool.h"
#include "engine/backends/cuda/weight_packer.h"
#include "engine/core/dtype.h"
#include "engine/core/status_macros.h"
#include "engine/device/cuda/cuda_status.h"
#include "engine/model/arch_spec.h"
#include "engine/model/text_weights.h"
#include "engine/offload/expert_batch_runner.h"
#include "engine/ops/cpu/moe.h"
#include "engine/ops/cuda/activations.h"
#include "engine/ops/cuda/attention.h"
#include "engine/ops/cuda/embedding.h"
#include "engine/ops/cuda/moe_permute.h"
#include "engine/ops/cuda/moe_router.h"
#include "engine/ops/cuda/norm.h"
#include "engine/ops/cuda/rope.h"

namespace vismoe::cuda {
namespace {

constexpr size_t kAlign = DeviceArena::kDefaultAlignment;
constexpr int64_t kLogitRowsPerChunk = 16;        // all_logits: [16, vocab] fp32 at a time
constexpr size_t kBlasWorkspaceBytes = 32 << 20;  // cuBLAS's recommendation for Hopper

size_t Aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// Device expert pointers from an ExpertWeights view (which points into the
// offload arena on this backend).
absl::StatusOr<DeviceExpert> ToDeviceExpert(const ExpertWeights& w, int layer, int expert) {
  const TensorView& any = w.down;
  if (any.dtype != DType::kBF16) {
    return absl::UnimplementedError(absl::StrCat("layer ", layer, " expert ", expert, " is ",
                                                 std::string(DTypeName(any.dtype)),
                                                 "; the CUDA backend runs bf16 experts only"));
  }
  DeviceExpert d;
  d.down = static_cast<const Bf16*>(w.down.data);
  if (w.layout == ExpertWeights::Layout::kFusedTransposed) {
    d.layout = WeightLayout::kInOut;
    d.gate_up = static_cast<const Bf16*>(w.gate_up.data);
  } else {
    d.layout = WeightLayout::kOutIn;
    d.gate = static_cast<const Bf16*>(w.gate.data);
    d.up = static_cast<const Bf16*>(w.up.data);
  }
  return d;
}

// Host-side buffers of the experts a layer computes on the host, kept by the
// step so no layer allocates once they have grown.
struct HostExpertBuffers {
  std::vector<Bf16> x, y;     // the host experts' permuted rows and outputs, expert after expert
  std::vector<float> xf, yf;  // one expert's rows and output in fp32
};

// The device side of RunExpertBatches for one MoE layer: a batch is one
// grouped MoeExpertsGrouped call on the compute stream over the experts'
// blocks of permuted rows, and its ticket an event recorded behind it. An
// expert on the host: its rows are copied to the host in PrepareHost (ahead
// of every launch), computed by the CPU kernels in ComputeOnHost, and its
// output copied into its permuted rows on the stream.
class StreamExpertLauncher final : public ExpertBatchLauncher {
 public:
  StreamExpertLauncher(Blas& blas, const Stream& stream, const std::vector<Event>& events,
                       int layer, const std::vector<int32_t>& offsets, int64_t hidden,
                       int64_t inter, const Bf16* xp, Bf16* gate_up, Bf16* act, Bf16* yp)
      : blas_(blas),
        stream_(stream),
        events_(events),
        layer_(layer),
        offsets_(offsets),
        hidden_(hidden),
        inter_(inter),
        xp_(xp),
        gate_up_(gate_up),
        act_(act),
        yp_(yp) {}

  // What host execution needs: all borrowed from the ops and the step.
  void SetHost(ThreadPool* pool, const Event* rows_ready, HostExpertBuffers* buffers) {
    pool_ = pool;
    rows_ready_ = rows_ready;
    host_ = buffers;
  }
  absl::Status PrepareHost(absl::Span<const int> experts) override;
  absl::Status ComputeOnHost(int expert, const ExpertWeights& weights) override;

  absl::Status Launch(absl::Span<const AcquiredExpert> batch, int ticket) override {
    if (ticket < 0 || ticket >= static_cast<int>(events_.size())) {
      return absl::InternalError(absl::StrCat("expert batch ticket ", ticket, " of ",
                                              events_.size(), " at layer ", layer_));
    }
    std::vector<MoeExpertRows> rows;
    rows.reserve(batch.size());
    for (const AcquiredExpert& a : batch) {
      VISMOE_ASSIGN_OR_RETURN(DeviceExpert w, ToDeviceExpert(a.weights, layer_, a.expert));
      rows.push_back({w, offsets_[a.expert], offsets_[a.expert + 1] - offsets_[a.expert]});
    }
    VISMOE_RETURN_IF_ERROR(
        blas_.MoeExpertsGrouped(xp_, rows, hidden_, inter_, gate_up_, act_, yp_));
    return events_[ticket].Record(stream_.get());
  }
  absl::StatusOr<bool> Done(int ticket) override { return events_[ticket].Query(); }
  absl::Status Wait(int ticket) override { return events_[ticket].Synchronize(); }
  absl::Status Drain() override { return stream_.Synchronize(); }

 private:
  Blas& blas_;
  const Stream& stream_;
  const std::vector<Event>& events_;  // one per possible batch (per expert)
  const int layer_;
  const std::vector<int32_t>& offsets_;  // expert e owns permuted rows [off[e], off[e+1])
  const int64_t hidden_, inter_;
  const Bf16* xp_;
  Bf16 *gate_up_, *act_, *yp_;
  ThreadPool* pool_ = nullptr;
  const Event* rows_ready_ = nullptr;
  HostExpertBuffers* host_ = nullptr;
  std::vector<int64_t> host_row_;  // per expert: its first row in host_->x / y, or -1
  bool rows_on_host_ = false;      // rows_ready_ has been waited for
};

absl::Status StreamExpertLauncher::PrepareHost(absl::Span<const int> experts) {
  if (host_ == nullptr || rows_ready_ == nullptr) {
    return absl::InternalError("CUDA experts: host execution was not set up");
  }
  host_row_.assign(offsets_.size(), -1);
  int64_t rows = 0;
  for (int e : experts) {
    host_row_.at(e) = rows;
    rows += offsets_[e + 1] - offsets_[e];
  }
  host_->x.resize(static_cast<size_t>(rows * hidden_));
  host_->y.resize(static_cast<size_t>(rows * hidden_));
  for (int e : experts) {
    const int64_t m = offsets_[e + 1] - offsets_[e];
    VISMOE_RETURN_IF_ERROR(CopyToHostAsync(
        host_->x.data() + host_row_[e] * hidden_, xp_ + int64_t{offsets_[e]} * hidden_,
        static_cast<size_t>(m * hidden_) * sizeof(Bf16), stream_.get()));
  }
  rows_on_host_ = false;
  return rows_ready_->Record(stream_.get());
}

absl::Status StreamExpertLauncher::ComputeOnHost(int expert, const ExpertWeights& weights) {
  if (expert < 0 || expert + 1 >= static_cast<int>(host_row_.size()) || host_row_[expert] < 0) {
    return absl::InternalError(
        absl::StrCat("layer ", layer_, " expert ", expert, " was not prepared for the host"));
  }
  if (!rows_on_host_) {
    VISMOE_RETURN_IF_ERROR(rows_ready_->Synchronize());
    rows_on_host_ = true;
  }
  const int64_t m = offsets_[expert + 1] - offsets_[expert];
  const size_t count = static_cast<size_t>(m * hidden_);
  const size_t at = static_cast<size_t>(host_row_[expert] * hidden_);
  host_->xf.resize(count);
  host_->yf.resize(count);
  ToFloat(DType::kBF16, host_->x.data() + at, count, host_->xf.data());
  cpu::ExpertForward(pool_, weights, host_->xf.data(), m, hidden_, inter_, host_->yf.data());
  for (size_t i = 0; i < count; ++i) host_->y[at + i] = FloatToBf16(host_->yf[i]);
  // Behind the batches already launched, ahead of the weighted sum.
  return CopyToDeviceAsync(yp_ + int64_t{offsets_[expert]} * hidden_, host_->y.data() + at,
                           count * sizeof(Bf16), stream_.get());
}

}  // namespace

// One step's device buffers (carved from the scratch arena) and the host state
// that follows the rows through compression. Holds the ops' lock for its life.
class CudaDecoderStep final : public DecoderStep {
 public:
  CudaDecoderStep(const CudaDecoderOps& ops, std::vector<KvCache*> caches,
                  std::vector<DeviceKvPool*> pools, std::vector<int64_t> seq_rows,
                  std::unique_lock<std::mutex> lock)
      : ops_(ops),
        c_(ops.config_.text),
        caches_(std::move(caches)),
        pools_(std::move(pools)),
        seq_rows_(std::move(seq_rows)),
        lock_(std::move(lock)),
        st_(ops.stream_.get()),
        h_(c_.hidden_size) {}
  ~CudaDecoderStep() override {
    // Leave no work queued that reads this step's scratch or a released slab.
    (void)ops_.stream_.Synchronize();
  }

  absl::Status Begin(const StepInput& in);
  absl::Status KeepRows(absl::Span<const int64_t> kept, absl::Span<const int64_t> positions,
                        absl::Span<const int64_t> visual_rows) override;
  absl::Status Norm(int layer, NormSite site) override;
  absl::Status Attention(int layer) override;
  absl::Status Route(int layer, bool with_scores, RouterResult* routing) override;
  absl::Status Experts(int layer, Phase phase, const RouterResult& routing,
                       ExpertProvider* experts) override;
  absl::Status AddMoeOutput() override { return Add(hs_, y_, n_ * h_, hs_, st_); }
  absl::Status DenseMlp(int layer) override;
  absl::Status AddDeepStack(int layer) override;
  absl::Status Logits(bool all_rows, std::vector<float>* logits) override;
  absl::StatusOr<const float*> HostRows(StepRows which) override;

 private:
  absl::Status Allocate(int64_t n);
  absl::Status UploadVisual(const StepInput& in);
  // Device index lists of the visual rows still in the step (DeepStack).
  absl::Status SetVisualRows(absl::Span<const int64_t> visual_rows);
  absl::Status UploadPositions(absl::Span<const int64_t> positions);
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
  Bf16* hs_ = nullptr;            // [n, H] residual stream
  Bf16* x_ = nullptr;             // [n, H] normed input of a block
  Bf16* y_ = nullptr;             // [n, H] MoE output
  Bf16* qkv_ = nullptr;           // [n, qd + 2 kvd]
  Bf16* attn_ = nullptr;          // [n, qd]
  int64_t* positions_ = nullptr;  // device [3][n]
  // Routing and the permuted MoE rows.
  float* router_logits_ = nullptr;  // [n, E]
  int32_t* top_experts_ = nullptr;  // [n, k]
  float* top_weights_ = nullptr;    // [n, k]
  int32_t *counts_ = nullptr, *offsets_ = nullptr, *row_token_ = nullptr, *slot_row_ = nullptr;
  Bf16 *xp_ = nullptr, *gate_up_ = nullptr, *act_ = nullptr, *yp_ = nullptr;
  // DeepStack features on the device [num_visual, H] each, and which visual
  // feature row goes to which row of hs.
  std::vector<const Bf16*> deepstack_;
  int32_t* ds_src_ = nullptr;  // device: visual index of each kept visual row
  int32_t* ds_dst_ = nullptr;  // device: its row in hs
  int64_t ds_count_ = 0;
  Bf16* ds_tmp_ = nullptr;        // [num_visual, H]
  std::vector<float> host_rows_;  // HostRows' copy
  std::vector<float> skip_weights_;  // source of ZeroSkippedSlots' upload; outlives the copy
  std::vector<int32_t> commit_experts_;  // sources of UploadCommittedRouting's copies
  std::vector<float> commit_weights_;
  HostExpertBuffers host_experts_;   // experts computed on the host
};

absl::Status CudaDecoderStep::Allocate(int64_t n) {
  DeviceArena& a = scratch();
  const size_t rows_h = static_cast<size_t>(n * h_);
  VISMOE_ASSIGN_OR_RETURN(hs_, a.AllocateArray<Bf16>(rows_h));
  VISMOE_ASSIGN_OR_RETURN(x_, a.AllocateArray<Bf16>(rows_h));
  VISMOE_ASSIGN_OR_RETURN(y_, a.AllocateArray<Bf16>(rows_h));
  const int64_t qd = int64_t{c_.num_attention_heads} * c_.head_dim;
  const int64_t kvd = int64_t{c_.num_key_value_heads} * c_.head_dim;
  VISMOE_ASSIGN_OR_RETURN(qkv_, a.AllocateArray<Bf16>(n * (qd + 2 * kvd)));
  VISMOE_ASSIGN_OR_RETURN(attn_, a.AllocateArray<Bf16>(n * qd));
  const int64_t nk = n * c_.num_experts_per_tok;
  VISMOE_ASSIGN_OR_RETURN(router_logits_, a.AllocateArray<float>(n * std::max(c_.num_experts, 1)));
  VISMOE_ASSIGN_OR_RETURN(top_experts_, a.AllocateArray<int32_t>(nk));
  VISMOE_ASSIGN_OR_RETURN(top_weights_, a.AllocateArray<float>(nk));
  VISMOE_ASSIGN_OR_RETURN(counts_, a.AllocateArray<int32_t>(c_.num_experts));
  VISMOE_ASSIGN_OR_RETURN(offsets_, a.AllocateArray<int32_t>(c_.num_experts + 1));
  VISMOE_ASSIGN_OR_RETURN(row_token_, a.AllocateArray<int32_t>(nk));
  VISMOE_ASSIGN_OR_RETURN(slot_row_, a.AllocateArray<int32_t>(nk));
  VISMOE_ASSIGN_OR_RETURN(xp_, a.AllocateArray<Bf16>(nk * h_));
  VISMOE_ASSIGN_OR_RETURN(yp_, a.AllocateArray<Bf16>(nk * h_));
  const int64_t inter = std::max<int64_t>(
      int64_t{c_.moe_intermediate_size} * c_.num_experts_per_tok, c_.intermediate_size);
  VISMOE_ASSIGN_OR_RETURN(gate_up_, a.AllocateArray<Bf16>(n * 2 * inter));
  VISMOE_ASSIGN_OR_RETURN(act_, a.AllocateArray<Bf16>(n * inter));
  return absl::OkStatus();
}

absl::Status CudaDecoderStep::UploadPositions(absl::Span<const int64_t> positions) {
  VISMOE_ASSIGN_OR_RETURN(positions_, scratch().AllocateArray<int64_t>(positions.size()));
  return CopyToDeviceAsync(positions_, positions.data(), positions.size() * sizeof(int64_t), st_);
}

absl::Status CudaDecoderStep::Begin(const StepInput& in) {
  n_ = static_cast<int64_t>(in.tokens.size());
  VISMOE_RETURN_IF_ERROR(Allocate(n_));
  std::vector<int32_t> ids(in.tokens.begin(), in.tokens.end());
  VISMOE_ASSIGN_OR_RETURN(int32_t * ids_dev, scratch().AllocateArray<int32_t>(n_));
  VISMOE_RETURN_IF_ERROR(CopyToDeviceAsync(ids_dev, ids.data(), ids.size() * sizeof(int32_t), st_));
  VISMOE_RETURN_IF_ERROR(UploadPositions(in.positions));
  VISMOE_RETURN_IF_ERROR(UploadBlockTables());
  VISMOE_RETURN_IF_ERROR(
      EmbeddingGather(ops_.embed_, c_.vocab_size, static_cast<int>(h_), ids_dev, n_, hs_, st_));
  if (in.visual_embeds != nullptr && !in.visual_rows.empty()) {
    VISMOE_RETURN_IF_ERROR(UploadVisual(in));
  }
  return absl::OkStatus();
}

// A pool's tables() has room for all of one step's tables: no block is in two
// caches. The caches' tables do not change during the step (the decoder takes
// blocks before it begins), so the copies may read them asynchronously.
absl::Status CudaDecoderStep::UploadBlockTables() {
  std::vector<std::pair<const DeviceKvPool*, int64_t>> used;  // entries taken per pool
  for (size_t s = 0; s < caches_.size(); ++s) {
    const std::vector<int32_t>& blocks = caches_[s]->blocks();
    auto it =
        std::find_if(used.begin(), used.end(), [&](const auto& u) { return u.first == pools_[s]; });
    if (it == used.end()) {
      used.emplace_back(pools_[s], 0);
      it = used.end() - 1;
    }
    int32_t* dst = pools_[s]->tables() + it->second;
    it->second += static_cast<int64_t>(blocks.size());
    VISMOE_RETURN_IF_ERROR(
        CopyToDeviceAsync(dst, blocks.data(), blocks.size() * sizeof(int32_t), st_));
    tables_.push_back(dst);
  }
  return absl::OkStatus();
}

// Visual rows replace the image-pad embeddings; DeepStack features wait on the
// device for their layers.
absl::Status CudaDecoderStep::UploadVisual(const StepInput& in) {
  const int64_t num_visual = static_cast<int64_t>(in.visual_rows.size());
  std::vector<Bf16> staged(static_cast<size_t>(num_visual * h_));
  auto upload = [&](const float* src) -> absl::StatusOr<Bf16*> {
    for (size_t i = 0; i < staged.size(); ++i) staged[i] = FloatToBf16(src[i]);
    VISMOE_ASSIGN_OR_RETURN(Bf16 * dst, scratch().AllocateArray<Bf16>(staged.size()));
    // Pageable source: the copy is staged before this returns, so `staged` may be reused.
    VISMOE_RETURN_IF_ERROR(
        CopyToDeviceAsync(dst, staged.data(), staged.size() * sizeof(Bf16), st_));
    return dst;
  };
  VISMOE_ASSIGN_OR_RETURN(Bf16 * visual, upload(in.visual_embeds));
  VISMOE_RETURN_IF_ERROR(SetVisualRows(in.visual_rows));
  VISMOE_RETURN_IF_ERROR(
      ScatterRows(visual, num_visual, static_cast<int>(h_), ds_dst_, hs_, n_, st_));
  for (const float* ds : in.deepstack) {
    if (ds == nullptr) {
      deepstack_.push_back(nullptr);
      continue;
    }
    VISMOE_ASSIGN_OR_RETURN(Bf16 * d, upload(ds));
    deepstack_.push_back(d);
  }
  if (!deepstack_.empty()) {
    VISMOE_ASSIGN_OR_RETURN(ds_tmp_, scratch().AllocateArray<Bf16>(staged.size()));
  }
  return absl::OkStatus();
}

absl::Status CudaDecoderStep::SetVisualRows(absl::Span<const int64_t> visual_rows) {
  std::vector<int32_t> src, dst;
  for (size_t i = 0; i < visual_rows.size(); ++i) {
    if (visual_rows[i] < 0) continue;  // compressed away
    src.push_back(static_cast<int32_t>(i));
    dst.push_back(static_cast<int32_t>(visual_rows[i]));
  }
  ds_count_ = static_cast<int64_t>(src.size());
  if (ds_count_ == 0) return absl::OkStatus();
  // Fresh buffers: kernels queued earlier may still read the old ones.
  VISMOE_ASSIGN_OR_RETURN(ds_src_, scratch().AllocateArray<int32_t>(ds_count_));
  VISMOE_ASSIGN_OR_RETURN(ds_dst_, scratch().AllocateArray<int32_t>(ds_count_));
  VISMOE_RETURN_IF_ERROR(CopyToDeviceAsync(ds_src_, src.data(), src.size() * sizeof(int32_t), st_));
  return CopyToDeviceAsync(ds_dst_, dst.data(), dst.size() * sizeof(int32_t), st_);
}

absl::Status CudaDecoderStep::KeepRows(absl::Span<const int64_t> kept,
                                       absl::Span<const int64_t> positions,
                                       absl::Span<const int64_t> visual_rows) {
  const int64_t m = static_cast<int64_t>(kept.size());
  std::vector<int32_t> rows(kept.begin(), kept.end());
  VISMOE_ASSIGN_OR_RETURN(int32_t * rows_dev, scratch().AllocateArray<int32_t>(m));
  VISMOE_RETURN_IF_ERROR(CopyToDeviceAsync(rows_dev, rows.data(), m * sizeof(int32_t), st_));
  VISMOE_ASSIGN_OR_RETURN(Bf16 * hs, scratch().AllocateArray<Bf16>(m * h_));
  VISMOE_RETURN_IF_ERROR(PermuteRows(hs_, static_cast<int>(h_), rows_dev, m, hs, st_));
  hs_ = hs;  // the old rows stay in the arena until the step ends
  VISMOE_RETURN_IF_ERROR(UploadPositions(positions));
  // DeepStack goes on adding to the visual rows that survived.
  if (!deepstack_.empty()) VISMOE_RETURN_IF_ERROR(SetVisualRows(visual_rows));
  n_ = m;
  seq_rows_ = RowsAfterKeep(seq_rows_, kept);
  return absl::OkStatus();
}

absl::Status CudaDecoderStep::Norm(int layer, NormSite site) {
  const CudaDecoderOps::Layer& w = ops_.layers_[layer];
  const Bf16* g = site == NormSite::kInput ? w.input_norm : w.post_norm;
  return RmsNorm(hs_, h_, n_, 1, static_cast<int>(h_), g, c_.rms_norm_eps, x_, h_, st_);
}

absl::Status CudaDecoderStep::Attention(int layer) {
  const CudaDecoderOps::Layer& w = ops_.layers_[layer];
  Blas& blas = *ops_.blas_;
  const int64_t n = n_, h = h_, hd = c_.head_dim;
  const int64_t qd = int64_t{c_.num_attention_heads} * hd,
                kvd = int64_t{c_.num_key_value_heads} * hd;
  const int64_t width = qd + 2 * kvd;  // fused q|k|v rows
  Bf16* q = qkv_;
  Bf16* k = qkv_ + qd;
  Bf16* v = qkv_ + qd + kvd;
  VISMOE_RETURN_IF_ERROR(
      blas.Linear(x_, n, h, w.q, WeightLayout::kOutIn, qd, q, GemmOut::kBf16, 0.0f, width));
  VISMOE_RETURN_IF_ERROR(
      blas.Linear(x_, n, h, w.k, WeightLayout::kOutIn, kvd, k, GemmOut::kBf16, 0.0f, width));
  VISMOE_RETURN_IF_ERROR(
      blas.Linear(x_, n, h, w.v, WeightLayout::kOutIn, kvd, v, GemmOut::kBf16, 0.0f, width));
  // Per-head RMSNorm before the rotary embedding, in place in the fused rows.
  VISMOE_RETURN_IF_ERROR(RmsNorm(q, width, n, c_.num_attention_heads, static_cast<int>(hd),
                                 w.q_norm, c_.rms_norm_eps, q, width, st_));
  VISMOE_RETURN_IF_ERROR(RmsNorm(k, width, n, c_.num_key_value_heads, static_cast<int>(hd),
                                 w.k_norm, c_.rms_norm_eps, k, width, st_));
  const int* section = ops_.mrope_section_.empty() ? nullptr : ops_.mrope_section_.data();
  VISMOE_RETURN_IF_ERROR(ApplyRope(q, n, c_.num_attention_heads, static_cast<int>(hd), width,
                                   positions_, ops_.inv_freq_, section, st_));
  VISMOE_RETURN_IF_ERROR(ApplyRope(k, n, c_.num_key_value_heads, static_cast<int>(hd), width,
                                   positions_, ops_.inv_freq_, section, st_));
  AttentionShape shape{c_.num_attention_heads, c_.num_key_value_heads, static_cast<int>(hd), width,
                       kvd};
  int64_t row = 0;  // the sequence's first row
  for (size_t s = 0; s < caches_.size(); ++s) {
    const DeviceKvPool& pool = *pools_[s];
    const int64_t rows = seq_rows_[s];
    const int64_t start = caches_[s]->layer_length(layer);
    const PagedKv paged{tables_[s], pool.block_tokens(), pool.block_elems()};
    Bf16* keys = pool.Keys(layer);
    Bf16* values = pool.Values(layer);
    VISMOE_RETURN_IF_ERROR(
        PagedKvWrite(k + row * width, width, rows, kvd, keys, paged, start, st_));
    VISMOE_RETURN_IF_ERROR(
        PagedKvWrite(v + row * width, width, rows, kvd, values, paged, start, st_));
    VISMOE_RETURN_IF_ERROR(PagedAttention(shape, q + row * width, rows, keys, values, paged,
                                          start + rows, /*causal=*/true, /*q_pos0=*/start,
                                          attn_ + row * qd, st_));
    row += rows;
  }
  // hs += o_proj(attn): the residual add is the GEMM's beta = 1.
  return blas.Linear(attn_, n, qd, w.o, WeightLayout::kOutIn, h, hs_, GemmOut::kBf16, 1.0f);
}

absl::Status CudaDecoderStep::DenseMlp(int layer) {
  const CudaDecoderOps::Layer& w = ops_.layers_[layer];
  Blas& blas = *ops_.blas_;
  const int64_t n = n_, h = h_, in = c_.intermediate_size;
  VISMOE_RETURN_IF_ERROR(blas.Linear(x_, n, h, w.gate_proj, WeightLayout::kOutIn, in, gate_up_,
                                     GemmOut::kBf16, 0.0f, 2 * in));
  VISMOE_RETURN_IF_ERROR(blas.Linear(x_, n, h, w.up_proj, WeightLayout::kOutIn, in, gate_up_ + in,
                                     GemmOut::kBf16, 0.0f, 2 * in));
  VISMOE_RETURN_IF_ERROR(SiluMulFused(gate_up_, n, in, act_, st_));
  return blas.Linear(act_, n, in, w.down_proj, WeightLayout::kOutIn, h, hs_, GemmOut::kBf16, 1.0f);
}

absl::Status CudaDecoderStep::Route(int layer, bool with_scores, RouterResult* r) {
  const CudaDecoderOps::Layer& w = ops_.layers_[layer];
  const int64_t n = n_;
  const int k = c_.num_experts_per_tok, e_count = c_.num_experts;
  VISMOE_RETURN_IF_ERROR(ops_.blas_->Linear(x_, n, h_, w.router, WeightLayout::kOutIn, e_count,
                                            router_logits_, GemmOut::kF32));
  VISMOE_RETURN_IF_ERROR(MoeRouterTopK(router_logits_, n, e_count, k, ops_.renormalize_topk_,
                                       top_experts_, top_weights_, st_));
  VISMOE_RETURN_IF_ERROR(BuildMoePermutation(top_experts_, n, k, e_count, counts_, offsets_,
                                             row_token_, slot_row_, st_));
  // The routing goes to the host: the provider and the observers live there.
  std::vector<int32_t> top(static_cast<size_t>(n * k));
  VISMOE_RETURN_IF_ERROR(
      CopyToHostAsync(top.data(), top_experts_, top.size() * sizeof(int32_t), st_));
  r->n = n;
  r->num_experts = e_count;
  r->top_k = k;
  r->weights.clear();
  r->logits.clear();
  if (with_scores) {
    r->weights.resize(top.size());
    r->logits.resize(static_cast<size_t>(n * e_count));
    VISMOE_RETURN_IF_ERROR(
        CopyToHostAsync(r->weights.data(), top_weights_, r->weights.size() * sizeof(float), st_));
    VISMOE_RETURN_IF_ERROR(
        CopyToHostAsync(r->logits.data(), router_logits_, r->logits.size() * sizeof(float), st_));
  }
  VISMOE_RETURN_IF_ERROR(ops_.stream_.Synchronize());
  r->experts.assign(top.begin(), top.end());
  return absl::OkStatus();
}

absl::Status CudaDecoderStep::Experts(int layer, Phase phase, const RouterResult& r,
                                      ExpertProvider* experts) {
  const int e_count = c_.num_experts;
  const int k = c_.num_experts_per_tok;
  // Expert e owns permuted rows [offsets[e], offsets[e + 1]): the prefix sum
  // BuildMoePermutation computes on the device, recomputed here from the same ids.
  std::vector<int32_t> offsets(e_count + 1, 0);
  std::vector<char> used(e_count, 0);  // some slot of the expert is not skipped
  for (size_t i = 0; i < r.experts.size(); ++i) {
    ++offsets[r.experts[i] + 1];  // ids checked by the decoder
    if (r.skipped.empty() || r.skipped[i] == 0) used[r.experts[i]] = 1;
  }
  std::vector<int> active;
  for (int e = 0; e < e_count; ++e) {
    if (used[e]) active.push_back(e);
    offsets[e + 1] += offsets[e];
  }
  if (!r.committed.empty()) VISMOE_RETURN_IF_ERROR(UploadCommittedRouting(r));
  if (!r.skipped.empty()) VISMOE_RETURN_IF_ERROR(ZeroSkippedSlots(r));
  // Only with every id known to be in range: an out-of-range id (a NaN router
  // row) leaves row_token entries unwritten.
  VISMOE_RETURN_IF_ERROR(PermuteRows(x_, static_cast<int>(h_), row_token_, n_ * k, xp_, st_));
  std::vector<int64_t> tokens;  // rows each active expert computes
  for (int e : active) tokens.push_back(offsets[e + 1] - offsets[e]);
  StreamExpertLauncher launcher(*ops_.blas_, ops_.stream_, ops_.expert_done_, layer, offsets, h_,
                                c_.moe_intermediate_size, xp_, gate_up_, act_, yp_);
  launcher.SetHost(ops_.host_pool_, &ops_.host_rows_ready_, &host_experts_);
  VISMOE_RETURN_IF_ERROR(RunExpertBatches(*experts, phase, layer, active, tokens, launcher));
  return UnpermuteCombine(yp_, slot_row_, top_weights_, n_, k, static_cast<int>(h_),
                          /*accumulate=*/false, y_, st_);
}

absl::Status CudaDecoderStep::UploadCommittedRouting(const RouterResult& r) {
  if (r.weights.size() != r.experts.size()) {
    return absl::InternalError("commit miss policy: the routing has no weights on the host");
  }
  commit_experts_.assign(r.experts.begin(), r.experts.end());
  commit_weights_ = r.weights;
  VISMOE_RETURN_IF_ERROR(CopyToDeviceAsync(top_experts_, commit_experts_.data(),
                                           commit_experts_.size() * sizeof(int32_t), st_));
  VISMOE_RETURN_IF_ERROR(CopyToDeviceAsync(top_weights_, commit_weights_.data(),
                                           commit_weights_.size() * sizeof(float), st_));
  return BuildMoePermutation(top_experts_, n_, c_.num_experts_per_tok, c_.num_experts, counts_,
                             offsets_, row_token_, slot_row_, st_);
}

absl::Status CudaDecoderStep::ZeroSkippedSlots(const RouterResult& r) {
  // Skipped slots keep their place in the permutation (rows of an expert that
  // runs for other tokens are computed, rows of an expert no token keeps are
  // never written), so: every permuted row starts at zero and a skipped
  // slot's combine weight is zero -- it adds exactly nothing (paper 001: the
  // kept experts keep their weights, no renormalisation).
  if (r.weights.size() != r.skipped.size()) {
    return absl::InternalError("expert skipping: the routing has no weights on the host");
  }
  skip_weights_ = r.weights;
  for (size_t i = 0; i < skip_weights_.size(); ++i) {
    if (r.skipped[i] != 0) skip_weights_[i] = 0.0f;
  }
  VISMOE_RETURN_IF_ERROR(CopyToDeviceAsync(top_weights_, skip_weights_.data(),
                                           skip_weights_.size() * sizeof(float), st_));
  return MemsetAsync(yp_, 0, static_cast<size_t>(n_) * c_.num_experts_per_tok * h_ * sizeof(Bf16),
                     st_);
}

absl::Status CudaDecoderStep::AddDeepStack(int layer) {
  if (layer >= static_cast<int>(deepstack_.size()) || deepstack_[layer] == nullptr ||
      ds_count_ == 0) {
    return absl::OkStatus();
  }
  VISMOE_RETURN_IF_ERROR(
      PermuteRows(deepstack_[layer], static_cast<int>(h_), ds_src_, ds_count_, ds_tmp_, st_));
  return AddRowsAt(ds_tmp_, ds_count_, static_cast<int>(h_), ds_dst_, hs_, n_, st_);
}

absl::Status CudaDecoderStep::Logits(bool all_rows, std::vector<float>* logits) {
  const int64_t vocab = c_.vocab_size;
  const Bf16* src = hs_;
  int64_t rows = n_;
  if (!all_rows) {  // the last row of each sequence, gathered
    rows = static_cast<int64_t>(seq_rows_.size());
    std::vector<int32_t> last(rows);
    int64_t end = 0;
    for (int64_t s = 0; s < rows; ++s) last[s] = static_cast<int32_t>((end += seq_rows_[s]) - 1);
    VISMOE_ASSIGN_OR_RETURN(int32_t * last_dev, scratch().AllocateArray<int32_t>(rows));
    VISMOE_RETURN_IF_ERROR(CopyToDeviceAsync(last_dev, last.data(), rows * sizeof(int32_t), st_));
    VISMOE_ASSIGN_OR_RETURN(Bf16 * gathered, scratch().AllocateArray<Bf16>(rows * h_));
    VISMOE_RETURN_IF_ERROR(PermuteRows(hs_, static_cast<int>(h_), last_dev, rows, gathered, st_));
    src = gathered;
  }
  const int64_t chunk = std::min(rows, kLogitRowsPerChunk);
  VISMOE_ASSIGN_OR_RETURN(Bf16 * normed, scratch().AllocateArray<Bf16>(chunk * h_));
  VISMOE_ASSIGN_OR_RETURN(float* out, scratch().AllocateArray<float>(chunk * vocab));
  logits->resize(static_cast<size_t>(rows * vocab));
  for (int64_t r = 0; r < rows; r += chunk) {
    const int64_t m = std::min(chunk, rows - r);
    VISMOE_RETURN_IF_ERROR(RmsNorm(src + r * h_, h_, m, 1, static_cast<int>(h_),
                                   ops_.final_norm_, c_.rms_norm_eps, normed, h_, st_));
    VISMOE_RETURN_IF_ERROR(ops_.blas_->Linear(normed, m, h_, ops_.lm_head_, WeightLayout::kOutIn,
                                              vocab, out, GemmOut::kF32));
    VISMOE_RETURN_IF_ERROR(CopyToHostAsync(logits->data() + r * vocab, out,
                                           static_cast<size_t>(m * vocab) * sizeof(float), st_));
    // The next chunk reuses `normed` and `out`: the copy must be done (a
    // pageable destination makes it synchronous anyway).
    VISMOE_RETURN_IF_ERROR(ops_.stream_.Synchronize());
  }
  return absl::OkStatus();
}

absl::StatusOr<const float*> CudaDecoderStep::HostRows(StepRows which) {
  const Bf16* src = which == StepRows::kResidual ? hs_ : which == StepRows::kNormed ? x_ : y_;
  VISMOE_RETURN_IF_ERROR(DownloadF32(src, n_ * h_, &host_rows_));
  return host_rows_.data();
}

absl::Status CudaDecoderStep::DownloadF32(const Bf16* src, int64_t count,
                                          std::vector<float>* out) const {
  std::vector<Bf16> tmp(static_cast<size_t>(count));
  VISMOE_RETURN_IF_ERROR(CopyToHostAsync(tmp.data(), src, tmp.size() * sizeof(Bf16), st_));
  VISMOE_RETURN_IF_ERROR(ops_.stream_.Synchronize());
  out->resize(tmp.size());
  for (size_t i = 0; i < tmp.size(); ++i) (*out)[i] = Bf16ToFloat(tmp[i]);
  return absl::OkStatus();
}

CudaDecoderOps::~CudaDecoderOps() {
  // Kernels may still read the weights: finish the stream before freeing.
  if (stream_.get() != nullptr) (void)stream_.Synchronize();
}

int64_t CudaDecoderOps::ScratchBytes(const ModelConfig& config, int64_t max_tokens) {
  const TextConfig& c = config.text;
  const int64_t n = std::max<int64_t>(max_tokens, 1);
  const int64_t h = c.hidden_size, k = c.num_experts_per_tok, e = c.num_experts;
  const int64_t qd = int64_t{c.num_attention_heads} * c.head_dim;
  const int64_t kvd = int64_t{c.num_key_value_heads} * c.head_dim;
  const int64_t inter = std::max<int64_t>(int64_t{c.moe_intermediate_size} * k,
                                          c.intermediate_size);  // per token row
  const int64_t ds = static_cast<int64_t>(config.vision.deepstack_visual_indexes.size());
  auto b = [](int64_t count, size_t elem) {
    return static_cast<int64_t>(Aligned(static_cast<size_t>(count) * elem));
  };
  int64_t total = 0;
  total += 3 * b(n * h, 2);                          // hs, x, y
  total += b(n * h, 2) * 2;                          // compression's new hs; normed logits rows
  total += b(n * (qd + 2 * kvd), 2) + b(n * qd, 2);  // qkv, attn
  total += 2 * b(3 * n, 8) + b(n, 4);                // positions (twice with compression), ids
  total += b(n * e, 4) + b(n * k, 4) * 2;            // router logits, top-k
  total += b(e, 4) + b(e + 1, 4) + 2 * b(n * k, 4);  // permutation
  total += 2 * b(n * k * h, 2);                      // xp, yp
  total += b(n * 2 * inter, 2) + b(n * inter, 2);    // gate_up, act
  total += (1 + ds + 1) * b(n * h, 2);               // visual, DeepStack, ds_tmp
  total += 5 * b(n, 4);  // visual rows, kept rows, ds src/dst (and again after compression)
  total += b(n * h, 2) + b(n, 4);  // each sequence's last row for the logits, and its index
  total += b(kLogitRowsPerChunk * int64_t{c.vocab_size}, 4);
  total += 64 * static_cast<int64_t>(kAlign);  // slack for per-allocation alignment
  return total;
}

int64_t CudaDecoderOps::ActivationBytes(const ModelConfig& config, int64_t max_tokens) {
  return ScratchBytes(config, max_tokens) + static_cast<int64_t>(kBlasWorkspaceBytes) +
         3 * Blas::kMaxGroupedProblems * static_cast<int64_t>(sizeof(void*));
}

absl::StatusOr<std::unique_ptr<CudaDecoderOps>> CudaDecoderOps::Create(const ModelConfig& config,
                                                                       const Checkpoint& ckpt,
                                                                       const Options& options) {
  const TextConfig& c = config.text;
  if (c.attention_bias) {
    return absl::UnimplementedError("the CUDA backend does not run attention_bias checkpoints");
  }
  if (!c.mrope_section.empty() && c.mrope_section.size() != 3) {
    return absl::InvalidArgumentError(absl::StrCat("mrope_section has ", c.mrope_section.size(),
                                                   " entries; the CUDA rope kernel takes 3"));
  }
  if (!c.mrope_section.empty() &&
      c.mrope_section[0] + c.mrope_section[1] + c.mrope_section[2] != c.head_dim / 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("mrope_section [", absl::StrJoin(c.mrope_section, ", "),
                     "] does not sum to head_dim / 2 = ", c.head_dim / 2));
  }
  if (options.max_tokens_per_step < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_tokens_per_step must be >= 1, got ", options.max_tokens_per_step));
  }
  VISMOE_RETURN_IF_ERROR(ProbeCudaDevice(options.device).status());
  VISMOE_ASSIGN_OR_RETURN(const ArchSpec spec, ArchSpec::For(config));
  std::unique_ptr<CudaDecoderOps> m(new CudaDecoderOps());
  m->config_ = config;
  m->renormalize_topk_ = spec.renormalize_topk;
  m->max_tokens_ = options.max_tokens_per_step;
  m->device_ = options.device;
  m->mrope_section_ = c.mrope_section;
  VISMOE_RETURN_IF_ERROR(m->UploadWeights(config, ckpt));
  VISMOE_ASSIGN_OR_RETURN(m->stream_, Stream::Create());
  VISMOE_ASSIGN_OR_RETURN(m->host_rows_ready_, Event::Create());
  m->host_pool_ = options.host_pool;
  for (int e = 0; e < c.num_experts; ++e) {
    VISMOE_ASSIGN_OR_RETURN(Event ev, Event::Create());
    m->expert_done_.push_back(std::move(ev));
  }
  VISMOE_ASSIGN_OR_RETURN(m->blas_workspace_, DeviceBuffer::Allocate(kBlasWorkspaceBytes));
  VISMOE_ASSIGN_OR_RETURN(
      Blas blas, Blas::Create(m->stream_.get(), m->blas_workspace_.data(), kBlasWorkspaceBytes));
  m->blas_ = std::make_unique<Blas>(std::move(blas));
  VISMOE_ASSIGN_OR_RETURN(
      m->scratch_,
      DeviceArena::Create(static_cast<size_t>(ScratchBytes(config, options.max_tokens_per_step))));
  return m;
}

// The TextWeights every backend loads, packed to bf16 and uploaded in one copy.
absl::Status CudaDecoderOps::UploadWeights(const ModelConfig& config, const Checkpoint& ckpt) {
  VISMOE_ASSIGN_OR_RETURN(const TextWeights w, TextWeights::Load(config, ckpt));
  WeightPacker pack;
  const size_t embed = pack.Add(w.embed);
  const size_t norm = pack.Add(w.final_norm);
  const size_t lm_head = w.lm_head.data == w.embed.data ? embed : pack.Add(w.lm_head);
  // Offsets of each layer's tensors, in Layer's field order.
  std::vector<std::vector<size_t>> offs;
  for (const DecoderLayerWeights& l : w.layers) {
    std::vector<size_t> o;
    for (const TensorView* t : {&l.input_norm, &l.post_norm, &l.q, &l.k, &l.v, &l.o, &l.q_norm,
                                &l.k_norm, &l.router, &l.gate_proj, &l.up_proj, &l.down_proj}) {
      o.push_back(t->empty() ? SIZE_MAX : pack.Add(*t));
    }
    offs.push_back(std::move(o));
  }
  const size_t inv_freq = pack.AddF32(RopeInvFreq(config.text.head_dim, config.text.rope_theta));

  const std::vector<Bf16>& host = pack.host();
  VISMOE_ASSIGN_OR_RETURN(weights_, DeviceBuffer::Allocate(host.size() * sizeof(Bf16)));
  VISMOE_RETURN_IF_ERROR(CopyToDevice(weights_.data(), host.data(), host.size() * sizeof(Bf16)));
  const char* base = static_cast<const char*>(weights_.data());
  auto at = [base](size_t offset) {
    return offset == SIZE_MAX ? nullptr : reinterpret_cast<const Bf16*>(base + offset);
  };
  embed_ = at(embed);
  final_norm_ = at(norm);
  lm_head_ = at(lm_head);
  inv_freq_ = reinterpret_cast<const float*>(base + inv_freq);
  for (const std::vector<size_t>& o : offs) {
    layers_.push_back(Layer{at(o[0]), at(o[1]), at(o[2]), at(o[3]), at(o[4]), at(o[5]), at(o[6]),
                            at(o[7]), at(o[8]), at(o[9]), at(o[10]), at(o[11])});
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<KvPool>> CudaDecoderOps::CreateKvPool(int64_t blocks,
                                                                     int64_t block_tokens) const {
  const TextConfig& c = config_.text;
  VISMOE_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));  // may run on any thread
  VISMOE_ASSIGN_OR_RETURN(std::unique_ptr<DeviceKvPool> pool,
                          DeviceKvPool::Create(c.num_hidden_layers, blocks, block_tokens,
                                               int64_t{c.num_key_value_heads} * c.head_dim));
  return std::unique_ptr<KvPool>(std::move(pool));
}

absl::Status CudaDecoderOps::CheckStepSize(int64_t tokens) const {
  if (tokens <= max_tokens_) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("Forward: ", tokens,
                                                 " tokens exceed the CUDA scratch sized for ",
                                                 max_tokens_, " rows per step"));
}

absl::StatusOr<std::unique_ptr<DecoderStep>> CudaDecoderOps::BeginStep(
    const StepInput& input) const {
  VISMOE_RETURN_IF_ERROR(CheckStepSequences(input));
  std::vector<KvCache*> caches;
  std::vector<DeviceKvPool*> pools;
  std::vector<int64_t> seq_rows;
  for (const StepSequence& seq : input.sequences) {
    auto* pool = dynamic_cast<DeviceKvPool*>(seq.cache->pool());
    if (pool == nullptr) {
      return absl::InvalidArgumentError(
          "CUDA Forward: the KV cache's pool must come from this model's CreateKvPool");
    }
    caches.push_back(seq.cache);
    pools.push_back(pool);
    seq_rows.push_back(seq.rows);
  }
  VISMOE_RETURN_IF_ERROR(CheckStepSize(static_cast<int64_t>(input.tokens.size())));
  if (input.deepstack.size() > config_.vision.deepstack_visual_indexes.size()) {
    // The scratch holds as many features as the config declares.
    return absl::InvalidArgumentError(absl::StrCat("Forward: ", input.deepstack.size(),
                                                   " DeepStack features; the config declares ",
                                                   config_.vision.deepstack_visual_indexes.size()));
  }
  std::unique_lock<std::mutex> lock(mu_);
  // The calling thread (a scheduler's) may never have selected our device.
  VISMOE_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  scratch_.Reset();
  auto step = std::make_unique<CudaDecoderStep>(*this, std::move(caches), std::move(pools),
                                                std::move(seq_rows), std::move(lock));
  VISMOE_RETURN_IF_ERROR(step->Begin(input));
  return std::unique_ptr<DecoderStep>(std::move(step));
}

}  // namespace vismoe::cuda
