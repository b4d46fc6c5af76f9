// vismoe-server: serves one vision-language MoE model over gRPC.
//   vismoe-server --model=/path/to/checkpoint [--listen=...] [--config=...]
// SIGTERM / SIGINT start a graceful drain (see VismoeServer).
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <thread>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "engine/core/help_flag.h"
#include "server/server.h"
#include "server/server_options.h"
#include "spdlog/spdlog.h"

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
  std::thread signal_thread([srv, &signals, &load_failed] {
    int sig = 0;
    sigwait(&signals, &sig);
    if (load_failed.load()) {
      spdlog::info("stopping: the model could not be loaded");
    } else {
      spdlog::info("received {}",
                   sig == SIGTERM ? "SIGTERM" : (sig == SIGINT ? "SIGINT" : "signal"));
    }
    srv->Shutdown();
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
