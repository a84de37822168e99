// The measurement policy shared by the GPU (CUDA events) and host (steady_clock) paths: warm-up,
// a per-config time cap for slow kernels, median and min over individually timed iterations.
#pragma once

#include <functional>
#include <vector>

#include "flashattn/flashattn.h"

namespace flashattn::bench {

struct TimingPolicy {
  int warmup = 5;
  int iters = 20;
  double slow_run_ms = 1000;        // a run slower than this triggers the cap...
  double config_budget_ms = 10000;  // ...so that the measured runs of a config take about this
  int min_iters = 3;                // but never fewer than this (or --iters, if smaller)
  double batch_ms = 250;            // runs enqueued back to back before the host waits
};

struct Timing {
  double median_ms = 0;
  double min_ms = 0;
  int iters = 0;  // measured iterations actually run
};

// Runs `n` iterations, each timed on its own, appending one duration (ms) per iteration.
using TimedBatch = std::function<Status(int n, std::vector<double>& ms)>;

Status measure(const TimingPolicy& policy, const TimedBatch& run, Timing& out);

}  // namespace flashattn::bench
