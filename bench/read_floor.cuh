// Shared by the plain-read floor programs (read_floor_decode.cu, read_floor_cluster.cu): the read
// kernel and the timing loops that mirror flashattn-bench --decode (events around each call,
// enqueued back to back, median; or, as --graph, replays of one CUDA graph).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

// Exits with the CUDA error on failure.
#define CK(x)                                                                     \
  do {                                                                            \
    cudaError_t err_ = (x);                                                       \
    if (err_ != cudaSuccess) {                                                    \
      printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(err_)); \
      exit(1);                                                                    \
    }                                                                             \
  } while (0)

// Diagnosis hooks at the read kernel's start and end (decode_timeline.cu stamps them); empty here.
#ifndef READ_FLOOR_BEGIN
#define READ_FLOOR_BEGIN()
#define READ_FLOOR_END(dep)
#endif

// Block b reads its own contiguous chunk, U 16-byte loads in flight per thread; the XOR keeps the
// loads. With kCluster the blocks of a cluster then wait for each other (the merge point of a
// cluster decode); with `smid` each block records the SM it ran on.
template <int U, bool kCluster = false>
__global__ void read_chunks(const uint4* __restrict__ p, size_t vecs_per_block, unsigned* out,
                            unsigned* smid) {
  READ_FLOOR_BEGIN();
  const uint4* base = p + blockIdx.x * vecs_per_block;
  unsigned acc = 0;
  for (size_t i = threadIdx.x; i < vecs_per_block; i += size_t(blockDim.x) * U) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const size_t k = i + size_t(u) * blockDim.x;
      v[u] = k < vecs_per_block ? __ldcs(base + k) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  if constexpr (kCluster) {
    asm volatile(
        "barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;\n" ::
            : "memory");
  }
  if (threadIdx.x == 0 && smid != nullptr) {
    unsigned s;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
    smid[blockIdx.x] = s;
  }
  if (acc == 0x12345678u) out[blockIdx.x] = acc;
  READ_FLOOR_END(acc);
}

// Median over `iters` calls of launch(i) (i picks the input set), in microseconds.
template <class F>
float median_us(F&& launch, int iters = 40) {
  std::vector<cudaEvent_t> ev(2 * iters);
  for (auto& e : ev) cudaEventCreate(&e);
  for (int i = 0; i < 5; ++i) launch(i);
  cudaDeviceSynchronize();
  for (int i = 0; i < iters; ++i) {
    cudaEventRecord(ev[2 * i]);
    launch(i);
    cudaEventRecord(ev[2 * i + 1]);
  }
  cudaDeviceSynchronize();
  std::vector<float> t(iters);
  for (int i = 0; i < iters; ++i) cudaEventElapsedTime(&t[i], ev[2 * i], ev[2 * i + 1]);
  for (auto& e : ev) cudaEventDestroy(e);
  std::sort(t.begin(), t.end());
  return 1000.f * t[iters / 2];
}

// Median over `iters` replays of one CUDA graph holding 8 rounds of launch(i, stream) for i in
// [0, sets), per call, in microseconds (flashattn-bench --decode --graph's timing).
template <class F>
float graph_median_us(F&& launch, int sets, int iters = 20) {
  constexpr int kRounds = 8;
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (int i = 0; i < sets; ++i) launch(i, s);
  CK(cudaStreamSynchronize(s));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int r = 0; r < kRounds; ++r)
    for (int i = 0; i < sets; ++i) launch(i, s);
  CK(cudaStreamEndCapture(s, &graph));
  CK(cudaGraphInstantiate(&exec, graph, 0));
  CK(cudaGraphDestroy(graph));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int w = 0; w < 3; ++w) CK(cudaGraphLaunch(exec, s));
  std::vector<float> t(iters);
  for (int it = 0; it < iters; ++it) {
    CK(cudaEventRecord(e0, s));
    CK(cudaGraphLaunch(exec, s));
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&t[it], e0, e1));
  }
  std::sort(t.begin(), t.end());
  CK(cudaGraphExecDestroy(exec));
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  CK(cudaStreamDestroy(s));
  return 1000.f * t[iters / 2] / (kRounds * sets);
}
