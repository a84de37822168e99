// flashattn-bench --decode / --sweep decode: times flashattn::decode on KV caches (contiguous or
// paged), reports K+V bytes read per second beside a device-to-device copy measured in the same
// run, and writes the usual JSON records with a "decode" block of fields.
#pragma once

#include <vector>

#include "args.h"
#include "report.h"
#include "runner.h"

namespace flashattn::bench {

// Runs every decode workload of `opts`; returns the process exit code (0 ok, 1 a failure).
int run_decode(const Options& opts, const RunInfo& info, const RunContext& ctx);

}  // namespace flashattn::bench
