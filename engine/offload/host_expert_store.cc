#include "engine/offload/host_expert_store.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "engine/core/fp8_block.h"
#include "engine/core/status_macros.h"

namespace vismoe {
namespace {

constexpr size_t kPartAlign = kExpertPartAlign;
constexpr size_t kPageAlign = 4096;

size_t RoundUp(size_t n, size_t a) { return (n + a - 1) / a * a; }

// n values of floating type `from` at src -> type `to` at dst, through fp32
// in chunks (one rounding, to nearest even).
void ConvertFloats(DType from, const void* src, size_t n, DType to, void* dst) {
  constexpr size_t kChunk = 1 << 14;
  std::vector<float> buf(std::min(n, kChunk));
  const size_t in_size = DTypeSize(from), out_size = DTypeSize(to);
  for (size_t begin = 0; begin < n; begin += kChunk) {
    const size_t count = std::min(kChunk, n - begin);
    ToFloat(from, static_cast<const char*>(src) + begin * in_size, count, buf.data());
    char* out = static_cast<char*>(dst) + begin * out_size;
    for (size_t i = 0; i < count; ++i) {
      uint16_t half = 0;
      switch (to) {
        case DType::kF32:
          std::memcpy(out + i * 4, &buf[i], 4);
          continue;
        case DType::kBF16:
          half = FloatToBf16(buf[i]);
          break;
        default:
          half = FloatToF16(buf[i]);
          break;
      }
      std::memcpy(out + i * 2, &half, 2);
    }
  }
}

bool IsFused(ExpertWeights::Layout l) {
  return l == ExpertWeights::Layout::kFusedTransposed || l == ExpertWeights::Layout::kFused;
}

bool IsBlockScaled(DType t) { return t == DType::kF8E4M3 || t == DType::kMxFp4; }

absl::InlinedVector<const TensorView*, 3> PartsOf(const ExpertWeights& w) {
  if (IsFused(w.layout)) return {&w.gate_up, &w.down};
  return {&w.gate, &w.up, &w.down};
}

// The block experts are quantised in at load (transformers' default).
constexpr QuantBlock kLoadQuantBlock{128, 128};

// The [out, in] shape of part `p` (gate, up, down) of `w` in the separate
// layout, whatever w's layout (fused: gate_up [H, 2I], down [I, H]).
Shape SeparateShape(const ExpertWeights& w, int p) {
  if (w.layout == ExpertWeights::Layout::kSeparate) return PartsOf(w)[p]->shape;
  const int64_t h = w.gate_up.dim(0), i = w.gate_up.dim(1) / 2;
  return p == 2 ? Shape{h, i} : Shape{i, h};
}

// Part `p` of `w` as that fp32 [out, in] matrix (the fused layout transposed).
std::vector<float> SeparateMatrix(const ExpertWeights& w, int p) {
  if (w.layout == ExpertWeights::Layout::kSeparate) {
    const TensorView& t = *PartsOf(w)[p];
    std::vector<float> m(static_cast<size_t>(t.numel()));
    ToFloat(t.dtype, t.data, m.size(), m.data());
    return m;
  }
  const TensorView& t = p == 2 ? w.down : w.gate_up;  // [I, H] or [H, 2I]
  const int64_t cols_in = t.dim(1);
  std::vector<float> src(static_cast<size_t>(t.numel()));
  ToFloat(t.dtype, t.data, src.size(), src.data());
  const Shape shape = SeparateShape(w, p);
  const int64_t out = shape[0], in = shape[1];
  const int64_t col0 = p == 1 ? out : 0;  // up is the second half of gate_up's columns
  std::vector<float> m(static_cast<size_t>(out * in));
  for (int64_t i = 0; i < in; ++i) {
    for (int64_t o = 0; o < out; ++o) m[o * in + i] = src[i * cols_in + col0 + o];
  }
  return m;
}

int64_t ScaleCount(const Shape& shape, QuantBlock b) {
  return CeilDiv(shape[0], b.rows) * CeilDiv(shape[1], b.cols);
}

}  // namespace

absl::StatusOr<ExpertFormat> ExpertFormat::FromWeights(const ExpertWeights& w,
                                                       std::optional<DType> dtype) {
  ExpertFormat f;
  f.source_layout = w.layout;
  const auto parts = PartsOf(w);
  f.source_dtype = parts[0]->dtype;
  f.dtype = dtype.value_or(f.source_dtype);
  if (IsBlockScaled(f.source_dtype) && f.dtype == DType::kBF16) f.dtype = f.source_dtype;
  for (const TensorView* t : parts) {
    if (t->empty()) return absl::InvalidArgumentError("expert weights miss a tensor");
    if (t->dtype != f.source_dtype ||
        (t->scale.data == nullptr) != (parts[0]->scale.data == nullptr) ||
        !t->scale.SameBlocks(parts[0]->scale)) {
      return absl::InvalidArgumentError("expert tensors of one expert differ in dtype or scales");
    }
    f.source_shapes.push_back(t->shape);
  }
  const bool quantise = f.dtype == DType::kF8E4M3 && f.source_dtype != DType::kF8E4M3;
  if (IsBlockScaled(f.source_dtype) && f.dtype != f.source_dtype) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(DTypeName(f.source_dtype)),
                                                   " experts cannot be converted to ",
                                                   std::string(DTypeName(f.dtype)), " here"));
  }
  if (f.dtype == DType::kMxFp4 && f.source_dtype != DType::kMxFp4) {
    return absl::InvalidArgumentError("experts are not quantised to MXFP4 at load");
  }
  if (quantise && w.layout == ExpertWeights::Layout::kFused) {
    return absl::InvalidArgumentError("row-major fused experts are not quantised at load");
  }
  std::vector<Shape> shapes = f.source_shapes;
  f.layout = w.layout;
  if (quantise) {
    f.layout = ExpertWeights::Layout::kSeparate;
    f.block = kLoadQuantBlock;
    f.scale_dtype = DType::kF32;
    shapes.clear();
    for (int p = 0; p < 3; ++p) shapes.push_back(SeparateShape(w, p));
  } else if (IsBlockScaled(f.source_dtype)) {
    f.block = QuantBlock{parts[0]->scale.rows, parts[0]->scale.cols};
    f.scale_dtype = parts[0]->scale.dtype;
  }
  for (const Shape& shape : shapes) {
    Part part{f.bytes, shape, 0};
    const int64_t numel = TensorView{nullptr, f.dtype, shape}.numel();
    f.bytes = RoundUp(f.bytes + DTypeBytes(f.dtype, numel), kPartAlign);
    if (f.block.has_value()) {
      part.scale_offset = f.bytes;
      f.bytes =
          RoundUp(f.bytes + ScaleCount(shape, *f.block) * DTypeSize(f.scale_dtype), kPartAlign);
    }
    f.parts.push_back(part);
  }
  return f;
}

bool ExpertFormat::Matches(const ExpertWeights& w) const {
  if (w.layout != source_layout) return false;
  const auto t = PartsOf(w);
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i]->empty() || t[i]->dtype != source_dtype || t[i]->shape != source_shapes[i]) {
      return false;
    }
    if (IsBlockScaled(source_dtype) &&
        (t[i]->scale.data == nullptr ||
         !t[i]->scale.SameBlocks({nullptr, scale_dtype, block->rows, block->cols}))) {
      return false;
    }
  }
  return true;
}

void ExpertFormat::Pack(const ExpertWeights& w, void* dst) const {
  const auto t = PartsOf(w);
  char* d = static_cast<char*>(dst);
  std::memset(d, 0, bytes);  // padding is deterministic
  if (dtype == DType::kF8E4M3 && source_dtype != DType::kF8E4M3) {
    for (size_t p = 0; p < parts.size(); ++p) {
      const std::vector<float> m = SeparateMatrix(w, static_cast<int>(p));
      const Shape& shape = parts[p].shape;
      QuantizeFp8Blocks(m.data(), shape[0], shape[1], *block,
                        reinterpret_cast<uint8_t*>(d + parts[p].offset),
                        reinterpret_cast<float*>(d + parts[p].scale_offset));
    }
    return;
  }
  for (size_t i = 0; i < t.size(); ++i) {
    if (source_dtype == dtype) {
      std::memcpy(d + parts[i].offset, t[i]->data, t[i]->nbytes());
      if (block.has_value()) {
        std::memcpy(d + parts[i].scale_offset, t[i]->scale.data, t[i]->scale_nbytes());
      }
    } else {
      ConvertFloats(source_dtype, t[i]->data, static_cast<size_t>(t[i]->numel()), dtype,
                    d + parts[i].offset);
    }
  }
}

ExpertWeights ExpertFormat::View(const void* block_start) const {
  ExpertWeights w;
  w.layout = layout;
  const char* b = static_cast<const char*>(block_start);
  auto part = [&](int i) {
    TensorView v{b + parts[i].offset, dtype, parts[i].shape};
    if (block.has_value()) {
      v.scale = {b + parts[i].scale_offset, scale_dtype, block->rows, block->cols};
    }
    return v;
  };
  if (IsFused(layout)) {
    w.gate_up = part(0);
    w.down = part(1);
  } else {
    w.gate = part(0);
    w.up = part(1);
    w.down = part(2);
  }
  return w;
}

void* AlignedHostAllocator::Allocate(size_t bytes) {
  return std::aligned_alloc(kPageAlign, RoundUp(bytes == 0 ? 1 : bytes, kPageAlign));
}
void AlignedHostAllocator::Free(void* p, size_t) { std::free(p); }
AlignedHostAllocator* AlignedHostAllocator::Default() {
  static AlignedHostAllocator* a = new AlignedHostAllocator();
  return a;
}

absl::StatusOr<std::unique_ptr<HostExpertStore>> HostExpertStore::Create(
    ExpertProvider& source, absl::Span<const int> layers, int num_experts,
    HostAllocator* allocator, std::optional<DType> dtype, bool map_if_possible) {
  std::unique_ptr<HostExpertStore> s(new HostExpertStore());
  const bool may_map = map_if_possible && source.views_outlive_release();
  s->allocator_ = allocator != nullptr ? allocator : AlignedHostAllocator::Default();
  s->num_experts_ = num_experts;
  if (layers.empty() || num_experts <= 0) return s;
  std::vector<int> all(num_experts);
  for (int e = 0; e < num_experts; ++e) all[e] = e;
  bool have_format = false;
  for (size_t li = 0; li < layers.size(); ++li) {
    const int layer = layers[li];
    if (layer >= static_cast<int>(s->slot_of_layer_.size()))
      s->slot_of_layer_.resize(layer + 1, -1);
    s->slot_of_layer_[layer] = static_cast<int>(li);
    VISMOE_ASSIGN_OR_RETURN(std::vector<int> order, source.BeginLayer(Phase::kPrefill, layer, all));
    for (int e : order) {
      auto w = source.Acquire(layer, e);
      absl::Status st = w.status();
      if (st.ok() && !have_format) {
        st = s->SetFormat(*w, dtype, may_map, layers.size());
        have_format = true;
      }
      if (st.ok()) st = s->Add(li, layer, e, *w);
      if (w.ok()) source.Release(layer, e);
      if (!st.ok()) {
        source.EndLayer(layer);
        return st;
      }
    }
    source.EndLayer(layer);
  }
  return s;
}

absl::Status HostExpertStore::SetFormat(const ExpertWeights& w, std::optional<DType> dtype,
                                        bool may_map, size_t num_layers) {
  VISMOE_ASSIGN_OR_RETURN(format_, ExpertFormat::FromWeights(w, dtype));
  const size_t count = num_layers * static_cast<size_t>(num_experts_);
  if (may_map && format_.dtype == format_.source_dtype && format_.layout == format_.source_layout) {
    views_.resize(count);
    return absl::OkStatus();
  }
  // Mapping was chosen (asked for, or a page-locked copy would not fit) but
  // the experts must be converted: the copy goes to pageable memory, which
  // the copy backend reads as it reads a mapped checkpoint.
  if (may_map) allocator_ = AlignedHostAllocator::Default();
  total_bytes_ = format_.bytes * count;
  data_ = static_cast<char*>(allocator_->Allocate(total_bytes_));
  if (data_ == nullptr) {
    total_bytes_ = 0;
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot allocate ", format_.bytes * count, " bytes of host memory for the expert store"));
  }
  return absl::OkStatus();
}

absl::Status HostExpertStore::Add(size_t li, int layer, int e, const ExpertWeights& w) {
  if (!format_.Matches(w)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layer ", layer, " expert ", e, " differs in layout, dtype or shape from the first"));
  }
  const size_t index = li * static_cast<size_t>(num_experts_) + static_cast<size_t>(e);
  if (mapped()) {
    views_[index] = w;
  } else {
    format_.Pack(w, data_ + index * format_.bytes);
  }
  return absl::OkStatus();
}

HostExpertStore::~HostExpertStore() {
  if (data_ != nullptr) allocator_->Free(data_, total_bytes_);
}

int64_t HostExpertStore::IndexOf(int layer, int expert) const {
  if (layer < 0 || layer >= static_cast<int>(slot_of_layer_.size()) || slot_of_layer_[layer] < 0 ||
      expert < 0 || expert >= num_experts_) {
    return -1;
  }
  return static_cast<int64_t>(slot_of_layer_[layer]) * num_experts_ + expert;
}

const void* HostExpertStore::Block(int layer, int expert) const {
  const int64_t index = IndexOf(layer, expert);
  if (index < 0 || data_ == nullptr) return nullptr;
  return data_ + static_cast<size_t>(index) * format_.bytes;
}

absl::StatusOr<ExpertWeights> HostExpertStore::Weights(int layer, int expert) const {
  const int64_t index = IndexOf(layer, expert);
  if (index < 0 || (!mapped() && data_ == nullptr)) {
    return absl::NotFoundError(
        absl::StrCat("layer ", layer, " expert ", expert, " is not in the host expert store"));
  }
  if (mapped()) return views_[static_cast<size_t>(index)];
  return format_.View(Block(layer, expert));
}

HostExpertStore::Segments HostExpertStore::CopySegments(int layer, int expert) const {
  Segments out;
  const int64_t index = IndexOf(layer, expert);
  if (index < 0) return out;
  if (!mapped()) {
    if (data_ != nullptr) out.push_back({Block(layer, expert), 0, format_.bytes});
    return out;
  }
  const auto tensors = PartsOf(views_[static_cast<size_t>(index)]);
  for (size_t i = 0; i < tensors.size(); ++i) {
    out.push_back({tensors[i]->data, format_.parts[i].offset, tensors[i]->nbytes()});
    if (format_.block.has_value()) {
      out.push_back(
          {tensors[i]->scale.data, format_.parts[i].scale_offset, tensors[i]->scale_nbytes()});
    }
  }
  return out;
}

}  // namespace vismoe
