// The Hopper family's entry points for the dispatch layer (sm_90a): K3 (TMA + K2's SIMT math,
// launch_k3.cu) and the wgmma schedules K4, K5, K6 (launch.cu). Each takes a validated Problem
// and the caller's debug switches; enqueues on problem.stream and returns the launch status.
#pragma once

#include "common/backward_problem.h"
#include "common/problem.h"

namespace flashattn {

Status k3_forward(const Problem& problem);
Status k4_forward(const Problem& problem, const DebugOptions& debug);
Status k5_forward(const Problem& problem, const DebugOptions& debug);
Status k6_forward(const Problem& problem, const DebugOptions& debug);
// K7: K6's schedule with the FP8 (e4m3) mainloop, for kFp8HeadDims; o in problem.out_dtype.
Status k7_forward(const Problem& problem, const DebugOptions& debug);
// K8: K7 with one descale per block of rows (problem.block_scaled(); dense batches).
Status k8_forward(const Problem& problem, const DebugOptions& debug);
// The Hopper backward (wgmma main kernel, launch_bwd.cu) for kBwdSm90HeadDims.
Status k6_backward(const BackwardProblem& problem);
// Its main kernel adds dQ's rows of odd index with their columns XOR this (the workspace's
// dq_odd_row_col_xor, which k6_backward passes and the postprocess undoes), so that its fp32
// staging stores are free of bank conflicts (kernel_bwd_sm90.cuh's dq_staging_flip).
inline constexpr int kDqOddRowColXor = 16;

}  // namespace flashattn
