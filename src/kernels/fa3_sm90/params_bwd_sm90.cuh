// The Hopper backward kernel's parameters: the validated backward problem, the workspace of the
// shared stages (kernels/bwd_stages: LSE·log2e, D, the fp32 dQ accumulator, the semaphores), and
// the TMA descriptors built on the host (launch_bwd.cuh).
#pragma once

#include "common/backward_problem.h"
#include "kernels/bwd_stages/stages.h"
#include "kernels/fa3_sm90/config_bwd.cuh"

namespace flashattn::fa3 {

template <class C>
struct ParamsBwd {
  BackwardProblem bp;
  bwd::Workspace ws;
  typename C::Tma::Q tma_q, tma_do;  // (rows, dim) boxes of q and dout
  typename C::Tma::K tma_k, tma_v;   // (keys, dim) boxes
  typename C::Tma::Dq tma_dq;        // (rows, dim / warpgroups or dim) reduce-add boxes
  GmemShape shape_q, shape_do, shape_k, shape_v, shape_dq;  // (tokens, dim, heads, batch)
  // The persistent kernel's tiles: (key block, KV head, sequence), key blocks fastest.
  int n_blocks = 0, tiles = 0;
};

}  // namespace flashattn::fa3
