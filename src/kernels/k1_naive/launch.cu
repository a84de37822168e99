// K1's host side: the score workspace and the three launches, then k1_forward's dispatch on the
// element type. The whole family is this one translation unit: two small GEMM kernels per dtype
// compile in seconds, and a single TU keeps the dtype-independent softmax kernel defined once.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <climits>
#include <cstdint>
#include <cstdio>
#include <string>

#include "kernels/k1_naive/entry.h"
#include "common/cuda_check.h"
#include "common/workspace.h"
#include "kernels/k1_naive/kernel.cuh"

namespace flashattn::k1 {
namespace {

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// The three launches on an already allocated score workspace `s` (null when seqlen_k == 0).
template <typename Element>
Status enqueue(const Problem& p, float* s, cudaStream_t stream) {
  const auto bh = static_cast<unsigned>(static_cast<int64_t>(p.batch) * p.heads_q);
  const auto q_tiles = static_cast<unsigned>(ceil_div(p.seqlen_q, kBlockM));
  if (p.seqlen_k > 0) {
    const dim3 grid(bh, q_tiles, static_cast<unsigned>(ceil_div(p.seqlen_k, kBlockN)));
    scores_kernel<Element><<<grid, kThreads, 0, stream>>>(p, s);
    FA_CUDA_LAUNCH_CHECK("k1 scores_kernel");
  }
  const int64_t rows = static_cast<int64_t>(bh) * p.seqlen_q;
  if (p.seqlen_k > 0 || p.lse != nullptr) {  // with seqlen_k == 0 it only writes LSE = -inf
    const auto blocks = static_cast<unsigned>(ceil_div(rows, kSoftmaxRowsPerBlock));
    softmax_kernel<<<blocks, kThreads, 0, stream>>>(s, p.lse, rows, p.seqlen_k);
    FA_CUDA_LAUNCH_CHECK("k1 softmax_kernel");
  }
  const dim3 grid(bh, q_tiles, static_cast<unsigned>(ceil_div(p.head_dim_v, kBlockN)));
  pv_kernel<Element><<<grid, kThreads, 0, stream>>>(p, s);
  FA_CUDA_LAUNCH_CHECK("k1 pv_kernel");
  return Status::success();
}

template <typename Element>
Status run_forward(const Problem& p) {
  const auto stream = static_cast<cudaStream_t>(p.stream);
  const int64_t bh = static_cast<int64_t>(p.batch) * p.heads_q;
  // Grid limits: batch * heads_q rides on grid.x, the tile counts on y and z (65535 each).
  if (bh > INT_MAX || ceil_div(p.seqlen_q, kBlockM) > 65535 ||
      ceil_div(p.seqlen_k, kBlockN) > 65535 ||
      ceil_div(bh * p.seqlen_q, kSoftmaxRowsPerBlock) > INT_MAX) {
    return {StatusCode::unsupported,
            "k1: batch * heads_q or a sequence length exceeds the K1 launch grid"};
  }
  if (p.head_dim % kBlockK != 0 || p.head_dim_v % kBlockK != 0) {
    return {StatusCode::unsupported, "k1: head_dim and head_dim_v must be multiples of 32"};
  }

  // S holds batch * heads_q * seqlen_q * seqlen_k floats.
  const double entries = static_cast<double>(bh) * p.seqlen_q * p.seqlen_k;
  void* s = nullptr;
  if (entries > 0) {
    const Status st = entries * sizeof(float) < 0x1p62
                          ? workspace_alloc(static_cast<size_t>(bh * p.seqlen_q) *
                                                static_cast<size_t>(p.seqlen_k) * sizeof(float),
                                            stream, &s)
                          : Status{StatusCode::cuda_error, "the size overflows size_t"};
    if (!st.ok()) {
      char need[96];
      std::snprintf(need, sizeof need, "k1: the score workspace needs %.2f GB (%.0f fp32 scores)",
                    entries * sizeof(float) / 1e9, entries);
      return {StatusCode::cuda_error, std::string(need) + ": " + st.message};
    }
  }
  const Status launched = enqueue<Element>(p, static_cast<float*>(s), stream);
  const Status freed = workspace_free(s, stream);  // also after a failed launch: no leak
  return launched.ok() ? freed : launched;
}

}  // namespace
}  // namespace flashattn::k1

namespace flashattn {

Status k1_forward(const Problem& problem) {
  if (problem.seqlen_q == 0 || problem.batch == 0 || problem.heads_q == 0) {
    return Status::success();
  }
  switch (problem.dtype) {
    case DType::bf16: return k1::run_forward<__nv_bfloat16>(problem);
    case DType::fp16: return k1::run_forward<__half>(problem);
    default: break;
  }
  return {StatusCode::unsupported, "k1: dtype must be bf16 or fp16"};
}

}  // namespace flashattn
