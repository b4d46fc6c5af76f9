// Helpers for the client end-to-end tests: start the real vismoe-server
// binary on a free loopback port, wait until it reports SERVING, and run the
// built client tools as child processes with stdout and stderr captured
// separately.
#ifndef VISMOE_TESTS_CLIENT_CLIENT_E2E_UTIL_H_
#define VISMOE_TESTS_CLIENT_CLIENT_E2E_UTIL_H_

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/channel.h"
#include "client/health_check.h"
#include "gtest/gtest.h"
#include "tests/testing/child_process.h"
#include "tests/testing/paths.h"

namespace vismoe::testing {

// A port that was free a moment ago (bind to 0, read it back, close).
inline int FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = -1;
  if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  if (fd >= 0) close(fd);
  return port;
}

inline std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A scratch directory for one test binary, removed by the destructor.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& name)
      : path_(std::filesystem::temp_directory_path() /
              absl::StrCat("vismoe_", name, "_", ::getpid())) {
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  std::string File(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

struct ToolResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

inline std::string ClientToolPath(const std::string& tool) {
  return BinaryDir() + "/client/" + tool;
}

// Runs BinaryDir()/client/<tool> (or `tool` itself when it is an absolute
// path) with `args`, bounded by `timeout`.
inline ToolResult RunClientTool(const ScratchDir& scratch, const std::string& tool,
                                const std::vector<std::string>& args,
                                absl::Duration timeout = absl::Seconds(300)) {
  static int counter = 0;
  const bool absolute = !tool.empty() && tool[0] == '/';
  const std::string base =
      scratch.File(absl::StrCat(std::filesystem::path(tool).filename().string(), "_", counter++));
  const std::string out = base + ".out", err = base + ".err";
  // "$0" "$@" passes every argument through the shell untouched.
  std::vector<std::string> argv = {"/bin/sh", "-c",
                                   absl::StrCat("exec \"$0\" \"$@\" >'", out, "' 2>'", err, "'"),
                                   absolute ? tool : ClientToolPath(tool)};
  argv.insert(argv.end(), args.begin(), args.end());
  ToolResult result;
  absl::StatusOr<int> code = RunToCompletion(argv, base + ".log", timeout);
  EXPECT_TRUE(code.ok()) << code.status();
  if (code.ok()) result.exit_code = *code;
  result.out = ReadWholeFile(out);
  result.err = ReadWholeFile(err);
  return result;
}

// The real server on 127.0.0.1:<free port> serving the tiny fixture model.
class ServerUnderTest {
 public:
  static std::string BinaryPath() { return BinaryDir() + "/server/vismoe-server"; }
  static bool BinaryExists() { return std::filesystem::exists(BinaryPath()); }

  // Starts the server (with `extra_flags`) and waits (bounded) for SERVING.
  // Errors carry the server's log.
  static absl::StatusOr<std::unique_ptr<ServerUnderTest>> Start(
      const ScratchDir& scratch, const std::vector<std::string>& extra_flags = {},
      const std::string& api_key = "") {
    auto s = std::unique_ptr<ServerUnderTest>(new ServerUnderTest());
    s->port_ = FreeLoopbackPort();
    if (s->port_ <= 0) return absl::InternalError("no free loopback port");
    s->log_ = scratch.File("server.log");
    std::vector<std::string> argv = {BinaryPath(), "--model=" + TinyModelDir(),
                                     absl::StrCat("--listen=", s->address()),
                                     "--metrics_listen=", "--engine_threads=1"};
    argv.insert(argv.end(), extra_flags.begin(), extra_flags.end());
    s->log_ = scratch.File(absl::StrCat("server_", s->port_, ".log"));
    absl::StatusOr<ChildProcess> child = ChildProcess::Start(argv, s->log_);
    if (!child.ok()) return child.status();
    s->child_ = std::make_unique<ChildProcess>(*std::move(child));
    client::ConnectionOptions conn;
    conn.server = s->address();
    conn.api_key = api_key;
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = client::CreateClientChannel(conn);
    if (!channel.ok()) return channel.status();
    const absl::Time deadline = absl::Now() + absl::Seconds(180);
    while (absl::Now() < deadline) {
      if (!s->child_->Running()) {
        return absl::InternalError(
            absl::StrCat("vismoe-server exited during start-up:\n", s->child_->Log()));
      }
      if (client::CheckHealth(*channel, conn, "", absl::Seconds(2)).serving()) return s;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return absl::DeadlineExceededError(
        absl::StrCat("vismoe-server not SERVING within 180 s; log:\n", s->child_->Log()));
  }

  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  std::string Log() const { return child_ ? child_->Log() : ""; }

 private:
  ServerUnderTest() = default;
  int port_ = 0;
  std::string log_;
  std::unique_ptr<ChildProcess> child_;
};

// Base fixture: one real server per test suite (started in the scratch
// directory `Name::kScratch`), skipping every test when the server binary was
// not built and failing them all when it was built but did not start.
template <typename Name>
class ServerSuiteTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    scratch_ = new ScratchDir(Name::kScratch);
    if (!ServerUnderTest::BinaryExists()) return;
    absl::StatusOr<std::unique_ptr<ServerUnderTest>> server = ServerUnderTest::Start(*scratch_);
    if (server.ok()) {
      server_ = server->release();
    } else {
      start_error_ = new std::string(server.status().ToString());
    }
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
    delete start_error_;
    start_error_ = nullptr;
    delete scratch_;
    scratch_ = nullptr;
  }
  void SetUp() override {
    if (!ServerUnderTest::BinaryExists()) {
      GTEST_SKIP() << ServerUnderTest::BinaryPath() << " was not built";
    }
    ASSERT_EQ(start_error_, nullptr) << *start_error_;
    ASSERT_NE(server_, nullptr);
  }

  static inline ScratchDir* scratch_ = nullptr;
  static inline ServerUnderTest* server_ = nullptr;
  static inline std::string* start_error_ = nullptr;
};

}  // namespace vismoe::testing

#endif  // VISMOE_TESTS_CLIENT_CLIENT_E2E_UTIL_H_
