// The validated, normalised form of BackwardParams that every backward family receives, built by
// make_backward_problem() after can_implement() passed. The forward half (q, k, v, o, lse, mask,
// scale, variable length, sinks) is a Problem, so the backward reads the forward's conventions
// from one place.
#pragma once

#include "common/problem.h"
#include "flashattn/flashattn.h"

namespace flashattn {

struct BackwardProblem {
  Problem fwd;  // q, k, v, o (read only here), lse (read only), mask, scale, varlen, sinks

  const void* dout = nullptr;
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  int64_t dout_stride[3] = {};  // batch, row, head (in elements)
  int64_t dq_stride[3] = {};
  int64_t dk_stride[3] = {};
  int64_t dv_stride[3] = {};

  float* dsinks = nullptr;  // (heads_q,) or null
  bool deterministic = false;
  bool persistent = true;  // debug.persistent: k6's grid, one block per SM (else per tile)
};

// The forward call whose gradients these are: the BackwardParams fields that describe the
// forward (o and lse as its outputs). Validation checks the shared rules on it, and the fp64
// reference recomputes the forward from it.
inline ForwardParams forward_params(const BackwardParams& p) {
  ForwardParams f;
  f.dtype = p.dtype;
  f.batch = p.batch;
  f.seqlen_q = p.seqlen_q;
  f.seqlen_k = p.seqlen_k;
  f.heads_q = p.heads_q;
  f.heads_kv = p.heads_kv;
  f.head_dim = p.head_dim;
  f.head_dim_v = p.head_dim_v;
  f.q = p.q;
  f.k = p.k;
  f.v = p.v;
  f.o.data = const_cast<void*>(p.o.data);
  for (int i = 0; i < 4; ++i) f.o.stride[i] = p.o.stride[i];
  f.lse = const_cast<float*>(p.lse);
  f.softmax_scale = p.softmax_scale;
  f.causal = p.causal;
  f.window_left = p.window_left;
  f.window_right = p.window_right;
  f.cu_seqlens_q = p.cu_seqlens_q;
  f.cu_seqlens_k = p.cu_seqlens_k;
  f.total_q = p.total_q;
  f.total_k = p.total_k;
  f.sinks = p.sinks;
  f.softcap = p.softcap;
  f.stream = p.stream;
  return f;
}

inline BackwardProblem make_backward_problem(const BackwardParams& p) {
  BackwardProblem b;
  b.fwd = make_problem(forward_params(p));
  b.dout = p.dout.data;
  b.dq = p.dq.data;
  b.dk = p.dk.data;
  b.dv = p.dv.data;
  for (int i = 0; i < 3; ++i) {
    b.dout_stride[i] = p.dout.stride[i];
    b.dq_stride[i] = p.dq.stride[i];
    b.dk_stride[i] = p.dk.stride[i];
    b.dv_stride[i] = p.dv.stride[i];
  }
  b.dsinks = p.dsinks;
  b.deterministic = p.deterministic;
  b.persistent = p.debug.persistent;
  return b;
}

}  // namespace flashattn
