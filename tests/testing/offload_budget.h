// The device budget that gives a model a chosen offload layout, for engine
// tests that want experts really copied.
#ifndef VISMOE_TESTS_TESTING_OFFLOAD_BUDGET_H_
#define VISMOE_TESTS_TESTING_OFFLOAD_BUDGET_H_

#include <cstdint>

#include "engine/api/engine.h"

namespace vismoe::testing {

// Device bytes for o.model_path's resident weights, a KV cache of
// o.max_context_tokens, `pinned_layers` MoE layers of experts and `slabs`
// expert slabs; 0 (with a test failure) when the model cannot be read.
int64_t OffloadBudget(const EngineOptions& o, int pinned_layers, int slabs);

}  // namespace vismoe::testing

#endif  // VISMOE_TESTS_TESTING_OFFLOAD_BUDGET_H_
