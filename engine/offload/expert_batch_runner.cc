#include "engine/offload/expert_batch_runner.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/core/status_macros.h"

namespace vismoe {
namespace {

// The layer's plan: BeginRoutedLayer with token counts, BeginLayer without.
// The order must be a permutation of what was declared: checked before
// anything is acquired (Ready() and Acquire() require declared experts).
absl::StatusOr<LayerPlan> BeginPlan(ExpertProvider& provider, Phase phase, int layer,
                                    absl::Span<const int> active,
                                    absl::Span<const int64_t> tokens) {
  LayerPlan plan;
  if (tokens.empty()) {
    VISMOE_ASSIGN_OR_RETURN(plan.order, provider.BeginLayer(phase, layer, active));
  } else {
    VISMOE_ASSIGN_OR_RETURN(plan, provider.BeginRoutedLayer(phase, layer, active, tokens));
  }
  std::vector<int> declared(active.begin(), active.end());
  std::vector<int> returned = plan.order;
  std::sort(declared.begin(), declared.end());
  std::sort(returned.begin(), returned.end());
  if (returned != declared) {
    provider.EndLayer(layer);
    return absl::InternalError(
        absl::StrCat("expert provider returned [", absl::StrJoin(plan.order, ", "), "] for layer ",
                     layer, ", which declared [", absl::StrJoin(active, ", "), "]"));
  }
  return plan;
}

// Rows routed to `expert` (0 when not given).
int64_t TokensOf(absl::Span<const int> active, absl::Span<const int64_t> tokens, int expert) {
  for (size_t i = 0; i < active.size() && i < tokens.size(); ++i) {
    if (active[i] == expert) return tokens[i];
  }
  return 0;
}

}  // namespace

absl::Status ExpertBatchLauncher::ComputeOnHost(int expert, const ExpertWeights& /*weights*/) {
  return absl::UnimplementedError(
      absl::StrCat("expert ", expert, ": this backend cannot compute experts on the host"));
}

absl::Status RunExpertBatches(ExpertProvider& provider, Phase phase, int layer,
                              absl::Span<const int> active, absl::Span<const int64_t> tokens,
                              ExpertBatchLauncher& launcher, HeldExperts* keep) {
  VISMOE_ASSIGN_OR_RETURN(LayerPlan plan, BeginPlan(provider, phase, layer, active, tokens));
  const std::vector<int>& order = plan.order;
  struct Launched {
    int expert;
    int ticket;
  };
  std::vector<Launched> launched;  // in launch order; released in that order
  size_t next_release = 0;
  auto release_finished = [&](bool wait) -> absl::Status {
    for (; next_release < launched.size(); ++next_release) {
      const Launched& l = launched[next_release];
      if (wait) {
        VISMOE_RETURN_IF_ERROR(launcher.Wait(l.ticket));
      } else {
        VISMOE_ASSIGN_OR_RETURN(bool done, launcher.Done(l.ticket));
        if (!done) break;
      }
      provider.Release(layer, l.expert);
    }
    return absl::OkStatus();
  };
  std::vector<AcquiredExpert> batch;  // acquired, not launched yet
  int next_ticket = 0;
  auto launch = [&]() -> absl::Status {
    if (batch.empty()) return absl::OkStatus();
    const int ticket = next_ticket++;
    const absl::Status st = launcher.Launch(batch, ticket);
    for (const AcquiredExpert& a : batch) launched.push_back({a.expert, ticket});
    batch.clear();
    return st;
  };
  // Host experts: computed here while the batches launched before them run.
  auto compute_on_host = [&](int e) -> absl::Status {
    VISMOE_RETURN_IF_ERROR(launch());
    VISMOE_ASSIGN_OR_RETURN(ExpertWeights weights, provider.HostWeights(layer, e));
    const auto start = std::chrono::steady_clock::now();
    VISMOE_RETURN_IF_ERROR(launcher.ComputeOnHost(e, weights));
    provider.OnHostExpertTime(
        TokensOf(active, tokens, e),
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    return absl::OkStatus();
  };

  absl::Status status;
  if (!plan.on_host.empty()) {
    std::vector<int> host;
    for (size_t i = 0; i < order.size(); ++i) {
      if (plan.OnHost(i)) host.push_back(order[i]);
    }
    status = launcher.PrepareHost(host);
  }
  for (size_t i = 0; i < order.size() && status.ok(); ++i) {
    const int e = order[i];
    status = release_finished(/*wait=*/false);
    if (!status.ok()) break;
    if (plan.OnHost(i)) {
      status = compute_on_host(e);
      continue;
    }
    absl::StatusOr<ExpertWeights> weights = provider.Acquire(layer, e);
    if (!weights.ok() && absl::IsResourceExhausted(weights.status()) &&
        (!batch.empty() || next_release < launched.size())) {
      // Every slab is held by experts acquired before this one: run them,
      // wait, hand their slabs back, and ask again.
      status = launch();
      if (status.ok()) status = release_finished(/*wait=*/true);
      if (!status.ok()) break;
      weights = provider.Acquire(layer, e);
    }
    if (!weights.ok()) {
      status = weights.status();
      break;
    }
    batch.push_back({e, *std::move(weights)});
    if (i + 1 == order.size() || plan.OnHost(i + 1) || !provider.Ready(layer, order[i + 1])) {
      status = launch();
    }
  }
  if (status.ok() && keep != nullptr) {
    // Nothing left unlaunched; the batches still running keep their experts.
    for (; next_release < launched.size(); ++next_release) {
      keep->Add(&provider, layer, launched[next_release].expert);
    }
    provider.EndLayer(layer);
    return absl::OkStatus();
  }
  // Whatever happened, every acquired expert is released once nothing queued
  // can read it any more.
  const absl::Status drained = launcher.Drain();
  for (; next_release < launched.size(); ++next_release) {
    provider.Release(layer, launched[next_release].expert);
  }
  for (const AcquiredExpert& a : batch) provider.Release(layer, a.expert);
  provider.EndLayer(layer);
  if (!status.ok()) return status;
  return drained;
}

}  // namespace vismoe
