#include "tests/testing/tiny_decoder.h"

#include <string>
#include <utility>

#include "tests/testing/paths.h"

namespace vismoe::testing {

::testing::AssertionResult LoadTinyDecoder(ThreadPool* pool, ModelConfig* config,
                                           std::unique_ptr<Checkpoint>* ckpt,
                                           std::unique_ptr<Qwen3VlMoeModel>* model,
                                           std::unique_ptr<ResidentExpertProvider>* experts) {
  const std::string dir = TinyModelDir();
  auto c = ModelConfig::Load(dir);
  if (!c.ok()) return ::testing::AssertionFailure() << "config: " << c.status();
  *config = *c;
  auto k = Checkpoint::Open(dir);
  if (!k.ok()) return ::testing::AssertionFailure() << "checkpoint: " << k.status();
  *ckpt = *std::move(k);
  auto m = Qwen3VlMoeModel::Create(*config, **ckpt, pool);
  if (!m.ok()) return ::testing::AssertionFailure() << "model: " << m.status();
  *model = *std::move(m);
  auto e = ResidentExpertProvider::Create(**ckpt, config->text,
                                          Qwen3VlMoeModel::TextPrefix(*config));
  if (!e.ok()) return ::testing::AssertionFailure() << "experts: " << e.status();
  *experts = *std::move(e);
  return ::testing::AssertionSuccess();
}

}  // namespace vismoe::testing
