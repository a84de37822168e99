// The one tile-size function of the Hopper family (K4, K5, K6): a pure constexpr function of the
// head dims, so the host (grid, shared memory) and the kernel (register tiles) agree by
// construction. Measured alternatives are recorded beside each choice.
#pragma once

namespace flashattn::fa3 {

// Whether CuTe's wgmma atom selector covers a tile's N with one atom: N in {8, 16, 32, 64, 96,
// 128, 192, 256}, or any multiple of 8 up to 256 where the translation unit enables CUTLASS's
// extended GMMA shapes (sources.cmake). Otherwise it silently falls back to n16 or n8 atoms, each
// re-reading A: the configs static_assert it for every GEMM N they use.
constexpr bool gmma_n_one_atom(int n) {
#if defined(CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED)
  return n % 8 == 0 && n >= 8 && n <= 256;
#else
  return n == 8 || n == 16 || n == 32 || n == 64 || n == 96 || n == 128 || n == 192 || n == 256;
#endif
}

struct TileSize {
  int block_m;  // query rows per tile: 64 per consumer warpgroup (one wgmma M)
  int block_n;  // keys per mainloop iteration (the N of S = Q·Kᵀ, the K of O += P·V)
  int stages;   // K and V shared-memory buffers each
};

// Shared memory is Q (block_m x d) + stages x (K: block_n x d + V: block_n x dv) + O (block_m x
// dv, or half of dv where all of it does not fit: d 256), 2 bytes each, within the 227 KB a
// Hopper block may opt into.
// Registers per consumer thread (240 with two consumer warpgroups, 160 with three): S is
// block_n / 2 fp32, O is dv / 2 fp32, P is block_n / 4.
constexpr TileSize tile_size(int head_dim, int head_dim_v) {
  // d 64: three consumer warpgroups (S 64 + P 32 + O 32 of 160 registers): a warpgroup's GEMMs
  // (512 tensor cycles per block) are shorter than its softmax, so two cannot hide each other's;
  // +10-23% from seqlen 2048 over 128-row tiles, though a 192-row tile wastes 12.5% at 512/1024.
  if (head_dim <= 64) return {192, 128, 2};
  if (head_dim <= 128) return {128, 128, 2};
  // d 192: 96 keys spilled 4 bytes (S 48 + P 24 + O 96 fp32 registers of 240); 80 fits. 80 and
  // 112 are extended wgmma shapes (gmma_n_one_atom; sources.cmake): without them Q·Kᵀ ran as n16
  // atoms, 26-51% slower (docs/PERF.md, head dim 192).
  if (head_dim <= 192) return {128, head_dim_v <= 128 ? 112 : 80, 2};
  // d 256: 80 keys spilled 96 bytes (S 40 + P 20 + O 128 fp32 registers); 64 fits.
  return {128, 64, 2};
}

// The FP8 (e4m3) mainloop's tiles (config_fp8.cuh). Shared memory is Q + stages x (K + Vᵀ + V as
// landed) (all 1 byte per element) + O (block_m x dv, 2 bytes). Two consumer warpgroups of 232
// registers, or three of 160 (schedule.cuh: the transposing producer keeps 40 or 32): S is
// block_n / 2 fp32, O dv / 2, P block_n / 8 (one byte each). 8-bit wgmma's k is 32: block_n is
// a multiple of 32.
struct TileSizeFp8 {
  int block_m, block_n, stages;  // stages of K, of V as landed and of Vᵀ each
};
// As many raw V stages as K's (the producer's leader then keeps one ring state): four measured
// the same as two once the transpose was cheap (d 128 16k: 831 / 829 TFLOP/s); with the first,
// slow transpose four had bought 472 -> 515.
// d 128, 192 keys: a tile's fixed costs (row max and sum, O's rescale, the P conversion's
// setup) over 1.5x the keys. H100 A/B with the unrolled transposer (k7_smoke, ABBA, one call,
// 2026-11-28): 16k 879 -> 959 dense, 865 -> 934 causal; 4k +3-5%; 1k -7% dense, -9% causal (a
// 1024-key row is 5.3 blocks of 192: 11% of the last block's work masked). flashattn-bench on
// N(0,1) data, against 128 keys in the call before: 16k 869 -> 933 dense, 853 -> 911 causal, 512
// -9% / -12%; geomean against cuDNN FP8 unchanged at d 128 (0.90), every config from 4k up gains.
// With the earlier transposer: 849 against 804 at 16k, 597 against 657 at 1024. 224 keys spilled
// 76 bytes.
// d 128, three consumer warpgroups (192-row tiles) of 96 keys: at 8 bits a warpgroup's two GEMMs
// (768 tensor cycles a block of 192 keys) are shorter than its softmax (as K6's at d 64), so two
// warpgroups cannot hide each other's; a third adds softmax parallelism. S 48 + P 12 + O 64 of
// 160 registers, no spills (128 keys spilled 164 bytes). H200, k7_smoke ABBA in one call
// against 2 x 192 (2026-11-28): 1k +2% dense / +8.5% causal, 4k +3.7% / +6.3%, 16k +4.4% /
// +1.8% (911 -> 952 dense); 64 keys lost 5-16%, 128 keys (spilled) 14-22%. flashattn-bench on
// the standard grid's d 128 rows, one call beside cuDNN FP8: +1.2 to +11.3% on every config
// (16k 929 -> 940 dense, 928 -> 952 causal), against cuDNN 0.902 -> 0.948 (docs/PERF.md).
constexpr TileSizeFp8 tile_size_fp8(int head_dim) {
  if (head_dim <= 64) return {192, 128, 2};
  if (head_dim <= 128) return {192, 96, 2};
  // d 256: O alone is 128 registers; 64 keys keep S + P at 40 (K6's 16-bit choice, for the same
  // reason).
  return {128, 64, 2};
}

}  // namespace flashattn::fa3
