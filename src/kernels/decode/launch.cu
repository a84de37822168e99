// Entry points of the decode family: the append step, then dispatch on (dtype, head_dim) to the
// instantiations in inst/.
#include <algorithm>
#include <string>
#include <type_traits>

#include "kernels/decode/entry.h"
#include "kernels/decode/append_kv.cuh"
#include "kernels/decode/launch.cuh"

namespace flashattn {
namespace {

template <typename Element, typename Fn>
Status by_head_dim(int head_dim, Fn&& fn) {
  switch (head_dim) {
    case 64: return fn(std::integral_constant<int, 64>{}, Element{});
    case 128: return fn(std::integral_constant<int, 128>{}, Element{});
    case 256: return fn(std::integral_constant<int, 256>{}, Element{});
    default: break;
  }
  return {StatusCode::unsupported,
          "decode: no instantiation for head_dim " + std::to_string(head_dim)};
}

template <typename Fn>
Status dispatch(DType dtype, int head_dim, Fn&& fn) {
  switch (dtype) {
    case DType::bf16: return by_head_dim<__nv_bfloat16>(head_dim, fn);
    case DType::fp16: return by_head_dim<__half>(head_dim, fn);
  }
  return {StatusCode::unsupported, "decode: dtype must be bf16 or fp16"};
}

}  // namespace

Status decode_blocks_per_sm(DType dtype, int head_dim, int* blocks) {
  return dispatch(dtype, head_dim, [&](auto d, auto e) {
    return decoding::blocks_per_sm<decltype(e), decltype(d)::value>(blocks);
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
  return dispatch(p.dtype, p.head_dim, [&](auto d, auto e) {
    return decoding::run_decode<decltype(e), decltype(d)::value>(p);
  });
}

}  // namespace flashattn
