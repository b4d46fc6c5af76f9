#include "engine/policy/token_compressor.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"
#include "engine/core/policy_names.h"
#include "engine/policy/affinity_compressor.h"

namespace vismoe {
namespace {

class NoneCompressor final : public TokenCompressor {
 public:
  const char* name() const override { return "none"; }
  absl::StatusOr<std::vector<int64_t>> Select(const CompressionInput& in) const override {
    std::vector<int64_t> all(in.num_tokens);
    std::iota(all.begin(), all.end(), int64_t{0});
    return all;
  }
};

class RandomCompressor final : public TokenCompressor {
 public:
  RandomCompressor(double beta, uint64_t seed) : beta_(beta), seed_(seed) {}
  const char* name() const override { return "random"; }
  absl::StatusOr<std::vector<int64_t>> Select(const CompressionInput& in) const override {
    // Partial Fisher-Yates with mt19937_64 (fully specified by the standard)
    // and a plain modulo, so the choice is the same on every platform.
    std::mt19937_64 rng(seed_);
    std::vector<int64_t> idx(in.num_tokens);
    std::iota(idx.begin(), idx.end(), int64_t{0});
    const int64_t keep = KeepBudget(beta_, in.num_tokens);
    for (int64_t i = 0; i < keep; ++i) {
      const int64_t j = i + static_cast<int64_t>(rng() % static_cast<uint64_t>(in.num_tokens - i));
      std::swap(idx[i], idx[j]);
    }
    idx.resize(keep);
    std::sort(idx.begin(), idx.end());
    return idx;
  }

 private:
  double beta_;
  uint64_t seed_;
};

class SaliencyCompressor final : public TokenCompressor {
 public:
  explicit SaliencyCompressor(double beta) : beta_(beta) {}
  const char* name() const override { return "saliency"; }
  absl::StatusOr<std::vector<int64_t>> Select(const CompressionInput& in) const override {
    if (static_cast<int64_t>(in.saliency.size()) != in.num_tokens) {
      return absl::InvalidArgumentError(absl::StrCat("saliency compressor: saliency has ",
                                                     in.saliency.size(), " entries for ",
                                                     in.num_tokens, " visual tokens"));
    }
    std::vector<int64_t> idx = TopKIndices(in.saliency, KeepBudget(beta_, in.num_tokens));
    std::sort(idx.begin(), idx.end());
    return idx;
  }

 private:
  double beta_;
};

}  // namespace

int64_t KeepBudget(double ratio, int64_t n) {
  if (n <= 0) return 0;
  // The epsilon keeps e.g. 0.29 * 100 from flooring to 28.
  const auto k = static_cast<int64_t>(std::floor(ratio * static_cast<double>(n) + 1e-9));
  return std::clamp<int64_t>(k, 1, n);
}

std::vector<float> NormalizeUnit(absl::Span<const float> s) {
  std::vector<float> out(s.size(), 0.0f);
  if (s.empty()) return out;
  const auto [mn, mx] = std::minmax_element(s.begin(), s.end());
  const float range = *mx - *mn;
  if (!(range > 0)) return out;
  for (size_t i = 0; i < s.size(); ++i) out[i] = (s[i] - *mn) / range;
  return out;
}

std::vector<int64_t> TopKIndices(absl::Span<const float> scores, int64_t k) {
  std::vector<int64_t> idx(scores.size());
  std::iota(idx.begin(), idx.end(), int64_t{0});
  k = std::clamp<int64_t>(k, 0, static_cast<int64_t>(idx.size()));
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int64_t a, int64_t b) {
    return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
  });
  idx.resize(k);
  return idx;
}

TokenCompressorOptions WithKeepRatio(TokenCompressorOptions options, double beta) {
  options.beta = beta;
  options.alpha = std::min(options.alpha, beta);
  return options;
}

absl::StatusOr<std::unique_ptr<TokenCompressor>> MakeTokenCompressor(
    const TokenCompressorOptions& o) {
  if (!(o.beta > 0 && o.beta <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("token compressor: keep ratio beta must be in (0, 1], got ", o.beta));
  }
  const std::optional<CompressorKind> kind = PolicyFromName<CompressorKind>(o.kind);
  if (!kind.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat("unknown token compressor '", o.kind,
                                                   "' (known: ", PolicyNames<CompressorKind>(", "),
                                                   ")"));
  }
  if (*kind == CompressorKind::kNone) return std::unique_ptr<TokenCompressor>(new NoneCompressor());
  if (*kind == CompressorKind::kRandom) {
    return std::unique_ptr<TokenCompressor>(new RandomCompressor(o.beta, o.seed));
  }
  if (*kind == CompressorKind::kSaliency) {
    return std::unique_ptr<TokenCompressor>(new SaliencyCompressor(o.beta));
  }
  {
    if (!(o.alpha >= 0 && o.alpha <= o.beta)) {
      return absl::InvalidArgumentError(
          absl::StrCat("token compressor: salient ratio alpha must be in [0, beta = ", o.beta,
                       "], got ", o.alpha));
    }
    if (!(o.lambda >= 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("token compressor: lambda must be >= 0, got ", o.lambda));
    }
    return std::unique_ptr<TokenCompressor>(new AffinityCompressor(o.alpha, o.beta, o.lambda));
  }
}

}  // namespace vismoe
