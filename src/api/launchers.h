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
Status k3_forward(const Problem& problem);   // src/kernels/fa3_sm90/launch_k3.cu
Status k4_forward(const Problem& problem);   // src/kernels/fa3_sm90/launch.cu
Status k5_forward(const Problem& problem);   // src/kernels/fa3_sm90/launch.cu
Status k6_forward(const Problem& problem);   // src/kernels/fa3_sm90/launch.cu

}  // namespace flashattn
