// The cpu family's entry points for the dispatch layer: FlashAttention's tiled forward on the
// host, multithreaded (forward.cpp), and the backward (backward.cpp), the reference
// implementation the GPU backward is checked against. Take a validated problem over host memory;
// return when done.
#pragma once

#include "common/backward_problem.h"
#include "common/problem.h"

namespace flashattn {

Status cpu_forward(const Problem& problem);
Status cpu_backward(const BackwardProblem& problem);

}  // namespace flashattn
