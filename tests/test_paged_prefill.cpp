// Paged KV in prefill on the cpu family (always runs): a variable-length batch read through a
// shuffled block table (ForwardParams::block_table) equals, bit for bit, the same batch with
// contiguous k and v, writes every output element, and each sequence passes FlashAttention's
// rule against the fp64 reference. Page sizes 1, 16, 256 and an odd one (7); causal, windows,
// GQA and MQA, head_dim_v != head_dim, softcap, zero-length sequences and rows that see no key.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "attention_case.h"
#include "paged_case.h"

namespace {

namespace fa = flashattn;
using fa_paged::PagedData;
using fa_paged::PagedShape;

std::vector<PagedShape> cpu_cases() {
  const auto mixed = fa_paged::mixed_lengths();
  std::vector<PagedShape> c;
  c.push_back({fa::DType::bf16, 4, 2, 64, 64, true, -1, -1, 1, mixed});
  c.push_back({fa::DType::fp16, 6, 1, 128, 128, false, -1, -1, 16, mixed});
  c.push_back({fa::DType::bf16, 4, 4, 64, 64, false, 37, 5, 256, mixed});
  c.push_back({fa::DType::bf16, 6, 2, 192, 128, true, -1, -1, 7, mixed, 1.f, 30.f});
  c.push_back({fa::DType::fp16, 2, 2, 64, 64, true, -1, -1, 7, {{300, 301}, {1, 700}}, 6.f});
  return c;
}

class CpuPaged : public ::testing::TestWithParam<size_t> {};

TEST_P(CpuPaged, EqualsContiguousAndMatchesReference) {
  const PagedShape shape = cpu_cases()[GetParam()];
  const uint64_t seed = fa_test::test_seed();
  const PagedData data(shape, seed);
  const size_t n_out = std::max<size_t>(size_t(data.total_q) * data.o_row(), 1);
  const size_t n_lse = std::max<size_t>(size_t(shape.hq) * data.total_q, 1);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<uint16_t> out_c(n_out, fa_paged::kNan16), out_p(n_out, fa_paged::kNan16);
  std::vector<float> lse_c(n_lse, nan), lse_p(n_lse, nan);

  const fa::ForwardParams contiguous = data.contiguous(out_c.data(), lse_c.data());
  const fa::ForwardParams paged = data.paged(out_p.data(), lse_p.data());
  const fa::Status sc = fa::forward(contiguous, fa::Kernel::cpu);
  ASSERT_TRUE(sc.ok()) << sc.message;
  EXPECT_EQ(fa::select_kernel(paged), fa::Kernel::cpu);
  const fa::Status sp = fa::forward(paged);
  ASSERT_TRUE(sp.ok()) << sp.message;

  for (size_t i = 0; i < size_t(data.total_q) * data.o_row(); ++i)
    ASSERT_NE(out_p[i], fa_paged::kNan16) << "output element " << i << " left unwritten";
  EXPECT_EQ(std::memcmp(out_c.data(), out_p.data(), n_out * 2), 0)
      << "paged output differs from the contiguous one";
  EXPECT_EQ(std::memcmp(lse_c.data(), lse_p.data(), n_lse * 4), 0)
      << "paged LSE differs from the contiguous one";
  data.check_against_reference(out_p, lse_p, fa_paged::shape_name(shape), seed);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CpuPaged, ::testing::Range<size_t>(0, cpu_cases().size()),
                         [](const auto& info) {
                           return fa_paged::shape_name(cpu_cases()[info.param]);
                         });

// The block table's row stride: rows padded beyond max_blocks_per_seq are read at the stride.
TEST(CpuPaged, BlockTableRowStride) {
  PagedShape shape{fa::DType::bf16, 2, 1, 64, 64, true, -1, -1, 5, {{9, 12}, {4, 23}, {3, 0}}};
  const PagedData data(shape, fa_test::test_seed());
  std::vector<int32_t> padded(size_t(data.batch) * (data.max_blocks + 3), -5);
  for (int b = 0; b < data.batch; ++b)
    std::copy_n(data.table.begin() + size_t(b) * data.max_blocks, data.max_blocks,
                padded.begin() + size_t(b) * (data.max_blocks + 3));
  std::vector<uint16_t> out_c(size_t(data.total_q) * data.o_row()), out_p(out_c.size());
  std::vector<float> lse(size_t(shape.hq) * data.total_q);
  ASSERT_TRUE(fa::forward(data.contiguous(out_c.data(), lse.data()), fa::Kernel::cpu).ok());
  fa::ForwardParams p = data.paged(out_p.data(), lse.data());
  p.block_table = padded.data();
  p.block_table_stride = data.max_blocks + 3;
  const fa::Status s = fa::forward(p, fa::Kernel::cpu);
  ASSERT_TRUE(s.ok()) << s.message;
  EXPECT_EQ(out_c, out_p);
}

// With a block table, total_k is not read: any value gives the same result.
TEST(CpuPaged, TotalKIsNotUsed) {
  PagedShape shape{fa::DType::fp16, 2, 2, 64, 64, false, -1, -1, 3, {{5, 8}, {6, 2}}};
  const PagedData data(shape, fa_test::test_seed());
  std::vector<uint16_t> a(size_t(data.total_q) * data.o_row()), b(a.size());
  std::vector<float> lse(size_t(shape.hq) * data.total_q);
  fa::ForwardParams p = data.paged(a.data(), lse.data());
  ASSERT_TRUE(fa::forward(p, fa::Kernel::cpu).ok());
  p.o.data = b.data();
  p.total_k = 123456;
  ASSERT_TRUE(fa::forward(p, fa::Kernel::cpu).ok());
  EXPECT_EQ(a, b);
}

}  // namespace
