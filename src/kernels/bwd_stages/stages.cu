// The backward stages shared by every GPU family, on the problem's stream:
//   1. preprocess (a group of threads per query row and head): D = rowsum(dO ∘ O) in fp32,
//      LSE·log2e (+inf for a row that sees no key, so that its P is exactly 0), the row of the
//      fp32 dQ accumulator zeroed (and the main kernel's tile counter);
//   2. the family's main kernel;
//   3. postprocess (a group of threads per query row and head): dQ = scale · accumulator,
//      rounded to the element type, through dq's strides; and, with sinks and dsinks, one block
//      per head sums dsink = −Σ_rows exp(sink − LSE) · D in a fixed order.
// The workspace (accumulator, LSE, D, semaphores) comes from the library's stream-ordered pool
// and goes back to it once the postprocess is queued.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "common/convert.cuh"
#include "common/cuda_check.h"
#include "common/head_dims.h"
#include "common/math_constants.h"
#include "common/workspace.h"
#include "kernels/bwd_stages/stages.h"

namespace flashattn::bwd {
namespace {

// The pre- and postprocess give each (row, head) a group of kGroup threads, 8 channels (one
// 16-byte load of bf16/fp16) a thread: kGroup = 8, 16 or 32, the smallest power of two covering
// the larger head dim, so every head dim is one pass (256 channels at most) and a warp holds
// 32 / kGroup rows. One warp per row (what these kernels were first) left 24 of 32 lanes idle at
// d 64 and 16 at d 128: the preprocess ran at 1.4-2.8 TB/s (H200). kRowsPerThread rows a thread,
// their loads issued before any use: measured 1, 2 and 4 (2026-11-28, H200, d 64 / 128 s512):
// 2 was 3% slower than 1 and 4 20% slower (fewer blocks, the same bytes in flight), so 1.
constexpr int kStageThreads = 256;
constexpr int kRowsPerThread = 1;

// Every head dim the library accepts is one pass of the groups: 16-byte loads (a multiple of 8
// channels) and at most 32 threads of 8 channels.
constexpr bool stage_head_dims_fit() {
  for (const HeadDims& h : kHeadDims) {
    if (h.qk > 256 || h.v > 256 || h.qk % 8 != 0 || h.v % 8 != 0) return false;
  }
  return true;
}
static_assert(stage_head_dims_fit(), "a head dim the pre/postprocess cannot cover in one pass");

int stage_group(const Problem& p) {
  const int d = p.head_dim > p.head_dim_v ? p.head_dim : p.head_dim_v;
  return d <= 64 ? 8 : d <= 128 ? 16 : 32;
}

// Rows one block covers: kStageThreads / kGroup per pass, kRowsPerThread passes.
constexpr int stage_rows(int group) { return kStageThreads / group * kRowsPerThread; }

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
__device__ __forceinline__ float dot8(const uint4& u, const uint4& v) {
  const uint32_t a[4] = {u.x, u.y, u.z, u.w}, b[4] = {v.x, v.y, v.z, v.w};
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    sum += to_float<Element>(static_cast<unsigned short>(a[i] & 0xffff)) *
           to_float<Element>(static_cast<unsigned short>(b[i] & 0xffff));
    sum += to_float<Element>(static_cast<unsigned short>(a[i] >> 16)) *
           to_float<Element>(static_cast<unsigned short>(b[i] >> 16));
  }
  return sum;
}

// Grid (ceil(rows / stage_rows(kGroup)), heads_q); a group of kGroup threads per (row, head).
template <typename Element, int kGroup>
__global__ void __launch_bounds__(kStageThreads)
    preprocess_kernel(const BackwardProblem bp, const Workspace ws) {
  constexpr int kRowsPerPass = kStageThreads / kGroup;
  const Problem& p = bp.fwd;
  const int c = threadIdx.x % kGroup * 8;  // this thread's first channel
  const int h = blockIdx.y;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kRowsPerPass * kRowsPerThread +
                     threadIdx.x / kGroup;
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) *ws.tile_counter = 0;
  uint4 o[kRowsPerThread], d_o[kRowsPerThread];
#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i) {
    const int64_t r = r0 + i * kRowsPerPass;
    o[i] = d_o[i] = make_uint4(0u, 0u, 0u, 0u);
    if (r < ws.rows && c < p.head_dim_v) {
      o[i] = *reinterpret_cast<const uint4*>(static_cast<const Element*>(p.o) +
                                             row_offset(p, p.o_stride, r, h) + c);
      d_o[i] = *reinterpret_cast<const uint4*>(static_cast<const Element*>(bp.dout) +
                                               row_offset(p, bp.dout_stride, r, h) + c);
    }
  }
#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i) {
    const int64_t r = r0 + i * kRowsPerPass;
    float sum = dot8<Element>(o[i], d_o[i]);  // 0 where the thread holds no channels
#pragma unroll
    for (int off = kGroup / 2; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    if (r >= ws.rows) continue;
    const int64_t w = static_cast<int64_t>(h) * ws.rows + r;
    if (c == 0) {
      const float lse = p.lse[lse_index(p, r, h)];
      ws.dsum[w] = sum;
      ws.lse_log2[w] = lse == -INFINITY ? INFINITY : lse * kLog2e;
    }
    if (c < p.head_dim) {
      float4* acc = reinterpret_cast<float4*>(ws.dq_accum + w * p.head_dim + c);
      acc[0] = acc[1] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
  }
}

template <typename Element, int kGroup>
__global__ void __launch_bounds__(kStageThreads)
    postprocess_kernel(const BackwardProblem bp, const Workspace ws) {
  constexpr int kRowsPerPass = kStageThreads / kGroup;
  const Problem& p = bp.fwd;
  const int c = threadIdx.x % kGroup * 8;
  const int h = blockIdx.y;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kRowsPerPass * kRowsPerThread +
                     threadIdx.x / kGroup;
  if (c >= p.head_dim) return;  // no shuffles below
  float4 a[kRowsPerThread], b[kRowsPerThread];
#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i) {
    const int64_t r = r0 + i * kRowsPerPass;
    if (r < ws.rows) {
      const int col = c ^ (r & 1 ? ws.dq_odd_row_col_xor : 0);  // Workspace says why
      const float* acc =
          ws.dq_accum + (static_cast<int64_t>(h) * ws.rows + r) * p.head_dim + col;
      a[i] = *reinterpret_cast<const float4*>(acc);
      b[i] = *reinterpret_cast<const float4*>(acc + 4);
    }
  }
#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i) {
    const int64_t r = r0 + i * kRowsPerPass;
    if (r >= ws.rows) continue;
    uint4 out;
    out.x = pack2<Element>(a[i].x * p.scale, a[i].y * p.scale);
    out.y = pack2<Element>(a[i].z * p.scale, a[i].w * p.scale);
    out.z = pack2<Element>(b[i].x * p.scale, b[i].y * p.scale);
    out.w = pack2<Element>(b[i].z * p.scale, b[i].w * p.scale);
    *reinterpret_cast<uint4*>(static_cast<Element*>(bp.dq) + row_offset(p, bp.dq_stride, r, h) +
                              c) = out;
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
  const int group = stage_group(p);
  const dim3 rows_grid(static_cast<unsigned>((ws.rows + stage_rows(group) - 1) / stage_rows(group)),
                       static_cast<unsigned>(p.heads_q));
  auto pre = group == 8    ? preprocess_kernel<Element, 8>
             : group == 16 ? preprocess_kernel<Element, 16>
                           : preprocess_kernel<Element, 32>;
  auto post = group == 8    ? postprocess_kernel<Element, 8>
              : group == 16 ? postprocess_kernel<Element, 16>
                            : postprocess_kernel<Element, 32>;
  if (ws.rows > 0) {
    pre<<<rows_grid, kStageThreads, 0, stream>>>(bp, ws);
    FA_CUDA_LAUNCH_CHECK("backward preprocess");
  }
  if (Status s = main_kernel(bp, ws); !s.ok()) return s;
  if (ws.rows > 0) {
    post<<<rows_grid, kStageThreads, 0, stream>>>(bp, ws);
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

Status run_backward_stages(const BackwardProblem& bp, MainKernel main, const char* family,
                           int dq_odd_row_col_xor) {
  const Problem& p = bp.fwd;
  if (p.batch == 0 || p.heads_q == 0) return Status::success();
  if (dq_odd_row_col_xor < 0 || dq_odd_row_col_xor % 8 != 0 ||
      (dq_odd_row_col_xor > 0 && p.head_dim % (2 * dq_odd_row_col_xor) != 0)) {
    return {StatusCode::unsupported, std::string(family) +
                                         ": the dQ accumulator's column order needs head_dim a "
                                         "multiple of twice its XOR"};
  }
  if (p.batch > 65535 || p.heads_kv > 65535 || p.heads_q > 65535) {
    return {StatusCode::unsupported,
            std::string(family) + ": the backward's grid takes at most 65535 sequences and heads"};
  }
  cudaStream_t stream = static_cast<cudaStream_t>(p.stream);
  Workspace ws;
  ws.rows = p.varlen() ? p.total_q : static_cast<int64_t>(p.batch) * p.seqlen_q;
  ws.dq_odd_row_col_xor = dq_odd_row_col_xor;
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
  ws.tile_counter = ws.sems + n_sems;  // in the 4 spare floats
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
