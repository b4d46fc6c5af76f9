// A VismoeServer over a FakeEngine, for the tests of its front ends (gRPC,
// HTTP), and what those tests check it with.
#ifndef VISMOE_TESTS_SERVER_FAKE_SERVER_H_
#define VISMOE_TESTS_SERVER_FAKE_SERVER_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "tests/server/fake_engine.h"

namespace vismoe::testing {

// Starts a server whose engine is a FakeEngine (`engine` points at it once
// loaded) and loads it unless `load` is false; null (with a test failure)
// when it cannot start.
inline std::unique_ptr<server::VismoeServer> StartFake(const server::ServerOptions& options,
                                                       FakeEngine** engine, bool load = true) {
  auto factory = [engine](const EngineOptions&) -> absl::StatusOr<std::unique_ptr<Engine>> {
    auto e = std::make_unique<FakeEngine>();
    *engine = e.get();
    return std::unique_ptr<Engine>(std::move(e));
  };
  absl::StatusOr<std::unique_ptr<server::VismoeServer>> server =
      server::VismoeServer::Start(options, factory);
  EXPECT_TRUE(server.ok()) << server.status();
  if (!server.ok()) return nullptr;
  if (load) {
    EXPECT_TRUE((*server)->LoadModel().ok());
  }
  return std::move(*server);
}

// What a FakeEngine generates for n tokens: "w0 w1 ... w<n-1> ".
inline std::string ExpectedText(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) absl::StrAppend(&s, "w", i, " ");
  return s;
}

// Polls `cond` until it holds; fails the test after 20 s.
inline void WaitUntil(const std::function<bool()>& cond) {
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (!cond()) {
    ASSERT_LT(absl::Now(), deadline) << "condition not reached in 20 s";
    absl::SleepFor(absl::Milliseconds(5));
  }
}

}  // namespace vismoe::testing

#endif  // VISMOE_TESTS_SERVER_FAKE_SERVER_H_
