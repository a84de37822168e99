// The fa2 backward family's entry point for the dispatch layer: FlashAttention-2's backward on
// mma.sync (sm_80 and later): a preprocess (D = rowsum(dO ∘ O), dQ accumulator zeroed), the main
// kernel over key blocks (dK, dV in registers, dQ added into an fp32 accumulator), and a
// postprocess (dQ scaled and converted). Takes a validated BackwardProblem; enqueues on
// problem.fwd.stream, its workspace from the library's stream-ordered pool.
#pragma once

#include "common/backward_problem.h"

namespace flashattn {

Status fa2_backward(const BackwardProblem& problem);

}  // namespace flashattn
