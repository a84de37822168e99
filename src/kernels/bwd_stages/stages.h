// The three stages every GPU backward family shares (FlashAttention's structure): a preprocess
// (D = rowsum(dO ∘ O), LSE·log2e, the fp32 dQ accumulator zeroed), the family's main kernel, and
// a postprocess (dQ scaled and rounded; dsinks summed in a fixed order). A family hands
// run_backward_stages its main kernel for the problem's dtype and head dims; the stages and the
// workspace layout are the same for all, so the accumulator a main kernel adds into is this one.
#pragma once

#include <cstdint>

#include "common/backward_problem.h"

namespace flashattn::bwd {

// Device workspace of one backward call (stages.cu allocates it from the library's
// stream-ordered pool). Rows are indexed by token: b * seqlen_q + i for padded tensors, the
// packed index for variable length.
struct Workspace {
  float* dq_accum = nullptr;  // (heads_q, rows, head_dim) fp32, zeroed by the preprocess
  float* lse_log2 = nullptr;  // (heads_q, rows): LSE·log2e; +inf for rows that see no key
  float* dsum = nullptr;      // (heads_q, rows): D = rowsum(dO ∘ O)
  int* sems = nullptr;        // (heads_q, batch, m_blocks), deterministic mode only, zeroed
  int* tile_counter = nullptr;  // one int, zeroed by the preprocess (k6's persistent claims)
  int64_t rows = 0;
  int m_blocks = 0;  // semaphore slots per sequence: 2 per 2·kMinBlockM rows (stages.cu)
  // The accumulator's rows of odd index (in `rows`) hold column c at c ^ dq_odd_row_col_xor:
  // 0, or k6's 16 (its dQ staging, kernel_bwd_sm90.cuh's dq_staging_flip); the postprocess
  // reads them back in order.
  int dq_odd_row_col_xor = 0;
};

// The smallest query block of any main kernel: the semaphores are one per kMinBlockM rows (their
// count rounded up to an even one), so a kernel with kBlockM = j·kMinBlockM owns j consecutive
// semaphores per query block.
inline constexpr int kMinBlockM = 32;

using MainKernel = Status (*)(const BackwardProblem&, const Workspace&);

// Allocates the workspace, runs preprocess, `main`, postprocess (and dsinks) on the problem's
// stream, and gives the workspace back. `family` names the caller in launch errors;
// `dq_odd_row_col_xor` is the column order `main` adds odd rows of dQ in (Workspace; a multiple
// of 8 with 2 · it dividing head_dim, else unsupported).
Status run_backward_stages(const BackwardProblem& bp, MainKernel main, const char* family,
                           int dq_odd_row_col_xor = 0);

}  // namespace flashattn::bwd
