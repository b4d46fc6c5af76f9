#include "tests/testing/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

extern char** environ;

namespace vismoe::testing {

std::optional<std::string> FindOnPath(const std::string& program) {
  if (program.find('/') != std::string::npos) {
    if (access(program.c_str(), X_OK) == 0) return program;
    return std::nullopt;
  }
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path ? path : "/usr/bin:/bin", ':')) {
    if (dir.empty()) continue;
    std::string candidate = absl::StrCat(dir, "/", program);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return std::nullopt;
}

absl::StatusOr<ChildProcess> ChildProcess::Start(const std::vector<std::string>& argv,
                                                 const std::string& log_path) {
  if (argv.empty()) return absl::InvalidArgumentError("ChildProcess: empty argv");
  std::optional<std::string> exe = FindOnPath(argv[0]);
  if (!exe) {
    return absl::NotFoundError(absl::StrCat("program '", argv[0], "' not found on PATH"));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path.c_str(),
                                   O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, exe->c_str(), &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    return absl::InternalError(
        absl::StrCat("cannot start '", absl::StrJoin(argv, " "), "': ", strerror(rc)));
  }
  return ChildProcess(pid, log_path);
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept
    : pid_(other.pid_), exit_code_(other.exit_code_), log_path_(std::move(other.log_path_)) {
  other.pid_ = -1;
}

ChildProcess::~ChildProcess() { Stop(); }

bool ChildProcess::Running() {
  if (pid_ < 0) return false;
  int status = 0;
  const pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == 0) return true;
  if (r == pid_) {
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  pid_ = -1;
  return false;
}

absl::StatusOr<int> ChildProcess::Wait(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (Running()) {
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("child still running after ", absl::FormatDuration(timeout)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return exit_code_;
}

void ChildProcess::Stop(absl::Duration grace) {
  if (pid_ < 0) return;
  kill(pid_, SIGTERM);
  if (Wait(grace).ok()) return;
  kill(pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
}

std::string ChildProcess::Log() const {
  std::ifstream in(log_path_);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

absl::StatusOr<int> RunToCompletion(const std::vector<std::string>& argv,
                                    const std::string& log_path, absl::Duration timeout) {
  absl::StatusOr<ChildProcess> child = ChildProcess::Start(argv, log_path);
  if (!child.ok()) return child.status();
  absl::StatusOr<int> code = child->Wait(timeout);
  if (!code.ok()) {
    child->Stop(absl::Seconds(1));
    return absl::DeadlineExceededError(absl::StrCat(
        "'", absl::StrJoin(argv, " "), "' did not finish within ", absl::FormatDuration(timeout)));
  }
  return code;
}

}  // namespace vismoe::testing
