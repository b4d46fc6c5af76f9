// LocalPrepared: the PreparedRequest that LocalEngine::Prepare makes -- the
// built prompt (ids, patches, positions) and the request's checked token
// compression, expert skipping and miss policy.
// Thread safety: immutable after construction.
// Ownership: owns its prompt; the caller of Prepare owns the object.
#ifndef VISMOE_ENGINE_RUNTIME_LOCAL_PREPARED_H_
#define VISMOE_ENGINE_RUNTIME_LOCAL_PREPARED_H_

#include <optional>
#include <utility>

#include "engine/api/engine.h"
#include "engine/core/commit_miss_policy.h"
#include "engine/core/expert_skipping.h"
#include "engine/policy/token_compressor_options.h"
#include "engine/runtime/prompt_builder.h"

namespace vismoe {

class LocalPrepared final : public PreparedRequest {
 public:
  LocalPrepared(GenerateRequest request, Prompt prompt, TokenCompressorOptions compression,
                std::optional<ExpertSkipping> skipping, std::optional<CommitMissPolicy> commit,
                double seconds)
      : PreparedRequest(std::move(request), static_cast<int>(prompt.ids.size()), seconds),
        prompt(std::move(prompt)),
        compression(std::move(compression)),
        skipping(std::move(skipping)),
        commit(std::move(commit)) {}
  const Prompt prompt;
  const TokenCompressorOptions compression;
  const std::optional<ExpertSkipping> skipping;  // nullopt = off (exact)
  const std::optional<CommitMissPolicy> commit;  // nullopt = fetch (exact)
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_RUNTIME_LOCAL_PREPARED_H_
