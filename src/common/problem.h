// The validated, normalised form of ForwardParams that every kernel family receives.
// Built only by make_problem() after can_implement() passed, so launchers may trust it:
// head_dim_v filled in, causal folded into the window, the softmax scale resolved.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/mask.h"
#include "common/math_constants.h"
#include "flashattn/flashattn.h"

namespace flashattn {

struct Problem {
  DType dtype = DType::bf16;
  int batch = 0, seqlen_q = 0, seqlen_k = 0;
  int heads_q = 0, heads_kv = 0;
  int head_dim = 0, head_dim_v = 0;
  int group = 1;  // heads_q / heads_kv: query head h reads KV head h / group

  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  float* lse = nullptr;
  int64_t q_stride[3] = {};  // batch, row, head (in elements; the last dim is contiguous)
  int64_t k_stride[3] = {};
  int64_t v_stride[3] = {};
  int64_t o_stride[3] = {};

  // Variable length: prefix sums of the sequence lengths (device or host memory, as the family
  // runs), or null. With them, strides[0] are unused and seqlen_q/seqlen_k are upper bounds.
  const int32_t* cu_seqlens_q = nullptr;
  const int32_t* cu_seqlens_k = nullptr;
  int total_q = 0, total_k = 0;
  bool varlen() const { return cu_seqlens_q != nullptr; }

  float scale = 0.f;       // softmax scale
  // The factor the softmax applies to a score in the log2 domain: scale · log2(e); with
  // softcap, softcap · log2(e), the kernels then having replaced each raw score q·k by
  // tanh(q·k · softcap_scale) (see softcap below).
  float scale_log2 = 0.f;
  Mask mask;               // seqlen_q/seqlen_k filled in; left/right from the window and causal

  const float* sinks = nullptr;  // (heads_q,) logits in natural-log units, or null

  // Soft-capping: the score scale·q·k becomes softcap·tanh(scale·q·k / softcap). Kernels that
  // support it compute t = tanh(q·k · softcap_scale) and hand t to the softmax, whose factor
  // scale_log2 is then softcap·log2(e) (positive: the sign of a negative scale is inside
  // softcap_scale). 0: off. Only families whose capabilities list softcap may receive it.
  float softcap = 0.f;
  float softcap_scale = 0.f;  // scale / softcap
  FA_HD bool has_softcap() const { return softcap > 0.f; }

  // FP8 inputs (dtype e4m3): o's element type and the descales (ForwardParams), or null.
  DType out_dtype = DType::bf16;  // = dtype for 16-bit inputs
  const float* q_descale = nullptr;
  const float* k_descale = nullptr;
  const float* v_descale = nullptr;
  // K8: one descale per block of rows (ForwardParams::q/k/v_block_descale), or null; rows per
  // block fp8_block_rows(head_dim), set by make_problem when the block descales are.
  const float* q_block_descale = nullptr;
  const float* k_block_descale = nullptr;
  const float* v_block_descale = nullptr;
  int q_block_rows = 0;
  int kv_block_rows = 0;
  FA_HD bool block_scaled() const { return q_block_descale != nullptr; }

  void* stream = nullptr;
};

inline Problem make_problem(const ForwardParams& p) {
  Problem pr;
  pr.dtype = p.dtype;
  pr.batch = p.batch;
  pr.seqlen_q = p.seqlen_q;
  pr.seqlen_k = p.seqlen_k;
  pr.heads_q = p.heads_q;
  pr.heads_kv = p.heads_kv;
  pr.head_dim = p.head_dim;
  pr.head_dim_v = p.head_dim_v > 0 ? p.head_dim_v : p.head_dim;
  pr.group = p.heads_q / p.heads_kv;
  pr.q = p.q.data;
  pr.k = p.k.data;
  pr.v = p.v.data;
  pr.o = p.o.data;
  pr.lse = p.lse;
  for (int i = 0; i < 3; ++i) {
    pr.q_stride[i] = p.q.stride[i];
    pr.k_stride[i] = p.k.stride[i];
    pr.v_stride[i] = p.v.stride[i];
    pr.o_stride[i] = p.o.stride[i];
  }
  pr.cu_seqlens_q = p.cu_seqlens_q;
  pr.cu_seqlens_k = p.cu_seqlens_k;
  pr.total_q = p.total_q;
  pr.total_k = p.total_k;
  pr.scale = p.softmax_scale != 0.f ? p.softmax_scale : 1.0f / std::sqrt(static_cast<float>(p.head_dim));
  pr.scale_log2 = pr.scale * kLog2e;
  if (p.softcap > 0.f) {
    pr.softcap = p.softcap;
    pr.softcap_scale = pr.scale / p.softcap;
    pr.scale_log2 = p.softcap * kLog2e;
  }
  pr.mask.seqlen_q = p.seqlen_q;
  pr.mask.seqlen_k = p.seqlen_k;
  pr.mask.left = p.window_left;
  pr.mask.right = p.causal ? 0 : p.window_right;
  pr.stream = p.stream;
  pr.sinks = p.sinks;
  const bool fp8 = p.dtype == DType::e4m3 || p.dtype == DType::e5m2;
  pr.out_dtype = fp8 ? p.out_dtype : p.dtype;
  pr.q_descale = p.q_descale;
  pr.k_descale = p.k_descale;
  pr.v_descale = p.v_descale;
  if (p.q_block_descale != nullptr) {
    const Fp8BlockRows rows = fp8_block_rows(p.head_dim);
    pr.q_block_descale = p.q_block_descale;
    pr.k_block_descale = p.k_block_descale;
    pr.v_block_descale = p.v_block_descale;
    pr.q_block_rows = rows.q;
    pr.kv_block_rows = rows.kv;
  }
  return pr;
}

}  // namespace flashattn
