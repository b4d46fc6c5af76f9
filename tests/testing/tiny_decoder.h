// The tiny Qwen3-VL-MoE fixture as the CPU decoder with every expert
// resident: the setup the decoder-level tests share.
#ifndef VISMOE_TESTS_TESTING_TINY_DECODER_H_
#define VISMOE_TESTS_TESTING_TINY_DECODER_H_

#include <memory>

#include "engine/arch/qwen3_vl_moe.h"
#include "engine/core/thread_pool.h"
#include "engine/model/checkpoint.h"
#include "engine/model/model_config.h"
#include "engine/offload/resident_expert_provider.h"
#include "gtest/gtest.h"

namespace vismoe::testing {

// Loads testing::TinyModelDir() into the out-parameters (the model runs on
// `pool`, which must outlive it); a failure names the step that failed.
::testing::AssertionResult LoadTinyDecoder(ThreadPool* pool, ModelConfig* config,
                                           std::unique_ptr<Checkpoint>* ckpt,
                                           std::unique_ptr<Qwen3VlMoeModel>* model,
                                           std::unique_ptr<ResidentExpertProvider>* experts);

}  // namespace vismoe::testing

#endif  // VISMOE_TESTS_TESTING_TINY_DECODER_H_
