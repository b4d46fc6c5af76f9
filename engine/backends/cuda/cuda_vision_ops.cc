#include "engine/backends/cuda/cuda_vision_ops.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/backends/cuda/weight_packer.h"
#include "engine/core/dtype.h"
#include "engine/core/status_macros.h"
#include "engine/core/tensor.h"
#include "engine/device/cuda/cuda_status.h"
#include "engine/model/qwen3_vl_vision_tables.h"
#include "engine/model/vision_weights.h"
#include "engine/ops/cuda/activations.h"
#include "engine/ops/cuda/attention.h"
#include "engine/ops/cuda/attention_saliency.h"
#include "engine/ops/cuda/norm.h"
#include "engine/ops/cuda/rope.h"

namespace vismoe::cuda {
namespace {

constexpr size_t kAlign = DeviceArena::kDefaultAlignment;
// The vision GEMMs are small next to the decoder's; a modest workspace keeps
// the tower's device footprint (counted against the memory budget) small.
constexpr size_t kBlasWorkspaceBytes = 4 << 20;
// Patch rows converted to bf16 and uploaded per patch-embedding GEMM.
constexpr int64_t kPatchChunkRows = 1024;
constexpr int kMaxHeadDim = 256;  // cuda::Attention's limit

size_t Aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

std::vector<float> Widen(const TensorView& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  ToFloat(t.dtype, t.data, v.size(), v.data());
  return v;
}

int64_t HeadDim(const VisionConfig& vc) { return vc.hidden_size / vc.num_heads; }
int64_t MergeUnit(const VisionConfig& vc) {
  return int64_t{vc.spatial_merge_size} * vc.spatial_merge_size;
}

}  // namespace

// One step on the device: the buffers carved from the scratch arena and the
// ops over them. Holds the ops' lock from construction to destruction.
class CudaVisionOps::Step final : public VisionStep {
 public:
  Step(const CudaVisionOps& ops, const VisionStepInput& in, int64_t n)
      : ops_(ops), c_(ops.config_), in_(in), n_(n), lock_(ops.mu_) {}
  ~Step() override {
    // Leave no work queued that reads this step's scratch or host outputs.
    if (!finished_) (void)ops_.stream_.Synchronize();
  }

  // Device, scratch, and the embedding: hs = patch_embed + bias + position.
  absl::Status Begin();

  absl::Status Attention(int block, bool saliency) override;
  absl::Status Mlp(int block) override;
  absl::Status Merge(int which, std::vector<float>* out) override;
  absl::Status Finish(std::vector<float>* patch_saliency) override;
  absl::StatusOr<const float*> HostResidual() override;

 private:
  absl::Status Allocate();
  absl::Status Embed();
  StreamHandle stream() const { return ops_.stream_.get(); }

  const CudaVisionOps& ops_;
  const VisionConfig& c_;
  const VisionStepInput in_;
  const int64_t n_;
  std::unique_lock<std::mutex> lock_;
  Bf16* staged_ = nullptr;     // [min(n, kPatchChunkRows), patch_dim] patch rows
  Bf16* hs_ = nullptr;         // [n, hidden] residual stream
  Bf16* x_ = nullptr;          // [n, hidden] normed input (== [n / unit, unit * hidden])
  Bf16* qkv_ = nullptr;        // [n, 3 * hidden]
  Bf16* attn_ = nullptr;       // [n, hidden]
  Bf16* mid_ = nullptr;        // [n, max(intermediate, hidden)]
  float* cos_ = nullptr;       // [n, head_dim]
  float* sin_ = nullptr;       // [n, head_dim]
  float* patch_sal_ = nullptr;  // [n]
  float* row_stats_ = nullptr;  // saliency scratch for the largest frame
  // One fp32 merger output, downloaded behind each merger: stream order keeps
  // the next merger from overwriting it before its copy has run.
  float* merged_ = nullptr;
  struct PendingBias {
    std::vector<float>* out;
    const std::vector<float>* bias;
  };
  std::vector<PendingBias> pending_;  // merger outputs still without their fc2 bias
  std::vector<float> host_hs_;
  bool finished_ = false;
};

CudaVisionOps::~CudaVisionOps() {
  // Kernels may still read the weights: finish the stream before freeing.
  if (stream_.get() != nullptr) (void)stream_.Synchronize();
}

int64_t CudaVisionOps::ScratchBytes(const ModelConfig& config, int64_t max_patches) {
  const VisionConfig& vc = config.vision;
  const int64_t n = std::max<int64_t>(max_patches, 1);
  const int64_t hd = vc.hidden_size;
  const int64_t head_dim = vc.num_heads > 0 ? HeadDim(vc) : 0;
  const int64_t pd =
      int64_t{vc.in_channels} * vc.temporal_patch_size * vc.patch_size * vc.patch_size;
  const int64_t unit = std::max<int64_t>(MergeUnit(vc), 1);
  const int64_t tokens = (n + unit - 1) / unit;
  auto b = [](int64_t count, size_t elem) {
    return static_cast<int64_t>(Aligned(static_cast<size_t>(count) * elem));
  };
  int64_t total = 0;
  total += b(std::min(n, kPatchChunkRows) * pd, 2);                // staged patch rows
  total += 3 * b(n * hd, 2) + b(n * 3 * hd, 2);                    // hs, x, attn; qkv
  total += b(n * std::max<int64_t>(vc.intermediate_size, hd), 2);  // mid
  total += 2 * b(n * head_dim, 4);                                 // cos, sin
  total += b(n, 4) + b(AttentionSaliencyScratchFloats(vc.num_heads, n), 4);
  total += b(tokens * vc.out_hidden_size, 4);  // fp32 merger output
  total += 32 * static_cast<int64_t>(kAlign);  // slack for alignment
  return total;
}

absl::StatusOr<std::unique_ptr<CudaVisionOps>> CudaVisionOps::Create(const ModelConfig& config,
                                                                     const Checkpoint& ckpt,
                                                                     const Options& options) {
  VISMOE_RETURN_IF_ERROR(CheckVisionConfig(config, "CudaVisionOps"));
  const VisionConfig& vc = config.vision;
  if (HeadDim(vc) > kMaxHeadDim) {
    return absl::UnimplementedError(absl::StrCat("vision_config: head_dim ", HeadDim(vc),
                                                 " exceeds the CUDA attention kernel's ",
                                                 kMaxHeadDim));
  }
  if (options.max_patches < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_patches must be >= 1, got ", options.max_patches));
  }
  VISMOE_RETURN_IF_ERROR(ProbeCudaDevice(options.device).status());
  std::unique_ptr<CudaVisionOps> m(new CudaVisionOps(vc));
  m->max_patches_ = options.max_patches;
  m->device_ = options.device;
  VISMOE_RETURN_IF_ERROR(m->UploadWeights(config, ckpt));
  VISMOE_ASSIGN_OR_RETURN(m->stream_, Stream::Create());
  VISMOE_ASSIGN_OR_RETURN(m->blas_workspace_, DeviceBuffer::Allocate(kBlasWorkspaceBytes));
  VISMOE_ASSIGN_OR_RETURN(
      Blas blas, Blas::Create(m->stream_.get(), m->blas_workspace_.data(), kBlasWorkspaceBytes));
  m->blas_ = std::make_unique<Blas>(std::move(blas));
  VISMOE_ASSIGN_OR_RETURN(
      m->scratch_,
      DeviceArena::Create(static_cast<size_t>(ScratchBytes(config, options.max_patches))));
  return m;
}

absl::Status CudaVisionOps::UploadWeights(const ModelConfig& config, const Checkpoint& ckpt) {
  VISMOE_ASSIGN_OR_RETURN(const VisionWeights w, VisionWeights::Load(config, ckpt));
  WeightPacker pack;
  const size_t patch_w = pack.Add(w.patch_w);
  patch_b_ = Widen(w.patch_b);
  pos_embed_ = Widen(w.pos_embed);
  pos_table_ = TensorView{pos_embed_.data(), DType::kF32,
                          {config_.num_position_embeddings, config_.hidden_size}};
  struct BlockOffsets {
    size_t norm1_w, norm1_b, norm2_w, norm2_b, qkv_w, qkv_b, proj_w, proj_b, fc1_w, fc1_b, fc2_w,
        fc2_b;
  };
  std::vector<BlockOffsets> boffs;
  for (const VisionBlockWeights& b : w.blocks) {
    boffs.push_back({pack.Add(b.norm1_w), pack.Add(b.norm1_b), pack.Add(b.norm2_w),
                     pack.Add(b.norm2_b), pack.Add(b.qkv_w), pack.Add(b.qkv_b), pack.Add(b.proj_w),
                     pack.Add(b.proj_b), pack.Add(b.fc1_w), pack.Add(b.fc1_b), pack.Add(b.fc2_w),
                     pack.Add(b.fc2_b)});
  }
  struct MergerOffsets {
    size_t norm_w, norm_b, fc1_w, fc1_b, fc2_w;
  };
  // fc2's bias stays fp32 on the host side of the pack (added after the GEMM).
  auto read_merger = [&](const VisionMergerWeights& mw, MergerOffsets* o, Merger* mg) {
    *o = {pack.Add(mw.norm_w), pack.Add(mw.norm_b), pack.Add(mw.fc1_w), pack.Add(mw.fc1_b),
          pack.Add(mw.fc2_w)};
    mg->fc2_b = Widen(mw.fc2_b);
  };
  MergerOffsets moffs;
  read_merger(w.merger, &moffs, &merger_);
  std::vector<MergerOffsets> doffs(w.deepstack.size());
  deepstack_.resize(doffs.size());
  for (size_t k = 0; k < doffs.size(); ++k) read_merger(w.deepstack[k], &doffs[k], &deepstack_[k]);

  const std::vector<Bf16>& host = pack.host();
  VISMOE_ASSIGN_OR_RETURN(weights_, DeviceBuffer::Allocate(host.size() * sizeof(Bf16)));
  VISMOE_RETURN_IF_ERROR(CopyToDevice(weights_.data(), host.data(), host.size() * sizeof(Bf16)));
  const char* base = static_cast<const char*>(weights_.data());
  auto at = [base](size_t offset) { return reinterpret_cast<const Bf16*>(base + offset); };
  patch_w_ = at(patch_w);  // the Conv3d as a Linear [hidden, patch_dim]
  for (const BlockOffsets& o : boffs) {
    blocks_.push_back({at(o.norm1_w), at(o.norm1_b), at(o.norm2_w), at(o.norm2_b), at(o.qkv_w),
                       at(o.qkv_b), at(o.proj_w), at(o.proj_b), at(o.fc1_w), at(o.fc1_b),
                       at(o.fc2_w), at(o.fc2_b)});
  }
  auto set_merger = [&](const MergerOffsets& o, Merger* mg) {
    mg->norm_w = at(o.norm_w);
    mg->norm_b = at(o.norm_b);
    mg->fc1_w = at(o.fc1_w);
    mg->fc1_b = at(o.fc1_b);
    mg->fc2_w = at(o.fc2_w);
  };
  set_merger(moffs, &merger_);
  for (size_t k = 0; k < doffs.size(); ++k) set_merger(doffs[k], &deepstack_[k]);
  return absl::OkStatus();
}

absl::Status CudaVisionOps::CheckPatches(int64_t patches) const {
  if (patches <= max_patches_) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "vision: ", patches, " patches exceed the CUDA scratch sized for ", max_patches_,
      " (max_patches)"));
}

absl::StatusOr<std::unique_ptr<VisionStep>> CudaVisionOps::BeginStep(
    const VisionStepInput& input) const {
  VISMOE_ASSIGN_OR_RETURN(const int64_t n, VisionStepRows(config_, input));
  VISMOE_RETURN_IF_ERROR(CheckPatches(n));
  auto step = std::make_unique<Step>(*this, input, n);
  VISMOE_RETURN_IF_ERROR(step->Begin());
  return std::unique_ptr<VisionStep>(std::move(step));
}

absl::Status CudaVisionOps::Step::Begin() {
  VISMOE_CUDA_RETURN_IF_ERROR(cudaSetDevice(ops_.device_));  // steps may run on any thread
  ops_.scratch_.Reset();
  VISMOE_RETURN_IF_ERROR(Allocate());
  return Embed();
}

absl::Status CudaVisionOps::Step::Allocate() {
  const int64_t hd = c_.hidden_size;
  const int64_t pd = static_cast<int64_t>(in_.patches.size()) / n_;
  int64_t largest_frame = 0;
  for (const GridThw& g : in_.grids) largest_frame = std::max(largest_frame, g.h * g.w);
  DeviceArena& a = ops_.scratch_;
  VISMOE_ASSIGN_OR_RETURN(staged_, a.AllocateArray<Bf16>(std::min(n_, kPatchChunkRows) * pd));
  VISMOE_ASSIGN_OR_RETURN(hs_, a.AllocateArray<Bf16>(n_ * hd));
  VISMOE_ASSIGN_OR_RETURN(x_, a.AllocateArray<Bf16>(n_ * hd));
  VISMOE_ASSIGN_OR_RETURN(qkv_, a.AllocateArray<Bf16>(n_ * 3 * hd));
  VISMOE_ASSIGN_OR_RETURN(attn_, a.AllocateArray<Bf16>(n_ * hd));
  VISMOE_ASSIGN_OR_RETURN(
      mid_, a.AllocateArray<Bf16>(n_ * std::max<int64_t>(c_.intermediate_size, hd)));
  VISMOE_ASSIGN_OR_RETURN(cos_, a.AllocateArray<float>(n_ * HeadDim(c_)));
  VISMOE_ASSIGN_OR_RETURN(sin_, a.AllocateArray<float>(n_ * HeadDim(c_)));
  VISMOE_ASSIGN_OR_RETURN(patch_sal_, a.AllocateArray<float>(n_));
  VISMOE_ASSIGN_OR_RETURN(row_stats_, a.AllocateArray<float>(AttentionSaliencyScratchFloats(
                                          c_.num_heads, largest_frame)));
  VISMOE_ASSIGN_OR_RETURN(merged_,
                          a.AllocateArray<float>(n_ / MergeUnit(c_) * c_.out_hidden_size));
  // Zero saliency when no Attention records it (the CPU's contract).
  return MemsetAsync(patch_sal_, 0, static_cast<size_t>(n_) * sizeof(float), stream());
}

absl::Status CudaVisionOps::Step::Embed() {
  const int64_t hd = c_.hidden_size;
  const int64_t pd = static_cast<int64_t>(in_.patches.size()) / n_;
  StreamHandle st = stream();
  // hs = bf16(position embedding + patch bias); the patch GEMM accumulates onto it.
  {
    std::vector<Bf16> staged(static_cast<size_t>(n_ * hd));
    for (int64_t r = 0; r < n_; ++r) {
      for (int64_t d = 0; d < hd; ++d) {
        staged[r * hd + d] = FloatToBf16(in_.position[r * hd + d] + ops_.patch_b_[d]);
      }
    }
    // Pageable source: staged before this returns, so `staged` may go away.
    VISMOE_RETURN_IF_ERROR(CopyToDeviceAsync(hs_, staged.data(), staged.size() * sizeof(Bf16), st));
  }
  VISMOE_RETURN_IF_ERROR(
      CopyToDeviceAsync(cos_, in_.cos.data(), in_.cos.size() * sizeof(float), st));
  VISMOE_RETURN_IF_ERROR(
      CopyToDeviceAsync(sin_, in_.sin.data(), in_.sin.size() * sizeof(float), st));
  // Patch embedding (the Conv3d as a Linear) in chunks through `staged_`: the
  // next chunk's upload is ordered on the stream behind the previous GEMM.
  const int64_t chunk = std::min(n_, kPatchChunkRows);
  std::vector<Bf16> rows(static_cast<size_t>(chunk * pd));
  for (int64_t r0 = 0; r0 < n_; r0 += chunk) {
    const int64_t m = std::min(chunk, n_ - r0);
    const float* src = in_.patches.data() + r0 * pd;
    for (int64_t i = 0; i < m * pd; ++i) rows[i] = FloatToBf16(src[i]);
    VISMOE_RETURN_IF_ERROR(
        CopyToDeviceAsync(staged_, rows.data(), static_cast<size_t>(m * pd) * sizeof(Bf16), st));
    VISMOE_RETURN_IF_ERROR(ops_.blas_->Linear(staged_, m, pd, ops_.patch_w_, WeightLayout::kOutIn,
                                              hd, hs_ + r0 * hd, GemmOut::kBf16, /*beta=*/1.0f));
  }
  return absl::OkStatus();
}

absl::Status CudaVisionOps::Step::Attention(int block, bool saliency) {
  VISMOE_RETURN_IF_ERROR(CheckVisionIndex("block", block, ops_.blocks_.size()));
  const Block& b = ops_.blocks_[block];
  const int64_t hd = c_.hidden_size;
  const int heads = c_.num_heads;
  const int head_dim = static_cast<int>(HeadDim(c_));
  StreamHandle st = stream();
  Blas& blas = *ops_.blas_;
  VISMOE_RETURN_IF_ERROR(LayerNorm(hs_, n_, static_cast<int>(hd), b.norm1_w, b.norm1_b,
                                   c_.layer_norm_eps, x_, st));
  VISMOE_RETURN_IF_ERROR(
      blas.Linear(x_, n_, hd, b.qkv_w, WeightLayout::kOutIn, 3 * hd, qkv_, GemmOut::kBf16));
  VISMOE_RETURN_IF_ERROR(AddBias(qkv_, n_, 3 * hd, b.qkv_b, st));
  // rotate_half rotary on q and k of every head, in place in the fused rows.
  VISMOE_RETURN_IF_ERROR(ApplyRopeTable(qkv_, n_, heads, head_dim, 3 * hd, cos_, sin_, st));
  VISMOE_RETURN_IF_ERROR(ApplyRopeTable(qkv_ + hd, n_, heads, head_dim, 3 * hd, cos_, sin_, st));
  // Bidirectional attention within each frame.
  AttentionShape shape;
  shape.num_heads = heads;
  shape.num_kv_heads = heads;
  shape.head_dim = head_dim;
  shape.q_row_stride = 3 * hd;
  shape.kv_row_stride = 3 * hd;
  int64_t start = 0;
  for (const GridThw& g : in_.grids) {
    const int64_t frame = g.h * g.w;
    for (int64_t t = 0; t < g.t; ++t, start += frame) {
      const Bf16* base = qkv_ + start * 3 * hd;
      VISMOE_RETURN_IF_ERROR(cuda::Attention(shape, base, frame, base + hd, base + 2 * hd, frame,
                                             /*causal=*/false, /*q_pos0=*/0, attn_ + start * hd,
                                             st));
      if (saliency) {
        VISMOE_RETURN_IF_ERROR(AttentionKeySaliency(shape, base, frame, base + hd, frame,
                                                    /*causal=*/false, /*q_pos0=*/0, row_stats_,
                                                    patch_sal_ + start, st));
      }
    }
  }
  // hs += proj(attn) + bias.
  VISMOE_RETURN_IF_ERROR(blas.Linear(attn_, n_, hd, b.proj_w, WeightLayout::kOutIn, hd, hs_,
                                     GemmOut::kBf16, /*beta=*/1.0f));
  return AddBias(hs_, n_, hd, b.proj_b, st);
}

absl::Status CudaVisionOps::Step::Mlp(int block) {
  VISMOE_RETURN_IF_ERROR(CheckVisionIndex("block", block, ops_.blocks_.size()));
  const Block& b = ops_.blocks_[block];
  const int64_t hd = c_.hidden_size;
  const int64_t inter = c_.intermediate_size;
  StreamHandle st = stream();
  Blas& blas = *ops_.blas_;
  VISMOE_RETURN_IF_ERROR(LayerNorm(hs_, n_, static_cast<int>(hd), b.norm2_w, b.norm2_b,
                                   c_.layer_norm_eps, x_, st));
  VISMOE_RETURN_IF_ERROR(
      blas.Linear(x_, n_, hd, b.fc1_w, WeightLayout::kOutIn, inter, mid_, GemmOut::kBf16));
  VISMOE_RETURN_IF_ERROR(AddBias(mid_, n_, inter, b.fc1_b, st));
  if (c_.hidden_act == "gelu") {
    VISMOE_RETURN_IF_ERROR(GeluErf(mid_, n_ * inter, st));
  } else {
    VISMOE_RETURN_IF_ERROR(GeluTanh(mid_, n_ * inter, st));
  }
  // hs += fc2(mid) + bias.
  VISMOE_RETURN_IF_ERROR(blas.Linear(mid_, n_, inter, b.fc2_w, WeightLayout::kOutIn, hd, hs_,
                                     GemmOut::kBf16, /*beta=*/1.0f));
  return AddBias(hs_, n_, hd, b.fc2_b, st);
}

absl::Status CudaVisionOps::Step::Merge(int which, std::vector<float>* out) {
  if (which != kFinalMerger) {
    VISMOE_RETURN_IF_ERROR(CheckVisionIndex("DeepStack merger", which, ops_.deepstack_.size()));
  }
  const Merger& m = which == kFinalMerger ? ops_.merger_ : ops_.deepstack_[which];
  const int64_t hd = c_.hidden_size;
  const int64_t unit = MergeUnit(c_);
  const int64_t mh = hd * unit;
  const int64_t rows = n_ / unit;
  const float eps = c_.layer_norm_eps;
  StreamHandle st = stream();
  // Consecutive `unit` patch rows form one merged row, so both norms act on
  // the same contiguous buffer, just with different row widths.
  if (which == kFinalMerger) {
    VISMOE_RETURN_IF_ERROR(LayerNorm(hs_, n_, static_cast<int>(hd), m.norm_w, m.norm_b, eps, x_, st));
  } else {
    VISMOE_RETURN_IF_ERROR(
        LayerNorm(hs_, rows, static_cast<int>(mh), m.norm_w, m.norm_b, eps, x_, st));
  }
  Blas& blas = *ops_.blas_;
  VISMOE_RETURN_IF_ERROR(
      blas.Linear(x_, rows, mh, m.fc1_w, WeightLayout::kOutIn, mh, mid_, GemmOut::kBf16));
  VISMOE_RETURN_IF_ERROR(AddBias(mid_, rows, mh, m.fc1_b, st));
  VISMOE_RETURN_IF_ERROR(GeluErf(mid_, rows * mh, st));  // nn.GELU(): exact
  VISMOE_RETURN_IF_ERROR(blas.Linear(mid_, rows, mh, m.fc2_w, WeightLayout::kOutIn,
                                     c_.out_hidden_size, merged_, GemmOut::kF32));
  out->resize(static_cast<size_t>(rows * c_.out_hidden_size));
  VISMOE_RETURN_IF_ERROR(CopyToHostAsync(out->data(), merged_, out->size() * sizeof(float), st));
  pending_.push_back({out, &m.fc2_b});
  return absl::OkStatus();
}

absl::Status CudaVisionOps::Step::Finish(std::vector<float>* patch_saliency) {
  patch_saliency->resize(static_cast<size_t>(n_));
  VISMOE_RETURN_IF_ERROR(CopyToHostAsync(patch_saliency->data(), patch_sal_,
                                         patch_saliency->size() * sizeof(float), stream()));
  VISMOE_RETURN_IF_ERROR(ops_.stream_.Synchronize());
  finished_ = true;
  // The mergers' fc2 bias, in fp32.
  const int64_t oh = c_.out_hidden_size;
  for (const PendingBias& p : pending_) {
    const int64_t rows = static_cast<int64_t>(p.out->size()) / oh;
    for (int64_t r = 0; r < rows; ++r) {
      float* y = p.out->data() + r * oh;
      for (int64_t c = 0; c < oh; ++c) y[c] += (*p.bias)[c];
    }
  }
  pending_.clear();
  return absl::OkStatus();
}

absl::StatusOr<const float*> CudaVisionOps::Step::HostResidual() {
  const int64_t count = n_ * c_.hidden_size;
  std::vector<Bf16> raw(static_cast<size_t>(count));
  VISMOE_RETURN_IF_ERROR(CopyToHostAsync(raw.data(), hs_, raw.size() * sizeof(Bf16), stream()));
  VISMOE_RETURN_IF_ERROR(ops_.stream_.Synchronize());
  host_hs_.resize(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) host_hs_[i] = Bf16ToFloat(raw[i]);
  return host_hs_.data();
}

}  // namespace vismoe::cuda
