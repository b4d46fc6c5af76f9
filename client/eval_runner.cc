#include "client/eval_runner.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/generate_call.h"
#include "client/request_builder.h"
#include "client/rpc_error.h"

namespace vismoe::client {

std::vector<EvalOutcome> RunEval(vismoe::v1::InferenceService::StubInterface* stub,
                                 const ConnectionOptions& connection,
                                 const std::vector<EvalItem>& items, const EvalOptions& options,
                                 std::FILE* progress, const std::atomic<bool>* stop) {
  std::vector<EvalOutcome> outcomes(items.size());
  vismoe::v1::SamplingParams sampling;  // greedy: temperature 0
  sampling.set_max_new_tokens(options.max_new_tokens);
  std::atomic<size_t> next{0};
  std::atomic<size_t> done{0};
  auto worker = [&] {
    for (;;) {
      const size_t i = next.fetch_add(1);
      if (i >= items.size()) return;
      const EvalItem& item = items[i];
      EvalOutcome& o = outcomes[i];  // each index is written by one worker only
      o.line = item.line;
      o.category = item.category;
      o.answer = item.answer;
      if (stop != nullptr && stop->load()) {
        o.error = "CANCELLED: run interrupted";
        done.fetch_add(1);
        continue;
      }
      PromptSpec spec;
      spec.prompt = BuildEvalPrompt(item);
      if (!item.image.bytes.empty()) spec.images.push_back(item.image);
      GenerateOutcome call = RunGenerate(
          stub, connection,
          BuildGenerateRequest(spec, sampling, options.policy, absl::StrCat("eval-", item.line)),
          options.request_timeout, nullptr);
      o.rpc_ok = call.status.ok();
      if (o.rpc_ok) {
        o.prediction = call.text;
        o.match = MatchAnswer(o.prediction, item.answer, item.choices);
      } else {
        o.error = absl::StrCat(StatusCodeName(call.status.error_code()), ": ",
                               call.status.error_message());
      }
      const size_t n = done.fetch_add(1) + 1;
      if (progress != nullptr) {
        std::fprintf(progress, "\r[%zu/%zu]", n, items.size());
        std::fflush(progress);
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < std::max(1, options.concurrency); ++t) threads.emplace_back(worker);
  for (std::thread& t : threads) t.join();
  if (progress != nullptr) std::fprintf(progress, "\n");
  return outcomes;
}

}  // namespace vismoe::client
