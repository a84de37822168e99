// The floor under the decode bandwidth bar: what a kernel that only streams N bytes (16-byte loads,
// no arithmetic) costs when timed as flashattn-bench --decode times decode (events around each
// call, enqueued back to back, median; inputs rotated over > 256 MB), beside the 1 GiB
// device-to-device copy and an empty kernel. The sizes are the K+V bytes of batch 1 at 8k..64k
// keys (32/8 heads, hd 128). docs/perf/decode.md quotes it. With --graph, each configuration is
// timed as flashattn-bench --decode --graph times decode (issue 20's copy-rate bar is graph-timed):
// one CUDA graph of 8 rounds over the input regions, replayed, time per call = replay / calls.
// Build and run on the GPU machine:
//   nvcc -O3 -gencode=arch=compute_90,code=sm_90 -o /tmp/read_floor bench/read_floor_decode.cu
//   /tmp/read_floor [--graph]
#include <cstring>

#include "read_floor.cuh"

__global__ void empty_kernel() {}

int main(int argc, char** argv) {
  const bool graph = argc > 1 && std::strcmp(argv[1], "--graph") == 0;
  const size_t pool = size_t(1536) << 20;
  void *a, *b;
  unsigned* out;
  CK(cudaMalloc(&a, pool));
  CK(cudaMalloc(&b, size_t(1) << 30));
  CK(cudaMalloc(&out, 1 << 20));
  CK(cudaMemset(a, 1, pool));
  const float copy_us =
      median_us([&](int) { cudaMemcpyAsync(b, a, size_t(1) << 30, cudaMemcpyDeviceToDevice); }, 20);
  const double copy = 2.0 * (size_t(1) << 30) / (copy_us * 1e-6) / 1e9;
  printf("# copy 1 GiB: %.0f GB/s (read+write)\n", copy);
  printf("# timing: %s\n", graph ? "cuda_graph (8 rounds over the regions, per call)" : "events");
  printf("# empty kernel between events: %.2f us\n",
         median_us([&](int) { empty_kernel<<<264, 128>>>(); }));
  printf("%-10s %-18s %9s %8s %7s\n", "MB", "config", "us", "GB/s", "%copy");
  for (double mb : {33.554432, 67.108864, 134.217728, 268.435456}) {
    const size_t bytes = size_t(mb * 1e6);
    const int regions = int(std::min<size_t>(pool / bytes, 8));
    struct Cfg {
      const char* name;
      int blocks, threads, u;
    };
    for (Cfg c : {Cfg{"264x128 u8", 264, 128, 8}, Cfg{"264x256 u8", 264, 256, 8},
                  Cfg{"396x128 u8", 396, 128, 8}, Cfg{"528x128 u8", 528, 128, 8},
                  Cfg{"528x256 u4", 528, 256, 4}, Cfg{"1056x256 u4", 1056, 256, 4}}) {
      const size_t vpb = bytes / 16 / c.blocks;
      auto launch = [&](int i, cudaStream_t s) {
        const uint4* p =
            reinterpret_cast<const uint4*>(static_cast<char*>(a) + size_t(i % regions) * bytes);
        if (c.u == 8)
          read_chunks<8><<<c.blocks, c.threads, 0, s>>>(p, vpb, out, nullptr);
        else
          read_chunks<4><<<c.blocks, c.threads, 0, s>>>(p, vpb, out, nullptr);
      };
      const float us = graph ? graph_median_us(launch, regions)
                             : median_us([&](int i) { launch(i, cudaStream_t{}); });
      CK(cudaGetLastError());
      const double gbps = double(vpb) * 16 * c.blocks / (us * 1e-6) / 1e9;
      printf("%-10.1f %-18s %9.2f %8.0f %6.1f%%\n", mb, c.name, us, gbps, 100 * gbps / copy);
    }
  }
  return 0;
}
