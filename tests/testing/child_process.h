// ChildProcess: runs an external program (prometheus, promtool) from a test,
// with its stdout+stderr captured in a file, and guarantees it is gone when
// the object is: the destructor sends SIGTERM, waits a bounded time, then
// SIGKILLs and reaps. Not thread-safe; not copyable.
#ifndef VISMOE_TESTS_TESTING_CHILD_PROCESS_H_
#define VISMOE_TESTS_TESTING_CHILD_PROCESS_H_

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace vismoe::testing {

// The absolute path of `program` found on $PATH, or nothing.
std::optional<std::string> FindOnPath(const std::string& program);

class ChildProcess {
 public:
  // Starts argv[0] (an absolute path, or a name looked up on $PATH) with its
  // output appended to `log_path`. NotFound when the program does not exist.
  static absl::StatusOr<ChildProcess> Start(const std::vector<std::string>& argv,
                                            const std::string& log_path);
  ~ChildProcess();
  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&&) = delete;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // Waits up to `timeout` for exit; returns the exit code (128 + signal when
  // killed by one). DeadlineExceeded if still running (it is left running).
  absl::StatusOr<int> Wait(absl::Duration timeout);
  // True while the process has not exited.
  bool Running();
  // SIGTERM, up to `grace` to exit, then SIGKILL; always reaps.
  void Stop(absl::Duration grace = absl::Seconds(5));
  // What the process wrote so far.
  std::string Log() const;

 private:
  ChildProcess(pid_t pid, std::string log_path) : pid_(pid), log_path_(std::move(log_path)) {}
  pid_t pid_ = -1;  // -1 once reaped
  int exit_code_ = -1;
  std::string log_path_;
};

// Runs a program to completion (bounded by `timeout`, then killed) and
// returns its exit code; its output goes to `log_path`.
absl::StatusOr<int> RunToCompletion(const std::vector<std::string>& argv,
                                    const std::string& log_path, absl::Duration timeout);

}  // namespace vismoe::testing

#endif  // VISMOE_TESTS_TESTING_CHILD_PROCESS_H_
