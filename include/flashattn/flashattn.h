// flashattn public API: attention forward over (batch, seqlen, heads, head_dim) tensors.
//
// Everything a caller needs is in this header: plain parameter structs, a Status that names the
// argument and the rule when an input is refused, the Kernel enum naming every kernel family, and
// forward(). Nothing here depends on the CUDA headers: the stream is passed as an opaque pointer.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace flashattn {

// ---------------------------------------------------------------------------------------------
// Status
// ---------------------------------------------------------------------------------------------
enum class StatusCode : int {
  ok = 0,
  invalid_argument = 1,  // the input breaks a rule of the API (message names argument and rule)
  unsupported = 2,       // valid input, but the chosen kernel or this build lacks the feature
  cuda_error = 3,        // a CUDA call failed (message carries the CUDA error string)
};

struct Status {
  StatusCode code = StatusCode::ok;
  std::string message;

  bool ok() const { return code == StatusCode::ok; }
  static Status success() { return {}; }
};

const char* status_code_name(StatusCode code);

// ---------------------------------------------------------------------------------------------
// Element types and kernel families
// ---------------------------------------------------------------------------------------------
// FP8 (e4m3, e5m2: one byte each) is a dtype like the others. e4m3 forward runs on k7 (the Hopper
// family's FP8 mainloop; ForwardParams::out_dtype and the descales below); e5m2 has no kernel yet,
// so can_implement() answers `unsupported` for it.
enum class DType : int { bf16 = 0, fp16 = 1, e4m3 = 2, e5m2 = 3 };

const char* dtype_name(DType dtype);                      // "bf16", "fp16", "e4m3", "e5m2"
std::optional<DType> parse_dtype(std::string_view name);  // also "float16", "float8_e4m3fn", ...
int dtype_size(DType dtype);                              // bytes per element; 0 if unknown

// Every kernel family of the lineage. A family that is not built yet answers `unsupported`.
enum class Kernel : int {
  automatic = 0,  // "auto": the fastest built family for the memory and device the inputs live on
  cpu,            // multithreaded tiled online softmax on the host (inputs in host memory)
  k1,             // naive: three launches, S materialised in device memory
  k2,             // fused tiled online softmax on CUDA cores (FA2 loop order, no tensor cores)
  fa2,            // mma.sync + cp.async + ldmatrix (sm_80 and later)
  k3,             // TMA + mbarrier pipeline (sm_90a)
  k4,             // + WGMMA, P kept in registers
  k5,             // + warp specialisation
  k6,             // + ping-pong, intra-warpgroup overlap, persistent scheduler (production path)
  // Lineage names of the FP8 steps, not families of their own: FP8 is a dtype (e4m3), and its
  // kernels will be a mainloop of the Hopper family these names map onto.
  k7,             // FP8 e4m3 forward
  k8,             // FP8 + incoherent processing + block quantisation
};

inline constexpr Kernel kAllKernels[] = {Kernel::automatic, Kernel::cpu, Kernel::k1, Kernel::k2,
                                         Kernel::fa2,       Kernel::k3,  Kernel::k4, Kernel::k5,
                                         Kernel::k6,        Kernel::k7,  Kernel::k8};

const char* kernel_name(Kernel kernel);  // "auto", "cpu", "k1", ...
std::optional<Kernel> parse_kernel(std::string_view name);
bool kernel_is_built(Kernel kernel);     // false for families not in this build yet
bool kernel_runs_on_host(Kernel kernel);  // true for cpu only

// ---------------------------------------------------------------------------------------------
// Tensors
// ---------------------------------------------------------------------------------------------
// A tensor of logical shape (batch, seqlen, heads, dim): a pointer and four strides in elements.
// The last stride must be 1; the others are free (padded rows, interleaved qkv, transposed heads).
struct TensorRef {
  const void* data = nullptr;
  int64_t stride[4] = {0, 0, 0, 1};
};

struct MutableTensorRef {
  void* data = nullptr;
  int64_t stride[4] = {0, 0, 0, 1};
};

// Strides of a densely packed (batch, seqlen, heads, dim) tensor.
inline void set_contiguous_strides(int64_t (&stride)[4], int64_t seqlen, int64_t heads, int64_t dim) {
  stride[3] = 1;
  stride[2] = dim;
  stride[1] = heads * dim;
  stride[0] = seqlen * heads * dim;
}

// ---------------------------------------------------------------------------------------------
// Debug switches
// ---------------------------------------------------------------------------------------------
// Switches for ablations and diagnosis (the bench CLI sets them; the library reads no environment
// variable). The defaults are the measured best: leave them alone outside experiments.
struct DebugOptions {
  // FlashAttention-4's conditional rescaling of O in the Hopper softmax (K4-K6): keep a row's
  // reference max while it grew by at most 8 (log2 units). Off: rescale whenever the max moves.
  bool conditional_rescale = true;
  // K6: one block per SM walks the tiles (persistent). Off: one block per tile, scheduled by the
  // hardware.
  bool persistent = true;
  // Builds with -DFLASHATTN_TIMELINE=ON only: the file each Hopper launch writes its per-warp
  // timeline to (bench/timeline.py reads it); null writes nothing. Ignored by other builds.
  const char* timeline_out = nullptr;
};

// ---------------------------------------------------------------------------------------------
// Forward
// ---------------------------------------------------------------------------------------------
// Shapes:  q (batch, seqlen_q, heads_q,  head_dim)      k (batch, seqlen_k, heads_kv, head_dim)
//          v (batch, seqlen_k, heads_kv, head_dim_v)    o (batch, seqlen_q, heads_q,  head_dim_v)
//          lse (batch, heads_q, seqlen_q), fp32, contiguous, natural log; optional.
//          (Variable length changes these shapes: see cu_seqlens_q below.)
// Query head h reads KV head h / (heads_q / heads_kv) (GQA/MQA).
//
// Masks are bottom-right aligned, as in FlashAttention: query row i sits on diagonal
// i + seqlen_k - seqlen_q, and key j is visible when
//     diag - window_left <= j <= diag + window_right      (a bound of -1 is unbounded)
// `causal` is window_right = 0. Rows that see no key (causal with seqlen_q > seqlen_k, or
// seqlen_k == 0) output 0 and LSE = -inf.
struct ForwardParams {
  DType dtype = DType::bf16;  // q, k, v and o share it

  int batch = 0;
  int seqlen_q = 0;  // >= 0 (0: nothing to do)
  int seqlen_k = 0;  // >= 0 (0: output 0, LSE -inf)
  int heads_q = 0;
  int heads_kv = 0;  // heads_q must be a multiple of it
  int head_dim = 0;
  int head_dim_v = 0;  // 0: same as head_dim

  TensorRef q, k, v;
  MutableTensorRef o;
  float* lse = nullptr;

  float softmax_scale = 0.0f;  // 0: 1/sqrt(head_dim)
  bool causal = false;
  int window_left = -1;   // -1: unbounded
  int window_right = -1;  // -1: unbounded; must be -1 or 0 with causal

  // Variable length (packed sequences). cu_seqlens_q/k: int32 arrays of batch + 1 prefix sums
  // (cu[0] = 0, non-decreasing; sequence b holds tokens cu[b] .. cu[b+1]-1; zero-length
  // sequences allowed), in memory the kernel reads (device memory for GPU families). When set:
  //   - q/o are (total_q, heads_q, dim) and k/v (total_k, heads_kv, dim): stride[1] walks tokens,
  //     stride[2] heads; stride[0] is ignored;
  //   - seqlen_q/seqlen_k are the longest sequence (max_seqlen): the kernels size their grids by
  //     them, so no sequence may be longer;
  //   - lse is (heads_q, total_q).
  // The masks apply per sequence (bottom-right aligned on each sequence's own lengths).
  const int32_t* cu_seqlens_q = nullptr;
  const int32_t* cu_seqlens_k = nullptr;
  int total_q = 0;  // packed query tokens, = cu_seqlens_q[batch]
  int total_k = 0;  // packed key tokens,   = cu_seqlens_k[batch] (not used with block_table)

  // Paged KV (flash-attn's `block_table` in flash_attn_varlen_func: prefill against a paged
  // cache). Only with cu_seqlens. k and v are then the cache's pages, (num_blocks, page_size,
  // heads_kv, head_dim) and (num_blocks, page_size, heads_kv, head_dim_v), strides (block, row,
  // head, dim) with stride[0] used; block_table is int32 (batch, max_blocks_per_seq), row b at
  // block_table + b * block_table_stride, in the memory the kernel reads. Key j of sequence b
  // lives at row j % page_size of block block_table[b][j / page_size]; sequence b has
  // cu_seqlens_k[b + 1] - cu_seqlens_k[b] keys, at most max_blocks_per_seq * page_size.
  // Every block id a sequence uses must lie in [0, num_blocks): the cpu family checks it (host
  // memory); GPU families cannot without a synchronisation, so there it is the caller's duty
  // (an id out of range is never dereferenced: its keys read as zeros, the result unspecified).
  // The GPU path gathers each sequence's keys and values into a packed copy in the library's
  // workspace and runs the variable-length forward on it (docs/DESIGN.md, "Paged KV in
  // prefill"): one extra read and write of the keys and values used.
  const int32_t* block_table = nullptr;
  int64_t block_table_stride = 0;  // elements between rows of block_table; 0: max_blocks_per_seq
  int max_blocks_per_seq = 0;      // columns of block_table, >= 1
  int num_blocks = 0;              // blocks (pages) in k and v, >= 1
  int page_size = 0;               // rows (tokens) per block, any size >= 1

  // Learnable attention sinks (gpt-oss): optional fp32 (heads_q,), one logit per query head, in
  // the units of the scaled scores (softmax_scale * q·k). Each row's softmax runs over its
  // visible keys plus the sink, which adds exp(sink) to the denominator and no value:
  //     o = sum_j exp(s_j) v_j / (sum_j exp(s_j) + exp(sink)),  lse = log of that denominator.
  // A row that sees no key outputs 0 with lse = sink. Null: no sinks. In the memory the kernel
  // reads (device memory for GPU families).
  const float* sinks = nullptr;

  // Logit soft-capping (Gemma-2/3, Grok): scores become softcap · tanh(scores / softcap), with
  // scores = softmax_scale · q·k, before masking and softmax (flash-attn's `softcap`). 0: off;
  // otherwise > 0 and finite. Families k6, fa2, cpu (and decode, backward on fa2 and cpu).
  float softcap = 0.0f;

  // FP8 inputs (dtype e4m3: q, k and v one byte per element). o is then `out_dtype` (bf16 or
  // fp16; o has `dtype` otherwise and out_dtype is ignored) and the LSE is in true units.
  // Descales: optional fp32 (batch, heads_kv), contiguous, in the memory the kernel reads, one
  // factor per sequence and KV head (FlashAttention-3's convention; null: 1.0; a query head uses
  // its KV head's q_descale). The kernel attends over the dequantised inputs
  //     q_descale·q, k_descale·k, v_descale·v:
  // the q·k descales fold into the softmax scale, v's into the output's normalisation. They must
  // be finite and > 0 (device memory is not read on the host, so this is the caller's duty).
  DType out_dtype = DType::bf16;
  const float* q_descale = nullptr;
  const float* k_descale = nullptr;
  const float* v_descale = nullptr;

  // K8: FP8 inputs with one descale per block of rows (block quantisation; quantize_fp8() in
  // flashattn/fp8.h makes them from bf16/fp16 tensors). fp32, contiguous, in the memory the
  // kernel reads:
  //     q_block_descale (batch, heads_q,  ceil(seqlen_q / rows.q))
  //     k_block_descale, v_block_descale (batch, heads_kv, ceil(seqlen_k / rows.kv))
  // with rows = fp8_block_rows(head_dim): block i of a sequence covers its rows
  // [i·rows, (i+1)·rows), and rows.kv is the kernel's key block, so each block of scores
  // Q·Kᵀ is rescaled by one q and one k descale per row (no extra GEMM). All three or none; with
  // them the per-head descales above must be null, and kernel k8 (or auto; cpu for host memory)
  // runs. Dense batches only (no cu_seqlens, no block_table). Finite and > 0: the caller's duty,
  // as for the descales (the cpu family checks host ones).
  const float* q_block_descale = nullptr;
  const float* k_block_descale = nullptr;
  const float* v_block_descale = nullptr;

  void* stream = nullptr;  // cudaStream_t; ignored by the cpu kernel

  DebugOptions debug;  // ablation and diagnosis switches; the defaults are the measured best
};

// Checks every rule for `params` run on `kernel`; ok when forward() would run.
Status can_implement(const ForwardParams& params, Kernel kernel = Kernel::automatic);

// The family `automatic` resolves to for these params (cpu for host memory; the fastest built
// GPU family for device memory). Returns `automatic` itself only when nothing can run.
Kernel select_kernel(const ForwardParams& params);

// Validates, then runs. GPU kernels are asynchronous on `stream`; the cpu kernel returns when done.
Status forward(const ForwardParams& params, Kernel kernel = Kernel::automatic);

// Dense row-major (batch, seqlen, heads, dim) strides filled in for q, k, v and o.
void set_contiguous_layout(ForwardParams& params);

}  // namespace flashattn
#include "flashattn/decode.h"    // decode(): KV-cache attention (after the types it uses)
#include "flashattn/backward.h"  // backward(): gradients of forward()
#include "flashattn/fp8.h"       // quantize_fp8(): bf16/fp16 -> e4m3 with block descales (K8)
