#include "engine/backends/cuda/cuda_decoder_ops.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/backends/cuda/cuda_decoder_step.h"
#include "engine/backends/cuda/device_kv_pool.h"
#include "engine/backends/cuda/weight_packer.h"
#include "engine/core/dtype.h"
#include "engine/core/status_macros.h"
#include "engine/device/cuda/cuda_status.h"
#include "engine/model/arch_spec.h"
#include "engine/model/text_weights.h"
#include "engine/offload/expert_batch_runner.h"
#include "engine/ops/cpu/moe.h"
#include "engine/ops/cpu/rope.h"
#include "engine/ops/cuda/activations.h"
#include "engine/ops/cuda/attention.h"
#include "engine/ops/cuda/embedding.h"
#include "engine/ops/cuda/greedy_argmax.h"
#include "engine/ops/cuda/latent_attention.h"
#include "engine/ops/cuda/moe_permute.h"
#include "engine/ops/cuda/moe_router.h"
#include "engine/ops/cuda/norm.h"
#include "engine/ops/cuda/rope.h"
#include "engine/ops/cuda/token_draw_rows.h"

namespace vismoe::cuda {
namespace {

constexpr size_t kAlign = DeviceArena::kDefaultAlignment;
// cuBLAS's recommendation for Hopper; a small model's GEMMs need no split-K
// room worth 32 MiB of a small budget (cuBLAS picks kernels that fit).
size_t BlasWorkspaceBytes(const TextConfig& c) {
  return c.hidden_size >= 1024 ? size_t{32} << 20 : size_t{4} << 20;
}

size_t Aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

}  // namespace

LatentShape LatentShapeOf(const TextConfig& c) {
  LatentShape s;
  if (!c.mla.has_value()) return s;
  s.num_heads = c.num_attention_heads;
  s.rank = c.mla->kv_lora_rank;
  s.nope_dim = c.mla->qk_nope_head_dim;
  s.rope_dim = c.mla->qk_rope_head_dim;
  s.v_dim = c.mla->v_head_dim;
  s.scale = static_cast<float>(c.AttentionScale());
  return s;
}

int64_t StepInterRows(const TextConfig& c) {
  return std::max({int64_t{c.moe_intermediate_size} * c.num_experts_per_tok,
                   int64_t{c.intermediate_size},
                   int64_t{c.moe_intermediate_size} * c.n_shared_experts});
}

CudaDecoderOps::~CudaDecoderOps() {
  // Kernels may still read the weights: finish the stream before freeing.
  if (stream_.get() != nullptr) (void)stream_.Synchronize();
}

int64_t CudaDecoderOps::ScratchBytes(const ModelConfig& config, int64_t max_tokens,
                                     bool fp8_experts) {
  const TextConfig& c = config.text;
  const int64_t n = std::max<int64_t>(max_tokens, 1);
  const int64_t h = c.hidden_size, k = c.num_experts_per_tok, e = c.num_experts;
  const int64_t qd = int64_t{c.num_attention_heads} * c.head_dim;
  const int64_t kvd = int64_t{c.num_key_value_heads} * c.head_dim;
  const int64_t inter = StepInterRows(c);  // per token row
  const int64_t ds = static_cast<int64_t>(config.vision.deepstack_visual_indexes.size());
  auto b = [](int64_t count, size_t elem) {
    return static_cast<int64_t>(Aligned(static_cast<size_t>(count) * elem));
  };
  int64_t total = 0;
  total += 3 * b(n * h, 2);                          // hs, x, y
  total += b(n * h, 2) * 2;                          // compression's new hs; normed logits rows
  if (!c.mla.has_value()) total += b(n * (qd + 2 * kvd), 2) + b(n * qd, 2);  // qkv, attn
  total += 2 * b(3 * n, 8) + b(n, 4);                // positions (twice with compression), ids
  total += b(n * e, 4) + b(n * k, 4) * 2;            // router logits, top-k
  total += b(e, 4) + b(e + 1, 4) + 2 * b(n * k, 4);  // permutation
  total += 2 * b(n * k * h, 2);                      // xp, yp
  total += b(n * 2 * inter, 2) + b(n * inter, 2);    // gate_up, act
  total += (1 + ds + 1) * b(n * h, 2);               // visual, DeepStack, ds_tmp
  total += 5 * b(n, 4);  // visual rows, kept rows, ds src/dst (and again after compression)
  total += 2 * b(n, 4);  // LongRoPE's row scales (again after compression)
  if (c.fp8.has_value() || c.mxfp4.has_value() || fp8_experts) {  // widened, kWidenSlots at a time
    total +=
        b(kWidenSlots * StreamExpertLauncher::ExpertScratchElems(h, c.moe_intermediate_size), 2);
  }
  total += b(n * h, 2) + b(n, 4);  // each sequence's last row for the logits, and its index
  total += b(kLogitRowsPerChunk * int64_t{c.vocab_size}, 4);
  total += b(GreedyArgmaxWorkspaceBytes(kLogitRowsPerChunk), 1);  // device argmax partials
  // DeviceMoe's, in steps of at most kMaxDecodeRows rows: the active experts,
  // fp32 SwiGLU rows and expert outputs.
  const int64_t d = std::min(n, kMaxDecodeRows);
  total += b(e, 4) + b(1, 4) + b(d * k * c.moe_intermediate_size, 4) + b(d * k * h, 4);
  if (c.mla.has_value()) {  // q_a, q, the latent rows, the heads' outputs; fp32 query and latent
    const LatentShape ls = LatentShapeOf(c);
    const int64_t chunk = std::min(n, kLatentChunkRows);
    total += b(n * c.mla->q_lora_rank, 2) + b(n * ls.q_stride(), 2) + b(n * ls.row_elems(), 2) +
             b(n * ls.num_heads * ls.v_dim, 2) + 2 * b(chunk * ls.num_heads * ls.rank, 4);
  }
  total += 64 * static_cast<int64_t>(kAlign);  // slack for per-allocation alignment
  return total;
}

// An FP8 checkpoint's linear weights outside the experts are held in bf16
// (UploadWeights): one byte per weight beyond the stored e4m3 byte the memory
// plan counts as resident. Attention and dense MLP weights, all assumed FP8
// (a bound: modules_to_not_convert may keep some in bf16 already).
int64_t CudaDecoderOps::WidenedWeightBytes(const ModelConfig& config) {
  const TextConfig& c = config.text;
  if (!c.fp8.has_value()) return 0;
  const int64_t h = c.hidden_size, nh = c.num_attention_heads;
  const int64_t qd = nh * c.head_dim;
  const int64_t kvd = int64_t{c.num_key_value_heads} * c.head_dim;
  int64_t attention = h * (qd + 2 * kvd) + qd * h;
  if (c.mla.has_value()) {  // q (through q_lora_rank or not), kv_a, kv_b, o
    const TextConfig::Mla& m = *c.mla;
    const int64_t q_out = nh * m.qk_head_dim();
    attention = (m.q_lora_rank > 0 ? int64_t{m.q_lora_rank} * (h + q_out) : h * q_out) +
                h * (int64_t{m.kv_lora_rank} + m.qk_rope_head_dim) +
                nh * (int64_t{m.qk_nope_head_dim} + m.v_head_dim) * m.kv_lora_rank +
                nh * m.v_head_dim * h;
  }
  const int64_t shared = 3 * h * int64_t{c.n_shared_experts} * c.moe_intermediate_size;
  int64_t weights = 0;
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    weights += attention;
    weights += c.IsMoeLayer(l) ? shared : 3 * h * int64_t{c.intermediate_size};
  }
  return weights;
}

int64_t CudaDecoderOps::ActivationBytes(const ModelConfig& config, int64_t max_tokens,
                                        bool fp8_experts) {
  // The grouped GEMMs' pointer table and DeviceMoe's expert tables (weights
  // and FP8 scales: PinnedLayerTables).
  const TextConfig& c = config.text;
  const int64_t tables =
      3 * Blas::kMaxGroupedProblems + 6 * int64_t{c.num_hidden_layers} * std::max(c.num_experts, 1);
  return ScratchBytes(config, max_tokens, fp8_experts) +
         static_cast<int64_t>(BlasWorkspaceBytes(c)) +
         tables * static_cast<int64_t>(sizeof(void*)) + WidenedWeightBytes(config);
}

absl::Status CudaDecoderOps::Runs(const ModelConfig& config) {
  VISMOE_ASSIGN_OR_RETURN(const ArchSpec spec, ArchSpec::For(config));
  const TextConfig& c = config.text;
  const bool router = spec.router != RouterKind::kSparseMixer || c.num_experts_per_tok == 2;
  if (!router) {
    return absl::UnimplementedError(
        absl::StrCat("the CUDA backend runs the sparsemixer with num_experts_per_tok 2 only, not ",
                     c.num_experts_per_tok, ": use --backend=cpu"));
  }
  const bool grouped = spec.router == RouterKind::kDeepseekSigmoid ||
                       (spec.router == RouterKind::kDeepseekSoftmax && c.group_limited);
  if (grouped && c.topk_group > 32) {  // a lane per kept group (MoeRouterGroup)
    return absl::UnimplementedError(
        absl::StrCat("the CUDA backend keeps at most 32 groups, not "
                     "topk_group=",
                     c.topk_group, ": use --backend=cpu"));
  }
  if (c.mla.has_value()) {
    if (absl::Status st = CheckLatentShape(LatentShapeOf(c)); !st.ok()) {
      return absl::UnimplementedError(absl::StrCat("the CUDA backend does not run this ",
                                                   config.model_type, ": ", st.message(),
                                                   "; use --backend=cpu"));
    }
  }
  return absl::OkStatus();
}

absl::Status CudaDecoderOps::Verified(const ModelConfig& config) {
  VISMOE_ASSIGN_OR_RETURN(const ArchSpec spec, ArchSpec::For(config));
  const TextConfig& c = config.text;
  std::vector<std::string> unverified;
  if (spec.qk_norm == QkNormScope::kProjection)
    unverified.push_back("q/k norms of whole projections");
  if (spec.qk_norm == QkNormScope::kNone) unverified.push_back("no q/k norms");
  if (c.clip_qkv > 0) unverified.push_back("clip_qkv");
  bool window = c.sliding_window > 0;
  for (int w : c.layer_windows) window = window || w > 0;
  if (window) unverified.push_back("sliding windows");
  if (c.attention_sinks) unverified.push_back("attention sinks");
  if (c.attention_bias) unverified.push_back("attention biases");
  if (c.yarn.has_value()) unverified.push_back("YaRN");
  if (spec.router == RouterKind::kTopKSoftmaxBiased) unverified.push_back("its router");
  if (c.clamped_swiglu.has_value()) unverified.push_back("its experts' biases and clamped SwiGLU");
  if (spec.norm == NormKind::kLayerNorm) unverified.push_back("LayerNorm");
  if (spec.router == RouterKind::kSparseMixer) unverified.push_back("the sparsemixer");
  if (c.longrope.has_value()) unverified.push_back("LongRoPE");
  if (c.lm_head_bias) unverified.push_back("lm_head bias");
  if (c.fp8.has_value()) unverified.push_back("FP8 weights and experts");
  if (c.mxfp4.has_value()) unverified.push_back("MXFP4 experts");
  if (c.mla.has_value()) unverified.push_back("multi-head latent attention");
  if (spec.router == RouterKind::kDeepseekSoftmax || spec.router == RouterKind::kDeepseekSigmoid) {
    unverified.push_back("DeepSeek's router");
  }
  if (c.n_shared_experts > 0) unverified.push_back("shared experts");
  if (unverified.empty()) return absl::OkStatus();
  // Compiled and tested against the CPU in the gpu tests, which have not run
  // on a GPU yet (tests/gpu/README.md).
  return absl::FailedPreconditionError(
      absl::StrCat("the CUDA backend's path for ", config.model_type, " (",
                   absl::StrJoin(unverified, ", "), ") has not run on a GPU yet"));
}

absl::StatusOr<std::unique_ptr<CudaDecoderOps>> CudaDecoderOps::Create(const ModelConfig& config,
                                                                       const Checkpoint& ckpt,
                                                                       const Options& options) {
  const TextConfig& c = config.text;
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
  VISMOE_ASSIGN_OR_RETURN(const ArchSpec spec, ArchSpec::For(config));
  VISMOE_RETURN_IF_ERROR(Runs(config));
  VISMOE_RETURN_IF_ERROR(ProbeCudaDevice(options.device).status());
  std::unique_ptr<CudaDecoderOps> m(new CudaDecoderOps());
  m->config_ = config;
  m->renormalize_topk_ = spec.renormalize_topk;
  m->qk_norm_ = spec.qk_norm;
  m->router_ = spec.router;
  m->norm_ = spec.norm;
  m->widen_experts_ = c.fp8.has_value() || c.mxfp4.has_value() || options.fp8_experts;
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
  const size_t workspace = BlasWorkspaceBytes(c);
  VISMOE_ASSIGN_OR_RETURN(m->blas_workspace_, DeviceBuffer::Allocate(workspace));
  VISMOE_ASSIGN_OR_RETURN(Blas blas,
                          Blas::Create(m->stream_.get(), m->blas_workspace_.data(), workspace));
  m->blas_ = std::make_unique<Blas>(std::move(blas));
  VISMOE_ASSIGN_OR_RETURN(
      m->scratch_, DeviceArena::Create(static_cast<size_t>(
                       ScratchBytes(config, options.max_tokens_per_step, options.fp8_experts))));
  VISMOE_RETURN_IF_ERROR(m->SetUpDeviceMoe(options));
  return m;
}

// The hit path of pinned layers (DeviceMoe), greedy ids and op timing.
absl::Status CudaDecoderOps::SetUpDeviceMoe(const Options& options) {
  const TextConfig& c = config_.text;
  VISMOE_ASSIGN_OR_RETURN(
      greedy_ids_, PinnedHostBuffer::Allocate(static_cast<size_t>(max_tokens_) * sizeof(int32_t),
                                              true, /*mapped=*/true));
  VISMOE_ASSIGN_OR_RETURN(
      token_draws_,
      PinnedHostBuffer::Allocate(static_cast<size_t>(max_tokens_) * sizeof(cuda::DeviceTokenDraw),
                                 true, /*mapped=*/true));
  if (options.op_timing) timer_ = std::make_unique<OpTimer>(options.stats);
  const char* graphs = std::getenv("VISMOE_CUDA_GRAPHS");
  graphs_enabled_ = graphs == nullptr || std::string(graphs) != "0";
  const char* sampling = std::getenv("VISMOE_CUDA_DEVICE_SAMPLING");
  device_sampling_ =
      options.device_sampling || (sampling != nullptr && std::string(sampling) == "1");
  // Softmax top-k routing (or DeepSeek's routers, then the permutation) and
  // SwiGLU experts (and shared ones); GPT-OSS's and PhiMoE's layers take the
  // host-driven path.
  const bool router = router_ == RouterKind::kSoftmaxTopK ||
                      router_ == RouterKind::kDeepseekSoftmax ||
                      router_ == RouterKind::kDeepseekSigmoid;
  device_moe_ = router && !c.clamped_swiglu.has_value() &&
                MoeDecodeSupports(c.hidden_size, c.moe_intermediate_size, c.num_experts,
                                  c.num_experts_per_tok);
  if (!device_moe_) return absl::OkStatus();
  VISMOE_ASSIGN_OR_RETURN(pinned_tables_,
                          PinnedLayerTables::Create(c.num_hidden_layers, c.num_experts));
  VISMOE_ASSIGN_OR_RETURN(staging_,
                          DeferredStaging::Create(c, std::min(max_tokens_, kMaxDecodeRows)));
  return absl::OkStatus();
}

namespace {

// `t` as fp32 values in the packed block (SIZE_MAX when absent).
size_t AddF32(WeightPacker& pack, const TensorView& t) {
  if (t.empty()) return SIZE_MAX;
  std::vector<float> f(static_cast<size_t>(t.numel()));
  ToFloat(t.dtype, t.data, f.size(), f.data());
  return pack.AddF32(f);
}

}  // namespace

// The TextWeights every backend loads, packed to bf16 and uploaded in one copy.
absl::Status CudaDecoderOps::UploadWeights(const ModelConfig& config, const Checkpoint& ckpt) {
  VISMOE_ASSIGN_OR_RETURN(const TextWeights w, TextWeights::Load(config, ckpt));
  WeightPacker pack;
  const size_t embed = pack.Add(w.embed);
  const size_t norm = pack.Add(w.final_norm);
  const size_t norm_bias = w.final_norm_bias.empty() ? SIZE_MAX : pack.Add(w.final_norm_bias);
  const size_t lm_head_bias = AddF32(pack, w.lm_head_bias);
  const size_t lm_head = w.lm_head.data == w.embed.data ? embed : pack.Add(w.lm_head);
  // Each layer's pointers, set once the packed block has its device address.
  layers_.assign(w.layers.size(), Layer{});
  std::vector<std::function<void(const char*)>> fix;
  auto bf16 = [&](const Bf16*& dst, const TensorView& t) {
    if (t.empty()) return;
    const size_t off = pack.Add(t);
    fix.push_back(
        [&dst, off](const char* base) { dst = reinterpret_cast<const Bf16*>(base + off); });
  };
  auto f32 = [&](const float*& dst, const TensorView& t) {
    const size_t off = AddF32(pack, t);
    if (off == SIZE_MAX) return;
    fix.push_back(
        [&dst, off](const char* base) { dst = reinterpret_cast<const float*>(base + off); });
  };
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const DecoderLayerWeights& l = w.layers[i];
    Layer& d = layers_[i];
    for (auto [dst, t] : {std::pair{&d.input_norm, &l.input_norm},
                          {&d.post_norm, &l.post_norm},
                          {&d.input_norm_bias, &l.input_norm_bias},
                          {&d.post_norm_bias, &l.post_norm_bias},
                          {&d.o, &l.o},
                          {&d.o_bias, &l.o_bias},
                          {&d.q_norm, &l.q_norm},
                          {&d.k_norm, &l.k_norm},
                          {&d.router, &l.router},
                          {&d.gate_proj, &l.gate_proj},
                          {&d.up_proj, &l.up_proj},
                          {&d.down_proj, &l.down_proj},
                          {&d.experts_gate_up_bias, &l.experts_gate_up_bias},
                          {&d.experts_down_bias, &l.experts_down_bias},
                          {&d.shared_gate, &l.shared_gate},
                          {&d.shared_up, &l.shared_up},
                          {&d.shared_down, &l.shared_down}}) {
      bf16(*dst, *t);
    }
    f32(d.sinks, l.sinks);
    f32(d.router_bias, l.router_bias);
    if (config.text.mla.has_value()) {  // no k / v projections: the latent's
      for (auto [dst, t] : {std::pair{&d.q, &l.q},
                            {&d.q_a, &l.q_a},
                            {&d.q_a_bias, &l.q_a_bias},
                            {&d.q_a_norm, &l.q_a_norm},
                            {&d.kv_a, &l.kv_a},
                            {&d.kv_a_bias, &l.kv_a_bias},
                            {&d.kv_a_norm, &l.kv_a_norm},
                            {&d.kv_b, &l.kv_b}}) {
        bf16(*dst, *t);
      }
      continue;
    }
    const size_t qkv = pack.AddStacked({&l.q, &l.k, &l.v});
    fix.push_back(
        [&d, qkv](const char* base) { d.qkv = reinterpret_cast<const Bf16*>(base + qkv); });
    // One bias add after the stacked GEMM: all three or none.
    const int qkv_biases = !l.q_bias.empty() + !l.k_bias.empty() + !l.v_bias.empty();
    if (qkv_biases != 0 && qkv_biases != 3) {
      return absl::UnimplementedError(
          absl::StrCat("layer ", i, " has ", qkv_biases,
                       " of the q/k/v biases; the CUDA backend takes all or none"));
    }
    if (qkv_biases == 3) {
      const size_t b = pack.AddStacked({&l.q_bias, &l.k_bias, &l.v_bias});
      fix.push_back(
          [&d, b](const char* base) { d.qkv_bias = reinterpret_cast<const Bf16*>(base + b); });
    }
  }
  const TextConfig& c = config.text;
  std::vector<float> freqs = RopeInvFreq(c.head_dim, c.rope_theta);
  if (c.yarn.has_value()) {  // GPT-OSS, DeepSeek (whose head_dim is the rope dims)
    const TextConfig::Yarn& y = *c.yarn;
    freqs = cpu::YarnInvFreq(c.head_dim, c.rope_theta, y.factor, y.original_max_position_embeddings,
                             y.beta_fast, y.beta_slow, y.truncate);
    rope_scale_ = static_cast<float>(YarnAttentionFactor(y));
  }
  if (c.longrope.has_value()) {  // PhiMoE: the short factors; the mscale per row (the step's)
    freqs = cpu::LongRopeInvFreq(c.head_dim, c.rope_theta, c.longrope->short_factor);
  }
  const size_t inv_freq = pack.AddF32(freqs);

  const std::vector<Bf16>& host = pack.host();
  VISMOE_ASSIGN_OR_RETURN(weights_, DeviceBuffer::Allocate(host.size() * sizeof(Bf16)));
  VISMOE_RETURN_IF_ERROR(CopyToDevice(weights_.data(), host.data(), host.size() * sizeof(Bf16)));
  const char* base = static_cast<const char*>(weights_.data());
  auto at = [base](size_t offset) {
    return offset == SIZE_MAX ? nullptr : reinterpret_cast<const Bf16*>(base + offset);
  };
  embed_ = at(embed);
  final_norm_ = at(norm);
  final_norm_bias_ = at(norm_bias);
  lm_head_ = at(lm_head);
  inv_freq_ = reinterpret_cast<const float*>(base + inv_freq);
  auto at_f32 = [&at](size_t offset) { return reinterpret_cast<const float*>(at(offset)); };
  lm_head_bias_ = at_f32(lm_head_bias);
  for (const auto& f : fix) f(base);
  if (c.clamped_swiglu.has_value()) KeepClampedExperts(w);
  return absl::OkStatus();
}

// GPT-OSS's expert biases, on the device (uploaded above) and as host fp32
// copies for experts computed on the host.
void CudaDecoderOps::KeepClampedExperts(const TextWeights& w) {
  const TextConfig& c = config_.text;
  const int64_t e = c.num_experts, inter = c.moe_intermediate_size, h = c.hidden_size;
  host_expert_biases_.resize(w.layers.size());
  clamped_experts_.resize(w.layers.size());
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const DecoderLayerWeights& lw = w.layers[l];
    if (lw.experts_gate_up_bias.empty() || lw.experts_down_bias.empty()) continue;
    std::vector<float>& host = host_expert_biases_[l];
    host.resize(static_cast<size_t>(e * (2 * inter + h)));
    ToFloat(lw.experts_gate_up_bias.dtype, lw.experts_gate_up_bias.data, e * 2 * inter,
            host.data());
    ToFloat(lw.experts_down_bias.dtype, lw.experts_down_bias.data, e * h,
            host.data() + e * 2 * inter);
    StreamExpertLauncher::ClampedExperts& x = clamped_experts_[l];
    x.act = ClampedSwigluAct{c.clamped_swiglu->alpha, c.clamped_swiglu->limit};
    x.gate_up_bias = layers_[l].experts_gate_up_bias;
    x.down_bias = layers_[l].experts_down_bias;
    x.host_gate_up_bias = host.data();
    x.host_down_bias = host.data() + e * 2 * inter;
  }
}

absl::StatusOr<std::unique_ptr<KvPool>> CudaDecoderOps::CreateKvPool(int64_t blocks,
                                                                     int64_t block_tokens) const {
  const TextConfig& c = config_.text;
  VISMOE_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));  // may run on any thread
  absl::StatusOr<std::unique_ptr<DeviceKvPool>> pool =
      DeviceKvPool::Create(c.num_hidden_layers, blocks, block_tokens, c.KvRowElems(), c.KvPlanes());
  if (!pool.ok()) {
    return absl::Status(pool.status().code(),
                        absl::StrCat("a KV cache of ", blocks * block_tokens,
                                     " tokens does not fit the device (lower kv_cache_tokens or "
                                     "max_context_tokens): ",
                                     pool.status().message()));
  }
  return std::unique_ptr<KvPool>(*std::move(pool));
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
