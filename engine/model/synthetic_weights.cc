#include "engine/model/synthetic_weights.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "engine/core/fnv1a.h"
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

// ExpectedTensors with the messages of this module.
absl::StatusOr<std::vector<TensorSpec>> SyntheticSpecs(const ModelConfig& config) {
  auto specs = ExpectedTensors(config);
  if (!specs.ok()) {
    return absl::Status(specs.status().code(),
                        absl::StrCat("synthetic weights: ", specs.status().message()));
  }
  return specs;
}

}  // namespace

absl::StatusOr<SyntheticSizes> MeasureSynthetic(const ModelConfig& config) {
  VISMOE_ASSIGN_OR_RETURN(std::vector<TensorSpec> specs, SyntheticSpecs(config));
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
                                                                 const std::string& label,
                                                                 SyntheticRouting routing) {
  VISMOE_ASSIGN_OR_RETURN(std::vector<TensorSpec> specs, SyntheticSpecs(config));
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
  if (routing == SyntheticRouting::kRealistic) {
    std::vector<SyntheticTensor> tensors;
    for (size_t t = 0; t < specs.size(); ++t) {
      tensors.push_back({&specs[t], reinterpret_cast<uint16_t*>(base + offset[t])});
    }
    VISMOE_RETURN_IF_ERROR(
        ShapeForRealisticRouting(config, RealisticRoutingParams{}, tensors, pool));
  }
  std::vector<std::pair<std::string, TensorView>> views;
  views.reserve(specs.size());
  for (size_t t = 0; t < specs.size(); ++t) {
    views.emplace_back(specs[t].name, TensorView{base + offset[t], specs[t].dtype, specs[t].shape});
  }
  spdlog::info(
      "synthetic weights: {} tensors, {} bytes ({:.2f} GiB) of random BF16 (seed {}, {} routing) "
      "in {}",
      specs.size(), total, static_cast<double>(total) / (1 << 30), seed,
      SyntheticRoutingName(routing), absl::FormatDuration(absl::Now() - start));
  return Checkpoint::FromMemory(label, std::move(storage), std::move(views));
}

}  // namespace vismoe
