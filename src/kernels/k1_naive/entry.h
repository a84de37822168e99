// The k1 family's entry point for the dispatch layer: the naive three-launch forward (launch.cu).
// Takes a validated Problem; enqueues on problem.stream and returns the launch status.
#pragma once

#include "common/problem.h"

namespace flashattn {

Status k1_forward(const Problem& problem);

}  // namespace flashattn
