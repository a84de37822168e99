// flashattn backward: gradients of attention with respect to q, k, v (and the sink logits).
// Included by flashattn.h after the types it uses; include that header, not this one.
#pragma once

namespace flashattn {

// ---------------------------------------------------------------------------------------------
// Backward
// ---------------------------------------------------------------------------------------------
// Given the forward's inputs q, k, v, its output o and LSE, and the gradient dout of a loss with
// respect to o, writes dq, dk, dv (the gradients with respect to q, k, v).
//
// Shapes are those of forward(): q, dq (batch, seqlen_q, heads_q, head_dim); k, dk (batch,
// seqlen_k, heads_kv, head_dim); v, dv (batch, seqlen_k, heads_kv, head_dim_v); o, dout
// (batch, seqlen_q, heads_q, head_dim_v); lse (batch, heads_q, seqlen_q) fp32 contiguous, natural
// log, exactly as forward() wrote it (required). Variable length as in ForwardParams: with
// cu_seqlens_q/k set, tensors are (total, heads, dim) and lse is (heads_q, total_q).
// All tensors share `dtype`; the last stride of each is 1, the others are free. dq, dk and dv
// must not overlap each other or any input.
// The mask, scale and sinks must be the forward's. Keys no query sees get dk = dv = 0; rows that
// see no key get dq = 0.
struct BackwardParams {
  DType dtype = DType::bf16;

  int batch = 0;
  int seqlen_q = 0;
  int seqlen_k = 0;
  int heads_q = 0;
  int heads_kv = 0;
  int head_dim = 0;
  int head_dim_v = 0;  // 0: same as head_dim

  TensorRef q, k, v, o, dout;
  const float* lse = nullptr;
  MutableTensorRef dq, dk, dv;

  float softmax_scale = 0.0f;  // 0: 1/sqrt(head_dim)
  bool causal = false;
  int window_left = -1;
  int window_right = -1;

  const int32_t* cu_seqlens_q = nullptr;
  const int32_t* cu_seqlens_k = nullptr;
  int total_q = 0;
  int total_k = 0;

  // Attention sinks as in ForwardParams (null: none). dsinks: optional fp32 (heads_q,) output,
  // the gradient of the sink logits (overwritten, not accumulated); null: not computed.
  const float* sinks = nullptr;
  float* dsinks = nullptr;

  float softcap = 0.0f;  // the forward's ForwardParams::softcap (0: off)

  // Bitwise-reproducible gradients: every accumulation runs in a fixed order, so two calls with
  // the same inputs on the same device give identical dq, dk, dv and dsinks. Slower.
  bool deterministic = false;

  void* stream = nullptr;  // cudaStream_t; ignored by the cpu kernel

  // Ablation switches; the defaults are the measured best. The backward reads `persistent`
  // (k6: one block per SM walks the key blocks where each key block's walk is short; off, one
  // block per key block always).
  DebugOptions debug;
};

// Checks every rule for `params` run on `kernel`; ok when backward() would run.
Status can_implement(const BackwardParams& params, Kernel kernel = Kernel::automatic);

// The family `automatic` resolves to (cpu for host memory, fa2 for device memory today).
Kernel select_kernel(const BackwardParams& params);

// Validates, then runs. GPU kernels are asynchronous on `stream` (their workspace comes from the
// library's stream-ordered pool); the cpu kernel returns when done.
Status backward(const BackwardParams& params, Kernel kernel = Kernel::automatic);

// Dense row-major (batch, seqlen, heads, dim) strides filled in for every tensor.
void set_contiguous_layout(BackwardParams& params);

}  // namespace flashattn
