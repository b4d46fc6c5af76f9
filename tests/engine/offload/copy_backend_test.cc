// The TransferEngine's CopyBackend hook, with a fake backend: copies go
// through the backend in priority order with the right pointers and sizes, a
// failed copy completes its request with on_done(the backend's error), is counted in
// Stats::failed (not in copies/bytes), is logged once, and does not stop the
// copies after it.
#include "engine/offload/copy_backend.h"

#include <cstring>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "engine/offload/transfer_engine.h"
#include "gtest/gtest.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"

namespace vismoe {
namespace {

// Records every call; memcpy's unless the call's index is in `fail_calls`.
class FakeCopyBackend final : public CopyBackend {
 public:
  struct Call {
    void* dst;
    const void* src;
    size_t bytes;
  };
  explicit FakeCopyBackend(std::vector<int> fail_calls = {}) : fail_calls_(std::move(fail_calls)) {}

  absl::Status Copy(void* dst, const void* src, size_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    const int index = static_cast<int>(calls_.size());
    calls_.push_back({dst, src, bytes});
    for (int f : fail_calls_) {
      if (f == index) return absl::InternalError("fake copy failure");
    }
    std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }
  const char* name() const override { return "fake"; }

  std::vector<Call> calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }

 private:
  const std::vector<int> fail_calls_;
  mutable std::mutex mu_;
  std::vector<Call> calls_;
};

// Swaps the default spdlog logger for one writing into a string.
class CapturedLog {
 public:
  CapturedLog() : previous_(spdlog::default_logger()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("captured", sink));
  }
  ~CapturedLog() { spdlog::set_default_logger(previous_); }
  std::string text() const { return out_.str(); }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::logger> previous_;
};

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

TEST(CopyBackendTest, CopiesGoThroughTheBackendInPriorityOrder) {
  FakeCopyBackend backend;
  TransferEngine::Options options;
  options.start_paused = true;
  options.backend = &backend;
  TransferEngine te(options);
  // Block i is 16 + i bytes of the value i, so sizes and sources are distinct.
  std::vector<std::vector<char>> src;
  std::vector<std::vector<char>> dst;
  for (int i = 0; i < 5; ++i) {
    src.emplace_back(16 + i, static_cast<char>('a' + i));
    dst.emplace_back(16 + i, 0);
  }
  const double prio[] = {2, 9, 2, 4, -1};
  std::mutex mu;
  std::vector<int> done;
  for (int i = 0; i < 5; ++i) {
    TransferEngine::Request r;
    r.src = src[i].data();
    r.dst = dst[i].data();
    r.bytes = src[i].size();
    r.priority = prio[i];
    r.on_done = [&, i](const absl::Status& copied) {
      const bool ok = copied.ok();
      EXPECT_TRUE(ok);
      EXPECT_EQ(dst[i], src[i]) << "completion before the bytes were in place, block " << i;
      std::lock_guard<std::mutex> lock(mu);
      done.push_back(i);
    };
    te.Submit(std::move(r));
  }
  te.Resume();
  te.WaitIdle();
  const std::vector<int> order = {1, 3, 0, 2, 4};
  EXPECT_EQ(done, order);
  const std::vector<FakeCopyBackend::Call> calls = backend.calls();
  ASSERT_EQ(calls.size(), 5u);
  size_t total = 0;
  for (size_t k = 0; k < calls.size(); ++k) {
    const int i = order[k];
    EXPECT_EQ(calls[k].dst, dst[i].data()) << k;
    EXPECT_EQ(calls[k].src, src[i].data()) << k;
    EXPECT_EQ(calls[k].bytes, src[i].size()) << k;
    total += src[i].size();
  }
  const TransferEngine::Stats s = te.stats();
  EXPECT_EQ(s.copies, 5u);
  EXPECT_EQ(s.bytes, total);
  EXPECT_EQ(s.failed, 0u);
  EXPECT_EQ(s.cancelled, 0u);
}

TEST(CopyBackendTest, FailedCopiesCompleteWithFalseAreCountedAndLoggedOnce) {
  CapturedLog log;
  // Calls 1 and 3 (in copy order) fail.
  FakeCopyBackend backend({1, 3});
  TransferEngine::Options options;
  options.start_paused = true;
  options.backend = &backend;
  TransferEngine te(options);
  std::vector<char> src(32, 'q');
  std::vector<std::vector<char>> dst(5, std::vector<char>(32, 0));
  std::mutex mu;
  std::vector<std::pair<int, bool>> done;
  for (int i = 0; i < 5; ++i) {
    TransferEngine::Request r;
    r.src = src.data();
    r.dst = dst[i].data();
    r.bytes = src.size();
    r.priority = 10 - i;  // copy order == submission order
    r.on_done = [&, i](const absl::Status& copied) {
      const bool ok = copied.ok();
      // The backend's own error, not a cancellation: the owner tells them apart.
      if (!ok) {
        EXPECT_EQ(copied.message(), "fake copy failure");
      }
      std::lock_guard<std::mutex> lock(mu);
      done.push_back({i, ok});
    };
    te.Submit(std::move(r));
  }
  te.Resume();
  te.WaitIdle();  // returns although copies failed
  const std::vector<std::pair<int, bool>> want = {
      {0, true}, {1, false}, {2, true}, {3, false}, {4, true}};
  EXPECT_EQ(done, want);
  for (int i : {0, 2, 4}) EXPECT_EQ(dst[i], src) << i;
  for (int i : {1, 3}) EXPECT_EQ(dst[i], std::vector<char>(32, 0)) << i;
  const TransferEngine::Stats s = te.stats();
  EXPECT_EQ(s.copies, 3u);
  EXPECT_EQ(s.bytes, 3u * 32);
  EXPECT_EQ(s.failed, 2u);
  EXPECT_EQ(s.cancelled, 0u);
  te.Shutdown();
  spdlog::default_logger()->flush();
  const std::string text = log.text();
  EXPECT_EQ(Count(text, "copy of 32 bytes failed"), 1u) << text;
  EXPECT_EQ(Count(text, "fake"), 2u) << text;  // backend name and its error, once each
  EXPECT_NE(text.find("fake copy failure"), std::string::npos) << text;
}

// Cancelled reaches the owner only for Cancel/Shutdown (the offload provider
// takes it for a shutdown); a backend's own "cancelled" is a failed copy.
class CancellingCopyBackend final : public CopyBackend {
 public:
  absl::Status Copy(void*, const void*, size_t) override {
    return absl::CancelledError("stream torn down");
  }
  const char* name() const override { return "cancelling"; }
};

TEST(CopyBackendTest, ABackendsCancelledIsAFailureNotACancellation) {
  CapturedLog log;  // the failure is logged; keep it out of the test output
  CancellingCopyBackend backend;
  TransferEngine::Options options;
  options.backend = &backend;
  TransferEngine te(options);
  char src[8] = {}, dst[8] = {};
  absl::Status got = absl::OkStatus();
  TransferEngine::Request r;
  r.src = src;
  r.dst = dst;
  r.bytes = sizeof(src);
  r.on_done = [&](const absl::Status& copied) { got = copied; };
  te.Submit(std::move(r));
  te.WaitIdle();
  EXPECT_FALSE(got.ok());
  EXPECT_FALSE(absl::IsCancelled(got)) << got;
  EXPECT_NE(std::string(got.message()).find("stream torn down"), std::string::npos) << got;
  EXPECT_EQ(te.stats().failed, 1u);
  EXPECT_EQ(te.stats().cancelled, 0u);
}

TEST(CopyBackendTest, ThrottleStillBoundsTheRateWithABackend) {
  FakeCopyBackend backend;
  TransferEngine::Options options;
  options.bandwidth_bytes_per_s = 8.0 * (1 << 20);
  options.backend = &backend;
  TransferEngine te(options);
  std::vector<char> src(32 << 10, 'w'), dst(2 * (32 << 10), 0);
  for (int i = 0; i < 2; ++i) {
    TransferEngine::Request r;
    r.src = src.data();
    r.dst = dst.data() + i * (32 << 10);
    r.bytes = src.size();
    te.Submit(std::move(r));
  }
  te.WaitIdle();
  EXPECT_EQ(backend.calls().size(), 2u);
  EXPECT_EQ(dst.back(), 'w');
  EXPECT_EQ(te.stats().bytes, 2u * (32 << 10));
  EXPECT_GT(te.MeasuredBandwidth(), 0);
  EXPECT_LE(te.MeasuredBandwidth(), 8.0 * (1 << 20) * 1.01);
}

}  // namespace
}  // namespace vismoe
