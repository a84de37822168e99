// The decode tile plan: fixed 16-row (one m16 MMA tile) by 16-key warp tiles, 4 warps per block
// each streaming its own keys, and the cp.async pipeline depth per head dim.
#pragma once

namespace flashattn::decoding {

// Warps per block of the library's split kernel (Config takes others; bench/decode_timeline.cu
// measures eight).
inline constexpr int kDecodeWarps = 4;

// Stages of each warp's K/V ring. Decode is bound by HBM latency x bandwidth: an SM must keep
// ~32 KB of loads in flight to stream at its share of ~3 TB/s (Little's law with ~1.5 us of
// latency). A stage of one warp is 16 keys of K and V: 64·hd bytes. The depths keep a block near
// 64-100 KB of shared memory so two blocks share an SM at hd 64/128 (each warp has stages - 1
// tiles in flight while it computes one): hd 64: 4 stages, 64 KB; hd 128: 3 stages, 96 KB;
// hd 256: 2 stages, 128 KB (one block per SM, still 64 KB in flight). hd 96 and 192 take the depth
// of the next size up (not measured yet): hd 96: 3 stages, 72 KB; hd 192: 2 stages, 96 KB (two
// blocks per SM).
constexpr int decode_stages(int head_dim) {
  return head_dim <= 64 ? 4 : head_dim <= 128 ? 3 : 2;
}

// An e4m3 cache takes the same depths: its blocks are latency-bound, not short of bytes in flight.
// Measured (H100, 2026-11-25, b8/8k hd128, ncu): the first FP8 build (16-bit depths, widened K and
// V tiles per warp, 84 KB, two blocks per SM) issued on 47% of cycles with DRAM at 48%; doubling
// the bytes in flight (2·stages − 1 stages, 100 KB) changed nothing (0.74-0.84x the bf16 time
// either way). Again on the H200 (2026-11-29, graph-timed): 4 and 5 stages at hd128 (5 and 6 at
// hd64) against 3 (4): contiguous b8/8k 45.5 -> 45.5 / 44.7 us, paged (page 16) 51.9 -> 52.6 /
// 56.1; fewer instructions per tile is what moved it (kernel.cuh; docs/PERF.md, Decode II). Its fragments are now read straight from the ring (kernel.cuh), so a block is the
// ring, Q and, at hd 192/256, Q's fragments: hd 64 34 KB, 96 39 KB, 128 52 KB, 192 60 KB, 256 80
// KB; registers (~160 at hd 128) hold it to three blocks per SM.

}  // namespace flashattn::decoding
