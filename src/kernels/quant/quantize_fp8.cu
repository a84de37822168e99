// K8's pre-pass on the GPU (flashattn/fp8.h has the contract): bf16/fp16 q, k, v -> e4m3 with one
// descale per block of rows, q and k optionally rotated by diag(s)·H/√d first.
//
// One launch for q, k and v: one thread block per (head, block of rows, sequence) of one tensor,
// heads fastest (the blocks running together read whole token rows). A lane holds 16 neighbouring
// channels of a row, 16·q + i (q = its place among the row's d/16 lanes): two 16-byte loads, and
// the rotation's stages of channel distance 1, 2, 4 and 8 within its registers. For the stages
// of distance 16 and up the row goes through shared memory once (each warp its own rows, a
// swizzle that keeps both directions free of bank conflicts): the lane then holds the channels
// 16·H + l for every H and the 16·16/d values of l it owns, so the remaining stages are again
// within its registers. No shuffles: the previous pre-pass ran the five stages between lanes as
// xor-shuffles, two instructions per element and stage, twice (shuffles issue at a quarter of
// the rate of FP32 arithmetic), and measured instruction-bound at 46% of the DRAM bandwidth.
// The block's amax is needed before any element can be rounded, so the rows are read twice: a
// first pass rotates them and keeps only the running max, the second (its reads hit L2: the block
// was just read) rotates them again, turns them back through shared memory and stores 16 bytes
// a lane. Every element sees the same fp32 operations in the same order as the host reference's
// (fp8.h): bitwise the same output.
//
// Measured (H200, standard grid's q + k + v, rotation on; bench/k8_prepass_ab.cu against the
// shuffle version, one call; bench/results/2026-11-28_h200_k8_prepass_no_shuffles_ab.txt):
// d 64 / 128 / 256 0.240 -> 0.146, 0.187 -> 0.144, 0.184 -> 0.158 ms, 1.9-2.1 TB/s against a
// floor of 0.063 ms (3 bytes per element at 4.8 TB/s). 62-76 registers. Slower in the same call:
// the next row's loads issued a row ahead (77-80 registers, +4-6%; capped at 64 with spills, ±0
// to +12%) and the signs read from shared memory per row (+2-20%).
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
constexpr int kPer = 16;  // channels a lane holds
static_assert(kThreads >= 256, "one thread per channel draws the signs (d <= 256)");

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
  int in_vec;   // bytes per load the rows' alignment allows: 16, 4 or 2 (one element)
  int out_vec;  // bytes per store: 16, 2 or 1
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

template <class T>
__device__ __forceinline__ void unpack(uint32_t w, float& lo, float& hi) {
  lo = to_float(__builtin_bit_cast(T, static_cast<uint16_t>(w & 0xffffu)));
  hi = to_float(__builtin_bit_cast(T, static_cast<uint16_t>(w >> 16)));
}

// Channels [c0, c0 + 16) of a row as fp32 (zeros for a row past the block's end).
template <class T>
__device__ __forceinline__ void load16(const T* at, int vec, bool valid, float (&x)[kPer]) {
  if (!valid) {
#pragma unroll
    for (int e = 0; e < kPer; ++e) x[e] = 0.f;
  } else if (vec == 16) {
    const uint4 a = reinterpret_cast<const uint4*>(at)[0];
    const uint4 b = reinterpret_cast<const uint4*>(at)[1];
    const uint32_t w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
    for (int p = 0; p < 8; ++p) unpack<T>(w[p], x[2 * p], x[2 * p + 1]);
  } else if (vec == 4) {
#pragma unroll
    for (int p = 0; p < 8; ++p)
      unpack<T>(reinterpret_cast<const uint32_t*>(at)[p], x[2 * p], x[2 * p + 1]);
  } else {
#pragma unroll
    for (int e = 0; e < kPer; ++e) x[e] = to_float(at[e]);
  }
}

// The rotation's stages (a, b) -> (a + b, a - b) on register pairs (e, e + h·kStride) for
// h = 1, 2, .. < kCount: channel distances kStride·h (in registers) of the documented order.
template <int kCount, int kStride>
__device__ __forceinline__ void stages(float (&x)[kPer]) {
#pragma unroll
  for (int h = 1; h < kCount; h *= 2) {
#pragma unroll
    for (int e = 0; e < kPer; ++e) {
      if (((e / kStride) & h) == 0) {
        const float a = x[e], b = x[e + h * kStride];
        x[e] = a + b;
        x[e + h * kStride] = a - b;
      }
    }
  }
}

// A warp's rows in shared memory: row ρ, channel c at float index ρ·kDim + c, the 16-byte granule
// g = c / 4 of the row stored at g ^ ((g / 8) % 8) ^ (6 if ρ is odd). The low-channel layout (a
// lane's 16 channels, four granules) and the high one (n = 16 / lanes-per-row channels per H)
// each then touch every bank once per wavefront at d 64, 128 and 256.
template <int kDim>
__device__ __forceinline__ int smem_index(int row, int c) {
  const int g = c / 4;
  const int phys = g ^ ((g / 8) % 8) ^ ((row & 1) ? 6 : 0);
  return row * kDim + phys * 4 + c % 4;
}

// n consecutive floats (n = 1, 2, 4; 4n-byte aligned) between registers and shared memory.
template <int n>
__device__ __forceinline__ void put(float* at, const float* x) {
  if constexpr (n == 4) {
    *reinterpret_cast<float4*>(at) = make_float4(x[0], x[1], x[2], x[3]);
  } else if constexpr (n == 2) {
    *reinterpret_cast<float2*>(at) = make_float2(x[0], x[1]);
  } else {
    *at = x[0];
  }
}
template <int n>
__device__ __forceinline__ void get(const float* at, float* x) {
  if constexpr (n == 4) {
    const float4 v = *reinterpret_cast<const float4*>(at);
    x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
  } else if constexpr (n == 2) {
    const float2 v = *reinterpret_cast<const float2*>(at);
    x[0] = v.x, x[1] = v.y;
  } else {
    x[0] = *at;
  }
}

// Low layout: lane (ρ, q) holds channels 16q + i in register i. High layout: lane (ρ, q) holds
// channels 16H + n·q + l in register H·n + l (n = 16 / lanes per row: 4, 2, 1).
template <int kDim, bool kToHigh>
__device__ __forceinline__ void exchange(float* buf, int row, int q, float (&x)[kPer]) {
  constexpr int kLanes = kDim / 16;
  constexpr int n = kPer / kLanes;
  __syncwarp();
  if constexpr (kToHigh) {
#pragma unroll
    for (int k = 0; k < 4; ++k) put<4>(&buf[smem_index<kDim>(row, 16 * q + 4 * k)], &x[4 * k]);
  } else {
#pragma unroll
    for (int h = 0; h < kLanes; ++h) put<n>(&buf[smem_index<kDim>(row, 16 * h + n * q)], &x[h * n]);
  }
  __syncwarp();
  if constexpr (kToHigh) {
#pragma unroll
    for (int h = 0; h < kLanes; ++h) get<n>(&buf[smem_index<kDim>(row, 16 * h + n * q)], &x[h * n]);
  } else {
#pragma unroll
    for (int k = 0; k < 4; ++k) get<4>(&buf[smem_index<kDim>(row, 16 * q + 4 * k)], &x[4 * k]);
  }
}

template <class T, int kDim>
__global__ void __launch_bounds__(kThreads) quantize_kernel(const __grid_constant__ Jobs jobs,
                                                            uint64_t seed) {
  constexpr int kLanes = kDim / 16;          // lanes per row
  constexpr int kRowsPerWarp = 32 / kLanes;  // 8, 4, 2
  constexpr int kRowsPerStep = kWarps * kRowsPerWarp;
  __shared__ __align__(16) float smem[kWarps * kRowsPerWarp * kDim];  // 16 KB

  const int t = blockIdx.x >= jobs.first[2] ? 2 : blockIdx.x >= jobs.first[1] ? 1 : 0;
  const TensorJob& job = jobs.t[t];
  const int index = blockIdx.x - jobs.first[t];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int rho = lane / kLanes, q = lane % kLanes;
  float* buf = smem + warp * kRowsPerWarp * kDim;
  const int head = index % job.heads;
  const int block = (index / job.heads) % job.blocks;
  const int seq = index / (job.blocks * job.heads);
  const int row0 = block * job.rows;
  const int row_end = min(job.seqlen, row0 + job.rows);
  const T* in = static_cast<const T*>(job.in) + seq * job.in_stride[0] + head * job.in_stride[2] +
                16 * q;
  uint8_t* out = job.out + seq * job.out_stride[0] + head * job.out_stride[2] + 16 * q;
  const int first_row = row0 + warp * kRowsPerWarp + rho;
  const bool rotate = job.rotate;

  // s_j, one hash per thread (not 16: splitmix64 is ~20 instructions, a lane's share of a block
  // ~50 elements).
  __shared__ __align__(16) float signs[kDim];
  if (rotate && threadIdx.x < kDim) signs[threadIdx.x] = hadamard_sign(seed, threadIdx.x);
  __syncthreads();
  float sign[kPer];
  if (rotate) {
#pragma unroll
    for (int k = 0; k < 4; ++k) get<4>(&signs[16 * q + 4 * k], &sign[4 * k]);
  }
  const float norm = hadamard_norm(kDim);

  // Row r of the job, transformed: in the low layout without the rotation, else in the high one.
  auto transformed = [&](int r, float(&x)[kPer]) {
    load16<T>(in + r * job.in_stride[1], job.in_vec, r < row_end, x);
    if (rotate) {
#pragma unroll
      for (int e = 0; e < kPer; ++e) x[e] *= sign[e];
      stages<16, 1>(x);  // channel distances 1, 2, 4, 8
      exchange<kDim, true>(buf, rho, q, x);
      stages<kLanes, kPer / kLanes>(x);  // 16, 32, ...
#pragma unroll
      for (int e = 0; e < kPer; ++e) x[e] *= norm;
    }
  };

  // Pass 1: the block's amax (the layout does not matter for the max). Every lane of a warp
  // takes the same trip count (rows past the end load zeros): the exchanges need the warp.
  float amax = 0.f;
  for (int r = first_row; r - rho < row_end; r += kRowsPerStep) {
    float x[kPer];
    transformed(r, x);
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
    job.descale[(static_cast<int64_t>(seq) * job.heads + head) * job.blocks + block] =
        scale.descale;
  }

  // Pass 2: again, back to the low layout, rounded and stored 16 bytes a lane.
  for (int r = first_row; r - rho < row_end; r += kRowsPerStep) {
    float x[kPer];
    transformed(r, x);
    if (rotate) exchange<kDim, false>(buf, rho, q, x);
    if (r >= row_end) continue;
    uint32_t w[kPer / 4];
#pragma unroll
    for (int p = 0; p < kPer / 2; ++p) {
      // .x lands in the low byte: the pair's first channel at the lower address.
      const uint32_t two = __nv_cvt_float2_to_fp8x2(
          make_float2(__fmul_rn(x[2 * p], f), __fmul_rn(x[2 * p + 1], f)), __NV_SATFINITE,
          __NV_E4M3);
      if (p % 2 == 0) w[p / 2] = two;
      else w[p / 2] |= two << 16;
    }
    uint8_t* dst = out + r * job.out_stride[1];
    if (job.out_vec == 16) {
      *reinterpret_cast<uint4*>(dst) = make_uint4(w[0], w[1], w[2], w[3]);
    } else if (job.out_vec == 2) {
#pragma unroll
      for (int p = 0; p < kPer / 2; ++p) {
        reinterpret_cast<uint16_t*>(dst)[p] = static_cast<uint16_t>(w[p / 2] >> (16 * (p % 2)));
      }
    } else {
#pragma unroll
      for (int e = 0; e < kPer; ++e) dst[e] = static_cast<uint8_t>(w[e / 4] >> (8 * (e % 4)));
    }
  }
}

template <class T, int kDim>
Status launch(const Jobs& jobs, uint64_t seed, cudaStream_t stream) {
  quantize_kernel<T, kDim>
      <<<static_cast<unsigned>(jobs.first[3]), kThreads, 0, stream>>>(jobs, seed);
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

// Whether the pointer and the (sequence, row, head) strides are all multiples of `bytes`.
bool aligned(const void* data, const int64_t (&st)[4], int64_t element, int64_t bytes) {
  if (reinterpret_cast<uintptr_t>(data) % bytes != 0) return false;
  for (int i = 0; i < 3; ++i) {
    if (st[i] * element % bytes != 0) return false;
  }
  return true;
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
  j.in_vec = aligned(in.data, in.stride, 2, 16) ? 16 : aligned(in.data, in.stride, 2, 4) ? 4 : 2;
  const bool out16 = aligned(out.data, out.stride, 1, 16);
  j.out_vec = out16 ? 16 : aligned(out.data, out.stride, 1, 2) ? 2 : 1;
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
