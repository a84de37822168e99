// GPU paged KV in prefill (ctest label `gpu`): flash_attn_varlen_func's block_table
// (ForwardParams::block_table) on k6 (the Hopper family `auto` picks on sm_90) and fa2. A
// variable-length batch read through a shuffled block table over page sizes 1, 16, 256 and 7
// must equal, bit for bit, the same batch with contiguous k and v on the same family (the gather
// copies keys and values exactly and the variable-length forward then runs unchanged), write
// every output element (outputs poisoned with NaN first), never read a row or block no sequence
// owns (those hold NaN), and pass FlashAttention's rule against the fp64 reference per sequence.
// Without a CUDA device every test skips.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "flashattn/flashattn.h"
#include "gpu_test_util.h"
#include "paged_case.h"

namespace fa = flashattn;

namespace {

using flashattn::testing::forward_and_sync;

using fa_paged::PagedData;
using fa_paged::PagedShape;
using flashattn::testing::DeviceBuffer;
using flashattn::testing::have_gpu;
using flashattn::testing::run_seed;

struct GpuPagedCase {
  fa::Kernel kernel;
  PagedShape shape;
};

std::string case_name(const GpuPagedCase& c) {
  return std::string(fa::kernel_name(c.kernel)) + "_" + fa_paged::shape_name(c.shape);
}

const std::vector<GpuPagedCase>& all_cases() {
  static const std::vector<GpuPagedCase> cases = [] {
    const auto mixed = fa_paged::mixed_lengths();
    const std::vector<std::pair<int, int>> long_ones = {
        {1500, 1300}, {0, 9}, {2048, 2100}, {1, 1}, {333, 4097}};
    std::vector<GpuPagedCase> all;
    for (fa::Kernel k : {fa::Kernel::k6, fa::Kernel::fa2}) {
      for (int page : {1, 16, 256, 7}) {
        all.push_back({k, {fa::DType::bf16, 4, 2, 128, 128, true, -1, -1, page, mixed}});
        all.push_back({k, {fa::DType::fp16, 6, 1, 64, 64, false, -1, -1, page, mixed, 6.f}});
      }
      all.push_back({k, {fa::DType::bf16, 8, 2, 128, 128, true, -1, -1, 16, long_ones}});
      all.push_back({k, {fa::DType::fp16, 6, 2, 192, 128, true, 64, -1, 7, mixed}});
      all.push_back({k, {fa::DType::bf16, 2, 2, 256, 256, false, 37, 5, 256, mixed}});
      all.push_back({k, {fa::DType::bf16, 4, 4, 96, 96, false, -1, -1, 1, long_ones}});
      all.push_back({k, {fa::DType::bf16, 4, 2, 128, 128, true, -1, -1, 7, mixed, 6.f, 30.f}});
    }
    return all;
  }();
  return cases;
}

// Device copies of one PagedData and the two calls over them.
struct DeviceCase {
  DeviceBuffer q, k, v, k_pages, v_pages, cu_q, cu_k, table, out_c, out_p, lse_c, lse_p;
  size_t n_out, n_lse;

  explicit DeviceCase(const PagedData& d)
      : q(d.q.size() * 2),
        k(d.k.size() * 2),
        v(d.v.size() * 2),
        k_pages(d.k_pages.size() * 2),
        v_pages(d.v_pages.size() * 2),
        cu_q(d.cu_q.size() * 4),
        cu_k(d.cu_k.size() * 4),
        table(d.table.size() * 4),
        out_c(bytes_out(d)),
        out_p(bytes_out(d)),
        lse_c(bytes_lse(d)),
        lse_p(bytes_lse(d)),
        n_out(size_t(d.total_q) * d.o_row()),
        n_lse(size_t(d.s.hq) * d.total_q) {}
  static size_t bytes_out(const PagedData& d) { return (size_t(d.total_q) + 1) * d.o_row() * 2; }
  static size_t bytes_lse(const PagedData& d) { return (size_t(d.s.hq) * d.total_q + 1) * 4; }

  bool ok() const {
    for (const DeviceBuffer* b :
         {&q, &k, &v, &k_pages, &v_pages, &cu_q, &cu_k, &table, &out_c, &out_p, &lse_c, &lse_p})
      if (b->ptr == nullptr) return false;
    return true;
  }

  void upload(const PagedData& d) {
    const std::pair<DeviceBuffer*, std::pair<const void*, size_t>> copies[] = {
        {&q, {d.q.data(), d.q.size() * 2}},
        {&k, {d.k.data(), d.k.size() * 2}},
        {&v, {d.v.data(), d.v.size() * 2}},
        {&k_pages, {d.k_pages.data(), d.k_pages.size() * 2}},
        {&v_pages, {d.v_pages.data(), d.v_pages.size() * 2}},
        {&cu_q, {d.cu_q.data(), d.cu_q.size() * 4}},
        {&cu_k, {d.cu_k.data(), d.cu_k.size() * 4}},
        {&table, {d.table.data(), d.table.size() * 4}}};
    for (const auto& [dst, src] : copies)
      ASSERT_EQ(cudaMemcpy(dst->ptr, src.first, src.second, cudaMemcpyHostToDevice), cudaSuccess);
    poison();
  }
  void poison() {
    for (const DeviceBuffer* b : {&out_c, &out_p})
      ASSERT_EQ(cudaMemset(b->ptr, 0xFF, (n_out + 1) * 2), cudaSuccess);
    for (const DeviceBuffer* b : {&lse_c, &lse_p})
      ASSERT_EQ(cudaMemset(b->ptr, 0xFF, (n_lse + 1) * 4), cudaSuccess);
  }

  // The host call of `d`, pointed at these device buffers.
  fa::ForwardParams device_params(const PagedData& d, bool paged) const {
    fa::ForwardParams p = paged ? d.paged(out_p.ptr, static_cast<float*>(lse_p.ptr))
                                : d.contiguous(out_c.ptr, static_cast<float*>(lse_c.ptr));
    p.q.data = q.ptr;
    p.k.data = paged ? k_pages.ptr : k.ptr;
    p.v.data = paged ? v_pages.ptr : v.ptr;
    p.cu_seqlens_q = static_cast<const int32_t*>(cu_q.ptr);
    p.cu_seqlens_k = static_cast<const int32_t*>(cu_k.ptr);
    if (paged) p.block_table = static_cast<const int32_t*>(table.ptr);
    return p;
  }
};

template <class T>
std::vector<T> download(const DeviceBuffer& b, size_t n) {
  std::vector<T> h(n);
  EXPECT_EQ(cudaMemcpy(h.data(), b.ptr, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

class GpuPaged : public ::testing::TestWithParam<size_t> {};

TEST_P(GpuPaged, EqualsContiguousAndMatchesReference) {
  const GpuPagedCase& c = all_cases()[GetParam()];
  if (!flashattn::testing::kernel_runs_here(c.kernel)) {
    GTEST_SKIP() << "no device for " << fa::kernel_name(c.kernel);
  }
  const uint64_t seed = run_seed() + GetParam() * 7919;
  const PagedData data(c.shape, seed);
  DeviceCase dev(data);
  ASSERT_TRUE(dev.ok());
  dev.upload(data);
  ASSERT_TRUE(forward_and_sync(dev.device_params(data, false), c.kernel)) << case_name(c);
  ASSERT_TRUE(forward_and_sync(dev.device_params(data, true), c.kernel)) << case_name(c);

  const auto out_c = download<uint16_t>(dev.out_c, dev.n_out + 1);
  const auto out_p = download<uint16_t>(dev.out_p, dev.n_out + 1);
  const auto lse_c = download<float>(dev.lse_c, dev.n_lse);
  const auto lse_p = download<float>(dev.lse_p, dev.n_lse);
  EXPECT_EQ(out_p[dev.n_out], fa_paged::kNan16) << case_name(c) << ": wrote past the output";
  int64_t unwritten = 0;
  for (size_t i = 0; i < dev.n_out; ++i) unwritten += out_p[i] == fa_paged::kNan16;
  EXPECT_EQ(unwritten, 0) << case_name(c) << ": output elements left poisoned";
  EXPECT_EQ(std::memcmp(out_c.data(), out_p.data(), dev.n_out * 2), 0)
      << case_name(c) << ": paged output differs from the contiguous one";
  EXPECT_EQ(std::memcmp(lse_c.data(), lse_p.data(), dev.n_lse * 4), 0)
      << case_name(c) << ": paged LSE differs from the contiguous one";
  data.check_against_reference(out_p, lse_p, case_name(c), seed);
}

INSTANTIATE_TEST_SUITE_P(Batches, GpuPaged, ::testing::Range<size_t>(0, all_cases().size()),
                         [](const auto& info) { return case_name(all_cases()[info.param]); });

// `auto` takes paged input on the production family; repeated runs are bitwise identical; the
// call needs no host synchronisation, so it can be captured in a CUDA graph and replayed.
TEST(GpuPagedRuns, AutoRepeatsBitwiseAndReplaysInAGraph) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const auto lens = fa_paged::mixed_lengths();
  const PagedShape shape{fa::DType::bf16, 8, 2, 128, 128, true, -1, -1, 16, lens};
  const PagedData data(shape, run_seed() + 17);
  DeviceCase dev(data);
  ASSERT_TRUE(dev.ok());
  dev.upload(data);
  const fa::ForwardParams p = dev.device_params(data, true);
  EXPECT_EQ(fa::select_kernel(p), flashattn::testing::expected_auto_kernel());
  ASSERT_TRUE(forward_and_sync(p, fa::Kernel::automatic));
  const auto first = download<uint16_t>(dev.out_p, dev.n_out);
  for (int i = 0; i < 3; ++i) {
    dev.poison();
    ASSERT_TRUE(forward_and_sync(p, fa::Kernel::automatic));
    EXPECT_EQ(download<uint16_t>(dev.out_p, dev.n_out), first) << "run " << i;
  }

  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  fa::ForwardParams g = p;
  g.stream = stream;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  const fa::Status captured = fa::forward(g, fa::Kernel::automatic);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_TRUE(captured.ok()) << captured.message;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int i = 0; i < 2; ++i) {
    dev.poison();
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    EXPECT_EQ(download<uint16_t>(dev.out_p, dev.n_out), first) << "graph replay " << i;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

// The block table must live where the family runs; a family without variable length refuses
// paged input. Nothing is written by a refused call.
TEST(GpuPagedRuns, BlockTableMustBeDeviceMemory) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const PagedShape shape{fa::DType::fp16, 2, 2, 64, 64, false, -1, -1, 16, {{9, 20}, {3, 40}}};
  const PagedData data(shape, run_seed() + 29);
  DeviceCase dev(data);
  ASSERT_TRUE(dev.ok());
  dev.upload(data);
  fa::ForwardParams p = dev.device_params(data, true);
  p.block_table = data.table.data();  // host memory
  const fa::Kernel k = flashattn::testing::expected_auto_kernel();
  fa::Status s = fa::forward(p, k);
  EXPECT_EQ(s.code, fa::StatusCode::invalid_argument);
  EXPECT_NE(s.message.find("block_table: kernel " + std::string(fa::kernel_name(k)) +
                           " needs device memory"),
            std::string::npos)
      << s.message;
  if (fa::kernel_is_built(fa::Kernel::k2)) {
    s = fa::forward(dev.device_params(data, true), fa::Kernel::k2);
    EXPECT_EQ(s.code, fa::StatusCode::unsupported) << s.message;
  }
  flashattn::testing::expect_all_poisoned(dev.out_p.ptr, dev.n_out);
}

}  // namespace
