// A variable-length batch whose keys and values live in a paged cache (ForwardParams::
// block_table), shared by the CPU and GPU suites: host data, the block table, and the same batch
// with contiguous packed k and v, so that a test can run both and compare them bit for bit, and
// check each sequence against the fp64 reference.
//
// The cache is built the way a serving engine leaves it: blocks handed out in a shuffled order
// (never the identity), spare blocks no sequence uses, the rows after a sequence's last key in
// its last block, the spare blocks and the unused block_table columns all poisoned (NaN rows, ids
// out of range), so reading anything a sequence does not own shows up in its output.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "flashattn/flashattn.h"
#include "flashattn/reference.h"

namespace fa_paged {

namespace fa = flashattn;

struct PagedShape {
  fa::DType dtype = fa::DType::bf16;
  int hq = 4, hkv = 2, d = 64, dv = 64;
  bool causal = false;
  int wl = -1, wr = -1;
  int page_size = 16;
  std::vector<std::pair<int, int>> lens;  // (seqlen_q, seqlen_k) per sequence
  float q_sigma = 1.f;
  float softcap = 0.f;
};

// "bf16_h4x2_d128_causal_page16_n8"; built with appends only (GCC 12 warns falsely, -Wrestrict,
// on "literal" + std::string).
inline std::string shape_name(const PagedShape& s) {
  std::string n = fa::dtype_name(s.dtype);
  const auto num = [&n](const char* tag, int x) { n.append(tag).append(std::to_string(x)); };
  num("_h", s.hq);
  num("x", s.hkv);
  num("_d", s.d);
  if (s.dv != s.d) num("x", s.dv);
  if (s.causal) n.append("_causal");
  if (s.wl >= 0 || s.wr >= 0) {
    num("_win", s.wl);
    num("_", s.wr);
  }
  num("_page", s.page_size);
  num("_n", static_cast<int>(s.lens.size()));
  if (s.softcap > 0) num("_softcap", static_cast<int>(s.softcap));
  for (char& c : n)
    if (c == '-') c = 'm';
  return n;
}

inline constexpr uint16_t kNan16 = 0xFFFF;  // NaN in bf16 and fp16
inline constexpr int kSpareBlocks = 3;
inline constexpr int kSpareColumns = 2;

struct PagedData {
  PagedShape s;
  int batch = 0, max_q = 0, max_k = 0, total_q = 0, total_k = 0;
  int max_blocks = 0, num_blocks = 0;
  std::vector<int32_t> cu_q, cu_k, table;
  std::vector<uint16_t> q, k, v;           // packed: (total, heads, dim)
  std::vector<uint16_t> k_pages, v_pages;  // (num_blocks, page_size, hkv, dim)

  int64_t k_row() const { return int64_t(s.hkv) * s.d; }  // elements per token
  int64_t v_row() const { return int64_t(s.hkv) * s.dv; }
  int64_t q_row() const { return int64_t(s.hq) * s.d; }
  int64_t o_row() const { return int64_t(s.hq) * s.dv; }

  PagedData(const PagedShape& shape, uint64_t seed) : s(shape) {
    batch = static_cast<int>(s.lens.size());
    cu_q.assign(batch + 1, 0);
    cu_k.assign(batch + 1, 0);
    std::vector<int> blocks_of(batch);
    for (int b = 0; b < batch; ++b) {
      const auto [lq, lk] = s.lens[b];
      cu_q[b + 1] = cu_q[b] + lq;
      cu_k[b + 1] = cu_k[b] + lk;
      max_q = std::max(max_q, lq);
      max_k = std::max(max_k, lk);
      blocks_of[b] = (lk + s.page_size - 1) / s.page_size;
      max_blocks = std::max(max_blocks, blocks_of[b]);
      num_blocks += blocks_of[b];
    }
    total_q = cu_q[batch];
    total_k = cu_k[batch];
    num_blocks += kSpareBlocks;
    max_blocks += kSpareColumns;

    q.resize(std::max<int64_t>(total_q * q_row(), 8));
    k.resize(std::max<int64_t>(total_k * k_row(), 8));
    v.resize(std::max<int64_t>(total_k * v_row(), 8));
    fa::reference::fill_normal(q.data(), std::ssize(q), s.dtype, seed, s.q_sigma);
    fa::reference::fill_normal(k.data(), std::ssize(k), s.dtype, seed + 1);
    fa::reference::fill_normal(v.data(), std::ssize(v), s.dtype, seed + 2);

    // Blocks in a shuffled order; the unused table columns hold ids out of range.
    std::vector<int32_t> order(num_blocks);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937_64(seed + 3));
    table.assign(size_t(batch) * max_blocks, num_blocks + 7);
    int next = 0;
    for (int b = 0; b < batch; ++b)
      for (int i = 0; i < blocks_of[b]; ++i) table[size_t(b) * max_blocks + i] = order[next++];

    k_pages.assign(size_t(num_blocks) * s.page_size * k_row(), kNan16);
    v_pages.assign(size_t(num_blocks) * s.page_size * v_row(), kNan16);
    for (int b = 0; b < batch; ++b) {
      for (int j = 0; j < s.lens[b].second; ++j) {
        const int64_t block = table[size_t(b) * max_blocks + j / s.page_size];
        const int64_t slot = block * s.page_size + j % s.page_size;
        const int64_t token = cu_k[b] + j;
        std::copy_n(k.begin() + token * k_row(), k_row(), k_pages.begin() + slot * k_row());
        std::copy_n(v.begin() + token * v_row(), v_row(), v_pages.begin() + slot * v_row());
      }
    }
  }

  // The contiguous varlen call over host memory (q, k, v here; o and lse the caller's).
  fa::ForwardParams contiguous(void* o, float* lse) const {
    fa::ForwardParams p;
    p.dtype = s.dtype;
    p.batch = batch;
    p.seqlen_q = max_q;
    p.seqlen_k = max_k;
    p.heads_q = s.hq;
    p.heads_kv = s.hkv;
    p.head_dim = s.d;
    p.head_dim_v = s.dv;
    p.causal = s.causal;
    p.window_left = s.wl;
    p.window_right = s.wr;
    p.softcap = s.softcap;
    p.q.data = q.data();
    p.k.data = k.data();
    p.v.data = v.data();
    p.o.data = o;
    p.lse = lse;
    fa::set_contiguous_strides(p.q.stride, total_q, s.hq, s.d);
    fa::set_contiguous_strides(p.k.stride, total_k, s.hkv, s.d);
    fa::set_contiguous_strides(p.v.stride, total_k, s.hkv, s.dv);
    fa::set_contiguous_strides(p.o.stride, total_q, s.hq, s.dv);
    p.cu_seqlens_q = cu_q.data();
    p.cu_seqlens_k = cu_k.data();
    p.total_q = total_q;
    p.total_k = total_k;
    return p;
  }

  // The same call reading k and v from the pages through the block table (total_k left 0).
  fa::ForwardParams paged(void* o, float* lse) const {
    fa::ForwardParams p = contiguous(o, lse);
    p.k.data = k_pages.data();
    p.v.data = v_pages.data();
    fa::set_contiguous_strides(p.k.stride, s.page_size, s.hkv, s.d);
    fa::set_contiguous_strides(p.v.stride, s.page_size, s.hkv, s.dv);
    p.total_k = 0;
    p.block_table = table.data();
    p.max_blocks_per_seq = max_blocks;
    p.num_blocks = num_blocks;
    p.page_size = s.page_size;
    return p;
  }

  // Every sequence of a varlen output (host copies of o (total_q, hq, dv) and lse (hq, total_q))
  // against the fp64 reference with FlashAttention's rule, on a batch-1 view of the sequence.
  void check_against_reference(const std::vector<uint16_t>& out, const std::vector<float>& lse,
                               const std::string& what, uint64_t seed) const {
    for (int b = 0; b < batch; ++b) {
      const auto [lq, lk] = s.lens[b];
      if (lq == 0) continue;
      std::vector<float> seq_lse(size_t(s.hq) * lq);
      for (int h = 0; h < s.hq; ++h)
        for (int i = 0; i < lq; ++i)
          seq_lse[size_t(h) * lq + i] = lse[size_t(h) * total_q + cu_q[b] + i];
      fa::ForwardParams view = contiguous(nullptr, nullptr);
      view.batch = 1;
      view.seqlen_q = lq;
      view.seqlen_k = lk;
      view.cu_seqlens_q = view.cu_seqlens_k = nullptr;
      view.total_q = view.total_k = 0;
      fa::set_contiguous_strides(view.q.stride, lq, s.hq, s.d);
      fa::set_contiguous_strides(view.k.stride, lk, s.hkv, s.d);
      fa::set_contiguous_strides(view.v.stride, lk, s.hkv, s.dv);
      fa::set_contiguous_strides(view.o.stride, lq, s.hq, s.dv);
      view.q.data = q.data() + cu_q[b] * q_row();
      view.k.data = k.data() + cu_k[b] * k_row();
      view.v.data = v.data() + cu_k[b] * v_row();
      view.o.data = const_cast<uint16_t*>(out.data()) + cu_q[b] * o_row();
      view.lse = seq_lse.data();
      const double work = double(s.hq) * lq * lk * (s.d + s.dv);
      const auto rows = work > 3e8 ? fa::reference::sample_rows(view, 256, seed + b)
                                   : std::vector<fa::reference::RowId>{};
      const fa::reference::CheckResult r = fa::reference::check(view, rows);
      EXPECT_TRUE(r.ok) << what << " sequence " << b << " (" << lq << ", " << lk << ") seed "
                        << seed << ": " << r.detail << " (max_err " << r.max_err << ", pt "
                        << r.max_err_pt << ", atol " << r.atol << "; lse " << r.lse_max_err
                        << " vs " << r.lse_max_err_pt << ", not finite " << r.not_finite << ")";
    }
  }
};

// The lengths the suites draw from: odd lengths, a zero-length sequence (no keys and no
// queries), a sequence with queries but no keys, one token, causal rows that see no key
// (seqlen_q > seqlen_k), and sequences longer than a 256-key page.
inline std::vector<std::pair<int, int>> mixed_lengths() {
  return {{17, 33}, {0, 0}, {1, 1}, {113, 239}, {5, 0}, {239, 113}, {0, 7}, {64, 300}};
}

}  // namespace fa_paged
