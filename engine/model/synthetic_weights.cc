#include "engine/model/synthetic_weights.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "engine/arch/qwen3_vl_moe.h"
#include "engine/core/status_macros.h"
#include "spdlog/spdlog.h"

namespace vismoe {
namespace {

constexpr int64_t kChunkElems = int64_t{1} << 16;  // one PRNG stream per chunk
constexpr size_t kAlign = 64;                      // every tensor starts on a cache line

uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 0xCBF29CE484222325ULL;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001B3ULL;
  return h;
}

absl::Status Positive(const char* field, int64_t value) {
  if (value > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("synthetic weights: ", field, " must be > 0, got ", value));
}

absl::Status CheckConfig(const ModelConfig& config) {
  if (config.model_type != "qwen3_vl_moe" && config.model_type != "qwen3_moe") {
    return absl::InvalidArgumentError(absl::StrCat("synthetic weights: model_type '",
                                                   config.model_type,
                                                   "' is not supported (qwen3_vl_moe, qwen3_moe)"));
  }
  const TextConfig& t = config.text;
  VISMOE_RETURN_IF_ERROR(Positive("text_config.hidden_size", t.hidden_size));
  VISMOE_RETURN_IF_ERROR(Positive("text_config.num_hidden_layers", t.num_hidden_layers));
  VISMOE_RETURN_IF_ERROR(Positive("text_config.num_attention_heads", t.num_attention_heads));
  VISMOE_RETURN_IF_ERROR(Positive("text_config.num_key_value_heads", t.num_key_value_heads));
  VISMOE_RETURN_IF_ERROR(Positive("text_config.head_dim", t.head_dim));
  VISMOE_RETURN_IF_ERROR(Positive("text_config.vocab_size", t.vocab_size));
  bool any_moe = false, any_dense = false;
  for (int l = 0; l < t.num_hidden_layers; ++l) (t.IsMoeLayer(l) ? any_moe : any_dense) = true;
  if (any_moe) {
    VISMOE_RETURN_IF_ERROR(Positive("text_config.num_experts", t.num_experts));
    VISMOE_RETURN_IF_ERROR(Positive("text_config.moe_intermediate_size", t.moe_intermediate_size));
    if (t.num_experts_per_tok < 1 || t.num_experts_per_tok > t.num_experts) {
      return absl::InvalidArgumentError(
          absl::StrCat("synthetic weights: text_config.num_experts_per_tok must be in [1, ",
                       t.num_experts, "], got ", t.num_experts_per_tok));
    }
  }
  if (any_dense) {
    VISMOE_RETURN_IF_ERROR(Positive("text_config.intermediate_size", t.intermediate_size));
  }
  if (config.has_vision) {
    const VisionConfig& v = config.vision;
    VISMOE_RETURN_IF_ERROR(Positive("vision_config.depth", v.depth));
    VISMOE_RETURN_IF_ERROR(Positive("vision_config.hidden_size", v.hidden_size));
    VISMOE_RETURN_IF_ERROR(Positive("vision_config.num_heads", v.num_heads));
    VISMOE_RETURN_IF_ERROR(Positive("vision_config.intermediate_size", v.intermediate_size));
    VISMOE_RETURN_IF_ERROR(Positive("vision_config.in_channels", v.in_channels));
    VISMOE_RETURN_IF_ERROR(Positive("vision_config.patch_size", v.patch_size));
    VISMOE_RETURN_IF_ERROR(Positive("vision_config.temporal_patch_size", v.temporal_patch_size));
    VISMOE_RETURN_IF_ERROR(Positive("vision_config.spatial_merge_size", v.spatial_merge_size));
    VISMOE_RETURN_IF_ERROR(
        Positive("vision_config.num_position_embeddings", v.num_position_embeddings));
    VISMOE_RETURN_IF_ERROR(Positive("vision_config.out_hidden_size", v.out_hidden_size));
  }
  return absl::OkStatus();
}

// Appends specs; a small builder so the lists below read like the loaders.
class SpecList {
 public:
  void Add(std::string name, Shape shape, TensorSpec::Init init = TensorSpec::Init::kNormal,
           bool routed_expert = false) {
    TensorSpec s;
    s.name = std::move(name);
    s.shape = std::move(shape);
    s.init = init;
    s.routed_expert = routed_expert;
    specs_.push_back(std::move(s));
  }
  void Ones(std::string name, Shape shape) {
    Add(std::move(name), std::move(shape), TensorSpec::Init::kOnes);
  }
  void Zeros(std::string name, Shape shape) {
    Add(std::move(name), std::move(shape), TensorSpec::Init::kZeros);
  }
  std::vector<TensorSpec> Take() { return std::move(specs_); }

 private:
  std::vector<TensorSpec> specs_;
};

// As Qwen3VlMoeModel::Create and ResidentExpertProvider::Create read them.
void AddText(const ModelConfig& config, SpecList* out) {
  const TextConfig& c = config.text;
  const std::string p = Qwen3VlMoeModel::TextPrefix(config);
  const int64_t h = c.hidden_size, hd = c.head_dim;
  const int64_t qd = int64_t{c.num_attention_heads} * hd, kvd = int64_t{c.num_key_value_heads} * hd;
  const int64_t e = c.num_experts, i = c.moe_intermediate_size;
  const bool fused = config.model_type == "qwen3_vl_moe";  // as the published checkpoints
  out->Add(p + "embed_tokens.weight", {c.vocab_size, h});
  out->Ones(p + "norm.weight", {h});
  if (!c.tie_word_embeddings) out->Add("lm_head.weight", {c.vocab_size, h});
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string lp = absl::StrCat(p, "layers.", l, ".");
    const std::string ap = lp + "self_attn.";
    out->Ones(lp + "input_layernorm.weight", {h});
    out->Ones(lp + "post_attention_layernorm.weight", {h});
    out->Add(ap + "q_proj.weight", {qd, h});
    out->Add(ap + "k_proj.weight", {kvd, h});
    out->Add(ap + "v_proj.weight", {kvd, h});
    out->Add(ap + "o_proj.weight", {h, qd});
    if (c.attention_bias) {
      out->Add(ap + "q_proj.bias", {qd});
      out->Add(ap + "k_proj.bias", {kvd});
      out->Add(ap + "v_proj.bias", {kvd});
      out->Add(ap + "o_proj.bias", {h});
    }
    out->Ones(ap + "q_norm.weight", {hd});
    out->Ones(ap + "k_norm.weight", {hd});
    if (!c.IsMoeLayer(l)) {
      const int64_t in = c.intermediate_size;
      out->Add(lp + "mlp.gate_proj.weight", {in, h});
      out->Add(lp + "mlp.up_proj.weight", {in, h});
      out->Add(lp + "mlp.down_proj.weight", {h, in});
      continue;
    }
    out->Add(lp + "mlp.gate.weight", {e, h});
    const std::string xp = lp + "mlp.experts.";
    if (fused) {
      out->Add(xp + "gate_up_proj", {e, h, 2 * i}, TensorSpec::Init::kNormal, true);
      out->Add(xp + "down_proj", {e, i, h}, TensorSpec::Init::kNormal, true);
      continue;
    }
    for (int x = 0; x < e; ++x) {
      const std::string eb = absl::StrCat(xp, x, ".");
      out->Add(eb + "gate_proj.weight", {i, h}, TensorSpec::Init::kNormal, true);
      out->Add(eb + "up_proj.weight", {i, h}, TensorSpec::Init::kNormal, true);
      out->Add(eb + "down_proj.weight", {h, i}, TensorSpec::Init::kNormal, true);
    }
  }
}

// As Qwen3VlVisionModel::Create reads them (prefix "model.visual.").
void AddVision(const VisionConfig& vc, SpecList* out) {
  const std::string p = "model.visual.";
  const int64_t hd = vc.hidden_size, inter = vc.intermediate_size;
  const int64_t mh = hd * vc.spatial_merge_size * vc.spatial_merge_size;
  const int64_t o = vc.out_hidden_size;
  out->Add(p + "patch_embed.proj.weight",
           {hd, vc.in_channels, vc.temporal_patch_size, vc.patch_size, vc.patch_size});
  out->Add(p + "patch_embed.proj.bias", {hd});
  out->Add(p + "pos_embed.weight", {vc.num_position_embeddings, hd});
  for (int b = 0; b < vc.depth; ++b) {
    const std::string bp = absl::StrCat(p, "blocks.", b, ".");
    out->Ones(bp + "norm1.weight", {hd});
    out->Zeros(bp + "norm1.bias", {hd});
    out->Ones(bp + "norm2.weight", {hd});
    out->Zeros(bp + "norm2.bias", {hd});
    out->Add(bp + "attn.qkv.weight", {3 * hd, hd});
    out->Add(bp + "attn.qkv.bias", {3 * hd});
    out->Add(bp + "attn.proj.weight", {hd, hd});
    out->Add(bp + "attn.proj.bias", {hd});
    out->Add(bp + "mlp.linear_fc1.weight", {inter, hd});
    out->Add(bp + "mlp.linear_fc1.bias", {inter});
    out->Add(bp + "mlp.linear_fc2.weight", {hd, inter});
    out->Add(bp + "mlp.linear_fc2.bias", {hd});
  }
  auto merger = [&](const std::string& mp, int64_t norm_dim) {
    out->Ones(mp + "norm.weight", {norm_dim});
    out->Zeros(mp + "norm.bias", {norm_dim});
    out->Add(mp + "linear_fc1.weight", {mh, mh});
    out->Add(mp + "linear_fc1.bias", {mh});
    out->Add(mp + "linear_fc2.weight", {o, mh});
    out->Add(mp + "linear_fc2.bias", {o});
  };
  merger(p + "merger.", hd);
  for (size_t k = 0; k < vc.deepstack_visual_indexes.size(); ++k) {
    merger(absl::StrCat(p, "deepstack_merger_list.", k, "."), mh);
  }
}

// Fills elements [begin, end) of chunk `chunk` of a tensor whose stream seed is `tseed`.
void FillChunk(const TensorSpec& spec, uint64_t tseed, int64_t chunk, uint16_t* dst) {
  const int64_t begin = chunk * kChunkElems;
  const int64_t end = std::min(spec.numel(), begin + kChunkElems);
  if (spec.init != TensorSpec::Init::kNormal) {
    const uint16_t v = FloatToBf16(spec.init == TensorSpec::Init::kOnes ? 1.0f : 0.0f);
    std::fill(dst + begin, dst + end, v);
    return;
  }
  uint64_t state = tseed ^ (static_cast<uint64_t>(chunk) * 0xD1B54A32D192ED03ULL);
  // Irwin-Hall: the sum of four 16-bit uniforms has mean 131070 and std 65536/sqrt(3).
  constexpr float kMean = 4 * 32767.5f;
  const float scale = kSyntheticStd / (65536.0f / 1.7320508f);
  for (int64_t k = begin; k < end; ++k) {
    const uint64_t r = SplitMix64(&state);
    const float sum =
        static_cast<float>((r & 0xFFFF) + ((r >> 16) & 0xFFFF) + ((r >> 32) & 0xFFFF) + (r >> 48));
    dst[k] = FloatToBf16((sum - kMean) * scale);
  }
}

}  // namespace

int64_t TensorSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

absl::StatusOr<std::vector<TensorSpec>> ExpectedTensors(const ModelConfig& config) {
  VISMOE_RETURN_IF_ERROR(CheckConfig(config));
  SpecList list;
  AddText(config, &list);
  if (config.has_vision) AddVision(config.vision, &list);
  return list.Take();
}

absl::StatusOr<SyntheticSizes> MeasureSynthetic(const ModelConfig& config) {
  VISMOE_ASSIGN_OR_RETURN(std::vector<TensorSpec> specs, ExpectedTensors(config));
  SyntheticSizes s;
  for (const TensorSpec& t : specs) {
    s.total_bytes += t.nbytes();
    if (t.routed_expert) s.expert_bytes_total += t.nbytes();
  }
  for (int l = 0; l < config.text.num_hidden_layers; ++l) {
    if (config.text.IsMoeLayer(l)) s.num_experts_total += config.text.num_experts;
  }
  if (s.num_experts_total > 0) s.expert_bytes = s.expert_bytes_total / s.num_experts_total;
  return s;
}

absl::StatusOr<std::unique_ptr<Checkpoint>> SynthesizeCheckpoint(const ModelConfig& config,
                                                                 uint64_t seed, ThreadPool* pool,
                                                                 const std::string& label) {
  VISMOE_ASSIGN_OR_RETURN(std::vector<TensorSpec> specs, ExpectedTensors(config));
  std::vector<size_t> offset(specs.size());
  std::vector<int64_t> first_chunk(specs.size() + 1, 0);
  size_t total = 0;
  for (size_t t = 0; t < specs.size(); ++t) {
    offset[t] = total;
    total += (static_cast<size_t>(specs[t].nbytes()) + kAlign - 1) / kAlign * kAlign;
    first_chunk[t + 1] = first_chunk[t] + (specs[t].numel() + kChunkElems - 1) / kChunkElems;
  }
  total = std::max(total, kAlign);
  const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page_size > 0 &&
      total > static_cast<size_t>(pages) * static_cast<size_t>(page_size)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "synthetic weights for ", label, " need ", total, " bytes, more than the ",
        static_cast<size_t>(pages) * static_cast<size_t>(page_size), " bytes of physical memory"));
  }
  std::shared_ptr<void> storage(std::aligned_alloc(kAlign, total), std::free);
  if (storage == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("synthetic weights for ", label, ": cannot allocate ", total, " bytes"));
  }
  char* base = static_cast<char*>(storage.get());
  std::vector<uint64_t> tseed(specs.size());
  for (size_t t = 0; t < specs.size(); ++t) {
    uint64_t s = seed ^ Fnv1a(specs[t].name);
    tseed[t] = SplitMix64(&s);
  }
  const absl::Time start = absl::Now();
  ParallelFor(pool, first_chunk.back(), 4, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      const size_t t = static_cast<size_t>(
          std::upper_bound(first_chunk.begin(), first_chunk.end(), c) - first_chunk.begin() - 1);
      FillChunk(specs[t], tseed[t], c - first_chunk[t],
                reinterpret_cast<uint16_t*>(base + offset[t]));
    }
  });
  std::vector<std::pair<std::string, TensorView>> views;
  views.reserve(specs.size());
  for (size_t t = 0; t < specs.size(); ++t) {
    views.emplace_back(specs[t].name, TensorView{base + offset[t], specs[t].dtype, specs[t].shape});
  }
  spdlog::info(
      "synthetic weights: {} tensors, {} bytes ({:.2f} GiB) of random BF16 (seed {}) in {}",
      specs.size(), total, static_cast<double>(total) / (1 << 30), seed,
      absl::FormatDuration(absl::Now() - start));
  return Checkpoint::FromMemory(label, std::move(storage), std::move(views));
}

}  // namespace vismoe
