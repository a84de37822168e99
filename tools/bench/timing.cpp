#include "timing.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace flashattn::bench {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// How many runs to enqueue before waiting: enough to keep the GPU busy (so that launch latency
// stays outside the events), few enough that the cap can still react.
int batch_size(const TimingPolicy& p, double estimate_ms, int remaining) {
  if (estimate_ms <= 0) return 1;
  const double n = std::floor(p.batch_ms / estimate_ms);
  return static_cast<int>(std::clamp<double>(n, 1, remaining));
}

}  // namespace

Status measure(const TimingPolicy& p, const TimedBatch& run, Timing& out) {
  // Warm-up: the first run alone, to learn its duration. It may carry one-time costs (module load,
  // plan building), so a slow first run is followed by one more whose time is trusted; a kernel
  // that stays slow needs no further warm-up.
  double estimate = 0;
  std::vector<double> warm;
  for (int left = p.warmup; left > 0;) {
    if (warm.size() >= 2 && estimate > p.slow_run_ms) break;
    const int n = warm.empty() || estimate > p.slow_run_ms ? 1 : batch_size(p, estimate, left);
    if (Status st = run(n, warm); !st.ok()) return st;
    estimate = warm.back();
    left -= n;
  }

  // The cap follows the latest run, so a single slow outlier cannot shrink the sample for good.
  const int floor_iters = std::min(p.min_iters, p.iters);
  auto target_for = [&](double run_ms) {
    if (run_ms <= p.slow_run_ms) return p.iters;
    const double fit = std::floor(p.config_budget_ms / run_ms);
    return static_cast<int>(std::clamp<double>(fit, floor_iters, p.iters));
  };

  std::vector<double> times;
  int target = target_for(estimate);
  while (static_cast<int>(times.size()) < target) {
    const int n = batch_size(p, estimate, target - static_cast<int>(times.size()));
    if (Status st = run(n, times); !st.ok()) return st;
    estimate = times.back();
    target = target_for(estimate);
    // Guards a kernel that only turns slow after warm-up (or had none).
    const double spent = std::accumulate(times.begin(), times.end(), 0.0);
    if (spent > p.config_budget_ms && static_cast<int>(times.size()) >= floor_iters) break;
  }

  out.median_ms = median(times);
  out.min_ms = *std::min_element(times.begin(), times.end());
  out.iters = static_cast<int>(times.size());
  return Status::success();
}

}  // namespace flashattn::bench
