// K8's pre-pass on the GPU (flashattn/fp8.h has the contract): bf16/fp16 q, k, v -> e4m3 with one
// descale per block of rows, q and k optionally rotated by diag(s)·H/√d first.
//
// One thread block per (block of rows, head, sequence) of one tensor; a warp holds a row, each lane
// head_dim / 32 channels (kPer) 32 apart, so loads and stores are coalesced for any strides and
// the Hadamard butterflies of channel distance below 32 are xor-shuffles, the others registers. The block's amax is needed
// before any element can be rounded, so the rows are read twice: a first pass rotates them and
// keeps only the running max, the second (its reads hit L2: the block was just read) rotates them
// again and stores. Re-reading costs less than keeping up to 32K rotated floats per block in
// registers, which would leave one block per SM and nothing to hide the loads under.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "common/cuda_check.h"
#include "common/hadamard.h"
#include "kernels/quant/entry.h"

namespace flashattn {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr float kE4m3Max = 448.f;

struct TensorJob {
  const void* in;
  int64_t in_stride[3];  // (sequence, row, head) in elements; the channel stride is 1
  uint8_t* out;
  int64_t out_stride[3];
  float* descale;  // (batch, heads, blocks)
  int seqlen;
  int heads;
  int rows;    // per block
  int blocks;  // ceil(seqlen / rows)
  bool rotate;
};

template <class T>
__device__ __forceinline__ float to_float(T x);
template <>
__device__ __forceinline__ float to_float(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
template <>
__device__ __forceinline__ float to_float(__half x) {
  return __half2float(x);
}

// One row's kPer channels of this lane, lane + 32·e (e < kPer: each load is 32 consecutive
// elements, coalesced whatever the strides), rotated when the job says so. Channel bits 0-4 are
// the lane, so stages h = 1 .. 16 are xor-shuffles and h >= 32 pair registers of this lane, run in
// the documented order of increasing h.
template <class T, int kDim, bool kRotate>
__device__ __forceinline__ void load_row(const T* row, int lane, const float (&sign)[kDim / 32],
                                         float (&x)[kDim / 32]) {
  constexpr int kPer = kDim / 32;
#pragma unroll
  for (int e = 0; e < kPer; ++e) x[e] = to_float(row[lane + 32 * e]);
  if constexpr (kRotate) {
#pragma unroll
    for (int e = 0; e < kPer; ++e) x[e] *= sign[e];
#pragma unroll
    for (int h = 1; h < 32; h *= 2) {
      const bool high = (lane & h) != 0;  // this lane holds the pair's channel j + h
#pragma unroll
      for (int e = 0; e < kPer; ++e) {
        const float other = __shfl_xor_sync(0xffffffffu, x[e], h);
        x[e] = high ? other - x[e] : x[e] + other;
      }
    }
#pragma unroll
    for (int h = 1; h < kPer; h *= 2) {  // channel distance 32·h
#pragma unroll
      for (int e = 0; e < kPer; ++e) {
        if ((e & h) == 0) {
          const float a = x[e], b = x[e + h];
          x[e] = a + b;
          x[e + h] = a - b;
        }
      }
    }
    const float norm = hadamard_norm(kDim);
#pragma unroll
    for (int e = 0; e < kPer; ++e) x[e] *= norm;
  }
}

template <class T, int kDim, bool kRotate>
__global__ void __launch_bounds__(kThreads) quantize_kernel(TensorJob job, uint64_t seed) {
  constexpr int kPer = kDim / 32;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int block = blockIdx.x % job.blocks;
  const int head = (blockIdx.x / job.blocks) % job.heads;
  const int seq = blockIdx.x / (job.blocks * job.heads);
  const int row0 = block * job.rows;
  const int row_end = min(job.seqlen, row0 + job.rows);
  const T* in = static_cast<const T*>(job.in) + seq * job.in_stride[0] + head * job.in_stride[2];
  uint8_t* out = job.out + seq * job.out_stride[0] + head * job.out_stride[2];

  float sign[kPer];
#pragma unroll
  for (int e = 0; e < kPer; ++e) sign[e] = kRotate ? hadamard_sign(seed, lane + 32 * e) : 1.f;

  float amax = 0.f;
  for (int r = row0 + warp; r < row_end; r += kWarps) {
    float x[kPer];
    load_row<T, kDim, kRotate>(in + r * job.in_stride[1], lane, sign, x);
#pragma unroll
    for (int e = 0; e < kPer; ++e) amax = fmaxf(amax, fabsf(x[e]));
  }
#pragma unroll
  for (int lanes = 16; lanes > 0; lanes /= 2) {
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, lanes));
  }
  __shared__ float warp_max[kWarps];
  if (lane == 0) warp_max[warp] = amax;
  __syncthreads();
  amax = warp_max[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) amax = fmaxf(amax, warp_max[w]);
  const float f = amax > 0.f ? __fdiv_rn(kE4m3Max, amax) : 1.f;
  if (threadIdx.x == 0) {
    job.descale[(static_cast<int64_t>(seq) * job.heads + head) * job.blocks + block] =
        amax > 0.f ? __fdiv_rn(amax, kE4m3Max) : 1.f;
  }

  for (int r = row0 + warp; r < row_end; r += kWarps) {
    float x[kPer];
    load_row<T, kDim, kRotate>(in + r * job.in_stride[1], lane, sign, x);
    uint8_t q[kPer];
#pragma unroll
    for (int e = 0; e < kPer; ++e) {
      q[e] = static_cast<uint8_t>(
          __nv_cvt_float_to_fp8(__fmul_rn(x[e], f), __NV_SATFINITE, __NV_E4M3));
    }
    uint8_t* dst = out + r * job.out_stride[1] + lane;
#pragma unroll
    for (int e = 0; e < kPer; ++e) dst[32 * e] = q[e];
  }
}

template <class T, int kDim>
Status launch(const TensorJob& job, int batch, uint64_t seed, cudaStream_t stream) {
  const int64_t grid = int64_t{batch} * job.heads * job.blocks;
  if (grid == 0) return Status::success();
  if (grid > 0x7fffffff) {
    return {StatusCode::unsupported, "quantize_fp8: batch * heads * blocks exceeds 2^31 - 1"};
  }
  if (job.rotate) {
    quantize_kernel<T, kDim, true><<<static_cast<unsigned>(grid), kThreads, 0, stream>>>(job, seed);
  } else {
    quantize_kernel<T, kDim, false><<<static_cast<unsigned>(grid), kThreads, 0, stream>>>(job, seed);
  }
  return cuda_status(cudaGetLastError(), "quantize_fp8 kernel launch");
}

template <class T>
Status launch_dim(const TensorJob& job, int dim, int batch, uint64_t seed, cudaStream_t stream) {
  switch (dim) {
    case 64: return launch<T, 64>(job, batch, seed, stream);
    case 128: return launch<T, 128>(job, batch, seed, stream);
    case 256: return launch<T, 256>(job, batch, seed, stream);
    default: break;
  }
  return {StatusCode::unsupported, "quantize_fp8: head_dim " + std::to_string(dim) +
                                       " has no pre-pass (64, 128 or 256)"};
}

TensorJob job_of(const TensorRef& in, const MutableTensorRef& out, float* descale, int seqlen,
                 int heads, int rows, bool rotate) {
  TensorJob j{};
  j.in = in.data;
  j.out = static_cast<uint8_t*>(out.data);
  for (int i = 0; i < 3; ++i) {
    j.in_stride[i] = in.stride[i];
    j.out_stride[i] = out.stride[i];
  }
  j.descale = descale;
  j.seqlen = seqlen;
  j.heads = heads;
  j.rows = rows;
  j.blocks = (seqlen + rows - 1) / rows;
  j.rotate = rotate;
  return j;
}

}  // namespace

Status quantize_fp8_device(const QuantizeFp8Params& p) {
  const Fp8BlockRows rows = fp8_block_rows(p.head_dim);
  const bool rotate = p.rotation == Fp8Rotation::hadamard;
  const int dim_v = p.head_dim_v > 0 ? p.head_dim_v : p.head_dim;
  const auto stream = static_cast<cudaStream_t>(p.stream);
  const TensorJob jobs[3] = {
      job_of(p.q, p.q_out, p.q_block_descale, p.seqlen_q, p.heads_q, rows.q, rotate),
      job_of(p.k, p.k_out, p.k_block_descale, p.seqlen_k, p.heads_kv, rows.kv, rotate),
      job_of(p.v, p.v_out, p.v_block_descale, p.seqlen_k, p.heads_kv, rows.kv, false)};
  const int dims[3] = {p.head_dim, p.head_dim, dim_v};
  for (int t = 0; t < 3; ++t) {
    const Status s = p.dtype == DType::bf16
                         ? launch_dim<__nv_bfloat16>(jobs[t], dims[t], p.batch, p.seed, stream)
                         : launch_dim<__half>(jobs[t], dims[t], p.batch, p.seed, stream);
    if (!s.ok()) return s;
  }
  return Status::success();
}

}  // namespace flashattn
