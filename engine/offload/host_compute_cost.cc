#include "engine/offload/host_compute_cost.h"

#include <bit>
#include <cmath>

namespace vismoe {

int HostComputeCost::BandOf(int64_t tokens) {
  const int band = std::bit_width(static_cast<uint64_t>(tokens)) - 1;  // floor(log2)
  return band < kBands ? band : kBands - 1;
}

void HostComputeCost::Record(int64_t tokens, double seconds) {
  if (tokens < 1 || !std::isfinite(seconds) || seconds < 0) return;
  Band& b = bands_[BandOf(tokens)];
  const double rows = static_cast<double>(tokens);
  if (b.samples == 0) {
    b.rows = rows;
    b.seconds = seconds;
  } else {
    b.rows += kSmoothing * (rows - b.rows);
    b.seconds += kSmoothing * (seconds - b.seconds);
  }
  ++b.samples;
  ++samples_;
}

std::optional<double> HostComputeCost::EstimateSeconds(int64_t tokens) const {
  if (samples_ == 0 || tokens < 1) return std::nullopt;
  const double m = static_cast<double>(tokens);
  const Band* below = nullptr;  // the band with the most rows <= m
  const Band* above = nullptr;  // the band with the fewest rows >= m
  for (const Band& b : bands_) {
    if (b.samples == 0) continue;
    if (b.rows <= m && (below == nullptr || b.rows > below->rows)) below = &b;
    if (b.rows >= m && (above == nullptr || b.rows < above->rows)) above = &b;
  }
  if (below != nullptr && above != nullptr) {
    if (above->rows <= below->rows) return below->seconds;
    const double f = (m - below->rows) / (above->rows - below->rows);
    return below->seconds + f * (above->seconds - below->seconds);
  }
  if (below != nullptr) return below->seconds * m / below->rows;
  return above->seconds;
}

bool HostComputeCost::PreferHost(int64_t tokens, double copy_seconds) const {
  if (!(copy_seconds > 0) || tokens < 1) return false;
  const std::optional<double> host = EstimateSeconds(tokens);
  if (!host.has_value()) return tokens == 1;
  return *host < copy_seconds;
}

}  // namespace vismoe
