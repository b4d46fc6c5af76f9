#include "engine/policy/affinity_compressor.h"

#include <algorithm>
#include <cmath>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace vismoe {

absl::StatusOr<AffinityScores> ScoreAffinity(const CompressionInput& in, double alpha, double beta,
                                             double lambda) {
  const int64_t n = in.num_tokens;
  if (static_cast<int64_t>(in.saliency.size()) != n) {
    return absl::InvalidArgumentError(absl::StrCat("affinity compressor: saliency has ",
                                                   in.saliency.size(), " entries for ", n,
                                                   " visual tokens"));
  }
  const int k = in.experts_per_token;
  if (k < 0 || static_cast<int64_t>(in.active_experts.size()) != n * k) {
    return absl::InvalidArgumentError(absl::StrCat(
        "affinity compressor: active_experts has ", in.active_experts.size(), " entries for ", n,
        " tokens x ", k, " experts (routing of the pinned prefix missing?)"));
  }
  AffinityScores out;
  out.normalized = NormalizeUnit(in.saliency);
  const int64_t keep = KeepBudget(beta, n);
  const int64_t core_n = std::min(keep, static_cast<int64_t>(std::floor(alpha * n + 1e-9)));
  out.core = TopKIndices(out.normalized, core_n);
  std::vector<bool> is_core(n, false);
  absl::flat_hash_set<int> target;  // E_target
  for (int64_t j : out.core) {
    is_core[j] = true;
    for (int s = 0; s < k; ++s) target.insert(in.active_experts[j * k + s]);
  }
  out.delta.assign(n, 0.0f);
  // Non-core tokens compete on p; core tokens are kept outright, so they are
  // pushed below every finite p to take no part in the second TopK.
  out.score.assign(n, -INFINITY);
  for (int64_t i = 0; i < n; ++i) {
    if (is_core[i]) continue;
    absl::flat_hash_set<int> e_i(in.active_experts.begin() + i * k,
                                 in.active_experts.begin() + (i + 1) * k);
    int64_t outside = 0;
    for (int e : e_i) outside += target.contains(e) ? 0 : 1;
    out.delta[i] =
        e_i.empty() ? 0.0f : static_cast<float>(outside) / static_cast<float>(e_i.size());
    out.score[i] = out.normalized[i] - static_cast<float>(lambda) * out.delta[i];
  }
  out.kept = out.core;
  const std::vector<int64_t> extra = TopKIndices(out.score, keep - core_n);
  out.kept.insert(out.kept.end(), extra.begin(), extra.end());
  std::sort(out.kept.begin(), out.kept.end());
  return out;
}

absl::StatusOr<std::vector<int64_t>> AffinityCompressor::Select(const CompressionInput& in) const {
  auto scores = ScoreAffinity(in, alpha_, beta_, lambda_);
  if (!scores.ok()) return scores.status();
  return std::move(scores->kept);
}

}  // namespace vismoe
