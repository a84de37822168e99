// The backward stages shared by every GPU family, on the problem's stream:
//   1. preprocess (one warp per query row and head): D = rowsum(dO ∘ O) in fp32, LSE·log2e (+inf
//      for a row that sees no key, so that its P is exactly 0), the row of the fp32 dQ
//      accumulator zeroed;
//   2. the family's main kernel;
//   3. postprocess (one warp per query row and head): dQ = scale · accumulator, rounded to the
//      element type, through dq's strides; and, with sinks and dsinks, one block per head sums
//      dsink = −Σ_rows exp(sink − LSE) · D in a fixed order.
// The workspace (accumulator, LSE, D, semaphores) comes from the library's stream-ordered pool
// and goes back to it once the postprocess is queued.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "common/convert.cuh"
#include "common/cuda_check.h"
#include "common/math_constants.h"
#include "common/workspace.h"
#include "kernels/bwd_stages/stages.h"

namespace flashattn::bwd {
namespace {

constexpr int kRowWarps = 8;  // rows (x heads) per block of the pre/postprocess

// Element offset of (row token r, head h) in a tensor with strides (batch, row, head): r is
// b * seqlen_q + i for padded tensors, the packed token for variable length.
__device__ __forceinline__ int64_t row_offset(const Problem& p, const int64_t (&stride)[3],
                                              int64_t r, int h) {
  if (p.cu_seqlens_q != nullptr) return r * stride[1] + h * stride[2];
  const int64_t b = r / p.seqlen_q, i = r % p.seqlen_q;
  return b * stride[0] + i * stride[1] + h * stride[2];
}

__device__ __forceinline__ int64_t lse_index(const Problem& p, int64_t r, int h) {
  if (p.cu_seqlens_q != nullptr) return static_cast<int64_t>(h) * p.total_q + r;
  const int64_t b = r / p.seqlen_q, i = r % p.seqlen_q;
  return (b * p.heads_q + h) * p.seqlen_q + i;
}

template <typename Element>
__device__ __forceinline__ void unpack8(const uint4& u, float (&f)[8]) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = to_float<Element>(static_cast<unsigned short>(w[i] & 0xffff));
    f[2 * i + 1] = to_float<Element>(static_cast<unsigned short>(w[i] >> 16));
  }
}

// Grid (ceil(rows / kRowWarps), heads_q); one warp per (row, head).
template <typename Element>
__global__ void __launch_bounds__(32 * kRowWarps)
    preprocess_kernel(const BackwardProblem bp, const Workspace ws) {
  const Problem& p = bp.fwd;
  const int lane = threadIdx.x % 32;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowWarps + threadIdx.x / 32;
  const int h = blockIdx.y;
  if (r >= ws.rows) return;
  const Element* o = static_cast<const Element*>(p.o) + row_offset(p, p.o_stride, r, h);
  const Element* d_o = static_cast<const Element*>(bp.dout) + row_offset(p, bp.dout_stride, r, h);
  float sum = 0.f;
  for (int c = lane * 8; c < p.head_dim_v; c += 32 * 8) {
    float a[8], x[8];
    unpack8<Element>(*reinterpret_cast<const uint4*>(o + c), a);
    unpack8<Element>(*reinterpret_cast<const uint4*>(d_o + c), x);
#pragma unroll
    for (int i = 0; i < 8; ++i) sum += a[i] * x[i];
  }
#pragma unroll
  for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  const int64_t w = static_cast<int64_t>(h) * ws.rows + r;
  if (lane == 0) {
    const float lse = p.lse[lse_index(p, r, h)];
    ws.dsum[w] = sum;
    ws.lse_log2[w] = lse == -INFINITY ? INFINITY : lse * kLog2e;
  }
  float4* acc = reinterpret_cast<float4*>(ws.dq_accum + w * p.head_dim);
  for (int c = lane; c < p.head_dim / 4; c += 32) acc[c] = make_float4(0.f, 0.f, 0.f, 0.f);
}

template <typename Element>
__global__ void __launch_bounds__(32 * kRowWarps)
    postprocess_kernel(const BackwardProblem bp, const Workspace ws) {
  const Problem& p = bp.fwd;
  const int lane = threadIdx.x % 32;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowWarps + threadIdx.x / 32;
  const int h = blockIdx.y;
  if (r >= ws.rows) return;
  const float* acc = ws.dq_accum + (static_cast<int64_t>(h) * ws.rows + r) * p.head_dim;
  Element* dq = static_cast<Element*>(bp.dq) + row_offset(p, bp.dq_stride, r, h);
  for (int c = lane * 8; c < p.head_dim; c += 32 * 8) {
    const float4 a = *reinterpret_cast<const float4*>(acc + c);
    const float4 b = *reinterpret_cast<const float4*>(acc + c + 4);
    uint4 out;
    out.x = pack2<Element>(a.x * p.scale, a.y * p.scale);
    out.y = pack2<Element>(a.z * p.scale, a.w * p.scale);
    out.z = pack2<Element>(b.x * p.scale, b.y * p.scale);
    out.w = pack2<Element>(b.z * p.scale, b.w * p.scale);
    *reinterpret_cast<uint4*>(dq + c) = out;
  }
}

// One block per head: dsink = −Σ_rows exp(sink − LSE) · D, summed in a fixed order (each thread
// a fixed stride of rows, then a fixed tree), so the result is the same on every call.
constexpr int kSinkThreads = 256;
__global__ void __launch_bounds__(kSinkThreads)
    dsinks_kernel(const BackwardProblem bp, const Workspace ws) {
  const Problem& p = bp.fwd;
  const int h = blockIdx.x;
  const float sink_log2 = p.sinks[h] * kLog2e;
  const float* lse = ws.lse_log2 + static_cast<int64_t>(h) * ws.rows;
  const float* dsum = ws.dsum + static_cast<int64_t>(h) * ws.rows;
  float sum = 0.f;
  for (int64_t r = threadIdx.x; r < ws.rows; r += kSinkThreads) {
    sum += exp2f(sink_log2 - lse[r]) * dsum[r];
  }
  __shared__ float part[kSinkThreads];
  part[threadIdx.x] = sum;
  __syncthreads();
  for (int n = kSinkThreads / 2; n > 0; n /= 2) {
    if (static_cast<int>(threadIdx.x) < n) part[threadIdx.x] += part[threadIdx.x + n];
    __syncthreads();
  }
  if (threadIdx.x == 0) bp.dsinks[h] = -part[0];
}

template <typename Element>
Status run_stages(const BackwardProblem& bp, const Workspace& ws, MainKernel main_kernel) {
  const Problem& p = bp.fwd;
  cudaStream_t stream = static_cast<cudaStream_t>(p.stream);
  const dim3 rows_grid(static_cast<unsigned>((ws.rows + kRowWarps - 1) / kRowWarps),
                       static_cast<unsigned>(p.heads_q));
  if (ws.rows > 0) {
    preprocess_kernel<Element><<<rows_grid, 32 * kRowWarps, 0, stream>>>(bp, ws);
    FA_CUDA_LAUNCH_CHECK("backward preprocess");
  }
  if (Status s = main_kernel(bp, ws); !s.ok()) return s;
  if (ws.rows > 0) {
    postprocess_kernel<Element><<<rows_grid, 32 * kRowWarps, 0, stream>>>(bp, ws);
    FA_CUDA_LAUNCH_CHECK("backward postprocess");
  }
  if (bp.dsinks != nullptr) {
    if (ws.rows > 0) {
      dsinks_kernel<<<p.heads_q, kSinkThreads, 0, stream>>>(bp, ws);
      FA_CUDA_LAUNCH_CHECK("backward dsinks");
    } else {
      FA_CUDA_TRY(cudaMemsetAsync(bp.dsinks, 0, sizeof(float) * p.heads_q, stream));
    }
  }
  return Status::success();
}

}  // namespace

Status run_backward_stages(const BackwardProblem& bp, MainKernel main, const char* family) {
  const Problem& p = bp.fwd;
  if (p.batch == 0 || p.heads_q == 0) return Status::success();
  if (p.batch > 65535 || p.heads_kv > 65535 || p.heads_q > 65535) {
    return {StatusCode::unsupported,
            std::string(family) + ": the backward's grid takes at most 65535 sequences and heads"};
  }
  cudaStream_t stream = static_cast<cudaStream_t>(p.stream);
  Workspace ws;
  ws.rows = p.varlen() ? p.total_q : static_cast<int64_t>(p.batch) * p.seqlen_q;
  // Semaphore slots per sequence: one per kMinBlockM rows, rounded up to whole 2·kMinBlockM
  // blocks, so that a 64-row query block owns two (k6: one per MMA warpgroup) even where
  // seqlen_q / 32 rounds up to an odd count (sized by the 32-row count alone, the last block's
  // second slot was the next (head, sequence)'s first: k6's deterministic mode hung at
  // seqlen_q 200).
  ws.m_blocks = (p.seqlen_q + 2 * kMinBlockM - 1) / (2 * kMinBlockM) * 2;
  const int64_t cells = static_cast<int64_t>(p.heads_q) * ws.rows;
  const int64_t sems =
      bp.deterministic ? static_cast<int64_t>(p.heads_q) * p.batch * ws.m_blocks : 0;
  // Float counts, each region a multiple of 4 floats (16-byte aligned for the float4 accesses).
  auto round4 = [](int64_t n) { return (n + 3) / 4 * 4; };
  const int64_t n_acc = round4(cells * p.head_dim), n_lse = round4(cells), n_sum = round4(cells);
  const int64_t n_sems = round4(sems);
  const size_t bytes = sizeof(float) * static_cast<size_t>(n_acc + n_lse + n_sum + n_sems + 4);
  void* base = nullptr;
  if (Status s = workspace_alloc(bytes, stream, &base); !s.ok()) return s;
  float* f = static_cast<float*>(base);
  ws.dq_accum = f;
  ws.lse_log2 = f + n_acc;
  ws.dsum = ws.lse_log2 + n_lse;
  ws.sems = reinterpret_cast<int*>(ws.dsum + n_sum);
  Status status = Status::success();
  if (sems > 0) {
    status =
        cuda_status(cudaMemsetAsync(ws.sems, 0, sizeof(int) * sems, stream), "cudaMemsetAsync");
  }
  if (status.ok()) {
    if (p.dtype == DType::bf16) {
      status = run_stages<__nv_bfloat16>(bp, ws, main);
    } else if (p.dtype == DType::fp16) {
      status = run_stages<__half>(bp, ws, main);
    } else {
      status = {StatusCode::unsupported, std::string(family) + ": bf16 or fp16 only"};
    }
  }
  if (Status s = workspace_free(base, stream); status.ok()) status = s;
  return status;
}

}  // namespace flashattn::bwd
