// Would a cluster-merged decode (the splits of one KV head in one thread-block cluster, merged
// through distributed shared memory, no combine kernel) stream as fast as the split grid does now?
// This times a kernel that only reads N bytes, as flashattn-bench --decode times decode (events
// around each call, enqueued back to back, median of 40; inputs rotated over 1.5 GB), in the grid
// shapes such a decode would take: 256 blocks x 128 threads at two per SM (today's split grid),
// 128 blocks x 256 threads at one per SM, each with and without clusters of 8 or 16 that end in a
// cluster barrier. It also prints cudaOccupancyMaxActiveClusters and how many SMs the blocks land
// on. docs/perf/decode.md quotes it. Build and run on the GPU machine:
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o /tmp/rfc
//   bench/read_floor_cluster.cu /tmp/rfc
#include <set>

#include "read_floor.cuh"

struct Cfg {
  int blocks, threads, smem_kb, cluster;
};

// The launch of one grid shape; `attr` holds the cluster dimension (used when cluster > 1).
cudaLaunchConfig_t launch_config(const Cfg& c, cudaLaunchAttribute* attr) {
  cudaLaunchConfig_t lc = {};
  lc.gridDim = dim3(c.blocks);
  lc.blockDim = dim3(c.threads);
  lc.dynamicSmemBytes = c.smem_kb * 1024;
  attr->id = cudaLaunchAttributeClusterDimension;
  attr->val.clusterDim.x = c.cluster;
  attr->val.clusterDim.y = attr->val.clusterDim.z = 1;
  lc.attrs = attr;
  lc.numAttrs = c.cluster > 1 ? 1 : 0;
  return lc;
}

int main() {
  const size_t pool = size_t(1536) << 20;
  void *a, *b;
  unsigned *out, *smid;
  CK(cudaMalloc(&a, pool));
  CK(cudaMalloc(&b, size_t(1) << 30));
  CK(cudaMalloc(&out, 1 << 20));
  CK(cudaMalloc(&smid, 1 << 20));
  CK(cudaMemset(a, 1, pool));
  const float copy_us =
      median_us([&](int) { cudaMemcpyAsync(b, a, size_t(1) << 30, cudaMemcpyDeviceToDevice); }, 20);
  const double copy = 2.0 * (size_t(1) << 30) / (copy_us * 1e-6) / 1e9;
  printf("# copy 1 GiB: %.0f GB/s (read+write)\n", copy);
  CK(cudaFuncSetAttribute(read_chunks<8, true>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  for (auto k : {read_chunks<8, true>, read_chunks<8, false>})
    CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));

  const Cfg cfgs[] = {{256, 128, 100, 1}, {256, 128, 100, 8},  {256, 128, 100, 16},
                      {128, 256, 196, 1}, {128, 256, 196, 8},  {128, 256, 196, 16},
                      {128, 128, 100, 1}, {128, 128, 100, 16}, {132, 256, 196, 1}};
  for (const Cfg& c : cfgs) {
    if (c.cluster > 1) {
      cudaLaunchAttribute at[1];
      const cudaLaunchConfig_t lc = launch_config(c, at);
      int n = -1;
      cudaError_t e = cudaOccupancyMaxActiveClusters(&n, read_chunks<8, true>, &lc);
      printf("# max active clusters: cluster %d, %d threads, %d KB smem: %d (%s)\n", c.cluster,
             c.threads, c.smem_kb, n, cudaGetErrorString(e));
    }
  }
  printf("%-8s %-24s %9s %8s %7s %s\n", "MB", "grid", "us", "GB/s", "%copy", "SMs used");
  for (double mb : {33.554432, 67.108864, 134.217728}) {
    const size_t bytes = size_t(mb * 1e6);
    const int regions = int(std::min<size_t>(pool / bytes, 8));
    for (const Cfg& c : cfgs) {
      const size_t vpb = bytes / 16 / c.blocks;
      cudaLaunchAttribute at[1];
      const cudaLaunchConfig_t lc = launch_config(c, at);
      auto launch = [&](int i, unsigned* sm) {
        const uint4* p =
            reinterpret_cast<const uint4*>(static_cast<char*>(a) + size_t(i % regions) * bytes);
        if (c.cluster > 1) return cudaLaunchKernelEx(&lc, read_chunks<8, true>, p, vpb, out, sm);
        return cudaLaunchKernelEx(&lc, read_chunks<8, false>, p, vpb, out, sm);
      };
      CK(launch(0, smid));
      CK(cudaDeviceSynchronize());
      std::vector<unsigned> ids(c.blocks);
      CK(cudaMemcpy(ids.data(), smid, c.blocks * 4, cudaMemcpyDeviceToHost));
      const std::set<unsigned> used(ids.begin(), ids.end());
      const float us = median_us([&](int i) { launch(i, nullptr); });
      CK(cudaGetLastError());
      const double gbps = double(vpb) * 16 * c.blocks / (us * 1e-6) / 1e9;
      char name[64];
      snprintf(name, sizeof name, "%dx%d %dKB cl%d", c.blocks, c.threads, c.smem_kb, c.cluster);
      printf("%-8.1f %-24s %9.2f %8.0f %6.1f%% %zu\n", mb, name, us, gbps, 100 * gbps / copy,
             used.size());
    }
  }
  return 0;
}
