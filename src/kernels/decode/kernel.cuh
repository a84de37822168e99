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
// tile), read straight into the MMA fragments, widened in registers, with no shared-memory round
// trip (swizzle.h lays the tiles out for these reads):
//  - S = Q·Kᵀ in fp16 whatever the input type. The head dimension of Q and K may be permuted
//    freely (the same way for both), so each lane's B fragment for one k16 step is four
//    consecutive bytes of its key row, and 16 bytes (one load) serve four steps; Q's fragments
//    are built once in the same permutation. e4m3 -> fp16 is one byte permute and two cvt's per
//    four bytes (sm_90 has no e4m3 -> bf16 cvt: bit moves and a multiply by 2^120 took seven
//    instructions). bf16 queries enter fp16 with each row scaled by a power of two that puts its
//    largest magnitude in [2^14, 2^15): every bf16 value down to 2^-31 of its row's largest is
//    then exact in fp16 (smaller ones round to fp16's subnormal grid, an error under 2^-38 of the
//    row's largest), so S is what bf16 operands give; the scale comes off with the softmax scale.
//  - O += P·V in fp16 whatever the input type (P in [0, 1] loses less in fp16 than in bf16; every
//    e4m3 value is an fp16 value). The output dimension of V is permuted instead: lane g's B
//    fragments take dimension g·hd/8 + n of block n, so a lane reads hd/8 consecutive bytes of each
//    of its four key rows, pairs them with byte permutes and converts with one cvt per pair; O's
//    columns are put back in place when the warps merge.
//  - k_scale is folded into the softmax scale, v_scale into the final normalisation.
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
// The conditional rescale's slack (log2 units), as the forward's (softmax_sm90.cuh).
inline constexpr float kRescaleSlack = 8.f;

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
  static constexpr int kTile = kBlockN * kHeadDim;         // elements of one K (or V) tile
  static constexpr int kStages = decode_stages(kHeadDim);  // either cache (tile_size.h)
  static constexpr int kCopiesPerLane = kBlockN * kKvChunks / 32;
  // Q fragments stay in registers up to hd 128 (32 registers); at 256 they would push the warp
  // past 255 registers with the 128-register O accumulator, so they are re-read from shared memory.
  // hd 192 (48 of Q, 96 of O) follows 256: keeping Q there was not measured.
  static constexpr bool kQInRegisters = kHeadDim <= 128;
  static constexpr int kMergeStride = kHeadDim + 4;  // floats; +4 staggers rows across banks
  static constexpr int kQBytes = kRows * kHeadDim * 2;
  static constexpr int kPipeBytes = kWarps * kStages * 2 * kTile * int(sizeof(KvStore));
  // e4m3 fragment reads: S's bytes per lane per group of 4·kQkBytes dimensions (kQkBytes / 4 k16
  // steps); P·V's bytes per lane per key row, read in kVUnit-byte loads.
  static constexpr int kQkBytes = e4m3_qk_bytes(kHeadDim);  // swizzle.h
  static constexpr int kVBytes = e4m3_v_bytes(kHeadDim);
  static constexpr int kVUnit = e4m3_v_unit(kHeadDim);
  // e4m3 with Q re-read every tile (hd > 128): Q's fragments, built once, after the ring.
  static constexpr int kQFragBytes = kKvE4m3 && !kQInRegisters ? 32 * kHeadDim : 0;
  static constexpr int kLoopBytes = kPipeBytes + kQFragBytes;
  static constexpr int kMergeBytes = kWarps * kRows * (kMergeStride + 2) * 4;
  static constexpr int kSmemBytes = kQBytes + (kLoopBytes > kMergeBytes ? kLoopBytes : kMergeBytes);
};

// Byte loads of the e4m3 path: kBytes (4, 8 or 16) at an aligned shared-memory address.
template <int kBytes>
__device__ __forceinline__ void load_shared(const uint8_t* p, uint32_t* w) {
  if constexpr (kBytes == 16) {
    const uint4 x = *reinterpret_cast<const uint4*>(p);
    w[0] = x.x, w[1] = x.y, w[2] = x.z, w[3] = x.w;
  } else if constexpr (kBytes == 8) {
    const uint2 x = *reinterpret_cast<const uint2*>(p);
    w[0] = x.x, w[1] = x.y;
  } else {
    w[0] = *reinterpret_cast<const uint32_t*>(p);
  }
}

// Four e4m3 values as two fp16 pairs: bytes 0, 1 -> lo, bytes 2, 3 -> hi. Exact. The halves of
// `four` go to the converts as 16-bit registers (no shift for the high pair).
__device__ __forceinline__ void e4m3x4_to_half2x2(uint32_t four, uint32_t& lo, uint32_t& hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm("{\n\t.reg .b16 l, h;\n\tmov.b32 {l, h}, %2;\n\t"
      "cvt.rn.f16x2.e4m3x2 %0, l;\n\tcvt.rn.f16x2.e4m3x2 %1, h;\n\t}"
      : "=r"(lo), "=r"(hi)
      : "r"(four));
#else  // sm_80: the library's conversion (no e4m3 instructions there)
  const __half2_raw l =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(four & 0xffffu), __NV_E4M3);
  const __half2_raw h =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(four >> 16), __NV_E4M3);
  lo = uint32_t(l.x) | (uint32_t(l.y) << 16);
  hi = uint32_t(h.x) | (uint32_t(h.y) << 16);
#endif
}

// Four e4m3 bytes of K as S's fp16 B operand: b0 = (byte 0, byte 2), b1 = (byte 1, byte 3). Exact.
__device__ __forceinline__ void e4m3x4_to_k_operand(uint32_t w, uint32_t& b0, uint32_t& b1) {
  e4m3x4_to_half2x2(__byte_perm(w, 0u, 0x3120), b0, b1);  // bytes 0, 2 | 1, 3
}

// How split_kernel finds a key's row in the cache (run_decode picks it from the problem; each is
// its own kernel, so that none pays for another's address arithmetic):
//   kDecodeContiguous  (batch or cache row, key) of a contiguous cache;
//   kDecodeTilePages   pages of a multiple of 16 keys: a 16-key tile lies in one page (tiles
//                      start on multiples of 16), whose page-table entry is read once per tile,
//                      one tile ahead of its use, by a uniform load;
//   kDecodeRowPages    any other page size: each row's page looked up by its copies.
// Measured (H200, 2026-11-29, graph-timed, page 16): the tile pages' kernel against the row pages'
// one (which every page size took before) 1.40x geomean on the race's grid (b8/8k hd128 100.1 ->
// 69.0 us, the contiguous cache's 66.8), FP8 KV 1.15x (docs/PERF.md, Decode II).
enum DecodePaging : int { kDecodeContiguous = 0, kDecodeTilePages = 1, kDecodeRowPages = 2 };

template <class C, int kPaging = kDecodeContiguous>
__global__ void __launch_bounds__(C::kThreads) split_kernel(const DecodeProblem p) {
  constexpr int kWarps = C::kWarps, kThreads = C::kThreads;
  using Element = typename C::Element;
  using KvStore = typename C::KvStore;
  constexpr int kD = C::kHeadDim;
  // bf16 queries on an e4m3 cache: S runs in fp16 with Q's rows scaled (file comment).
  constexpr bool kHalfQk = C::kKvE4m3 && !std::is_same_v<Element, __half>;
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
  // Tiles start on multiples of 16 keys (so that a page of whole tiles holds whole tiles, and the
  // layouts split alike: paged == contiguous bitwise): a sliding window's first tile starts at
  // most 15 keys early, keys that the edge tiles' mask hides.
  kb -= kb % kBlockN;
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
  // The e4m3 kernels load without it: in them nvcc 13.0's ptxas folded the shared-memory base
  // into hinted LDGSTS' addresses and emitted descriptor and offset registers that nothing writes
  // (an illegal instruction at run time; the sass_uniform_registers ctest reads every kernel's
  // SASS for it), once each layout had its own kernel. Measured on the H200 (2026-11-29): the
  // 16-bit kernels without the hint 1.5% slower (geomean of the race's grid, up to 4.7% at b1/16k),
  // so they keep it; the unhinted e4m3 kernels ran faster than the hinted ones before them
  // (contiguous b8/8k 53.0 -> 45.4 us, b1/32k 29.8 -> 26.4; the layouts' split came with it).
  constexpr bool kHintedLoads = !C::kKvE4m3;
  const uint64_t kv_policy = kHintedLoads ? l2_evict_first() : 0;
  int bad_page = -1;  // a page-table column this lane found out of range (recorded after the loop)
  // kDecodeTilePages: the page-table entry of tile t (0 past the split: such tiles load nothing).
  auto tile_page = [&](int t) -> int {
    const int j0 = kb + t * kBlockN;
    return kPaging == kDecodeTilePages && t < t_end && j0 < ke ? pages[j0 / p.page_size] : 0;
  };
  constexpr int kPerChunk = 16 / int(sizeof(KvStore));  // elements per 16-byte chunk
  // load_tile's lane form (contiguous and tile pages, where a row's chunks divide 32): lane
  // copies chunk lc of rows lr + i·kRowStep, so its source addresses are one per-lane offset
  // plus the tile's base plus i times a uniform step, and the loop keeps no per-copy index math.
  constexpr bool kLaneRows = 32 % C::kKvChunks == 0 && kPaging != kDecodeRowPages;
  constexpr int kRowStep = 32 / C::kKvChunks > 0 ? 32 / C::kKvChunks : 1;
  const int lr = lane / C::kKvChunks, lc = lane % C::kKvChunks;
  const int64_t k_lane = (kPaging == kDecodeContiguous ? cache_row * p.k_stride[0] : 0) +
                         lr * p.k_stride[1] + lc * kPerChunk;
  const int64_t v_lane = (kPaging == kDecodeContiguous ? cache_row * p.v_stride[0] : 0) +
                         lr * p.v_stride[1] + lc * kPerChunk;
  // kDecodeTilePages: the cache offsets of the page's row holding key j0 (the tile's first), and
  // whether the page is in range (a bad one is recorded for the error word).
  auto tile_page_offsets = [&](int j0, int page, int64_t& k0, int64_t& v0) {
    const int pi = j0 / p.page_size, in_page0 = j0 - pi * p.page_size;
    const bool page_ok = page >= 0 && page < p.num_pages;
    if (!page_ok && j0 < ke) bad_page = pi;
    k0 = page * p.k_stride[0] + in_page0 * p.k_stride[1];
    v0 = page * p.v_stride[0] + in_page0 * p.v_stride[1];
    return page_ok;
  };
  auto load_tile = [&](int t, int stage, int page) {
    KvStore* ks = ring + stage * 2 * C::kTile;
    KvStore* vs = ks + C::kTile;
    const int j0 = kb + t * kBlockN;
    if constexpr (kLaneRows) {
      int64_t kt, vt;  // the lane's first row in the cache
      bool tile_ok = row_ok;
      if constexpr (kPaging == kDecodeTilePages) {
        int64_t k0, v0;
        tile_ok = tile_page_offsets(j0, page, k0, v0);
        kt = k_lane + k0;
        vt = v_lane + v0;
      } else {
        kt = k_lane + j0 * p.k_stride[1];
        vt = v_lane + j0 * p.v_stride[1];
      }
      const int rem = ke - j0 - lr;  // the lane's rows i·kRowStep < rem are keys of the sequence
#pragma unroll
      for (int i = 0; i < C::kCopiesPerLane; ++i) {
        const int row = lr + kRowStep * i;
        const bool ok = tile_ok && kRowStep * i < rem;
        const KvStore* k_src = k_base + (ok ? kt + i * kRowStep * p.k_stride[1] : 0);
        const KvStore* v_src = v_base + (ok ? vt + i * kRowStep * p.v_stride[1] : 0);
        int k_at, v_at;
        if constexpr (C::kKvE4m3) {
          k_at = e4m3_k_offset<kD>(row, 16 * lc);
          v_at = e4m3_v_offset<kD>(row, 16 * lc);
        } else {
          k_at = v_at = swizzle<kD>(row, lc);
        }
        if constexpr (kHintedLoads) {
          cp_async_16_hint(ks + k_at, k_src, ok, kv_policy);
          cp_async_16_hint(vs + v_at, v_src, ok, kv_policy);
        } else {
          cp_async_16(ks + k_at, k_src, ok);
          cp_async_16(vs + v_at, v_src, ok);
        }
      }
    } else {
      // kDecodeTilePages: the tile's first row in the cache, and whether its page is in range.
      [[maybe_unused]] int64_t k0 = 0, v0 = 0;
      [[maybe_unused]] bool page_ok = true;
      if constexpr (kPaging == kDecodeTilePages) page_ok = tile_page_offsets(j0, page, k0, v0);
#pragma unroll
      for (int i = 0; i < C::kCopiesPerLane; ++i) {
        const int flat = lane + 32 * i;
        const int row = flat / C::kKvChunks, c = flat % C::kKvChunks, j = j0 + row;
        bool ok = j < ke && row_ok;
        int64_t k_off = 0, v_off = 0;
        if (ok) {
          if constexpr (kPaging == kDecodeTilePages) {
            ok = page_ok;
            k_off = k0 + row * p.k_stride[1];
            v_off = v0 + row * p.v_stride[1];
          } else if constexpr (kPaging == kDecodeRowPages) {
            const int pi = j / p.page_size;
            const int pg = pages[pi];
            const int in_page = j - pi * p.page_size;
            ok = pg >= 0 && pg < p.num_pages;
            if (!ok) bad_page = pi;
            k_off = pg * p.k_stride[0] + in_page * p.k_stride[1];
            v_off = pg * p.v_stride[0] + in_page * p.v_stride[1];
          } else {
            k_off = cache_row * p.k_stride[0] + j * p.k_stride[1];
            v_off = cache_row * p.v_stride[0] + j * p.v_stride[1];
          }
        }
        if (!ok) k_off = v_off = 0;
        int k_at, v_at;  // elements (of KvStore) into the K and V tiles
        if constexpr (C::kKvE4m3) {
          k_at = e4m3_k_offset<kD>(row, 16 * c);
          v_at = e4m3_v_offset<kD>(row, 16 * c);
        } else {
          k_at = v_at = swizzle<kD>(row, c);
        }
        if constexpr (kHintedLoads) {
          cp_async_16_hint(ks + k_at, k_base + k_off + c * kPerChunk, ok, kv_policy);
          cp_async_16_hint(vs + v_at, v_base + v_off + c * kPerChunk, ok, kv_policy);
        } else {
          cp_async_16(ks + k_at, k_base + k_off + c * kPerChunk, ok);
          cp_async_16(vs + v_at, v_base + v_off + c * kPerChunk, ok);
        }
      }
    }
  };

  // FP8 cache: this KV head's scales (k on S, folded into the softmax scale; v on O).
  float k_scale = 1.f, v_scale = 1.f;
  if constexpr (C::kKvE4m3) {
    const int si = p.kv_scale_per_head ? hk : 0;
    k_scale = p.k_scale[si];
    v_scale = p.v_scale[si];
  }
  const float softcap_scale = p.softcap_scale * k_scale;
  const float scale_log2 = p.softcap > 0.f ? p.scale_log2 : p.scale_log2 * k_scale;

  // Start the ring before waiting on Q: the first K/V bytes are the long pole. kDecodeTilePages:
  // the pages of the ring's first tiles and of the loop's first load, read together first.
  int first_pages[C::kStages];
#pragma unroll
  for (int s = 0; s < C::kStages; ++s) first_pages[s] = tile_page(t_begin + warp + s * kWarps);
#pragma unroll
  for (int s = 0; s < C::kStages - 1; ++s) {
    if (s < mine) load_tile(t_begin + warp + s * kWarps, s, first_pages[s]);
    cp_async_commit();
  }
  int next_page = first_pages[C::kStages - 1];  // the page of the loop's next load
  cp_async_wait<C::kStages - 1>();              // the Q group, the oldest, has landed
  __syncthreads();                              // ... for every thread's share of it

  // ldmatrix lane roles: lanes 8i..8i+7 address matrix i. For A (Q, P) and the transposed V
  // operand the matrices are (rows 0-7 | 8-15) x (chunk 0 | 1); for K they are (chunk 0 | 1) x
  // (keys 0-7 | 8-15), matching the fragment orders of ptx_sm80.cuh.
  const int a_row = (lane & 7) + ((lane >> 3) & 1) * 8, a_chunk = lane >> 4;
  const int k_row = (lane & 7) + (lane >> 4) * 8, k_chunk = (lane >> 3) & 1;
  // This lane's two rows (g, g + 8) of the tile and the query index each belongs to.
  const int g = lane >> 2, t4 = lane & 3;
  uint32_t qf[C::kQInRegisters ? kD / 16 : 1][4];
  // e4m3: Q's fragment for k16 step kk, in the permuted head dimension of the fragment reads
  // (kernel comment): a[0] / a[2] of row g hold dimensions (d, d + 2) / (d + 1, d + 3), d =
  // qk_dim(kk) (a[1], a[3]: row g + 8), matching e4m3x4_to_k_operand's byte pairs.
  constexpr int kStepsPerGroup = C::kQkBytes / 4;
  auto qk_dim = [&](int kk) {
    return (kk / kStepsPerGroup) * 4 * C::kQkBytes + t4 * C::kQkBytes + (kk % kStepsPerGroup) * 4;
  };
  auto q_pair = [&](int kk, int h) {  // row g + 8h, dimensions qk_dim(kk) .. + 3
    const int d = qk_dim(kk);
    return *reinterpret_cast<const uint2*>(q_s + swizzle<kD>(g + 8 * h, d / 8) + d % 8);
  };
  // bf16 queries on an e4m3 cache: S = Q·Kᵀ runs in fp16 (kernel comment), each row of Q scaled
  // by a power of two that brings its largest magnitude into [2^14, 2^15); s_unscale undoes it on
  // S. Rows past the chunk's end (zeros) and non-finite maxima keep a scale of 1.
  float q_mul[2] = {1.f, 1.f}, s_unscale[2] = {1.f, 1.f};
  if constexpr (kHalfQk) {
    float amax[2] = {0.f, 0.f};
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint2 x = q_pair(kk, h);
        amax[h] = fmaxf(amax[h], fmaxf(fmaxf(fabsf(__uint_as_float(x.x << 16)),
                                             fabsf(__uint_as_float(x.x & 0xffff0000u))),
                                       fmaxf(fabsf(__uint_as_float(x.y << 16)),
                                             fabsf(__uint_as_float(x.y & 0xffff0000u)))));
      }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      amax[h] = fmaxf(amax[h], __shfl_xor_sync(0xffffffffu, amax[h], 1));
      amax[h] = fmaxf(amax[h], __shfl_xor_sync(0xffffffffu, amax[h], 2));
      if (amax[h] > 0.f && amax[h] <= 3.4e38f) {
        int ex;
        frexpf(amax[h], &ex);  // amax in [2^(ex-1), 2^ex)
        ex = max(ex, -100);
        q_mul[h] = ldexpf(1.f, 15 - ex);
        s_unscale[h] = ldexpf(1.f, ex - 15);
      }
    }
  }
  float row_softcap_scale[2], row_scale_log2[2];  // S's scales, per row (g, g + 8)
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    row_softcap_scale[h] = softcap_scale * s_unscale[h];
    row_scale_log2[h] = p.softcap > 0.f ? scale_log2 : scale_log2 * s_unscale[h];
  }
  auto q_fragment_e4m3 = [&](int kk, uint32_t(&a)[4]) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint2 x = q_pair(kk, h);
      if constexpr (kHalfQk) {  // bf16 (d, d+1, d+2, d+3) -> fp16 (d, d+2), (d+1, d+3), scaled
        const float f0 = __uint_as_float(x.x << 16), f1 = __uint_as_float(x.x & 0xffff0000u);
        const float f2 = __uint_as_float(x.y << 16), f3 = __uint_as_float(x.y & 0xffff0000u);
        a[h] = pack2<__half>(f0 * q_mul[h], f2 * q_mul[h]);
        a[2 + h] = pack2<__half>(f1 * q_mul[h], f3 * q_mul[h]);
      } else {
        a[h] = __byte_perm(x.x, x.y, 0x5410);
        a[2 + h] = __byte_perm(x.x, x.y, 0x7632);
      }
    }
  };
  uint32_t* q_frag = reinterpret_cast<uint32_t*>(smem + C::kQBytes + C::kPipeBytes);
  if constexpr (C::kQInRegisters) {
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      if constexpr (C::kKvE4m3) {
        q_fragment_e4m3(kk, qf[kk]);
      } else {
        ldsm_x4(q_s + swizzle<kD>(a_row, 2 * kk + a_chunk), qf[kk]);
      }
    }
  } else if constexpr (C::kKvE4m3) {
    // Built once into shared memory in fragment order (one 16-byte load per step and lane).
    if (warp == 0) {
      for (int kk = 0; kk < kD / 16; ++kk) {
        uint32_t a[4];
        q_fragment_e4m3(kk, a);
        *reinterpret_cast<uint4*>(q_frag + (kk * 32 + lane) * 4) =
            make_uint4(a[0], a[1], a[2], a[3]);
      }
    }
    __syncthreads();
  }
  const int qi_row[2] = {(r0 + g) / p.group, (r0 + g + 8) / p.group};
  float m[2] = {kNegInf, kNegInf}, l[2] = {0.f, 0.f};
  float acc[kD / 8][4];
#pragma unroll
  for (int n = 0; n < kD / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;

  for (int i = 0; i < mine; ++i) {
    const int ahead = i + C::kStages - 1;
    if (ahead < mine) {
      const int t = t_begin + warp + ahead * kWarps;
      load_tile(t, ahead % C::kStages, next_page);
      next_page = tile_page(t + kWarps);  // lands while this tile is computed
    }
    cp_async_commit();
    cp_async_wait<C::kStages - 1>();
    __syncwarp();  // every lane's copies of tile i have landed
    if (i == 0) FA_TRACE(kTraceSplit, 2, 0);
    const KvStore* k_ring = ring + (i % C::kStages) * 2 * C::kTile;
    const KvStore* v_ring = k_ring + C::kTile;

    // S = Q·Kᵀ: s[n] holds keys n*8 .. n*8+7 of rows g (s[n][0..1]) and g+8 (s[n][2..3]).
    float s[2][4] = {};
    if constexpr (C::kKvE4m3) {
#pragma unroll
      for (int grp = 0; grp < kD / (4 * C::kQkBytes); ++grp) {
        uint32_t kw[2][kStepsPerGroup];  // keys g and g + 8
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          load_shared<C::kQkBytes>(
              k_ring + e4m3_k_offset<kD>(g + 8 * h, grp * 4 * C::kQkBytes + t4 * C::kQkBytes),
              kw[h]);
        }
#pragma unroll
        for (int u = 0; u < kStepsPerGroup; ++u) {
          const int kk = grp * kStepsPerGroup + u;
          uint32_t a[4];
          if constexpr (C::kQInRegisters) {
#pragma unroll
            for (int x = 0; x < 4; ++x) a[x] = qf[kk][x];
          } else {
            const uint4 x = *reinterpret_cast<const uint4*>(q_frag + (kk * 32 + lane) * 4);
            a[0] = x.x, a[1] = x.y, a[2] = x.z, a[3] = x.w;
          }
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            uint32_t b0, b1;
            e4m3x4_to_k_operand(kw[h][u], b0, b1);
            mma_16816<__half>(s[h], a, b0, b1);
          }
        }
      }
    } else {
      const Element* ks = k_ring;
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
    }

    // Scale into the log2 domain (soft-capped first: tanh(S · softcap_scale) · softcap·log2e),
    // then mask: keys past the edge of the window, the causal diagonal or the sequence (zeros
    // were loaded there) become -inf.
    const int j0 = kb + (t_begin + warp + i * kWarps) * kBlockN;
    const bool edge = !mask.tile_all_visible(q_first, q_end, j0, j0 + kBlockN);
    // One uniform branch each for the softcap and the edge mask, not one per element.
    if (p.softcap > 0.f) {
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[n][e] = tanh_accurate(s[n][e] * row_softcap_scale[e / 2]);
    }
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[n][e] *= row_scale_log2[e / 2];
    if (edge) {
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (!mask.visible(qi_row[e / 2], j0 + n * 8 + 2 * t4 + (e & 1))) s[n][e] = kNegInf;
    }

    // Online softmax with FlashAttention-4's conditional rescale: a row keeps its reference max
    // m while its true max grows by at most kRescaleSlack (log2 units), so P reaches at most 2^8
    // (harmless in the fp32 sums and in P's 16-bit type), and O's rescale (kD / 2 multiplies a
    // lane) runs only when some row of the warp moves its reference. The final normalisation and
    // the LSE use the same reference: exact. A row with no visible key yet keeps m = -inf;
    // subtracting 0 instead keeps exp2 at exactly 0 rather than NaN.
    float mx[2];
    bool move = false;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(fmaxf(s[0][2 * r], s[0][2 * r + 1]), fmaxf(s[1][2 * r], s[1][2 * r + 1]));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      move = move || mx[r] > m[r] + kRescaleSlack;
    }
    if (__any_sync(0xffffffffu, move)) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float m_new = fmaxf(m[r], mx[r]);
        const float alpha = exp2_approx(m[r] - (m_new == kNegInf ? 0.f : m_new));
        m[r] = m_new;
        l[r] *= alpha;
#pragma unroll
        for (int d = 0; d < kD / 8; ++d) {
          acc[d][2 * r] *= alpha;
          acc[d][2 * r + 1] *= alpha;
        }
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float base = m[r] == kNegInf ? 0.f : m[r];
      float sum = 0.f;
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int e = 2 * r; e < 2 * r + 2; ++e) {
          s[n][e] = exp2_approx(s[n][e] - base);
          sum += s[n][e];
        }
      l[r] += sum;
    }

    if constexpr (C::kKvE4m3) {
      // O += P·V in fp16: P from the S accumulators; V's B fragments for block n (output
      // dimension g·kD/8 + n) from byte n of the lane's kD/8 bytes of keys 2t, 2t+1 (b0) and
      // 2t+8, 2t+9 (b1), paired by byte permutes.
      const uint32_t pa[4] = {pack2<__half>(s[0][0], s[0][1]), pack2<__half>(s[0][2], s[0][3]),
                              pack2<__half>(s[1][0], s[1][1]), pack2<__half>(s[1][2], s[1][3])};
      uint32_t vw[4][C::kVBytes / 4];  // keys 2t, 2t + 1, 2t + 8, 2t + 9
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int u = 0; u < C::kVBytes / C::kVUnit; ++u) {
          const int key = 2 * t4 + (j & 1) + (j >> 1) * 8;
          load_shared<C::kVUnit>(v_ring + e4m3_v_offset<kD>(key, g * C::kVBytes + u * C::kVUnit),
                                 &vw[j][u * C::kVUnit / 4]);
        }
#pragma unroll
      for (int w = 0; w < C::kVBytes / 4; ++w) {
        const uint32_t lo[2] = {__byte_perm(vw[0][w], vw[1][w], 0x5140),
                                __byte_perm(vw[0][w], vw[1][w], 0x7362)};
        const uint32_t hi[2] = {__byte_perm(vw[2][w], vw[3][w], 0x5140),
                                __byte_perm(vw[2][w], vw[3][w], 0x7362)};
        uint32_t b_lo[4], b_hi[4];  // block e's b0, b1
        e4m3x4_to_half2x2(lo[0], b_lo[0], b_lo[1]);
        e4m3x4_to_half2x2(lo[1], b_lo[2], b_lo[3]);
        e4m3x4_to_half2x2(hi[0], b_hi[0], b_hi[1]);
        e4m3x4_to_half2x2(hi[1], b_hi[2], b_hi[3]);
#pragma unroll
        for (int e = 0; e < 4; ++e) mma_16816<__half>(acc[4 * w + e], pa, b_lo[e], b_hi[e]);
      }
    } else {
      // O += P·V with P (rounded to Element) as the A operand, straight from the S accumulators.
      const Element* vs = v_ring;
      const uint32_t pa[4] = {pack2<Element>(s[0][0], s[0][1]), pack2<Element>(s[0][2], s[0][3]),
                              pack2<Element>(s[1][0], s[1][1]), pack2<Element>(s[1][2], s[1][3])};
#pragma unroll
      for (int dj = 0; dj < kD / 16; ++dj) {
        uint32_t bv[4];
        ldsm_x4_trans(vs + swizzle<kD>(a_row, 2 * dj + a_chunk), bv);
        mma_16816<Element>(acc[2 * dj], pa, bv[0], bv[1]);
        mma_16816<Element>(acc[2 * dj + 1], pa, bv[2], bv[3]);
      }
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
    if constexpr (C::kKvE4m3) {
      // Accumulator column 2t + e of block n is output dimension (2t + e)·kD/8 + n.
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int col = (2 * t4 + e) * (kD / 8) + n;
        if (row_lo) mo[g * C::kMergeStride + col] = acc[n][e];
        if (row_hi) mo[(g + 8) * C::kMergeStride + col] = acc[n][2 + e];
      }
    } else {
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
    if (p.num_splits == 1 && p.sinks != nullptr) {        // else the combine adds the sink
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
