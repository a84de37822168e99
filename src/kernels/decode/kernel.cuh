// The split-KV decode kernel. One block = (row chunk, split) x KV head x batch entry: the query
// rows of every query head sharing the KV head (times seqlen_q) packed into one 16-row MMA tile,
// against the split's share of the keys, read once. Its warps (C::kWarps, four in the library)
// stream disjoint key tiles (tile w, w+4, ... with four) through their own cp.async rings, with
// no block barrier in the loop, each running the FlashAttention recurrence on its tiles:
//   S = Q·Kᵀ (mma.sync), mask the edge tiles, online softmax in the log2 domain, O += P·V.
// The warps' states merge through shared memory at the end; the block writes O and LSE directly
// (one split) or an fp32 partial and its log2-LSE for the combine kernel.
//
// FP8 KV cache (kKvE4m3): the ring holds e4m3 tiles (one byte per element: half the bytes per
// tile); each warp widens the tile it is about to use into its own Element tile (exact: every
// e4m3 value is a bf16 and an fp16 value), which the unchanged ldmatrix/mma path reads, and the
// scales are applied in fp32: k_scale to S (folded into the softmax scale), v_scale to O.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "common/convert.cuh"
#include "common/decode_problem.h"
#include "common/mask.h"
#include "common/math_constants.h"
#include "common/sink.h"
#include "kernels/decode/errors.cuh"
#include "kernels/decode/ptx_sm80.cuh"
#include "kernels/decode/swizzle.h"
#include "kernels/decode/tile_size.h"
#include "kernels/decode/trace.h"

namespace flashattn::decoding {

inline constexpr int kRows = kDecodeRowsPerBlock;   // 16
inline constexpr int kBlockN = kDecodeKeysPerTile;  // 16
inline constexpr float kNegInf = -__builtin_huge_valf();

template <typename Element_, int kHeadDim_, int kWarps_ = kDecodeWarps, bool kKvE4m3_ = false>
struct Config {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kWarps = kWarps_;  // each streams its own key tiles
  static constexpr bool kKvE4m3 = kKvE4m3_;
  // What the cache holds: Element, or e4m3 bytes.
  using KvStore = std::conditional_t<kKvE4m3, uint8_t, Element>;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kChunks = kHeadDim / 8;  // 16-byte chunks per row of Q (Element)
  static constexpr int kKvChunks = kHeadDim * int(sizeof(KvStore)) / 16;  // ... of the cache
  static constexpr int kTile = kBlockN * kHeadDim;  // elements of one K (or V) tile
  static constexpr int kStages = decode_stages(kHeadDim);  // either cache (tile_size.h)
  static constexpr int kCopiesPerLane = kBlockN * kKvChunks / 32;
  // Q fragments stay in registers up to hd 128 (32 registers); at 256 they would push the warp
  // past 255 registers with the 128-register O accumulator, so they are re-read from shared memory.
  // hd 192 (48 of Q, 96 of O) follows 256: keeping Q there was not measured.
  static constexpr bool kQInRegisters = kHeadDim <= 128;
  static constexpr int kMergeStride = kHeadDim + 4;  // floats; +4 staggers rows across banks
  static constexpr int kQBytes = kRows * kHeadDim * 2;
  static constexpr int kPipeBytes = kWarps * kStages * 2 * kTile * int(sizeof(KvStore));
  // e4m3: each warp's widened tile, after its ring: K for S, then V for P·V in the same place.
  static constexpr int kWideBytes = kKvE4m3 ? kWarps * kTile * 2 : 0;
  static constexpr int kLoopBytes = kPipeBytes + kWideBytes;
  static constexpr int kMergeBytes = kWarps * kRows * (kMergeStride + 2) * 4;
  static constexpr int kSmemBytes = kQBytes + (kLoopBytes > kMergeBytes ? kLoopBytes : kMergeBytes);
};

// Element offset of 16-byte chunk `chunk` of cache row `row` in a ring tile: the swizzle for
// 16-bit tiles (ldmatrix reads them); e4m3 tiles are plain rows (each lane reads back the 16-byte
// chunks it copied, eight consecutive chunks per 128-byte phase: no bank conflicts).
template <class C>
__device__ __forceinline__ int kv_offset(int row, int chunk) {
  if constexpr (C::kKvE4m3) {
    return row * C::kHeadDim + chunk * 16;
  } else {
    return swizzle<C::kHeadDim>(row, chunk);
  }
}

// Two e4m3 values (low byte first) as two Elements, packed as pack2 packs them. Exact.
template <typename Element>
__device__ __forceinline__ uint32_t widen_e4m3x2(uint32_t two) {
  const __half2_raw h =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two), __NV_E4M3);
  if constexpr (std::is_same_v<Element, __half>) {
    return uint32_t(h.x) | (uint32_t(h.y) << 16);
  } else {
    const float2 f = __half22float2(__half2(h));
    return pack2<Element>(f.x, f.y);
  }
}

// One e4m3 tile of the ring into the warp's Element tile (the swizzled layout ldmatrix reads):
// each lane widens the 16-byte chunks it copied.
template <class C>
__device__ __forceinline__ void widen_tile(const uint8_t* src, typename C::Element* dst, int lane) {
  using Element = typename C::Element;
#pragma unroll
  for (int i = 0; i < C::kCopiesPerLane; ++i) {
    const int flat = lane + 32 * i;
    const int row = flat / C::kKvChunks, c = flat % C::kKvChunks;
    const uint4 raw = *reinterpret_cast<const uint4*>(src + kv_offset<C>(row, c));
    const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
    uint32_t out[8];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      out[2 * k] = widen_e4m3x2<Element>(w[k] & 0xffffu);
      out[2 * k + 1] = widen_e4m3x2<Element>(w[k] >> 16);
    }
    *reinterpret_cast<uint4*>(dst + swizzle<C::kHeadDim>(row, 2 * c)) =
        make_uint4(out[0], out[1], out[2], out[3]);
    *reinterpret_cast<uint4*>(dst + swizzle<C::kHeadDim>(row, 2 * c + 1)) =
        make_uint4(out[4], out[5], out[6], out[7]);
  }
}

template <class C>
__global__ void __launch_bounds__(C::kThreads) split_kernel(const DecodeProblem p) {
  constexpr int kWarps = C::kWarps, kThreads = C::kThreads;
  using Element = typename C::Element;
  using KvStore = typename C::KvStore;
  constexpr int kD = C::kHeadDim;
  extern __shared__ __align__(128) unsigned char smem[];
  Element* q_s = reinterpret_cast<Element*>(smem);
  KvStore* pipe = reinterpret_cast<KvStore*>(smem + C::kQBytes);
  float* merge = reinterpret_cast<float*>(smem + C::kQBytes);

  const int chunk = blockIdx.x % p.row_chunks;
  const int split = blockIdx.x / p.row_chunks;
  const int hk = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r0 = chunk * kRows;
  FA_TRACE(kTraceSplit, 0, 0);

  // Keys this entry attends to. Clamped to the capacity so that unchecked bad lengths
  // (check_indices off) still read nothing outside the cache. Measured (H100, b1/16k): issuing
  // the first K/V tiles before this load resolves (tiles dealt round-robin over the splits so that
  // a warp's first tiles do not depend on the length) gained nothing over waiting for it
  // (34.4 us both ways, docs/perf/decode.md).
  const int seqlen = p.cache_seqlens[b];
  const int len = min(max(seqlen + p.seqlen_new, 0), p.capacity);
  const Mask mask{p.seqlen_q, len, p.window_left, p.window_right};
  const int q_first = r0 / p.group;
  const int q_end = (min(r0 + kRows, p.rows) - 1) / p.group + 1;
  int kb = 0, ke = 0;
  mask.key_range(q_first, q_end, kb, ke);
  const int tiles = ke > kb ? (ke - kb + kBlockN - 1) / kBlockN : 0;
  const int per_split = (tiles + p.num_splits - 1) / p.num_splits;
  const int t_begin = min(split * per_split, tiles);
  const int t_end = min(t_begin + per_split, tiles);
  const int mine = t_end - t_begin > warp ? (t_end - t_begin - warp + kWarps - 1) / kWarps : 0;
  FA_TRACE(kTraceSplit, 1, mine);

  // Q rows of the chunk into shared memory (zeros past the last row), as the first cp.async
  // group: a plain load would stall every thread for a memory latency before the K/V stream
  // starts, and a short split (one wave at batch 1) feels that microsecond.
  for (int i = threadIdx.x; i < kRows * C::kChunks; i += kThreads) {
    const int row = i / C::kChunks, c = i % C::kChunks, r = r0 + row;
    const bool ok = r < p.rows;
    const int qi = ok ? r / p.group : 0, h = ok ? hk * p.group + r % p.group : 0;
    cp_async_16(q_s + swizzle<kD>(row, c),
                static_cast<const Element*>(p.q) + b * p.q_stride[0] + qi * p.q_stride[1] +
                    h * p.q_stride[2] + c * 8,
                ok);
  }
  cp_async_commit();

  // Where the keys live: a cache row (contiguous) or pages. An index out of range (only possible
  // with check_indices off) leaves its rows unloaded (zeros) instead of reading outside the cache.
  const KvStore* k_base = static_cast<const KvStore*>(p.k_cache) + hk * p.k_stride[2];
  const KvStore* v_base = static_cast<const KvStore*>(p.v_cache) + hk * p.v_stride[2];
  const int32_t* pages = p.page_table + b * p.page_table_stride;
  int cache_row = b;
  if (!p.paged && p.cache_batch_idx != nullptr) cache_row = p.cache_batch_idx[b];
  const bool row_ok = p.paged || (cache_row >= 0 && cache_row < p.cache_batch);
  // An unchecked bad length or cache row is recorded once per batch entry (decode_check_errors).
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) {
    if (seqlen < 0 || int64_t{seqlen} + p.seqlen_new > p.capacity) {
      record_decode_error(p.errors, kDecodeErrorSeqlen, b, 0, seqlen, p.capacity, p.seqlen_new);
    }
    if (!row_ok) {
      record_decode_error(p.errors, kDecodeErrorCacheRow, b, 0, cache_row, p.cache_batch, 0);
    }
  }

  KvStore* ring = pipe + warp * C::kStages * 2 * C::kTile;
  // K/V is read once: loads carry an L2 evict-first hint, so the stream does not push out what is
  // read again (the partials the combine kernel reads back, Q, the lengths). Measured (H100,
  // bench/decode_timeline.cu, same call): -0.5 us on the split kernel alone, -0.7 to -1.0 us end
  // to end at batch 1 / 16k-32k keys and batch 8 / 4k (docs/perf/decode.md, fourth pass).
  const uint64_t kv_policy = l2_evict_first();
  int bad_page = -1;  // a page-table column this lane found out of range (recorded after the loop)
  auto load_tile = [&](int t, int stage) {
    KvStore* ks = ring + stage * 2 * C::kTile;
    KvStore* vs = ks + C::kTile;
    const int j0 = kb + t * kBlockN;
    constexpr int kPerChunk = 16 / int(sizeof(KvStore));  // elements per 16-byte chunk
#pragma unroll
    for (int i = 0; i < C::kCopiesPerLane; ++i) {
      const int flat = lane + 32 * i;
      const int row = flat / C::kKvChunks, c = flat % C::kKvChunks, j = j0 + row;
      bool ok = j < ke && row_ok;
      int64_t k_off = 0, v_off = 0;
      if (ok) {
        if (p.paged) {
          const int pi = j / p.page_size;
          const int page = pages[pi];
          const int in_page = j - pi * p.page_size;
          ok = page >= 0 && page < p.num_pages;
          if (!ok) bad_page = pi;
          k_off = page * p.k_stride[0] + in_page * p.k_stride[1];
          v_off = page * p.v_stride[0] + in_page * p.v_stride[1];
        } else {
          k_off = cache_row * p.k_stride[0] + j * p.k_stride[1];
          v_off = cache_row * p.v_stride[0] + j * p.v_stride[1];
        }
      }
      if (!ok) k_off = v_off = 0;
      cp_async_16_hint(ks + kv_offset<C>(row, c), k_base + k_off + c * kPerChunk, ok, kv_policy);
      cp_async_16_hint(vs + kv_offset<C>(row, c), v_base + v_off + c * kPerChunk, ok, kv_policy);
    }
  };

  // FP8 cache: this KV head's scales (k on S, folded into the softmax scale; v on O), and the
  // warp's Element tiles the widened K and V go to.
  float k_scale = 1.f, v_scale = 1.f;
  Element* wide = nullptr;
  if constexpr (C::kKvE4m3) {
    const int si = p.kv_scale_per_head ? hk : 0;
    k_scale = p.k_scale[si];
    v_scale = p.v_scale[si];
    wide = reinterpret_cast<Element*>(smem + C::kQBytes + C::kPipeBytes) + warp * C::kTile;
  }
  const float softcap_scale = p.softcap_scale * k_scale;
  const float scale_log2 = p.softcap > 0.f ? p.scale_log2 : p.scale_log2 * k_scale;

  // Start the ring before waiting on Q: the first K/V bytes are the long pole.
#pragma unroll
  for (int s = 0; s < C::kStages - 1; ++s) {
    if (s < mine) load_tile(t_begin + warp + s * kWarps, s);
    cp_async_commit();
  }
  cp_async_wait<C::kStages - 1>();  // the Q group, the oldest, has landed
  __syncthreads();                  // ... for every thread's share of it

  // ldmatrix lane roles: lanes 8i..8i+7 address matrix i. For A (Q, P) and the transposed V
  // operand the matrices are (rows 0-7 | 8-15) x (chunk 0 | 1); for K they are (chunk 0 | 1) x
  // (keys 0-7 | 8-15), matching the fragment orders of ptx_sm80.cuh.
  const int a_row = (lane & 7) + ((lane >> 3) & 1) * 8, a_chunk = lane >> 4;
  const int k_row = (lane & 7) + (lane >> 4) * 8, k_chunk = (lane >> 3) & 1;
  uint32_t qf[C::kQInRegisters ? kD / 16 : 1][4];
  if constexpr (C::kQInRegisters) {
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk)
      ldsm_x4(q_s + swizzle<kD>(a_row, 2 * kk + a_chunk), qf[kk]);
  }

  // This lane's two rows (g, g + 8) of the tile and the query index each belongs to.
  const int g = lane >> 2, t4 = lane & 3;
  const int qi_row[2] = {(r0 + g) / p.group, (r0 + g + 8) / p.group};
  float m[2] = {kNegInf, kNegInf}, l[2] = {0.f, 0.f};
  float acc[kD / 8][4];
#pragma unroll
  for (int n = 0; n < kD / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;

  for (int i = 0; i < mine; ++i) {
    const int ahead = i + C::kStages - 1;
    if (ahead < mine) load_tile(t_begin + warp + ahead * kWarps, ahead % C::kStages);
    cp_async_commit();
    cp_async_wait<C::kStages - 1>();
    __syncwarp();  // every lane's copies of tile i have landed
    if (i == 0) FA_TRACE(kTraceSplit, 2, 0);
    const KvStore* k_ring = ring + (i % C::kStages) * 2 * C::kTile;
    const Element* ks;
    const Element* vs;
    if constexpr (C::kKvE4m3) {
      widen_tile<C>(k_ring, wide, lane);  // K now, V after S (below) in the same tile
      __syncwarp();                       // every lane's chunks are widened
      ks = wide;
      vs = wide;
    } else {
      ks = k_ring;
      vs = k_ring + C::kTile;
    }

    // S = Q·Kᵀ: s[n] holds keys n*8 .. n*8+7 of rows g (s[n][0..1]) and g+8 (s[n][2..3]).
    float s[2][4] = {};
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      uint32_t a[4], bk[4];
      if constexpr (C::kQInRegisters) {
#pragma unroll
        for (int x = 0; x < 4; ++x) a[x] = qf[kk][x];
      } else {
        ldsm_x4(q_s + swizzle<kD>(a_row, 2 * kk + a_chunk), a);
      }
      ldsm_x4(ks + swizzle<kD>(k_row, 2 * kk + k_chunk), bk);
      mma_16816<Element>(s[0], a, bk[0], bk[1]);
      mma_16816<Element>(s[1], a, bk[2], bk[3]);
    }

    // Scale into the log2 domain (soft-capped first: tanh(S · softcap_scale) · softcap·log2e),
    // then mask: keys past the edge of the window, the causal diagonal or the sequence (zeros
    // were loaded there) become -inf.
    const int j0 = kb + (t_begin + warp + i * kWarps) * kBlockN;
    const bool edge = !mask.tile_all_visible(q_first, q_end, j0, j0 + kBlockN);
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (p.softcap > 0.f) s[n][e] = tanh_accurate(s[n][e] * softcap_scale);
        s[n][e] *= scale_log2;
        if (edge && !mask.visible(qi_row[e / 2], j0 + n * 8 + 2 * t4 + (e & 1))) s[n][e] = kNegInf;
      }

      // Online softmax. A row with no visible key yet keeps m = -inf; subtracting 0 instead keeps
      // exp2 at exactly 0 rather than NaN.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = fmaxf(fmaxf(s[0][2 * r], s[0][2 * r + 1]), fmaxf(s[1][2 * r], s[1][2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[r], mx);
      const float base = m_new == kNegInf ? 0.f : m_new;
      const float alpha = exp2_approx(m[r] - base);
      m[r] = m_new;
      float sum = 0.f;
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int e = 2 * r; e < 2 * r + 2; ++e) {
          s[n][e] = exp2_approx(s[n][e] - base);
          sum += s[n][e];
        }
      l[r] = l[r] * alpha + sum;
#pragma unroll
      for (int d = 0; d < kD / 8; ++d) {
        acc[d][2 * r] *= alpha;
        acc[d][2 * r + 1] *= alpha;
      }
    }

    if constexpr (C::kKvE4m3) {
      __syncwarp();  // every lane's ldmatrix of K is done: V takes its place
      widen_tile<C>(k_ring + C::kTile, wide, lane);
      __syncwarp();
    }

    // O += P·V with P (rounded to Element) as the A operand, straight from the S accumulators.
    const uint32_t pa[4] = {pack2<Element>(s[0][0], s[0][1]), pack2<Element>(s[0][2], s[0][3]),
                            pack2<Element>(s[1][0], s[1][1]), pack2<Element>(s[1][2], s[1][3])};
#pragma unroll
    for (int dj = 0; dj < kD / 16; ++dj) {
      uint32_t bv[4];
      ldsm_x4_trans(vs + swizzle<kD>(a_row, 2 * dj + a_chunk), bv);
      mma_16816<Element>(acc[2 * dj], pa, bv[0], bv[1]);
      mma_16816<Element>(acc[2 * dj + 1], pa, bv[2], bv[3]);
    }
    __syncwarp();  // all lanes are done with this stage before it is refilled
  }
  cp_async_wait<0>();
  if (bad_page >= 0) {
    record_decode_error(p.errors, kDecodeErrorPage, b, bad_page, pages[bad_page], p.num_pages, 0);
  }
  FA_TRACE(kTraceSplit, 3, 0);
  launch_dependents();

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }

  // Merge the warps: each writes its unnormalised O, row max and row sum for the chunk's real
  // rows (with one query token and four query heads per KV head, 4 of the tile's 16).
  const int rows_here = min(kRows, p.rows - r0);
  const bool row_lo = g < rows_here, row_hi = g + 8 < rows_here;
  __syncthreads();  // every warp is done with the ring the merge area overlaps
  FA_TRACE(kTraceSplit, 6, 0);
  float* mo = merge + warp * kRows * C::kMergeStride;
  float* ml = merge + kWarps * kRows * C::kMergeStride;  // [warp][row][m, l]
#pragma unroll
  for (int n = 0; n < kD / 8; ++n) {
    const int col = n * 8 + 2 * t4;
    if (row_lo) {
      *reinterpret_cast<float2*>(mo + g * C::kMergeStride + col) =
          make_float2(acc[n][0], acc[n][1]);
    }
    if (row_hi) {
      *reinterpret_cast<float2*>(mo + (g + 8) * C::kMergeStride + col) =
          make_float2(acc[n][2], acc[n][3]);
    }
  }
  if (t4 == 0) {
    ml[(warp * kRows + g) * 2] = m[0];
    ml[(warp * kRows + g) * 2 + 1] = l[0];
    ml[(warp * kRows + g + 8) * 2] = m[1];
    ml[(warp * kRows + g + 8) * 2 + 1] = l[1];
  }
  __syncthreads();
  FA_TRACE(kTraceSplit, 4, 0);

  // Every thread takes (row, 4 columns) pieces of the real rows: one 16-byte load per warp from
  // shared memory (consecutive threads, consecutive pieces: no bank conflicts) and one store.
  // Measured (H100, bench/decode_timeline.cu, A/B in one call): the former layout (all 16 rows
  // written, then eight threads per row with 16 scalar columns each) took a median of ~2760 SM
  // cycles from the last warp's stream to the stores, this one ~1820; end to end -0.45 us at
  // batch 1 / 16k-32k keys, -0.6 us at batch 8 / 4k.
  constexpr int kPieces = kD / 4;
  for (int i = threadIdx.x; i < rows_here * kPieces; i += kThreads) {
    const int row = i / kPieces, col = (i % kPieces) * 4, r = r0 + row;
    float M = kNegInf;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) M = fmaxf(M, ml[(w * kRows + row) * 2]);
    float wscale[kWarps], L = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float mw = ml[(w * kRows + row) * 2];
      wscale[w] = mw == kNegInf ? 0.f : exp2_approx(mw - M);
      L += ml[(w * kRows + row) * 2 + 1] * wscale[w];
    }
    const int qi = r / p.group, h = hk * p.group + r % p.group;
    float inv = L > 0.f ? 1.f / L : 0.f;  // times v_scale below (1 for a 16-bit cache)
    const float lse2 = L > 0.f ? M + log2f(L) : kNegInf;  // the partial's, log2 units
    float lse = lse2 * kLn2;                              // the row's, one split
    if (p.num_splits == 1 && p.sinks != nullptr) {  // else the combine adds the sink
      const SinkNorm n = normalize_with_sink(L, M, p.sinks[h]);
      inv = n.inv;
      lse = n.lse;
    }
    float out[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float4 x =
          *reinterpret_cast<const float4*>(merge + (w * kRows + row) * C::kMergeStride + col);
      out[0] += x.x * wscale[w];
      out[1] += x.y * wscale[w];
      out[2] += x.z * wscale[w];
      out[3] += x.w * wscale[w];
    }
    inv *= v_scale;
#pragma unroll
    for (int c = 0; c < 4; ++c) out[c] *= inv;
    if (p.num_splits == 1) {
      Element* dst = static_cast<Element*>(p.o) + b * p.o_stride[0] + qi * p.o_stride[1] +
                     h * p.o_stride[2] + col;
      *reinterpret_cast<uint2*>(dst) =
          make_uint2(pack2<Element>(out[0], out[1]), pack2<Element>(out[2], out[3]));
      if (p.lse != nullptr && col == 0) {
        p.lse[(int64_t(b) * p.heads_q + h) * p.seqlen_q + qi] = lse;
      }
    } else {
      const int64_t prow = ((int64_t(split) * p.batch + b) * p.seqlen_q + qi) * p.heads_q + h;
      *reinterpret_cast<float4*>(p.o_partial + prow * kD + col) =
          make_float4(out[0], out[1], out[2], out[3]);
      if (col == 0) p.lse_partial[prow] = lse2;
    }
  }
  FA_TRACE(kTraceSplit, 5, 0);
}

}  // namespace flashattn::decoding
