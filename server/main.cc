// vismoe-server: serves one vision-language MoE model over gRPC.
//   vismoe-server --model=/path/to/checkpoint [--listen=...] [--config=...]
// SIGTERM / SIGINT start a graceful drain (see VismoeServer); the process
// exits at the latest kShutdownGrace after --drain_timeout, or at once on a
// second signal.
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <thread>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "engine/core/help_flag.h"
#include "server/server.h"
#include "server/server_options.h"
#include "spdlog/spdlog.h"

namespace {

// Past --drain_timeout, time for the cancelled requests to be answered and the
// listeners to close. A step blocked for longer (a copy that never ends) does
// not hold the process.
constexpr absl::Duration kShutdownGrace = absl::Seconds(5);

// Set when the shutdown is over; static, as the watchdog may outlive main().
std::atomic<bool> g_shutdown_finished{false};

// Ends the process when the shutdown overruns drain_timeout + kShutdownGrace
// or a second signal comes, unless it finished by then.
void StartShutdownWatchdog(sigset_t signals, absl::Duration drain_timeout) {
  std::thread([signals, drain_timeout] {
    const absl::Time deadline = absl::Now() + drain_timeout + kShutdownGrace;
    int sig = -1;
    while (sig < 0 && absl::Now() < deadline) {
      const timespec left = absl::ToTimespec(deadline - absl::Now());
      sig = sigtimedwait(&signals, nullptr, &left);
      if (sig < 0 && errno != EINTR) break;  // EAGAIN: the time is up
    }
    if (g_shutdown_finished.load()) return;
    if (sig > 0) {
      spdlog::error("second signal during shutdown: exiting now");
    } else {
      spdlog::error("shutdown still running {} after drain_timeout ({}): exiting now",
                    absl::FormatDuration(kShutdownGrace), absl::FormatDuration(drain_timeout));
    }
    spdlog::shutdown();  // flush
    std::_Exit(1);
  }).detach();
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Serves a vision-language Mixture-of-Experts model over gRPC "
      "(vismoe.v1.InferenceService).\nUsage: vismoe-server [--model=DIR] [--listen=HOST:PORT] "
      "[--config=FILE.json] [flags]");
  // --help lists the daemon's flags, which live in server_options.cc.
  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = [](absl::string_view file) {
    return absl::StrContains(file, "server_options");
  };
  usage.contains_helpshort_flags = usage.contains_help_flags;
  absl::SetFlagsUsageConfig(usage);
  vismoe::ExitOnHelpFlag(argc, argv, "server_options");
  absl::ParseCommandLine(argc, argv);

  // Block the shutdown signals in every thread (threads inherit the mask);
  // one thread takes them with sigwait, outside any signal handler.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  absl::StatusOr<vismoe::server::ServerOptions> options = vismoe::server::ServerOptionsFromFlags();
  if (!options.ok()) {
    spdlog::error("configuration error: {}", std::string(options.status().message()));
    return 2;
  }
  spdlog::info("vismoe-server effective configuration:\n{}", options->DebugString());

  absl::StatusOr<std::unique_ptr<vismoe::server::VismoeServer>> server =
      vismoe::server::VismoeServer::Start(*options);
  if (!server.ok()) {
    spdlog::error("cannot start: {}", std::string(server.status().message()));
    return 1;
  }
  vismoe::server::VismoeServer* srv = server->get();
  std::atomic<bool> load_failed{false};
  const absl::Duration drain_timeout = options->drain_timeout;
  std::thread signal_thread([srv, &signals, &load_failed, drain_timeout] {
    int sig = 0;
    sigwait(&signals, &sig);
    if (load_failed.load()) {
      spdlog::info("stopping: the model could not be loaded");
    } else {
      spdlog::info("received {}",
                   sig == SIGTERM ? "SIGTERM" : (sig == SIGINT ? "SIGINT" : "signal"));
      StartShutdownWatchdog(signals, drain_timeout);
    }
    srv->Shutdown();
    g_shutdown_finished.store(true);
  });

  int exit_code = 0;
  absl::Status loaded = srv->LoadModel();
  if (!loaded.ok() && !absl::IsCancelled(loaded)) {
    spdlog::error("{}", std::string(loaded.message()));
    exit_code = 1;
    load_failed.store(true);
    pthread_kill(signal_thread.native_handle(), SIGTERM);  // wakes the sigwait thread
  }
  srv->Wait();
  signal_thread.join();
  server->reset();
  return exit_code;
}
