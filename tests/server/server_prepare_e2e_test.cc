// End-to-end over loopback: request preparation (chat template, tokenizer,
// image decoding) runs off the engine's worker. A request whose text takes
// seconds to tokenize (and is then refused for its token count) does not hold
// up a small request sent while it is being prepared: with the default
// --prepare_threads the small one is answered first, on the only worker.
#include <chrono>
#include <string>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "tests/server/server_test_util.h"
#include "tests/testing/paths.h"

namespace vismoe::server {
namespace {

using ::testing::HasSubstr;
using vismoe::testing::MakeStub;
using vismoe::testing::RunGenerate;
using vismoe::testing::StreamResult;
using vismoe::testing::TextRequest;

TEST(ServerPrepareE2eTest, ASlowPreparationDoesNotHoldUpOtherRequests) {
  ServerOptions o = vismoe::testing::LoopbackOptions(vismoe::testing::TinyModelDir());
  o.backend = "cpu";
  o.workers = 1;  // prepare_threads left at its default
  o.max_message_bytes = 64 << 20;
  o.max_prompt_bytes = 48 << 20;
  o.max_prompt_tokens = 1024;
  auto server = VismoeServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_TRUE((*server)->LoadModel().ok());
  auto stub = MakeStub((*server)->port());

  // ~6M tokens of words: seconds of tokenizing before the token limit refuses it.
  std::string huge;
  while (huge.size() < (24u << 20)) huge += "the quick brown fox jumps over a lazy dog ";
  using Clock = std::chrono::steady_clock;
  Clock::time_point huge_done, small_done;
  StreamResult huge_result;
  std::thread slow([&] {
    huge_result = RunGenerate(*stub, TextRequest(huge, 2), std::chrono::seconds(120));
    huge_done = Clock::now();
  });
  // Wait until the huge request is being prepared (waiting, none running).
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while ((*server)->scheduler()->queue_depth() == 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  const StreamResult small = RunGenerate(*stub, TextRequest("Hello", 2));
  small_done = Clock::now();
  slow.join();
  ASSERT_TRUE(small.status.ok()) << small.status.error_message();
  EXPECT_EQ(small.token_ids.size(), 2u);
  EXPECT_EQ(huge_result.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(huge_result.status.error_message(), HasSubstr("tokens"));
  EXPECT_LT(small_done, huge_done) << "the small request waited for the huge one's tokenizer";
}

}  // namespace
}  // namespace vismoe::server
