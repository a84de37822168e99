// K8's pre-pass on the GPU (flashattn/fp8.h has the contract): bf16/fp16 q, k, v -> e4m3 with one
// descale per block of rows, q and k optionally rotated by diag(s)·H/√d first.
//
// One launch for q, k and v: one thread block per (head, block of rows, sequence) of one tensor,
// heads fastest (the blocks running together read whole token rows). A warp holds a row; each lane
// pairs of neighbouring channels, 2·lane + 64·p + {0, 1}, so a load is one 32-bit word per lane
// (128 consecutive bytes a warp) and a store two e4m3 bytes, coalesced for any row strides. The
// Hadamard stage of distance 1 pairs a lane's two registers, distances 2 .. 32 are xor-shuffles
// (one FFMA each: fma(x, ±1, other)), 64 and up pair registers of the lane. The block's amax is
// needed before any element can be rounded, so the rows are read twice: a first pass rotates them
// and keeps only the running max, the second (its reads hit L2: the block was just read) rotates
// them again and stores. 32 registers, eight blocks of 256 threads per SM.
//
// Measured (H100, standard grid's q + k + v, rotation on; bench/results/
// 2026-11-25_h100_k8_prepass_variants.txt): 0.24 / 0.20 / 0.19 ms at d 64 / 128 / 256, 1.25-1.6
// TB/s of DRAM traffic against a floor of 0.086 ms (3 bytes per element at 3.35 TB/s). ncu: SM
// 82% busy, DRAM 46%: instruction-bound, the butterflies twice. Tried and slower: 16-bit loads,
// byte stores and three launches (0.24 / 0.22 / 0.21 ms); four rows' loads in flight per warp
// (62-75 registers, 0.34-0.38 ms); the block kept in registers between max and stores (512
// threads, 25% occupancy, 0.19-0.29 ms); 16 channels per lane with 16-byte loads and stores and
// 2-4 shuffle stages instead of 5 (0.26-0.31 ms).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "common/cuda_check.h"
#include "common/fp8_block_scale.h"
#include "common/hadamard.h"
#include "kernels/quant/entry.h"

namespace flashattn {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

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
  bool power_of_two;  // v: the descale is the power of two at or above amax/448
  bool in_pairs;   // every row's channel pairs 4-byte aligned in `in` (one 32-bit load each)
  bool out_pairs;  // and 2-byte aligned in `out` (one 16-bit store)
};

// q, k and v of one call; tensor t owns the thread blocks [first[t], first[t + 1]).
struct Jobs {
  TensorJob t[3];
  int first[4];
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

// Channel of this lane's element e.
__device__ __forceinline__ int channel(int lane, int e) {
  return 2 * lane + 64 * (e / 2) + e % 2;
}

// One row's channels of this lane as fp32.
template <class T, int kPer>
__device__ __forceinline__ void load_row(const T* row, int lane, bool aligned, float (&x)[kPer]) {
#pragma unroll
  for (int p = 0; p < kPer / 2; ++p) {
    const T* at = row + channel(lane, 2 * p);
    if (aligned) {
      const uint32_t w = *reinterpret_cast<const uint32_t*>(at);
      x[2 * p] = to_float(__builtin_bit_cast(T, static_cast<uint16_t>(w & 0xffffu)));
      x[2 * p + 1] = to_float(__builtin_bit_cast(T, static_cast<uint16_t>(w >> 16)));
    } else {
      x[2 * p] = to_float(at[0]);
      x[2 * p + 1] = to_float(at[1]);
    }
  }
}

// M's rotation of one row (fp8.h): signs, then the stages in the documented order of increasing
// channel distance h, then 1/√d.
template <int kDim>
__device__ __forceinline__ void rotate_row(int lane, const float (&sign)[kDim / 32],
                                           float (&x)[kDim / 32]) {
  constexpr int kPer = kDim / 32;
#pragma unroll
  for (int e = 0; e < kPer; ++e) x[e] *= sign[e];
#pragma unroll
  for (int p = 0; p < kPer / 2; ++p) {  // h = 1
    const float a = x[2 * p], b = x[2 * p + 1];
    x[2 * p] = a + b;
    x[2 * p + 1] = a - b;
  }
#pragma unroll
  for (int lanes = 1; lanes < 32; lanes *= 2) {  // h = 2·lanes: the partner is lane ^ lanes
    const float self = (lane & lanes) != 0 ? -1.f : 1.f;  // the pair's high channel: other - x
#pragma unroll
    for (int e = 0; e < kPer; ++e) {
      const float other = __shfl_xor_sync(0xffffffffu, x[e], lanes);
      x[e] = fmaf(x[e], self, other);
    }
  }
#pragma unroll
  for (int h = 2; h < kPer; h *= 2) {  // channel distance 32·h: registers e and e + h
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

// Row `row` of the job, transformed (the rotation is uniform over the block: every lane of the
// warp takes the shuffles together).
template <class T, int kDim>
__device__ __forceinline__ void transformed_row(const TensorJob& job, const T* in, int row,
                                                int lane, const float (&sign)[kDim / 32],
                                                float (&x)[kDim / 32]) {
  load_row<T, kDim / 32>(in + row * job.in_stride[1], lane, job.in_pairs, x);
  if (job.rotate) rotate_row<kDim>(lane, sign, x);
}

template <class T, int kDim>
__global__ void __launch_bounds__(kThreads) quantize_kernel(const __grid_constant__ Jobs jobs,
                                                            uint64_t seed) {
  constexpr int kPer = kDim / 32;
  const int t = blockIdx.x >= jobs.first[2] ? 2 : blockIdx.x >= jobs.first[1] ? 1 : 0;
  const TensorJob& job = jobs.t[t];
  const int index = blockIdx.x - jobs.first[t];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int head = index % job.heads;
  const int block = (index / job.heads) % job.blocks;
  const int seq = index / (job.blocks * job.heads);
  const int row0 = block * job.rows;
  const int row_end = min(job.seqlen, row0 + job.rows);
  const T* in = static_cast<const T*>(job.in) + seq * job.in_stride[0] + head * job.in_stride[2];
  uint8_t* out = job.out + seq * job.out_stride[0] + head * job.out_stride[2];

  float sign[kPer];
#pragma unroll
  for (int e = 0; e < kPer; ++e) sign[e] = hadamard_sign(seed, channel(lane, e));

  float amax = 0.f;
  for (int r = row0 + warp; r < row_end; r += kWarps) {
    float x[kPer];
    transformed_row<T, kDim>(job, in, r, lane, sign, x);
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
  const Fp8BlockScale scale = fp8_block_scale(amax, job.power_of_two);
  const float f = scale.factor;
  if (threadIdx.x == 0) {
    job.descale[(static_cast<int64_t>(seq) * job.heads + head) * job.blocks + block] = scale.descale;
  }

  for (int r = row0 + warp; r < row_end; r += kWarps) {
    float x[kPer];
    transformed_row<T, kDim>(job, in, r, lane, sign, x);
    uint8_t* dst = out + r * job.out_stride[1];
#pragma unroll
    for (int p = 0; p < kPer / 2; ++p) {
      // .x lands in the low byte: the pair's first channel at the lower address.
      const uint16_t two = __nv_cvt_float2_to_fp8x2(
          make_float2(__fmul_rn(x[2 * p], f), __fmul_rn(x[2 * p + 1], f)), __NV_SATFINITE,
          __NV_E4M3);
      uint8_t* at = dst + channel(lane, 2 * p);
      if (job.out_pairs) {
        *reinterpret_cast<uint16_t*>(at) = two;
      } else {
        at[0] = static_cast<uint8_t>(two & 0xffu);
        at[1] = static_cast<uint8_t>(two >> 8);
      }
    }
  }
}

template <class T, int kDim>
Status launch(const Jobs& jobs, uint64_t seed, cudaStream_t stream) {
  quantize_kernel<T, kDim><<<static_cast<unsigned>(jobs.first[3]), kThreads, 0, stream>>>(jobs, seed);
  return cuda_status(cudaGetLastError(), "quantize_fp8 kernel launch");
}

template <class T>
Status launch_dim(const Jobs& jobs, int dim, uint64_t seed, cudaStream_t stream) {
  switch (dim) {
    case 64: return launch<T, 64>(jobs, seed, stream);
    case 128: return launch<T, 128>(jobs, seed, stream);
    case 256: return launch<T, 256>(jobs, seed, stream);
    default: break;
  }
  return {StatusCode::unsupported, "quantize_fp8: head_dim " + std::to_string(dim) +
                                       " has no pre-pass (64, 128 or 256)"};
}

bool even_strides(const int64_t (&st)[4]) {
  return st[0] % 2 == 0 && st[1] % 2 == 0 && st[2] % 2 == 0;
}

TensorJob job_of(const TensorRef& in, const MutableTensorRef& out, float* descale, int seqlen,
                 int heads, int rows, bool rotate, bool power_of_two) {
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
  j.power_of_two = power_of_two;
  j.in_pairs = reinterpret_cast<uintptr_t>(in.data) % 4 == 0 && even_strides(in.stride);
  j.out_pairs = reinterpret_cast<uintptr_t>(out.data) % 2 == 0 && even_strides(out.stride);
  return j;
}

}  // namespace

Status quantize_fp8_device(const QuantizeFp8Params& p) {
  const Fp8BlockRows rows = fp8_block_rows(p.head_dim);
  const bool rotate = p.rotation == Fp8Rotation::hadamard;
  Jobs jobs{{job_of(p.q, p.q_out, p.q_block_descale, p.seqlen_q, p.heads_q, rows.q, rotate, false),
             job_of(p.k, p.k_out, p.k_block_descale, p.seqlen_k, p.heads_kv, rows.kv, rotate, false),
             job_of(p.v, p.v_out, p.v_block_descale, p.seqlen_k, p.heads_kv, rows.kv, false, true)},
            {0, 0, 0, 0}};
  int64_t total = 0;
  for (int t = 0; t < 3; ++t) {
    total += int64_t{p.batch} * jobs.t[t].heads * jobs.t[t].blocks;
    if (total > 0x7fffffff) {
      return {StatusCode::unsupported,
              "quantize_fp8: batch * heads * blocks of q, k and v exceed 2^31 - 1 thread blocks"};
    }
    jobs.first[t + 1] = static_cast<int>(total);
  }
  if (total == 0) return Status::success();
  const auto stream = static_cast<cudaStream_t>(p.stream);
  // head_dim_v is head_dim (validated): one kernel for the three tensors.
  return p.dtype == DType::bf16 ? launch_dim<__nv_bfloat16>(jobs, p.head_dim, p.seed, stream)
                                : launch_dim<__half>(jobs, p.head_dim, p.seed, stream);
}

}  // namespace flashattn
