// Entry points of the kernel families, called by the dispatch in forward.cpp after validation.
// Each takes a validated Problem; GPU launchers enqueue on problem.stream and return the launch
// status. A family's capabilities (what can_implement lets through) live in capabilities.h.
#pragma once

#include "api/problem.h"

namespace flashattn {

Status cpu_forward(const Problem& problem);  // src/reference/cpu_backend.cpp
Status k1_forward(const Problem& problem);   // src/kernels/k1_naive/launch.cu
Status k2_forward(const Problem& problem);   // src/kernels/k2_simt/launch.cu
Status fa2_forward(const Problem& problem);  // src/kernels/fa2_sm80/launch.cu

}  // namespace flashattn
