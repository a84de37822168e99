// Entry points of the decode family: the rotary step (when asked), the append step, then dispatch
// on (dtype, head_dim) to the generated instantiations (cmake/instantiations.cmake) of
// kDecodeHeadDims. This file sees only the declarations of run_decode and blocks_per_sm (launch.cuh
// defines them).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <type_traits>

#include "common/cuda_check.h"
#include "common/head_dims.h"
#include "kernels/decode/append_kv.cuh"
#include "kernels/decode/entry.h"
#include "kernels/decode/rotary.cuh"

namespace flashattn::decoding {

template <typename Element, int kHeadDim, bool kKvE4m3>
Status run_decode(const DecodeProblem& p);  // launch.cuh
template <typename Element, int kHeadDim, bool kKvE4m3>
Status blocks_per_sm(int* blocks);  // launch.cuh

}  // namespace flashattn::decoding

namespace flashattn {
namespace {

// The record of decode_check_errors: one per device (each device holds its own copy of a module's
// __device__ variables), zero until a kernel meets a bad index.
__device__ DecodeErrorRecord g_decode_errors;

// fn(Element{}, HeadDimTag) for the problem's dtype and head dim.
template <typename Fn>
Status dispatch(DType dtype, int head_dim, Fn&& fn) {
  return flashattn::dispatch<kDecodeHeadDims>(
      "decode", dtype, head_dim, head_dim, [&](auto dtype_tag, auto dims) {
        using Element =
            std::conditional_t<decltype(dtype_tag)::value == DType::bf16, __nv_bfloat16, __half>;
        return fn(Element{}, dims);
      });
}

}  // namespace

Status decode_blocks_per_sm(DType dtype, int head_dim, bool kv_e4m3, int* blocks) {
  return dispatch(dtype, head_dim, [&](auto e, auto dims) {
    constexpr int kD = decltype(dims)::qk;
    return kv_e4m3 ? decoding::blocks_per_sm<decltype(e), kD, true>(blocks)
                   : decoding::blocks_per_sm<decltype(e), kD, false>(blocks);
  });
}

Status decode_error_record(DecodeErrorRecord** record) {
  static std::array<std::atomic<DecodeErrorRecord*>, 64> cached{};
  int device = 0;
  FA_CUDA_TRY(cudaGetDevice(&device));
  if (device < 64 && cached[device] != nullptr) {
    *record = cached[device];
    return Status::success();
  }
  void* address = nullptr;
  FA_CUDA_TRY(cudaGetSymbolAddress(&address, g_decode_errors));
  *record = static_cast<DecodeErrorRecord*>(address);
  if (device < 64) cached[device] = *record;
  return Status::success();
}

namespace {

// Rotated copies of q and k_new into the workspace, then a problem that reads them (dense).
Status rotate(const DecodeProblem& in, DecodeProblem& p) {
  const auto stream = static_cast<cudaStream_t>(in.stream);
  const int64_t rows = int64_t(in.batch) *
                       (int64_t(in.seqlen_q) * in.heads_q + int64_t(in.seqlen_new) * in.heads_kv);
  const int64_t blocks = std::min<int64_t>((rows * (in.head_dim / 2) + 255) / 256, 65535);
  if (in.dtype == DType::bf16)
    decoding::rotary_kernel<__nv_bfloat16><<<static_cast<unsigned>(blocks), 256, 0, stream>>>(in);
  else
    decoding::rotary_kernel<__half><<<static_cast<unsigned>(blocks), 256, 0, stream>>>(in);
  FA_CUDA_LAUNCH_CHECK("decode rotary_kernel");
  p = in;
  p.q = in.q_rotated;
  p.q_stride[0] = int64_t(in.seqlen_q) * in.heads_q * in.head_dim;
  p.q_stride[1] = int64_t(in.heads_q) * in.head_dim;
  p.q_stride[2] = in.head_dim;
  if (in.seqlen_new > 0) {
    p.k_new = in.k_new_rotated;
    p.k_new_stride[0] = int64_t(in.seqlen_new) * in.heads_kv * in.head_dim;
    p.k_new_stride[1] = int64_t(in.heads_kv) * in.head_dim;
    p.k_new_stride[2] = in.head_dim;
  }
  return Status::success();
}

}  // namespace

Status decode_run(const DecodeProblem& problem) {
  DecodeProblem rotated;
  if (problem.rotary_dim > 0) {
    if (Status s = rotate(problem, rotated); !s.ok()) return s;
  }
  const DecodeProblem& p = problem.rotary_dim > 0 ? rotated : problem;
  const auto stream = static_cast<cudaStream_t>(p.stream);
  if (p.seqlen_new > 0) {
    const int64_t chunks = 2 * int64_t(p.batch) * p.seqlen_new * p.heads_kv * (p.head_dim / 8);
    const int64_t blocks = std::min<int64_t>((chunks + 255) / 256, 65535);
    if (!p.kv_e4m3) {
      decoding::append_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(p);
    } else if (p.dtype == DType::bf16) {
      decoding::append_e4m3_kernel<__nv_bfloat16>
          <<<static_cast<unsigned>(blocks), 256, 0, stream>>>(p);
    } else {
      decoding::append_e4m3_kernel<__half><<<static_cast<unsigned>(blocks), 256, 0, stream>>>(p);
    }
    FA_CUDA_LAUNCH_CHECK("decode append_kernel");
  }
  return dispatch(p.dtype, p.head_dim, [&](auto e, auto dims) {
    constexpr int kD = decltype(dims)::qk;
    return p.kv_e4m3 ? decoding::run_decode<decltype(e), kD, true>(p)
                     : decoding::run_decode<decltype(e), kD, false>(p);
  });
}

}  // namespace flashattn
