#include "engine/offload/transfer_engine.h"

#include <chrono>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "spdlog/spdlog.h"

namespace vismoe {
namespace {

absl::Status Cancelled() { return absl::CancelledError("expert copy cancelled"); }

}  // namespace

using Clock = std::chrono::steady_clock;

TransferEngine::TransferEngine(Options options) : options_(options), paused_(options.start_paused) {
  thread_ = std::thread([this] { Run(); });
}

TransferEngine::~TransferEngine() { Shutdown(); }

uint64_t TransferEngine::Submit(Request request) {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t ticket = next_ticket_++;
  if (stopping_) {
    ++stats_.cancelled;
    lock.unlock();
    if (request.on_done) request.on_done(Cancelled());
    return ticket;
  }
  queue_.push_back({ticket, std::move(request)});
  cv_.notify_all();
  return ticket;
}

bool TransferEngine::Cancel(uint64_t ticket) {
  std::unique_lock<std::mutex> lock(mu_);
  for (size_t i = 0; i < queue_.size(); ++i) {
    if (queue_[i].ticket != ticket) continue;
    Request r = std::move(queue_[i].request);
    queue_.erase(queue_.begin() + static_cast<std::ptrdiff_t>(i));
    ++stats_.cancelled;
    if (queue_.empty() && !busy_) idle_cv_.notify_all();
    lock.unlock();
    if (r.on_done) r.on_done(Cancelled());
    return true;
  }
  return false;
}

void TransferEngine::Resume() {
  std::lock_guard<std::mutex> lock(mu_);
  paused_ = false;
  cv_.notify_all();
}

void TransferEngine::WaitIdle() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [&] { return (queue_.empty() || stopping_) && !busy_; });
}

void TransferEngine::Shutdown() {
  std::vector<Entry> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_) {
      stopping_ = true;
      dropped.swap(queue_);
      stats_.cancelled += dropped.size();
      cv_.notify_all();
    }
  }
  if (thread_.joinable()) thread_.join();
  for (Entry& e : dropped) {
    if (e.request.on_done) e.request.on_done(Cancelled());
  }
  std::lock_guard<std::mutex> lock(mu_);
  idle_cv_.notify_all();
}

absl::Status TransferEngine::CopyOne(const Request& r) {
  const CopySegment whole{r.src, 0, r.bytes};
  const absl::Span<const CopySegment> pieces =
      r.segments.empty() ? absl::MakeConstSpan(&whole, 1) : absl::MakeConstSpan(r.segments);
  for (const CopySegment& p : pieces) {
    void* dst = static_cast<char*>(r.dst) + p.dst_offset;
    if (options_.backend == nullptr) {
      std::memcpy(dst, p.src, p.bytes);
      continue;
    }
    absl::Status copied = options_.backend->Copy(dst, p.src, p.bytes);
    // Cancelled means Cancel/Shutdown to the owner; a backend's own
    // "cancelled" is a failed copy like any other.
    if (absl::IsCancelled(copied)) {
      return absl::InternalError(absl::StrCat("copy cancelled by the backend: ", copied.message()));
    }
    if (!copied.ok()) return copied;
  }
  return absl::OkStatus();
}

void TransferEngine::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || (!paused_ && !queue_.empty()); });
    if (stopping_) return;
    size_t best = 0;
    for (size_t i = 1; i < queue_.size(); ++i) {
      const Entry& a = queue_[i];
      const Entry& b = queue_[best];
      if (a.request.priority > b.request.priority ||
          (a.request.priority == b.request.priority && a.ticket < b.ticket)) {
        best = i;
      }
    }
    Request r = std::move(queue_[best].request);
    queue_.erase(queue_.begin() + static_cast<std::ptrdiff_t>(best));
    busy_ = true;
    lock.unlock();
    const Clock::time_point start = Clock::now();
    absl::Status copied = CopyOne(r);
    if (copied.ok() && options_.bandwidth_bytes_per_s > 0) {
      // The throttle is simulated time (the bytes are in place): Shutdown
      // cuts it short rather than waiting out a slow setting.
      const Clock::time_point until =
          start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
                      static_cast<double>(r.bytes) / options_.bandwidth_bytes_per_s));
      std::unique_lock<std::mutex> throttle(mu_);
      cv_.wait_until(throttle, until, [&] { return stopping_; });
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    lock.lock();
    bool log_failure = false;
    if (copied.ok()) {
      ++stats_.copies;
      stats_.bytes += r.bytes;
      stats_.busy_seconds += seconds;
    } else {
      log_failure = stats_.failed++ == 0;
    }
    lock.unlock();
    // Logged once: a broken device fails every copy and must not flood the log.
    if (log_failure) {
      spdlog::error(
          "transfer engine: {} copy of {} bytes failed: {} (further failures are only counted)",
          options_.backend->name(), r.bytes, copied.ToString());
    }
    if (r.on_done) r.on_done(copied);
    lock.lock();
    busy_ = false;
    if (queue_.empty()) idle_cv_.notify_all();
  }
}

TransferEngine::Stats TransferEngine::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

double TransferEngine::MeasuredBandwidth() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_.busy_seconds > 0 ? static_cast<double>(stats_.bytes) / stats_.busy_seconds : 0;
}

size_t TransferEngine::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

}  // namespace vismoe
