#include "engine/backend/decoder_ops.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/core/argmax.h"
#include "engine/core/status_macros.h"

namespace vismoe {

absl::Status CheckStepSequences(const StepInput& input) {
  if (input.sequences.empty()) return absl::InvalidArgumentError("step: no sequences");
  int64_t total = 0;
  for (size_t i = 0; i < input.sequences.size(); ++i) {
    const StepSequence& s = input.sequences[i];
    if (s.cache == nullptr || s.rows < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("step: sequence ", i, " has no cache or no rows"));
    }
    if (s.cache->length() + s.rows > s.cache->reserved_tokens()) {
      return absl::InvalidArgumentError(
          absl::StrCat("step: sequence ", i, " holds KV blocks for ", s.cache->reserved_tokens(),
                       " tokens, not ", s.cache->length() + s.rows, " (KvCache::Reserve)"));
    }
    for (size_t j = 0; j < i; ++j) {
      if (input.sequences[j].cache == s.cache) {
        return absl::InvalidArgumentError(
            absl::StrCat("step: sequences ", j, " and ", i, " share a KV cache"));
      }
    }
    total += s.rows;
  }
  if (total != static_cast<int64_t>(input.tokens.size())) {
    return absl::InvalidArgumentError(absl::StrCat("step: sequences hold ", total, " rows, ",
                                                   input.tokens.size(), " tokens given"));
  }
  return absl::OkStatus();
}

std::vector<int64_t> RowsAfterKeep(absl::Span<const int64_t> rows, absl::Span<const int64_t> kept) {
  std::vector<int64_t> out(rows.size(), 0);
  size_t seq = 0;
  int64_t end = rows.empty() ? 0 : rows[0];  // one past the current sequence's last row
  for (int64_t r : kept) {
    while (seq + 1 < rows.size() && r >= end) end += rows[++seq];
    ++out[seq];
  }
  return out;
}

absl::StatusOr<std::unique_ptr<KvCache>> DecoderOps::CreateKvCache(int64_t capacity) const {
  if (capacity <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV cache capacity must be > 0, got ", capacity));
  }
  const int64_t bt = KvPool::kDefaultBlockTokens;
  VISMOE_ASSIGN_OR_RETURN(std::unique_ptr<KvPool> pool, CreateKvPool((capacity + bt - 1) / bt, bt));
  return std::make_unique<KvCache>(std::move(pool), capacity);
}

absl::StatusOr<std::unique_ptr<DecoderStep>> DecoderOps::BeginStep(const StepInput& input,
                                                                   KvCache* cache) const {
  const StepSequence one{cache, static_cast<int64_t>(input.tokens.size())};
  StepInput in = input;
  in.sequences = absl::MakeConstSpan(&one, 1);
  return BeginStep(in);
}

absl::Status DecoderStep::DrawTokens(absl::Span<const TokenDraw> draws, std::vector<int>* tokens) {
  std::vector<float> logits;
  VISMOE_RETURN_IF_ERROR(Logits(/*all_rows=*/false, &logits));
  if (draws.empty() || logits.size() % draws.size() != 0) {
    return absl::InternalError(absl::StrCat(draws.size(), " draws for ", logits.size(), " logits"));
  }
  const size_t vocab = logits.size() / draws.size();
  tokens->clear();
  TokenPicker picker;
  for (size_t s = 0; s < draws.size(); ++s) {
    const absl::Span<const float> row = absl::MakeConstSpan(logits).subspan(s * vocab, vocab);
    tokens->push_back(DrawToken(row, draws[s], &picker));
  }
  return absl::OkStatus();
}

absl::Status DecoderStep::DeviceMoe(int layer, Phase /*phase*/, ExpertProvider* /*experts*/,
                                    bool /*observed*/) {
  return absl::UnimplementedError(
      absl::StrCat("DeviceMoe(", layer, "): this backend runs no MoE layer without the host"));
}

absl::StatusOr<bool> DecoderStep::DeferredReady(int layer) {
  return absl::UnimplementedError(
      absl::StrCat("DeferredReady(", layer, "): this backend runs no MoE layer without the host"));
}

absl::StatusOr<DeferredLayer> DecoderStep::TakeDeferred(int layer) {
  return absl::UnimplementedError(
      absl::StrCat("TakeDeferred(", layer, "): this backend runs no MoE layer without the host"));
}

}  // namespace vismoe
