// Entry points of the decode family: the append step, then dispatch on (dtype, head_dim) to the
// generated instantiations (cmake/instantiations.cmake) of kDecodeHeadDims. This file sees only
// the declarations of run_decode and blocks_per_sm (launch.cuh defines them).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "common/cuda_check.h"
#include "common/head_dims.h"
#include "kernels/decode/append_kv.cuh"
#include "kernels/decode/entry.h"

namespace flashattn::decoding {

template <typename Element, int kHeadDim>
Status run_decode(const DecodeProblem& p);  // launch.cuh
template <typename Element, int kHeadDim>
Status blocks_per_sm(int* blocks);  // launch.cuh

}  // namespace flashattn::decoding

namespace flashattn {
namespace {

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

Status decode_blocks_per_sm(DType dtype, int head_dim, int* blocks) {
  return dispatch(dtype, head_dim, [&](auto e, auto dims) {
    return decoding::blocks_per_sm<decltype(e), decltype(dims)::qk>(blocks);
  });
}

Status decode_run(const DecodeProblem& p) {
  const auto stream = static_cast<cudaStream_t>(p.stream);
  if (p.seqlen_new > 0) {
    const int64_t chunks = 2 * int64_t(p.batch) * p.seqlen_new * p.heads_kv * (p.head_dim / 8);
    const int64_t blocks = std::min<int64_t>((chunks + 255) / 256, 65535);
    decoding::append_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(p);
    FA_CUDA_LAUNCH_CHECK("decode append_kernel");
  }
  return dispatch(p.dtype, p.head_dim, [&](auto e, auto dims) {
    return decoding::run_decode<decltype(e), decltype(dims)::qk>(p);
  });
}

}  // namespace flashattn
