#include "tests/testing/offload_budget.h"

#include "engine/arch/qwen3_vl_moe.h"
#include "engine/core/thread_pool.h"
#include "engine/model/checkpoint.h"
#include "engine/model/model_config.h"
#include "engine/offload/memory_plan.h"
#include "gtest/gtest.h"

namespace vismoe::testing {

int64_t OffloadBudget(const EngineOptions& o, int pinned_layers, int slabs) {
  auto config = ModelConfig::Load(o.model_path);
  auto ckpt = Checkpoint::Open(o.model_path);
  EXPECT_TRUE(config.ok() && ckpt.ok());
  if (!config.ok() || !ckpt.ok()) return 0;
  ThreadPool pool(1);
  auto model = Qwen3VlMoeModel::Create(*config, **ckpt, &pool);
  auto sizes = MeasureModelSizes(**ckpt, config->text, Qwen3VlMoeModel::Experts(*config));
  EXPECT_TRUE(model.ok() && sizes.ok());
  if (!model.ok() || !sizes.ok()) return 0;
  return sizes->resident_bytes + (*model)->NewKvCache(o.max_context_tokens)->bytes() +
         (pinned_layers * sizes->num_experts + slabs) * sizes->expert_bytes;
}

}  // namespace vismoe::testing
