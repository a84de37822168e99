// K8's pre-pass: bf16/fp16 q, k, v in, e4m3 q, k, v out with one fp32 descale per block of rows,
// optionally after an incoherent rotation of q and k (included by flashattn.h; needs its types).
//
//   flashattn::QuantizeFp8Params qp;  ... shapes, inputs, outputs, rotation
//   flashattn::quantize_fp8(qp);                  // on qp.stream
//   ForwardParams f;  f.dtype = e4m3; f.q = qp.q_out; ...; f.q_block_descale = qp.q_block_descale; ...
//   flashattn::forward(f);                        // k8
//
// Blocks: per (sequence, head) the rows [i·rows, (i+1)·rows), rows = fp8_block_rows(head_dim)
// (.q for q, .kv for k and v: the forward kernel's query tile and key block). amax is the block's
// largest |value| (after the rotation). A q or k block's descale is amax/448 and f = 448/amax; a
// v block's descale is the power of two at or above amax/448 and f = 1/descale (exact): the
// kernel folds dv/dv_max into P, and a power of two keeps P's largest value exact in e4m3 (with
// amax/448 that value was rounded too, which measured 3x the oracle's error on peaked rows); for
// a floating-point format a power-of-two scale costs no precision. An all-zero block has descale
// 1 and f = 1. Each element becomes e4m3(x · f), one fp32 multiplication, rounded to nearest even
// and saturated to ±448 (the product may round just past 448).
//
// Rotation (incoherent processing, FlashAttention-3 §3.3): q and k rows are multiplied by the
// same orthogonal M = diag(s)·H/√d (H the Sylvester Hadamard matrix of order d = head_dim, s
// random signs), so (qM)(kM)ᵀ = qkᵀ and attention is unchanged while an outlier in one channel is
// spread over all of them before rounding. v is not rotated. s_j = -1 when bit 0 of
// splitmix64(seed + j) is set, else +1 (splitmix64 as in Vigna's reference). The transform runs
// in fp32 as log2(d) butterfly stages, stage h pairing channels j and j + 2^h (h = 0, 1, ...):
// (a, b) -> (a + b, a - b); then the 1/√d factor. The host and device implementations perform the
// same fp32 operations in the same order, so their outputs are bitwise equal.
#pragma once

#include <cstdint>

namespace flashattn {

enum class Fp8Rotation : int { none = 0, hadamard = 1 };

// Rows per descale block for a head dim: {0, 0} where no FP8 kernel is built for it.
struct Fp8BlockRows {
  int q = 0;
  int kv = 0;
};
Fp8BlockRows fp8_block_rows(int head_dim);

// Shapes as ForwardParams' (dense: no variable length). head_dim is q's and k's, head_dim_v v's
// (0: head_dim; K8 runs head_dim_v == head_dim). Inputs and outputs any strides >= 0 with a
// contiguous last dim; outputs must not overlap inputs or each other. All in device memory (the
// GPU pre-pass) or all in host memory (the reference implementation, same results bit for bit);
// an empty tensor's pointers may be null.
struct QuantizeFp8Params {
  DType dtype = DType::bf16;  // of q, k, v: bf16 or fp16
  int batch = 0;
  int seqlen_q = 0;
  int seqlen_k = 0;
  int heads_q = 0;
  int heads_kv = 0;
  int head_dim = 0;
  int head_dim_v = 0;

  TensorRef q, k, v;                     // inputs
  MutableTensorRef q_out, k_out, v_out;  // e4m3, same shapes
  // Outputs, fp32, contiguous, shapes as ForwardParams' q/k/v_block_descale.
  float* q_block_descale = nullptr;
  float* k_block_descale = nullptr;
  float* v_block_descale = nullptr;

  Fp8Rotation rotation = Fp8Rotation::none;
  uint64_t seed = 0;  // the rotation's signs (ignored without rotation)

  void* stream = nullptr;  // cudaStream_t; ignored for host memory
};

// Checks every rule; ok when quantize_fp8() would run.
Status can_quantize_fp8(const QuantizeFp8Params& params);
// Validates, then quantises (asynchronously on `stream` for device memory).
Status quantize_fp8(const QuantizeFp8Params& params);

}  // namespace flashattn
