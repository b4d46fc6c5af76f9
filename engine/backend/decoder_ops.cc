#include "engine/backend/decoder_ops.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

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

std::vector<int64_t> RowsAfterKeep(absl::Span<const int64_t> rows,
                                   absl::Span<const int64_t> kept) {
  std::vector<int64_t> out(rows.size(), 0);
  size_t seq = 0;
  int64_t end = rows.empty() ? 0 : rows[0];  // one past the current sequence's last row
  for (int64_t r : kept) {
    while (seq + 1 < rows.size() && r >= end) end += rows[++seq];
    ++out[seq];
  }
  return out;
}

absl::StatusOr<std::unique_ptr<DecoderStep>> DecoderOps::BeginStep(const StepInput& input,
                                                                   KvCache* cache) const {
  const StepSequence one{cache, static_cast<int64_t>(input.tokens.size())};
  StepInput in = input;
  in.sequences = absl::MakeConstSpan(&one, 1);
  return BeginStep(in);
}

}  // namespace vismoe
