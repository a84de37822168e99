// The fa2 family's entry point for the dispatch layer: the mma.sync forward (launch.cu).
// Takes a validated Problem; enqueues on problem.stream and returns the launch status.
#pragma once

#include "common/problem.h"

namespace flashattn {

Status fa2_forward(const Problem& problem);

}  // namespace flashattn
