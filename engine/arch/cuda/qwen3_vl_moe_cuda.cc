#include "engine/arch/cuda/qwen3_vl_moe_cuda.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/arch/cuda/weight_packer.h"
#include "engine/core/dtype.h"
#include "engine/core/status_macros.h"
#include "engine/offload/expert_batch_runner.h"
#include "engine/ops/cpu/moe.h"
#include "engine/ops/cuda/activations.h"
#include "engine/ops/cuda/attention.h"
#include "engine/ops/cuda/cuda_status.h"
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

}  // namespace

// One Forward's device buffers (carved from the scratch arena) and the host
// state that follows the rows through compression.
struct Qwen3VlMoeCudaModel::Step {
  int64_t n = 0;     // rows in flight
  Bf16* hs = nullptr;  // [n, H] residual stream
  Bf16* x = nullptr;   // [n, H] normed input of a block
  Bf16* y = nullptr;   // [n, H] MoE output
  Bf16* qkv = nullptr;   // [n, qd + 2 kvd]
  Bf16* attn = nullptr;  // [n, qd]
  int64_t* positions = nullptr;  // device [3][n]
  std::vector<int64_t> host_positions;
  // Routing and the permuted MoE rows.
  float* router_logits = nullptr;  // [n, E]
  int32_t* top_experts = nullptr;  // [n, k]
  float* top_weights = nullptr;    // [n, k]
  int32_t *counts = nullptr, *offsets = nullptr, *row_token = nullptr, *slot_row = nullptr;
  Bf16 *xp = nullptr, *gate_up = nullptr, *act = nullptr, *yp = nullptr;
  // Visual rows: host rows of the visual tokens (-1 once compressed away),
  // and the DeepStack features on the device [num_visual, H] each.
  std::vector<int64_t> visual_rows;
  std::vector<const Bf16*> deepstack;
  int32_t* ds_src = nullptr;  // device: visual index of each kept visual row
  int32_t* ds_dst = nullptr;  // device: its row in hs
  int64_t ds_count = 0;
  Bf16* ds_tmp = nullptr;  // [num_visual, H]
};

namespace {

// The device side of RunExpertBatches for one MoE layer: a batch is one
// grouped MoeExpertsGrouped call on the compute stream over the experts'
// blocks of permuted rows, and its ticket an event recorded behind it.
class StreamExpertLauncher final : public ExpertBatchLauncher {
 public:
  StreamExpertLauncher(Blas& blas, const Stream& stream, const std::vector<Event>& events,
                       int layer, const std::vector<int32_t>& offsets, int64_t hidden,
                       int64_t inter, const Bf16* xp, Bf16* gate_up, Bf16* act, Bf16* yp)
      : blas_(blas), stream_(stream), events_(events), layer_(layer), offsets_(offsets),
        hidden_(hidden), inter_(inter), xp_(xp), gate_up_(gate_up), act_(act), yp_(yp) {}

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
};

}  // namespace

Qwen3VlMoeCudaModel::~Qwen3VlMoeCudaModel() {
  // Kernels may still read the weights: finish the stream before freeing.
  if (stream_.get() != nullptr) (void)stream_.Synchronize();
}

int64_t Qwen3VlMoeCudaModel::ScratchBytes(const ModelConfig& config, int64_t max_tokens) {
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
  total += b(kLogitRowsPerChunk * int64_t{c.vocab_size}, 4);
  total += 64 * static_cast<int64_t>(kAlign);  // slack for per-allocation alignment
  return total;
}

int64_t Qwen3VlMoeCudaModel::ActivationBytes(const ModelConfig& config, int64_t max_tokens) {
  return ScratchBytes(config, max_tokens) + static_cast<int64_t>(kBlasWorkspaceBytes) +
         3 * Blas::kMaxGroupedProblems * static_cast<int64_t>(sizeof(void*));
}

absl::StatusOr<std::unique_ptr<Qwen3VlMoeCudaModel>> Qwen3VlMoeCudaModel::Create(
    const ModelConfig& config, const Checkpoint& ckpt, const Options& options) {
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
    return absl::InvalidArgumentError(absl::StrCat(
        "mrope_section [", absl::StrJoin(c.mrope_section, ", "), "] does not sum to head_dim / 2 = ",
        c.head_dim / 2));
  }
  if (options.max_tokens_per_step < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_tokens_per_step must be >= 1, got ", options.max_tokens_per_step));
  }
  VISMOE_RETURN_IF_ERROR(ProbeCudaDevice(options.device).status());
  std::unique_ptr<Qwen3VlMoeCudaModel> m(new Qwen3VlMoeCudaModel());
  m->config_ = config;
  m->max_tokens_ = options.max_tokens_per_step;
  m->device_ = options.device;
  m->mrope_section_ = c.mrope_section;

  // Same tensors, names and shape checks as the CPU model.
  const std::string p = Qwen3VlMoeModel::TextPrefix(config);
  const int64_t h = c.hidden_size, hd = c.head_dim;
  const int64_t qd = int64_t{c.num_attention_heads} * hd, kvd = int64_t{c.num_key_value_heads} * hd;
  WeightPacker pack;
  auto add = [&](const std::string& name, Shape shape) -> absl::StatusOr<size_t> {
    VISMOE_ASSIGN_OR_RETURN(TensorView t, ckpt.Get(name, std::move(shape)));
    return pack.Add(t);
  };
  struct Offsets {
    size_t input_norm, post_norm, q, k, v, o, q_norm, k_norm, router, gate, up, down;
  };
  VISMOE_ASSIGN_OR_RETURN(size_t embed, add(p + "embed_tokens.weight", {c.vocab_size, h}));
  VISMOE_ASSIGN_OR_RETURN(size_t norm, add(p + "norm.weight", {h}));
  size_t lm_head = embed;
  if (ckpt.Has("lm_head.weight") || !c.tie_word_embeddings) {
    VISMOE_ASSIGN_OR_RETURN(lm_head, add("lm_head.weight", {c.vocab_size, h}));
  }
  std::vector<Offsets> offs;
  std::vector<bool> moe;
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string lp = absl::StrCat(p, "layers.", l, ".");
    const std::string ap = lp + "self_attn.";
    Offsets o{};
    VISMOE_ASSIGN_OR_RETURN(o.input_norm, add(lp + "input_layernorm.weight", {h}));
    VISMOE_ASSIGN_OR_RETURN(o.post_norm, add(lp + "post_attention_layernorm.weight", {h}));
    VISMOE_ASSIGN_OR_RETURN(o.q, add(ap + "q_proj.weight", {qd, h}));
    VISMOE_ASSIGN_OR_RETURN(o.k, add(ap + "k_proj.weight", {kvd, h}));
    VISMOE_ASSIGN_OR_RETURN(o.v, add(ap + "v_proj.weight", {kvd, h}));
    VISMOE_ASSIGN_OR_RETURN(o.o, add(ap + "o_proj.weight", {h, qd}));
    VISMOE_ASSIGN_OR_RETURN(o.q_norm, add(ap + "q_norm.weight", {hd}));
    VISMOE_ASSIGN_OR_RETURN(o.k_norm, add(ap + "k_norm.weight", {hd}));
    moe.push_back(c.IsMoeLayer(l));
    if (moe.back()) {
      VISMOE_ASSIGN_OR_RETURN(o.router, add(lp + "mlp.gate.weight", {c.num_experts, h}));
    } else {
      const int64_t in = c.intermediate_size;
      VISMOE_ASSIGN_OR_RETURN(o.gate, add(lp + "mlp.gate_proj.weight", {in, h}));
      VISMOE_ASSIGN_OR_RETURN(o.up, add(lp + "mlp.up_proj.weight", {in, h}));
      VISMOE_ASSIGN_OR_RETURN(o.down, add(lp + "mlp.down_proj.weight", {h, in}));
    }
    offs.push_back(o);
  }
  const size_t inv_freq = pack.AddF32(RopeInvFreq(c.head_dim, c.rope_theta));

  const std::vector<Bf16>& host = pack.host();
  VISMOE_ASSIGN_OR_RETURN(m->weights_, DeviceBuffer::Allocate(host.size() * sizeof(Bf16)));
  VISMOE_RETURN_IF_ERROR(CopyToDevice(m->weights_.data(), host.data(), host.size() * sizeof(Bf16)));
  const char* base = static_cast<const char*>(m->weights_.data());
  auto at = [base](size_t offset) { return reinterpret_cast<const Bf16*>(base + offset); };
  m->embed_ = at(embed);
  m->final_norm_ = at(norm);
  m->lm_head_ = at(lm_head);
  m->inv_freq_ = reinterpret_cast<const float*>(base + inv_freq);
  for (size_t l = 0; l < offs.size(); ++l) {
    const Offsets& o = offs[l];
    Layer w;
    w.input_norm = at(o.input_norm);
    w.post_norm = at(o.post_norm);
    w.q = at(o.q);
    w.k = at(o.k);
    w.v = at(o.v);
    w.o = at(o.o);
    w.q_norm = at(o.q_norm);
    w.k_norm = at(o.k_norm);
    w.moe = moe[l];
    if (w.moe) {
      w.router = at(o.router);
    } else {
      w.gate_proj = at(o.gate);
      w.up_proj = at(o.up);
      w.down_proj = at(o.down);
    }
    m->layers_.push_back(w);
  }

  VISMOE_ASSIGN_OR_RETURN(m->stream_, Stream::Create());
  for (int e = 0; e < c.num_experts; ++e) {
    VISMOE_ASSIGN_OR_RETURN(Event ev, Event::Create());
    m->expert_done_.push_back(std::move(ev));
  }
  VISMOE_ASSIGN_OR_RETURN(m->blas_workspace_, DeviceBuffer::Allocate(kBlasWorkspaceBytes));
  VISMOE_ASSIGN_OR_RETURN(Blas blas, Blas::Create(m->stream_.get(), m->blas_workspace_.data(),
                                                  kBlasWorkspaceBytes));
  m->blas_ = std::make_unique<Blas>(std::move(blas));
  VISMOE_ASSIGN_OR_RETURN(m->scratch_, DeviceArena::Create(static_cast<size_t>(
                                           ScratchBytes(config, options.max_tokens_per_step))));
  return m;
}

absl::StatusOr<std::unique_ptr<KvCache>> Qwen3VlMoeCudaModel::CreateKvCache(
    int64_t capacity) const {
  const TextConfig& c = config_.text;
  VISMOE_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));  // may run on any thread
  VISMOE_ASSIGN_OR_RETURN(std::unique_ptr<DeviceKvCache> cache,
                          DeviceKvCache::Create(c.num_hidden_layers, capacity,
                                                int64_t{c.num_key_value_heads} * c.head_dim));
  return std::unique_ptr<KvCache>(std::move(cache));
}

absl::Status Qwen3VlMoeCudaModel::DownloadF32(const Bf16* src, int64_t count,
                                              std::vector<float>* out) const {
  std::vector<Bf16> tmp(static_cast<size_t>(count));
  VISMOE_RETURN_IF_ERROR(CopyToHostAsync(tmp.data(), src, tmp.size() * sizeof(Bf16),
                                         stream_.get()));
  VISMOE_RETURN_IF_ERROR(stream_.Synchronize());
  out->resize(tmp.size());
  for (size_t i = 0; i < tmp.size(); ++i) (*out)[i] = Bf16ToFloat(tmp[i]);
  return absl::OkStatus();
}

absl::Status Qwen3VlMoeCudaModel::Forward(const DecoderInput& input, KvCache* cache,
                                          ExpertProvider* experts,
                                          std::vector<float>* logits) const {
  auto* device_cache = dynamic_cast<DeviceKvCache*>(cache);
  if (device_cache == nullptr) {
    return absl::InvalidArgumentError(
        "CUDA Forward: the KV cache must come from this model's CreateKvCache");
  }
  std::lock_guard<std::mutex> lock(mu_);
  // The calling thread (a scheduler's) may never have selected our device.
  VISMOE_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  scratch_.Reset();
  absl::Status st = ForwardLocked(input, device_cache, experts, logits);
  if (!st.ok()) {
    // Leave no work queued that reads this step's scratch or a released slab.
    (void)stream_.Synchronize();
  }
  return st;
}

absl::Status Qwen3VlMoeCudaModel::ForwardLocked(const DecoderInput& input, DeviceKvCache* cache,
                                                ExpertProvider* experts,
                                                std::vector<float>* logits) const {
  const TextConfig& c = config_.text;
  const int64_t n_in = static_cast<int64_t>(input.tokens.size());
  const int64_t h = c.hidden_size;
  if (n_in == 0) return absl::InvalidArgumentError("Forward: no tokens");
  if (n_in > max_tokens_) {
    return absl::InvalidArgumentError(absl::StrCat("Forward: ", n_in,
                                                   " tokens exceed the CUDA scratch sized for ",
                                                   max_tokens_, " (max_context_tokens)"));
  }
  VISMOE_RETURN_IF_ERROR(cache->CheckRoom(n_in));
  Step s;
  s.n = n_in;
  s.host_positions = input.positions;
  if (s.host_positions.empty()) {
    s.host_positions.resize(3 * n_in);
    for (int a = 0; a < 3; ++a) {
      for (int64_t i = 0; i < n_in; ++i) s.host_positions[a * n_in + i] = cache->length() + i;
    }
  } else if (static_cast<int64_t>(s.host_positions.size()) != 3 * n_in) {
    return absl::InvalidArgumentError(absl::StrCat("Forward: positions has ",
                                                   s.host_positions.size(), " entries, expected 3 * ",
                                                   n_in));
  }
  std::vector<int32_t> ids(n_in);
  for (int64_t t = 0; t < n_in; ++t) {
    const int id = input.tokens[t];
    if (id < 0 || id >= c.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Forward: token id ", id, " outside the vocabulary [0, ", c.vocab_size, ")"));
    }
    ids[t] = id;
    if (input.visual_embeds != nullptr && id == config_.image_token_id) s.visual_rows.push_back(t);
  }
  const int64_t num_visual = static_cast<int64_t>(s.visual_rows.size());
  if (input.visual_embeds != nullptr && num_visual != input.num_visual) {
    return absl::InvalidArgumentError(absl::StrCat("Forward: ", num_visual,
                                                   " image tokens but ", input.num_visual,
                                                   " visual embeddings"));
  }
  if (input.deepstack.size() > layers_.size()) {
    return absl::InvalidArgumentError("Forward: more DeepStack features than decoder layers");
  }
  if (input.deepstack.size() > config_.vision.deepstack_visual_indexes.size()) {
    // The scratch holds as many features as the config declares.
    return absl::InvalidArgumentError(absl::StrCat(
        "Forward: ", input.deepstack.size(), " DeepStack features; the config declares ",
        config_.vision.deepstack_visual_indexes.size()));
  }

  const size_t rows_h = static_cast<size_t>(n_in * h);
  VISMOE_ASSIGN_OR_RETURN(s.hs, scratch_.AllocateArray<Bf16>(rows_h));
  VISMOE_ASSIGN_OR_RETURN(s.x, scratch_.AllocateArray<Bf16>(rows_h));
  VISMOE_ASSIGN_OR_RETURN(s.y, scratch_.AllocateArray<Bf16>(rows_h));
  const int64_t qd = int64_t{c.num_attention_heads} * c.head_dim;
  const int64_t kvd = int64_t{c.num_key_value_heads} * c.head_dim;
  VISMOE_ASSIGN_OR_RETURN(s.qkv, scratch_.AllocateArray<Bf16>(n_in * (qd + 2 * kvd)));
  VISMOE_ASSIGN_OR_RETURN(s.attn, scratch_.AllocateArray<Bf16>(n_in * qd));
  VISMOE_ASSIGN_OR_RETURN(s.positions, scratch_.AllocateArray<int64_t>(3 * n_in));
  VISMOE_ASSIGN_OR_RETURN(int32_t * ids_dev, scratch_.AllocateArray<int32_t>(n_in));
  const int64_t nk = n_in * c.num_experts_per_tok;
  VISMOE_ASSIGN_OR_RETURN(s.router_logits,
                          scratch_.AllocateArray<float>(n_in * std::max(c.num_experts, 1)));
  VISMOE_ASSIGN_OR_RETURN(s.top_experts, scratch_.AllocateArray<int32_t>(nk));
  VISMOE_ASSIGN_OR_RETURN(s.top_weights, scratch_.AllocateArray<float>(nk));
  VISMOE_ASSIGN_OR_RETURN(s.counts, scratch_.AllocateArray<int32_t>(c.num_experts));
  VISMOE_ASSIGN_OR_RETURN(s.offsets, scratch_.AllocateArray<int32_t>(c.num_experts + 1));
  VISMOE_ASSIGN_OR_RETURN(s.row_token, scratch_.AllocateArray<int32_t>(nk));
  VISMOE_ASSIGN_OR_RETURN(s.slot_row, scratch_.AllocateArray<int32_t>(nk));
  VISMOE_ASSIGN_OR_RETURN(s.xp, scratch_.AllocateArray<Bf16>(nk * h));
  VISMOE_ASSIGN_OR_RETURN(s.yp, scratch_.AllocateArray<Bf16>(nk * h));
  const int64_t inter = std::max<int64_t>(int64_t{c.moe_intermediate_size} * c.num_experts_per_tok,
                                          c.intermediate_size);
  VISMOE_ASSIGN_OR_RETURN(s.gate_up, scratch_.AllocateArray<Bf16>(n_in * 2 * inter));
  VISMOE_ASSIGN_OR_RETURN(s.act, scratch_.AllocateArray<Bf16>(n_in * inter));

  StreamHandle st = stream_.get();
  VISMOE_RETURN_IF_ERROR(
      CopyToDeviceAsync(ids_dev, ids.data(), ids.size() * sizeof(int32_t), st));
  VISMOE_RETURN_IF_ERROR(CopyToDeviceAsync(s.positions, s.host_positions.data(),
                                           s.host_positions.size() * sizeof(int64_t), st));
  VISMOE_RETURN_IF_ERROR(EmbeddingGather(embed_, c.vocab_size, static_cast<int>(h), ids_dev, n_in,
                                         s.hs, st));
  if (input.visual_embeds != nullptr && num_visual > 0) {
    // Visual rows replace the image-pad embeddings; DeepStack features wait
    // on the device for their layers.
    std::vector<Bf16> staged(static_cast<size_t>(num_visual * h));
    auto upload = [&](const float* src) -> absl::StatusOr<Bf16*> {
      for (size_t i = 0; i < staged.size(); ++i) staged[i] = FloatToBf16(src[i]);
      VISMOE_ASSIGN_OR_RETURN(Bf16 * dst, scratch_.AllocateArray<Bf16>(staged.size()));
      // Pageable source: the copy is staged before this returns, so `staged` may be reused.
      VISMOE_RETURN_IF_ERROR(CopyToDeviceAsync(dst, staged.data(), staged.size() * sizeof(Bf16), st));
      return dst;
    };
    VISMOE_ASSIGN_OR_RETURN(Bf16 * visual, upload(input.visual_embeds));
    std::vector<int32_t> rows(s.visual_rows.begin(), s.visual_rows.end());
    std::vector<int32_t> src(num_visual);
    for (int64_t i = 0; i < num_visual; ++i) src[i] = static_cast<int32_t>(i);
    VISMOE_ASSIGN_OR_RETURN(s.ds_dst, scratch_.AllocateArray<int32_t>(num_visual));
    VISMOE_ASSIGN_OR_RETURN(s.ds_src, scratch_.AllocateArray<int32_t>(num_visual));
    VISMOE_RETURN_IF_ERROR(
        CopyToDeviceAsync(s.ds_dst, rows.data(), rows.size() * sizeof(int32_t), st));
    VISMOE_RETURN_IF_ERROR(
        CopyToDeviceAsync(s.ds_src, src.data(), src.size() * sizeof(int32_t), st));
    s.ds_count = num_visual;
    VISMOE_RETURN_IF_ERROR(ScatterRows(visual, num_visual, static_cast<int>(h), s.ds_dst, s.hs,
                                       n_in, st));
    for (const float* ds : input.deepstack) {
      if (ds == nullptr) {
        s.deepstack.push_back(nullptr);
        continue;
      }
      VISMOE_ASSIGN_OR_RETURN(Bf16 * d, upload(ds));
      s.deepstack.push_back(d);
    }
    if (!s.deepstack.empty()) {
      VISMOE_ASSIGN_OR_RETURN(s.ds_tmp, scratch_.AllocateArray<Bf16>(staged.size()));
    }
  }

  bool compressed = false;
  for (int l = 0; l < static_cast<int>(layers_.size()); ++l) {
    if (input.is_cancelled && input.is_cancelled()) return absl::CancelledError("cancelled");
    if (input.select_kept_rows && l == input.compress_before_layer) {
      VISMOE_ASSIGN_OR_RETURN(std::vector<int64_t> kept, input.select_kept_rows());
      VISMOE_RETURN_IF_ERROR(KeepRows(kept, s));
      compressed = true;
    }
    const Layer& w = layers_[l];
    const int64_t n = s.n;
    VISMOE_RETURN_IF_ERROR(RmsNorm(s.hs, h, n, 1, static_cast<int>(h), w.input_norm,
                                   c.rms_norm_eps, s.x, h, st));
    VISMOE_RETURN_IF_ERROR(Attention(l, s, cache));  // hs += attention
    if (w.moe && input.observer != nullptr) {
      std::vector<float> residual;
      VISMOE_RETURN_IF_ERROR(DownloadF32(s.hs, n * h, &residual));
      input.observer->OnPostAttention(input.phase, l, residual.data(), n);
    }
    VISMOE_RETURN_IF_ERROR(RmsNorm(s.hs, h, n, 1, static_cast<int>(h), w.post_norm,
                                   c.rms_norm_eps, s.x, h, st));
    if (w.moe) {
      VISMOE_RETURN_IF_ERROR(Moe(input, l, s, experts));  // y = MoE(x)
      if (input.observer != nullptr) {
        std::vector<float> out;
        VISMOE_RETURN_IF_ERROR(DownloadF32(s.y, n * h, &out));
        input.observer->OnMoeOutput(input.phase, l, out.data(), n);
      }
      VISMOE_RETURN_IF_ERROR(Add(s.hs, s.y, n * h, s.hs, st));
    } else {
      VISMOE_RETURN_IF_ERROR(DenseMlp(l, s));  // hs += MLP(x)
    }
    if (l < static_cast<int>(s.deepstack.size()) && s.deepstack[l] != nullptr && s.ds_count > 0) {
      VISMOE_RETURN_IF_ERROR(
          PermuteRows(s.deepstack[l], static_cast<int>(h), s.ds_src, s.ds_count, s.ds_tmp, st));
      VISMOE_RETURN_IF_ERROR(
          AddRowsAt(s.ds_tmp, s.ds_count, static_cast<int>(h), s.ds_dst, s.hs, n, st));
    }
  }
  // Logits is the step's first wait on the device, so an asynchronous error
  // from any layer surfaces there; the cache advances only after it.
  VISMOE_RETURN_IF_ERROR(Logits(input, s, logits));
  if (compressed) {
    cache->Advance(n_in, input.compress_before_layer, s.n);
  } else {
    cache->Advance(n_in);
  }
  return absl::OkStatus();
}

absl::Status Qwen3VlMoeCudaModel::Attention(int layer, Step& s, DeviceKvCache* cache) const {
  const TextConfig& c = config_.text;
  const Layer& w = layers_[layer];
  const int64_t n = s.n, h = c.hidden_size, hd = c.head_dim;
  const int64_t qd = int64_t{c.num_attention_heads} * hd, kvd = int64_t{c.num_key_value_heads} * hd;
  const int64_t width = qd + 2 * kvd;  // fused q|k|v rows
  StreamHandle st = stream_.get();
  Bf16* q = s.qkv;
  Bf16* k = s.qkv + qd;
  Bf16* v = s.qkv + qd + kvd;
  VISMOE_RETURN_IF_ERROR(blas_->Linear(s.x, n, h, w.q, WeightLayout::kOutIn, qd, q,
                                       GemmOut::kBf16, 0.0f, width));
  VISMOE_RETURN_IF_ERROR(blas_->Linear(s.x, n, h, w.k, WeightLayout::kOutIn, kvd, k,
                                       GemmOut::kBf16, 0.0f, width));
  VISMOE_RETURN_IF_ERROR(blas_->Linear(s.x, n, h, w.v, WeightLayout::kOutIn, kvd, v,
                                       GemmOut::kBf16, 0.0f, width));
  // Per-head RMSNorm before the rotary embedding, in place in the fused rows.
  VISMOE_RETURN_IF_ERROR(RmsNorm(q, width, n, c.num_attention_heads, static_cast<int>(hd),
                                 w.q_norm, c.rms_norm_eps, q, width, st));
  VISMOE_RETURN_IF_ERROR(RmsNorm(k, width, n, c.num_key_value_heads, static_cast<int>(hd),
                                 w.k_norm, c.rms_norm_eps, k, width, st));
  const int* section = mrope_section_.empty() ? nullptr : mrope_section_.data();
  VISMOE_RETURN_IF_ERROR(ApplyRope(q, n, c.num_attention_heads, static_cast<int>(hd), width,
                                   s.positions, inv_freq_, section, st));
  VISMOE_RETURN_IF_ERROR(ApplyRope(k, n, c.num_key_value_heads, static_cast<int>(hd), width,
                                   s.positions, inv_freq_, section, st));
  const int64_t start = cache->layer_length(layer);
  const size_t row_bytes = static_cast<size_t>(kvd) * sizeof(Bf16);
  VISMOE_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(cache->Keys(layer) + start * kvd, row_bytes, k,
                                                width * sizeof(Bf16), row_bytes, n,
                                                cudaMemcpyDeviceToDevice, st));
  VISMOE_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(cache->Values(layer) + start * kvd, row_bytes, v,
                                                width * sizeof(Bf16), row_bytes, n,
                                                cudaMemcpyDeviceToDevice, st));
  AttentionShape shape{c.num_attention_heads, c.num_key_value_heads, static_cast<int>(hd), width,
                       kvd};
  VISMOE_RETURN_IF_ERROR(cuda::Attention(shape, q, n, cache->Keys(layer), cache->Values(layer),
                                         start + n, /*causal=*/true, /*q_pos0=*/start, s.attn, st));
  // hs += o_proj(attn): the residual add is the GEMM's beta = 1.
  return blas_->Linear(s.attn, n, qd, w.o, WeightLayout::kOutIn, h, s.hs, GemmOut::kBf16, 1.0f);
}

absl::Status Qwen3VlMoeCudaModel::DenseMlp(int layer, Step& s) const {
  const TextConfig& c = config_.text;
  const Layer& w = layers_[layer];
  const int64_t n = s.n, h = c.hidden_size, in = c.intermediate_size;
  VISMOE_RETURN_IF_ERROR(blas_->Linear(s.x, n, h, w.gate_proj, WeightLayout::kOutIn, in, s.gate_up,
                                       GemmOut::kBf16, 0.0f, 2 * in));
  VISMOE_RETURN_IF_ERROR(blas_->Linear(s.x, n, h, w.up_proj, WeightLayout::kOutIn, in,
                                       s.gate_up + in, GemmOut::kBf16, 0.0f, 2 * in));
  VISMOE_RETURN_IF_ERROR(SiluMulFused(s.gate_up, n, in, s.act, stream_.get()));
  return blas_->Linear(s.act, n, in, w.down_proj, WeightLayout::kOutIn, h, s.hs, GemmOut::kBf16,
                       1.0f);
}

absl::Status Qwen3VlMoeCudaModel::Moe(const DecoderInput& input, int layer, Step& s,
                                      ExpertProvider* experts) const {
  const TextConfig& c = config_.text;
  const Layer& w = layers_[layer];
  const int64_t n = s.n, h = c.hidden_size;
  const int k = c.num_experts_per_tok, e_count = c.num_experts;
  StreamHandle st = stream_.get();
  VISMOE_RETURN_IF_ERROR(blas_->Linear(s.x, n, h, w.router, WeightLayout::kOutIn, e_count,
                                       s.router_logits, GemmOut::kF32));
  // transformers' Qwen3-VL-MoE router always renormalises the top-k weights.
  const bool renorm = c.norm_topk_prob || config_.model_type == "qwen3_vl_moe";
  VISMOE_RETURN_IF_ERROR(
      MoeRouterTopK(s.router_logits, n, e_count, k, renorm, s.top_experts, s.top_weights, st));
  VISMOE_RETURN_IF_ERROR(BuildMoePermutation(s.top_experts, n, k, e_count, s.counts, s.offsets,
                                             s.row_token, s.slot_row, st));

  // The routing goes to the host: the provider and the observers live there.
  std::vector<int32_t> top(static_cast<size_t>(n * k));
  VISMOE_RETURN_IF_ERROR(CopyToHostAsync(top.data(), s.top_experts, top.size() * sizeof(int32_t), st));
  cpu::RouterResult r;
  r.n = n;
  r.num_experts = e_count;
  r.top_k = k;
  if (input.observer != nullptr) {
    r.weights.resize(top.size());
    r.logits.resize(static_cast<size_t>(n * e_count));
    VISMOE_RETURN_IF_ERROR(
        CopyToHostAsync(r.weights.data(), s.top_weights, r.weights.size() * sizeof(float), st));
    VISMOE_RETURN_IF_ERROR(
        CopyToHostAsync(r.logits.data(), s.router_logits, r.logits.size() * sizeof(float), st));
  }
  VISMOE_RETURN_IF_ERROR(stream_.Synchronize());
  // Expert e owns permuted rows [offsets[e], offsets[e + 1]): the prefix sum
  // BuildMoePermutation computes on the device, recomputed here from the same ids.
  std::vector<int32_t> offsets(e_count + 1, 0);
  for (int32_t id : top) {
    if (id < 0 || id >= e_count) {
      return absl::InternalError(absl::StrCat("router returned expert ", id, " at layer ", layer));
    }
    ++offsets[id + 1];
  }
  std::vector<int> active;
  for (int e = 0; e < e_count; ++e) {
    if (offsets[e + 1] > 0) active.push_back(e);
    offsets[e + 1] += offsets[e];
  }
  // Only now, with every id known to be in range: an out-of-range id (a NaN
  // router row) leaves row_token entries unwritten.
  VISMOE_RETURN_IF_ERROR(PermuteRows(s.x, static_cast<int>(h), s.row_token, n * k, s.xp, st));
  if (input.observer != nullptr) {
    r.experts.assign(top.begin(), top.end());
    std::vector<float> hidden;
    VISMOE_RETURN_IF_ERROR(DownloadF32(s.x, n * h, &hidden));
    input.observer->OnRouting(input.phase, layer, hidden.data(), r);
  }
  VISMOE_RETURN_IF_ERROR(RunExperts(input, layer, s, offsets, active, experts));
  return UnpermuteCombine(s.yp, s.slot_row, s.top_weights, n, k, static_cast<int>(h),
                          /*accumulate=*/false, s.y, st);
}

absl::Status Qwen3VlMoeCudaModel::RunExperts(const DecoderInput& input, int layer, Step& s,
                                             const std::vector<int32_t>& offsets,
                                             const std::vector<int>& active,
                                             ExpertProvider* experts) const {
  StreamExpertLauncher launcher(*blas_, stream_, expert_done_, layer, offsets,
                                config_.text.hidden_size, config_.text.moe_intermediate_size,
                                s.xp, s.gate_up, s.act, s.yp);
  return RunExpertBatches(*experts, input.phase, layer, active, launcher);
}

absl::Status Qwen3VlMoeCudaModel::KeepRows(const std::vector<int64_t>& kept, Step& s) const {
  const int64_t h = config_.text.hidden_size;
  const int64_t old_n = s.n;
  const int64_t m = static_cast<int64_t>(kept.size());
  if (m == 0) return absl::InvalidArgumentError("Forward: token compression kept no rows");
  std::vector<int32_t> rows(m);
  for (int64_t i = 0; i < m; ++i) {
    if (kept[i] < 0 || kept[i] >= old_n || (i > 0 && kept[i] <= kept[i - 1])) {
      return absl::InvalidArgumentError(
          absl::StrCat("Forward: kept row ", kept[i], " at index ", i,
                       " is out of [0, ", old_n, ") or not strictly ascending"));
    }
    rows[i] = static_cast<int32_t>(kept[i]);
  }
  StreamHandle st = stream_.get();
  VISMOE_ASSIGN_OR_RETURN(int32_t * rows_dev, scratch_.AllocateArray<int32_t>(m));
  VISMOE_RETURN_IF_ERROR(CopyToDeviceAsync(rows_dev, rows.data(), m * sizeof(int32_t), st));
  VISMOE_ASSIGN_OR_RETURN(Bf16 * hs, scratch_.AllocateArray<Bf16>(m * h));
  VISMOE_RETURN_IF_ERROR(PermuteRows(s.hs, static_cast<int>(h), rows_dev, m, hs, st));
  s.hs = hs;  // the old rows stay in the arena until the step ends

  std::vector<int64_t> new_row(old_n, -1);
  std::vector<int64_t> pos(3 * m);
  for (int64_t i = 0; i < m; ++i) {
    new_row[kept[i]] = i;
    for (int a = 0; a < 3; ++a) pos[a * m + i] = s.host_positions[a * old_n + kept[i]];
  }
  s.host_positions = std::move(pos);
  VISMOE_ASSIGN_OR_RETURN(s.positions, scratch_.AllocateArray<int64_t>(3 * m));
  VISMOE_RETURN_IF_ERROR(CopyToDeviceAsync(s.positions, s.host_positions.data(),
                                           s.host_positions.size() * sizeof(int64_t), st));
  // DeepStack goes on adding to the visual rows that survived.
  std::vector<int32_t> ds_src, ds_dst;
  for (size_t i = 0; i < s.visual_rows.size(); ++i) {
    int64_t& r = s.visual_rows[i];
    r = r < 0 ? -1 : new_row[r];
    if (r >= 0) {
      ds_src.push_back(static_cast<int32_t>(i));
      ds_dst.push_back(static_cast<int32_t>(r));
    }
  }
  s.ds_count = static_cast<int64_t>(ds_src.size());
  if (s.ds_count > 0) {
    // Fresh buffers: kernels queued earlier may still read the old ones.
    VISMOE_ASSIGN_OR_RETURN(s.ds_src, scratch_.AllocateArray<int32_t>(s.ds_count));
    VISMOE_ASSIGN_OR_RETURN(s.ds_dst, scratch_.AllocateArray<int32_t>(s.ds_count));
    VISMOE_RETURN_IF_ERROR(
        CopyToDeviceAsync(s.ds_src, ds_src.data(), ds_src.size() * sizeof(int32_t), st));
    VISMOE_RETURN_IF_ERROR(
        CopyToDeviceAsync(s.ds_dst, ds_dst.data(), ds_dst.size() * sizeof(int32_t), st));
  }
  s.n = m;
  return absl::OkStatus();
}

absl::Status Qwen3VlMoeCudaModel::Logits(const DecoderInput& input, Step& s,
                                         std::vector<float>* logits) const {
  const TextConfig& c = config_.text;
  const int64_t h = c.hidden_size, vocab = c.vocab_size;
  const int64_t first = input.all_logits ? 0 : s.n - 1;
  const int64_t rows = s.n - first;
  StreamHandle st = stream_.get();
  const int64_t chunk = std::min(rows, kLogitRowsPerChunk);
  VISMOE_ASSIGN_OR_RETURN(Bf16 * normed, scratch_.AllocateArray<Bf16>(chunk * h));
  VISMOE_ASSIGN_OR_RETURN(float* out, scratch_.AllocateArray<float>(chunk * vocab));
  logits->resize(static_cast<size_t>(rows * vocab));
  for (int64_t r = 0; r < rows; r += chunk) {
    const int64_t m = std::min(chunk, rows - r);
    VISMOE_RETURN_IF_ERROR(RmsNorm(s.hs + (first + r) * h, h, m, 1, static_cast<int>(h),
                                   final_norm_, c.rms_norm_eps, normed, h, st));
    VISMOE_RETURN_IF_ERROR(blas_->Linear(normed, m, h, lm_head_, WeightLayout::kOutIn, vocab, out,
                                         GemmOut::kF32));
    VISMOE_RETURN_IF_ERROR(CopyToHostAsync(logits->data() + r * vocab, out,
                                           static_cast<size_t>(m * vocab) * sizeof(float), st));
    // The next chunk reuses `normed` and `out`: the copy must be done (a
    // pageable destination makes it synchronous anyway).
    VISMOE_RETURN_IF_ERROR(stream_.Synchronize());
  }
  return absl::OkStatus();
}

}  // namespace vismoe::cuda
