// Where one (sequence, query head) of a forward problem lives: token offsets into the padded or
// packed (varlen) tensors and the sequence's own lengths. Shared by the GPU families that read
// Problem on the device.
#pragma once

#include <cstdint>

#include "common/problem.h"

namespace flashattn {

struct SequenceView {
  int64_t q_offset, k_offset, v_offset, o_offset;  // elements, to the sequence's first token
  int64_t lse_offset;                              // floats, to (head h, token 0)
  int len_q, len_k;
  int token_q, token_k;  // index of the sequence's first token in its tensor's token dimension
};

__device__ __forceinline__ SequenceView sequence_view(const Problem& p, int b, int h, int h_kv) {
  SequenceView s;
  if (p.cu_seqlens_q != nullptr) {  // Problem::varlen() is host-only
    const int q0 = p.cu_seqlens_q[b], k0 = p.cu_seqlens_k[b];
    s.len_q = p.cu_seqlens_q[b + 1] - q0;
    s.len_k = p.cu_seqlens_k[b + 1] - k0;
    s.token_q = q0;
    s.token_k = k0;
    s.q_offset = q0 * p.q_stride[1];
    s.k_offset = k0 * p.k_stride[1];
    s.v_offset = k0 * p.v_stride[1];
    s.o_offset = q0 * p.o_stride[1];
    s.lse_offset = static_cast<int64_t>(h) * p.total_q + q0;  // lse is (heads_q, total_q)
  } else {
    s.len_q = p.seqlen_q;
    s.len_k = p.seqlen_k;
    s.token_q = s.token_k = 0;
    s.q_offset = b * p.q_stride[0];
    s.k_offset = b * p.k_stride[0];
    s.v_offset = b * p.v_stride[0];
    s.o_offset = b * p.o_stride[0];
    s.lse_offset = (static_cast<int64_t>(b) * p.heads_q + h) * p.seqlen_q;
  }
  s.q_offset += h * p.q_stride[2];
  s.k_offset += h_kv * p.k_stride[2];
  s.v_offset += h_kv * p.v_stride[2];
  s.o_offset += h * p.o_stride[2];
  return s;
}

}  // namespace flashattn
