#include "engine/runtime/stop_matcher.h"

#include <algorithm>

namespace vismoe {

StopMatcher::Step StopMatcher::Push(const std::string& text) {
  Step step;
  if (stopped_) {
    step.stopped = true;
    return step;
  }
  pending_ += text;
  // A stop string never starts inside already released text (its start would
  // have been held back), so searching the pending text is enough.
  size_t first = std::string::npos;
  for (const std::string& s : stops_) first = std::min(first, pending_.find(s));
  if (first != std::string::npos) {
    step.ready = pending_.substr(0, first);
    step.stopped = true;
    stopped_ = true;
    pending_.clear();
    emitted_ += step.ready;
    return step;
  }
  // Longest suffix of pending_ that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const std::string& s : stops_) {
    const size_t max_len = std::min(pending_.size(), s.size() - 1);
    for (size_t len = max_len; len > hold; --len) {
      if (pending_.compare(pending_.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  step.ready = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  emitted_ += step.ready;
  return step;
}

std::string StopMatcher::Flush() {
  std::string rest;
  if (!stopped_) rest.swap(pending_);
  emitted_ += rest;
  return rest;
}

}  // namespace vismoe
