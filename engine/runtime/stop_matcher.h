// StopMatcher: applies stop strings to streamed text.
//
// Text is pushed as it is decoded; Push() returns what may be shown now. Text
// that could still turn into a stop string (a suffix equal to a proper prefix
// of one) is held back; once a stop string appears, the text before it is
// released, the stop string and everything after it are dropped, and the
// matcher is finished. emitted() is always the concatenation of all released
// text, i.e. the final completion text.
// Thread safety: none; one per sequence.
#ifndef VISMOE_ENGINE_RUNTIME_STOP_MATCHER_H_
#define VISMOE_ENGINE_RUNTIME_STOP_MATCHER_H_

#include <string>
#include <vector>

namespace vismoe {

class StopMatcher {
 public:
  // REQUIRES: no stop string is empty.
  explicit StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}

  struct Step {
    std::string ready;     // text to show now
    bool stopped = false;  // a stop string was found; push nothing more
  };
  Step Push(const std::string& text);
  // Releases held-back text at the end of generation (no stop string came).
  std::string Flush();

  const std::string& emitted() const { return emitted_; }
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;  // held back: may be the start of a stop string
  std::string emitted_;
  bool stopped_ = false;
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_RUNTIME_STOP_MATCHER_H_
