// The correctness oracle, public so that tests, the benchmark CLI and users share one definition.
//
// reference::forward computes attention exactly in fp64 on the host (Precision::fp64), or the way a
// same-precision kernel would (Precision::emulate: fp32 accumulation, P rounded to the input type
// before P·V). check() applies FlashAttention's rule to a kernel's output:
//     max|out - ref| <= 2 * max|pt - ref| + atol
// with ref the fp64 result, pt the emulated one and atol the rounding floor of the output type.
// reference::backward and check_backward() do the same for the gradients.
//
// FP8 (e4m3) inputs, as FlashAttention-3 tests them: ref is the fp64 attention of the dequantised
// inputs q_descale·q, k_descale·k, v_descale·v (ForwardParams' descales, null = 1; with K8's
// block descales each row's block's descale instead); pt the same
// math in bf16 (the dequantised inputs rounded to bf16, fp32 logits and sums) with P scaled by
// kFp8POffset and rounded to e4m3 before P·V, o rounded to out_dtype; atol the rounding floor of
// out_dtype. The LSE is compared in true units.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flashattn/flashattn.h"

namespace flashattn::reference {

enum class Precision { fp64, emulate };

// The FP8 `pt` scales P = exp(s - rowmax) in [0, 1] by 2^8 before rounding it to e4m3 (and the
// row sum by the same after), as a kernel that offsets its running max by 8 (log2 units) does:
// in [0, 256] e4m3's normal range reaches down to 2^-14, where [0, 1] would flush every P below
// 2^-6 into e4m3's eight subnormal steps.
inline constexpr float kFp8POffset = 256.f;

// One query row of one (batch, query head). `params` points at host memory (q, k, v); o and lse
// are not read. Writes head_dim_v values to `out` and the natural-log LSE to `lse`.
// A row that sees no key gets out = 0 and lse = -inf.
void forward_row(const ForwardParams& params, Precision precision, int batch, int head, int row,
                 double* out, double* lse);

// Every row, multithreaded. `out` is dense (batch, seqlen_q, heads_q, head_dim_v); `lse` dense
// (batch, heads_q, seqlen_q); either may be null.
void forward(const ForwardParams& params, Precision precision, double* out, double* lse);

struct RowId {
  int batch, head, row;
};

struct CheckResult {
  bool ok = false;
  double max_err = 0;     // max |out - ref| over checked elements
  double max_err_pt = 0;  // max |pt - ref|
  double atol = 0;        // rounding floor of the output type
  double lse_max_err = 0, lse_max_err_pt = 0, lse_atol = 0;
  double rmse = 0;          // sqrt(mean (out - ref)^2) over the finite checked elements
  int64_t checked = 0;      // output elements compared
  int64_t not_finite = 0;   // outputs that are NaN/inf (poison left behind, or a blow-up)
  std::string detail;       // first failure, human readable
};

// Checks a kernel's outputs. `params.q/k/v` (and the FP8 descales) point at host copies of the
// inputs; `params.o` at a host copy of the output (params.dtype, or out_dtype for FP8 inputs;
// params.o.stride); `params.lse` at a host copy of the LSE or null to skip it. `rows` lists the
// rows to check; empty means every row.
CheckResult check(const ForwardParams& params, const std::vector<RowId>& rows = {});

// Up to `count` rows drawn evenly (always including the first and last row of each sequence and
// any fully masked row), for shapes too large to check whole on the CPU.
std::vector<RowId> sample_rows(const ForwardParams& params, int count, uint64_t seed);

// ---- Backward ---------------------------------------------------------------------------------
// Gradients of the loss sum(dout * o) with respect to q, k, v and the sink logits, from params.q,
// k, v and dout (host memory, as are cu_seqlens and sinks) alone: the forward is recomputed in
// the same precision; params.o, lse and the gradient pointers are not read. fp64 is exact;
// emulate is what a kernel of the input precision computes (fp32 arithmetic on the emulated
// forward's O and LSE, P rounded to the input type before dV += P^T dO, dS rounded before
// dQ += dS K and dK += dS^T Q, each gradient rounded to the input type at the end).
// Outputs are dense: dq (batch, seqlen_q, heads_q, head_dim), dk (batch, seqlen_k, heads_kv,
// head_dim), dv (batch, seqlen_k, heads_kv, head_dim_v); with cu_seqlens (total_q, heads_q,
// head_dim) and so on; dsinks (heads_q). Any may be null.
void backward(const BackwardParams& params, Precision precision, double* dq, double* dk,
              double* dv, double* dsinks);

// One KV head of one batch entry: the unit whose gradients can be checked alone (dk and dv of
// the KV head, dq of the query heads of its group).
struct KvHeadId {
  int batch, kv_head;
};

struct GradientCheck {
  bool ok = true;
  double max_err = 0;     // max |g - ref|
  double max_err_pt = 0;  // max |pt - ref|
  double atol = 0;
  int64_t checked = 0;     // elements compared
  int64_t not_finite = 0;  // NaN/inf elements (poison left behind, or a blow-up)
};

struct BackwardCheckResult {
  bool ok = false;
  GradientCheck dq, dk, dv, dsinks;  // dsinks.checked == 0: not checked
  std::string detail;                // the failures, human readable
};

// FlashAttention's rule on each gradient, as check() applies it to the output:
//     max|g - ref| <= 2 * max|pt - ref| + atol
// atol the rounding floor of the input type (dsinks, fp32: a bound on the standard deviation of what
// rounding O to the input type moves it by, since D = dO.O uses the forward's rounded O), and every
// element finite. params.q/k/v/dout (cu_seqlens, sinks) point at host copies of the inputs,
// params.dq/dk/dv (dsinks) at host copies of the kernel's gradients, in their own strides.
// `pairs` limits the check to those (batch, KV head) units; dsinks, a sum over every batch entry,
// is checked only when `pairs` is empty (all of them).
BackwardCheckResult check_backward(const BackwardParams& params,
                                   const std::vector<KvHeadId>& pairs = {});

// Up to `count` distinct (batch, KV head) units: the first and the last, then seeded others.
std::vector<KvHeadId> sample_kv_heads(const BackwardParams& params, int count, uint64_t seed);

// Rotary embedding of one head on the host, with decode()'s arithmetic (decode.h's header
// comment: fp32 fmas, one round to nearest even), so the result equals what decode() appends bit
// for bit. `in` and `out` hold head_dim values of `dtype` (they may be the same); `cos` and `sin`
// are dense (seqlen_ro, rotary_dim / 2) tables of `dtype` read at row `position`.
void apply_rotary(DType dtype, const void* cos, const void* sin, int rotary_dim, bool interleaved,
                  int64_t position, const void* in, void* out, int head_dim);

// Standard rotary tables: cos and sin of t * theta^(-2p / rotary_dim) for t < seqlen_ro and
// p < rotary_dim / 2, computed in fp64 and rounded to `dtype`; dense (seqlen_ro, rotary_dim / 2).
void rotary_tables(DType dtype, int seqlen_ro, int rotary_dim, double theta, void* cos, void* sin);

// An FP8 (e4m3) KV cache on the host with decode's rule (decode.h): quantize_e4m3 writes, for n
// values of `dtype` (bf16/fp16), e4m3 = satfinite_rne(in[i] / scale) (bit for bit what decode()
// appends); dequantize_e4m3 writes float(e4m3) * scale rounded to `dtype` (exact when scale is a
// power of two and the product in range).
void quantize_e4m3(DType dtype, const void* in, int64_t n, float scale, uint8_t* out);
void dequantize_e4m3(const uint8_t* in, int64_t n, float scale, DType dtype, void* out);

// n values of `dtype` (bf16, fp16 or e4m3) drawn from N(0, sigma^2) with a seeded generator
// (never zeros).
void fill_normal(void* data, int64_t n, DType dtype, uint64_t seed, float sigma = 1.0f);

// FlashAttention-3's outlier distribution (its Table 3), scaled by sigma: N(0, sigma^2) +
// N(0, 100 sigma^2)·Bernoulli(0.001), i.e. about one value in a thousand gets an extra normal of
// ten times the standard deviation. n values of `dtype` (e4m3 saturates at ±448), seeded, never 0.
void fill_outliers(void* data, int64_t n, DType dtype, uint64_t seed, float sigma = 1.0f);

// FP8 inputs from 16-bit data, the way a user quantises per (batch, KV head): `in` is a dense
// (batch, seqlen, heads, dim) tensor of `dtype` (bf16/fp16); every `heads_per_descale`
// consecutive heads (the query heads of one KV head for q, 1 for k and v) share one descale =
// amax / 448 over their (seqlen, heads_per_descale, dim) values (1 where all are 0), and
// out = satfinite_rne(x / descale) in e4m3 (host_dtype.h's quantize_e4m3), so that descale·out
// approximates x. descales: (batch, heads / heads_per_descale) fp32, the layout of
// ForwardParams::q_descale etc.
void quantize_e4m3_per_head(DType dtype, const void* in, int batch, int64_t seqlen, int heads,
                            int dim, int heads_per_descale, uint8_t* out, float* descales);

}  // namespace flashattn::reference
