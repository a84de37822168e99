// The validated, normalised form of DecodeParams that the decode kernels receive (by value, as a
// kernel argument). The family's entry points are in src/kernels/decode/entry.h.
// Built only by make_decode_problem() after can_implement() passed.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/math_constants.h"
#include "flashattn/flashattn.h"

namespace flashattn {

// Query rows one thread block computes: one m16 tensor-core tile. The query heads that share a KV
// head, times seqlen_q, are packed into rows (row = query index · group + head in group), so one
// read of K/V serves them all; more rows than this take several row chunks.
inline constexpr int kDecodeRowsPerBlock = 16;
// Keys per tile: the unit in which splits divide a sequence.
inline constexpr int kDecodeKeysPerTile = 16;
inline constexpr int kDecodeMaxSplits = 128;

// An index a decode kernel found out of range with check_indices off (decode.h,
// decode_check_errors): the kernels then read zeros in its place and record it here. One record
// per device, in device memory the library owns, with one entry per kind: the first kernel to
// claim an entry (seen 0 -> 1) describes its error, later ones of that kind are not kept. The
// host reports the kinds in this order, the root cause first: a bad length also makes the kernel
// read the page-table entries past the sequence's true end, which then look bad too.
enum DecodeErrorKind : int32_t {
  kDecodeErrorSeqlen = 0,    // cache_seqlens[batch] + seqlen_new outside [0, limit = capacity]
  kDecodeErrorCacheRow = 1,  // cache_batch_idx[batch] outside [0, limit = cache rows)
  kDecodeErrorPage = 2,      // page_table[batch][index] outside [0, limit = num_pages)
  kDecodeErrorKinds = 3,
};
struct DecodeErrorEntry {
  int32_t seen = 0;
  int32_t batch = 0;
  int32_t index = 0;       // page_table: the column of the page; else 0
  int32_t value = 0;       // the entry read
  int32_t limit = 0;       // the bound it broke
  int32_t seqlen_new = 0;  // the call's seqlen_new (kDecodeErrorSeqlen)
};
struct DecodeErrorRecord {
  DecodeErrorEntry by_kind[kDecodeErrorKinds];
};

struct DecodeProblem {
  DType dtype = DType::bf16;
  int batch = 0, seqlen_q = 0, heads_q = 0, heads_kv = 0, head_dim = 0;
  int group = 1;       // heads_q / heads_kv
  int rows = 0;        // group * seqlen_q
  int row_chunks = 0;  // ceil(rows / kDecodeRowsPerBlock)

  const void* q = nullptr;
  void* o = nullptr;
  float* lse = nullptr;
  int64_t q_stride[3] = {}, o_stride[3] = {};  // batch, row, head (elements)

  void* k_cache = nullptr;
  void* v_cache = nullptr;
  int64_t k_stride[3] = {}, v_stride[3] = {};  // batch-or-page, row, head
  bool paged = false;
  int cache_batch = 0;  // contiguous: rows of the cache
  int capacity = 0;     // tokens one batch entry can hold (cache_seqlen, or max_pages*page_size)
  const int32_t* cache_batch_idx = nullptr;
  const int32_t* page_table = nullptr;
  int64_t page_table_stride = 0;
  int num_pages = 0, page_size = 1;
  const int32_t* cache_seqlens = nullptr;

  // FP8 KV cache (decode.h): the caches hold e4m3 and k = float(e4m3) * k_scale[h * per_head]
  // (likewise v); k_new/v_new are quantised into them with the same scales.
  bool kv_e4m3 = false;
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
  int kv_scale_per_head = 0;  // 1: one scale per KV head; 0: one for the tensor

  const void* k_new = nullptr;
  const void* v_new = nullptr;
  int64_t k_new_stride[3] = {}, v_new_stride[3] = {};
  int seqlen_new = 0;

  float scale_log2 = 0.f;  // softmax_scale * log2(e); with softcap, softcap * log2(e)
  float softcap = 0.f;        // Problem::softcap (0: off)
  float softcap_scale = 0.f;  // softmax_scale / softcap
  int window_left = -1, window_right = -1;  // causal folded into window_right = 0

  int num_splits = 1;
  float* o_partial = nullptr;    // (num_splits, batch, seqlen_q, heads_q, head_dim) fp32
  float* lse_partial = nullptr;  // (num_splits, batch, seqlen_q, heads_q), log2 domain

  const float* sinks = nullptr;  // (heads_q,) logits in natural-log units, or null

  // Rotary embedding (DecodeParams): rotary_dim 0 is off. decode() points q_rotated (batch,
  // seqlen_q, heads_q, head_dim) and k_new_rotated (batch, seqlen_new, heads_kv, head_dim), both
  // dense, at workspace; decode_run fills them and runs the append and attention on them.
  const void* rotary_cos = nullptr;
  const void* rotary_sin = nullptr;
  int rotary_dim = 0;
  int seqlen_ro = 0;
  bool rotary_interleaved = true;
  bool rotary_q_per_token = false;  // causal or local: query token i at cache_seqlens[b] + i
  void* q_rotated = nullptr;
  void* k_new_rotated = nullptr;

  DecodeErrorRecord* errors = nullptr;  // where the kernels record bad indices (null: nowhere)

  void* stream = nullptr;
};

inline DecodeProblem make_decode_problem(const DecodeParams& p) {
  DecodeProblem d;
  d.dtype = p.dtype;
  d.batch = p.batch;
  d.seqlen_q = p.seqlen_q;
  d.heads_q = p.heads_q;
  d.heads_kv = p.heads_kv;
  d.head_dim = p.head_dim;
  d.group = p.heads_q / p.heads_kv;
  d.rows = d.group * p.seqlen_q;
  d.row_chunks = (d.rows + kDecodeRowsPerBlock - 1) / kDecodeRowsPerBlock;
  d.q = p.q.data;
  d.o = p.o.data;
  d.lse = p.lse;
  d.k_cache = p.k_cache.data;
  d.v_cache = p.v_cache.data;
  d.kv_e4m3 = decode_cache_dtype(p) == DType::e4m3;
  if (d.kv_e4m3) {
    d.k_scale = p.k_scale;
    d.v_scale = p.v_scale;
    d.kv_scale_per_head = p.kv_scale_layout == KvScaleLayout::per_kv_head ? 1 : 0;
  }
  d.k_new = p.k_new.data;
  d.v_new = p.v_new.data;
  for (int i = 0; i < 3; ++i) {
    d.q_stride[i] = p.q.stride[i];
    d.o_stride[i] = p.o.stride[i];
    d.k_stride[i] = p.k_cache.stride[i];
    d.v_stride[i] = p.v_cache.stride[i];
    d.k_new_stride[i] = p.k_new.stride[i];
    d.v_new_stride[i] = p.v_new.stride[i];
  }
  d.paged = p.page_table != nullptr;
  d.cache_batch = p.cache_batch > 0 ? p.cache_batch : p.batch;
  d.cache_batch_idx = p.cache_batch_idx;
  d.page_table = p.page_table;
  d.page_table_stride = p.page_table_stride > 0 ? p.page_table_stride : p.max_pages;
  d.num_pages = p.num_pages;
  d.page_size = d.paged ? p.page_size : 1;
  d.capacity = d.paged ? p.max_pages * p.page_size : p.cache_seqlen;
  d.cache_seqlens = p.cache_seqlens;
  d.seqlen_new = p.k_new.data != nullptr ? p.seqlen_new : 0;
  const float scale =
      p.softmax_scale != 0.f ? p.softmax_scale : 1.0f / std::sqrt(static_cast<float>(p.head_dim));
  d.scale_log2 = scale * kLog2e;
  if (p.softcap > 0.f) {
    d.softcap = p.softcap;
    d.softcap_scale = scale / p.softcap;
    d.scale_log2 = p.softcap * kLog2e;
  }
  d.window_left = p.window_left;
  d.window_right = p.causal ? 0 : p.window_right;
  d.num_splits = 1;
  d.sinks = p.sinks;
  if (p.rotary_cos != nullptr) {
    d.rotary_cos = p.rotary_cos;
    d.rotary_sin = p.rotary_sin;
    d.rotary_dim = p.rotary_dim;
    d.seqlen_ro = p.seqlen_ro;
    d.rotary_interleaved = p.rotary_interleaved;
    d.rotary_q_per_token = p.causal || p.window_left >= 0 || p.window_right >= 0;
  }
  d.stream = p.stream;
  return d;
}

}  // namespace flashattn
