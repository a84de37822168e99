// The k2 family's entry point for the dispatch layer: the fused SIMT forward (launch.cu).
// Takes a validated Problem; enqueues on problem.stream and returns the launch status.
#pragma once

#include "common/problem.h"

namespace flashattn {

Status k2_forward(const Problem& problem);

}  // namespace flashattn
