#include "engine/backends/cuda/qwen3_vl_vision_cuda.h"

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

// One Forward's device buffers, carved from the scratch arena.
struct Qwen3VlVisionCudaModel::Step {
  int64_t n = 0;               // patches
  Bf16* staged = nullptr;      // [min(n, kPatchChunkRows), patch_dim] patch rows
  Bf16* hs = nullptr;          // [n, hidden] residual stream
  Bf16* x = nullptr;           // [n, hidden] normed input (== [n / unit, unit * hidden])
  Bf16* qkv = nullptr;         // [n, 3 * hidden]
  Bf16* attn = nullptr;        // [n, hidden]
  Bf16* mid = nullptr;         // [n, max(intermediate, hidden)]
  float* cos = nullptr;        // [n, head_dim]
  float* sin = nullptr;        // [n, head_dim]
  float* patch_sal = nullptr;  // [n]
  float* row_stats = nullptr;  // saliency scratch for the largest frame
};

Qwen3VlVisionCudaModel::~Qwen3VlVisionCudaModel() {
  // Kernels may still read the weights: finish the stream before freeing.
  if (stream_.get() != nullptr) (void)stream_.Synchronize();
}

int64_t Qwen3VlVisionCudaModel::ScratchBytes(const ModelConfig& config, int64_t max_patches) {
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

absl::StatusOr<std::unique_ptr<Qwen3VlVisionCudaModel>> Qwen3VlVisionCudaModel::Create(
    const ModelConfig& config, const Checkpoint& ckpt, const Options& options) {
  VISMOE_RETURN_IF_ERROR(CheckVisionConfig(config, "Qwen3VlVisionCudaModel"));
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
  std::unique_ptr<Qwen3VlVisionCudaModel> m(new Qwen3VlVisionCudaModel(vc));
  m->max_patches_ = options.max_patches;

  // The same tensors, names and shape checks as the CPU tower.
  VISMOE_ASSIGN_OR_RETURN(const VisionWeights w, VisionWeights::Load(config, ckpt));
  WeightPacker pack;
  const size_t patch_w = pack.Add(w.patch_w);
  m->patch_b_ = Widen(w.patch_b);
  m->pos_embed_ = Widen(w.pos_embed);
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
  read_merger(w.merger, &moffs, &m->merger_);
  std::vector<MergerOffsets> doffs(w.deepstack.size());
  m->deepstack_.resize(doffs.size());
  for (size_t k = 0; k < doffs.size(); ++k)
    read_merger(w.deepstack[k], &doffs[k], &m->deepstack_[k]);

  const std::vector<Bf16>& host = pack.host();
  VISMOE_ASSIGN_OR_RETURN(m->weights_, DeviceBuffer::Allocate(host.size() * sizeof(Bf16)));
  VISMOE_RETURN_IF_ERROR(CopyToDevice(m->weights_.data(), host.data(), host.size() * sizeof(Bf16)));
  const char* base = static_cast<const char*>(m->weights_.data());
  auto at = [base](size_t offset) { return reinterpret_cast<const Bf16*>(base + offset); };
  m->patch_w_ = at(patch_w);  // the Conv3d as a Linear [hidden, patch_dim]
  for (const BlockOffsets& o : boffs) {
    Block b;
    b.norm1_w = at(o.norm1_w);
    b.norm1_b = at(o.norm1_b);
    b.norm2_w = at(o.norm2_w);
    b.norm2_b = at(o.norm2_b);
    b.qkv_w = at(o.qkv_w);
    b.qkv_b = at(o.qkv_b);
    b.proj_w = at(o.proj_w);
    b.proj_b = at(o.proj_b);
    b.fc1_w = at(o.fc1_w);
    b.fc1_b = at(o.fc1_b);
    b.fc2_w = at(o.fc2_w);
    b.fc2_b = at(o.fc2_b);
    m->blocks_.push_back(b);
  }
  auto set_merger = [&](const MergerOffsets& o, Merger* mg) {
    mg->norm_w = at(o.norm_w);
    mg->norm_b = at(o.norm_b);
    mg->fc1_w = at(o.fc1_w);
    mg->fc1_b = at(o.fc1_b);
    mg->fc2_w = at(o.fc2_w);
  };
  set_merger(moffs, &m->merger_);
  for (size_t k = 0; k < doffs.size(); ++k) set_merger(doffs[k], &m->deepstack_[k]);

  m->device_ = options.device;
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

int64_t Qwen3VlVisionCudaModel::patch_dim() const {
  return int64_t{config_.in_channels} * config_.temporal_patch_size * config_.patch_size *
         config_.patch_size;
}

absl::StatusOr<VisionOutput> Qwen3VlVisionCudaModel::Forward(
    absl::Span<const float> patches, absl::Span<const GridThw> grids) const {
  VisionOutput out;
  out.out_hidden = config_.out_hidden_size;
  VISMOE_ASSIGN_OR_RETURN(const int64_t n, CheckVisionInput(config_, patch_dim(), patches.size(),
                                                            grids, &out.tokens_per_image));
  if (n > max_patches_) {
    return absl::InvalidArgumentError(absl::StrCat("vision: ", n,
                                                   " patches exceed the CUDA scratch sized for ",
                                                   max_patches_, " (max_patches)"));
  }
  out.num_tokens = n / MergeUnit(config_);
  out.deepstack.assign(deepstack_.size(), std::vector<float>());
  if (n == 0) return out;  // no images: nothing to run (the CPU tower's empty output)
  std::lock_guard<std::mutex> lock(mu_);
  VISMOE_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));  // Forward may run on any thread
  scratch_.Reset();
  absl::Status st = ForwardLocked(patches, grids, n, &out);
  if (!st.ok()) {
    // Leave no work queued that reads this call's scratch.
    (void)stream_.Synchronize();
    return st;
  }
  return out;
}

absl::Status Qwen3VlVisionCudaModel::ForwardLocked(absl::Span<const float> patches,
                                                   absl::Span<const GridThw> grids, int64_t n,
                                                   VisionOutput* out) const {
  const int64_t hd = config_.hidden_size;
  const int64_t unit = MergeUnit(config_);
  const int64_t head_dim = HeadDim(config_);
  const int64_t rows = n / unit;
  const int64_t out_size = rows * config_.out_hidden_size;
  int64_t largest_frame = 0;
  for (const GridThw& g : grids) largest_frame = std::max(largest_frame, g.h * g.w);

  Step s;
  s.n = n;
  VISMOE_ASSIGN_OR_RETURN(s.staged,
                          scratch_.AllocateArray<Bf16>(std::min(n, kPatchChunkRows) * patch_dim()));
  VISMOE_ASSIGN_OR_RETURN(s.hs, scratch_.AllocateArray<Bf16>(n * hd));
  VISMOE_ASSIGN_OR_RETURN(s.x, scratch_.AllocateArray<Bf16>(n * hd));
  VISMOE_ASSIGN_OR_RETURN(s.qkv, scratch_.AllocateArray<Bf16>(n * 3 * hd));
  VISMOE_ASSIGN_OR_RETURN(s.attn, scratch_.AllocateArray<Bf16>(n * hd));
  VISMOE_ASSIGN_OR_RETURN(
      s.mid, scratch_.AllocateArray<Bf16>(n * std::max<int64_t>(config_.intermediate_size, hd)));
  VISMOE_ASSIGN_OR_RETURN(s.cos, scratch_.AllocateArray<float>(n * head_dim));
  VISMOE_ASSIGN_OR_RETURN(s.sin, scratch_.AllocateArray<float>(n * head_dim));
  VISMOE_ASSIGN_OR_RETURN(s.patch_sal, scratch_.AllocateArray<float>(n));
  VISMOE_ASSIGN_OR_RETURN(s.row_stats, scratch_.AllocateArray<float>(AttentionSaliencyScratchFloats(
                                           config_.num_heads, largest_frame)));
  // One fp32 merger output, downloaded behind each merger: stream order keeps
  // the next merger from overwriting it before its copy has run.
  VISMOE_ASSIGN_OR_RETURN(float* merged, scratch_.AllocateArray<float>(out_size));
  StreamHandle st = stream_.get();
  auto download = [&](std::vector<float>* dst) -> absl::Status {
    dst->resize(static_cast<size_t>(out_size));
    return CopyToHostAsync(dst->data(), merged, dst->size() * sizeof(float), st);
  };
  std::vector<bool> has_deepstack(deepstack_.size(), false);

  VISMOE_RETURN_IF_ERROR(Embed(patches, grids, s));
  for (int i = 0; i < config_.depth; ++i) {
    VISMOE_RETURN_IF_ERROR(RunBlock(blocks_[i], grids, /*last=*/i + 1 == config_.depth, s));
    for (size_t k = 0; k < deepstack_.size(); ++k) {
      // An index past the last block leaves its feature empty, as on the CPU.
      if (config_.deepstack_visual_indexes[k] != i) continue;
      VISMOE_RETURN_IF_ERROR(RunMerger(deepstack_[k], /*postshuffle_norm=*/true, s, merged));
      VISMOE_RETURN_IF_ERROR(download(&out->deepstack[k]));
      has_deepstack[k] = true;
    }
  }
  VISMOE_RETURN_IF_ERROR(RunMerger(merger_, /*postshuffle_norm=*/false, s, merged));
  VISMOE_RETURN_IF_ERROR(download(&out->embeds));
  std::vector<float> patch_sal(static_cast<size_t>(n));
  VISMOE_RETURN_IF_ERROR(
      CopyToHostAsync(patch_sal.data(), s.patch_sal, patch_sal.size() * sizeof(float), st));
  VISMOE_RETURN_IF_ERROR(stream_.Synchronize());

  // The mergers' fc2 bias, in fp32.
  const int64_t oh = config_.out_hidden_size;
  auto add_bias = [rows, oh](const std::vector<float>& bias, std::vector<float>* y) {
    for (int64_t r = 0; r < rows; ++r) {
      float* yr = y->data() + r * oh;
      for (int64_t c = 0; c < oh; ++c) yr[c] += bias[c];
    }
  };
  add_bias(merger_.fc2_b, &out->embeds);
  for (size_t k = 0; k < deepstack_.size(); ++k) {
    if (has_deepstack[k]) add_bias(deepstack_[k].fc2_b, &out->deepstack[k]);
  }
  MergePatchSaliency(patch_sal.data(), rows, unit, &out->saliency);
  return absl::OkStatus();
}

absl::Status Qwen3VlVisionCudaModel::Embed(absl::Span<const float> patches,
                                           absl::Span<const GridThw> grids, Step& s) const {
  const int64_t n = s.n;
  const int64_t hd = config_.hidden_size;
  const int64_t pd = patch_dim();
  StreamHandle st = stream_.get();
  // hs = bf16(position embedding + patch bias); the patch GEMM accumulates onto it.
  {
    std::vector<float> pos(static_cast<size_t>(n * hd), 0.0f);
    const TensorView table{pos_embed_.data(), DType::kF32, {config_.num_position_embeddings, hd}};
    AddVisionPositionEmbedding(config_, table, grids, pos.data());
    std::vector<Bf16> staged(pos.size());
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t d = 0; d < hd; ++d) {
        staged[r * hd + d] = FloatToBf16(pos[r * hd + d] + patch_b_[d]);
      }
    }
    // Pageable source: staged before this returns, so `staged` may go away.
    VISMOE_RETURN_IF_ERROR(
        CopyToDeviceAsync(s.hs, staged.data(), staged.size() * sizeof(Bf16), st));
  }
  {
    std::vector<float> cos, sin;
    VisionRotaryTables(config_, grids, &cos, &sin);
    VISMOE_RETURN_IF_ERROR(CopyToDeviceAsync(s.cos, cos.data(), cos.size() * sizeof(float), st));
    VISMOE_RETURN_IF_ERROR(CopyToDeviceAsync(s.sin, sin.data(), sin.size() * sizeof(float), st));
  }
  // Patch embedding (the Conv3d as a Linear) in chunks through `staged`: the
  // next chunk's upload is ordered on the stream behind the previous GEMM.
  const int64_t chunk = std::min(n, kPatchChunkRows);
  std::vector<Bf16> rows(static_cast<size_t>(chunk * pd));
  for (int64_t r0 = 0; r0 < n; r0 += chunk) {
    const int64_t m = std::min(chunk, n - r0);
    const float* src = patches.data() + r0 * pd;
    for (int64_t i = 0; i < m * pd; ++i) rows[i] = FloatToBf16(src[i]);
    VISMOE_RETURN_IF_ERROR(
        CopyToDeviceAsync(s.staged, rows.data(), static_cast<size_t>(m * pd) * sizeof(Bf16), st));
    VISMOE_RETURN_IF_ERROR(blas_->Linear(s.staged, m, pd, patch_w_, WeightLayout::kOutIn, hd,
                                         s.hs + r0 * hd, GemmOut::kBf16, /*beta=*/1.0f));
  }
  return absl::OkStatus();
}

absl::Status Qwen3VlVisionCudaModel::RunBlock(const Block& b, absl::Span<const GridThw> grids,
                                              bool last, Step& s) const {
  const int64_t n = s.n;
  const int64_t hd = config_.hidden_size;
  const int heads = config_.num_heads;
  const int head_dim = static_cast<int>(HeadDim(config_));
  const int64_t inter = config_.intermediate_size;
  const float eps = config_.layer_norm_eps;
  StreamHandle st = stream_.get();

  VISMOE_RETURN_IF_ERROR(
      LayerNorm(s.hs, n, static_cast<int>(hd), b.norm1_w, b.norm1_b, eps, s.x, st));
  VISMOE_RETURN_IF_ERROR(
      blas_->Linear(s.x, n, hd, b.qkv_w, WeightLayout::kOutIn, 3 * hd, s.qkv, GemmOut::kBf16));
  VISMOE_RETURN_IF_ERROR(AddBias(s.qkv, n, 3 * hd, b.qkv_b, st));
  // rotate_half rotary on q and k of every head, in place in the fused rows.
  VISMOE_RETURN_IF_ERROR(ApplyRopeTable(s.qkv, n, heads, head_dim, 3 * hd, s.cos, s.sin, st));
  VISMOE_RETURN_IF_ERROR(ApplyRopeTable(s.qkv + hd, n, heads, head_dim, 3 * hd, s.cos, s.sin, st));
  // Bidirectional attention within each frame.
  AttentionShape shape;
  shape.num_heads = heads;
  shape.num_kv_heads = heads;
  shape.head_dim = head_dim;
  shape.q_row_stride = 3 * hd;
  shape.kv_row_stride = 3 * hd;
  int64_t start = 0;
  for (const GridThw& g : grids) {
    const int64_t frame = g.h * g.w;
    for (int64_t t = 0; t < g.t; ++t, start += frame) {
      const Bf16* base = s.qkv + start * 3 * hd;
      VISMOE_RETURN_IF_ERROR(Attention(shape, base, frame, base + hd, base + 2 * hd, frame,
                                       /*causal=*/false, /*q_pos0=*/0, s.attn + start * hd, st));
      if (last) {
        VISMOE_RETURN_IF_ERROR(AttentionKeySaliency(shape, base, frame, base + hd, frame,
                                                    /*causal=*/false, /*q_pos0=*/0, s.row_stats,
                                                    s.patch_sal + start, st));
      }
    }
  }
  // hs += proj(attn) + bias.
  VISMOE_RETURN_IF_ERROR(blas_->Linear(s.attn, n, hd, b.proj_w, WeightLayout::kOutIn, hd, s.hs,
                                       GemmOut::kBf16, /*beta=*/1.0f));
  VISMOE_RETURN_IF_ERROR(AddBias(s.hs, n, hd, b.proj_b, st));

  VISMOE_RETURN_IF_ERROR(
      LayerNorm(s.hs, n, static_cast<int>(hd), b.norm2_w, b.norm2_b, eps, s.x, st));
  VISMOE_RETURN_IF_ERROR(
      blas_->Linear(s.x, n, hd, b.fc1_w, WeightLayout::kOutIn, inter, s.mid, GemmOut::kBf16));
  VISMOE_RETURN_IF_ERROR(AddBias(s.mid, n, inter, b.fc1_b, st));
  if (config_.hidden_act == "gelu") {
    VISMOE_RETURN_IF_ERROR(GeluErf(s.mid, n * inter, st));
  } else {
    VISMOE_RETURN_IF_ERROR(GeluTanh(s.mid, n * inter, st));
  }
  // hs += fc2(mid) + bias.
  VISMOE_RETURN_IF_ERROR(blas_->Linear(s.mid, n, inter, b.fc2_w, WeightLayout::kOutIn, hd, s.hs,
                                       GemmOut::kBf16, /*beta=*/1.0f));
  return AddBias(s.hs, n, hd, b.fc2_b, st);
}

absl::Status Qwen3VlVisionCudaModel::RunMerger(const Merger& m, bool postshuffle_norm, Step& s,
                                               float* out) const {
  const int64_t hd = config_.hidden_size;
  const int64_t unit = MergeUnit(config_);
  const int64_t mh = hd * unit;
  const int64_t rows = s.n / unit;
  const float eps = config_.layer_norm_eps;
  StreamHandle st = stream_.get();
  // Consecutive `unit` patch rows form one merged row, so both norms act on
  // the same contiguous buffer, just with different row widths.
  if (postshuffle_norm) {
    VISMOE_RETURN_IF_ERROR(
        LayerNorm(s.hs, rows, static_cast<int>(mh), m.norm_w, m.norm_b, eps, s.x, st));
  } else {
    VISMOE_RETURN_IF_ERROR(
        LayerNorm(s.hs, s.n, static_cast<int>(hd), m.norm_w, m.norm_b, eps, s.x, st));
  }
  VISMOE_RETURN_IF_ERROR(
      blas_->Linear(s.x, rows, mh, m.fc1_w, WeightLayout::kOutIn, mh, s.mid, GemmOut::kBf16));
  VISMOE_RETURN_IF_ERROR(AddBias(s.mid, rows, mh, m.fc1_b, st));
  VISMOE_RETURN_IF_ERROR(GeluErf(s.mid, rows * mh, st));  // nn.GELU(): exact
  return blas_->Linear(s.mid, rows, mh, m.fc2_w, WeightLayout::kOutIn, config_.out_hidden_size, out,
                       GemmOut::kF32);
}

}  // namespace vismoe::cuda
