// How many KV splits a decode call uses when the caller leaves num_splits at 0: a pure function,
// unit-tested on the CPU (tests/test_decode_splits.cpp).
#pragma once

namespace flashattn {

struct DecodeSplitInputs {
  int blocks = 0;         // thread blocks without splitting: batch * heads_kv * row chunks
  int key_tiles = 0;      // tiles of kDecodeKeysPerTile keys the longest sequence may attend to
  int num_sms = 0;        // multiprocessors of the device (132 on the H100 SXM)
  int blocks_per_sm = 1;  // blocks of the split kernel resident on one SM at once
  // Blocks per SM that already draw an SM's share of the bandwidth (0: blocks_per_sm). When
  // smaller, a grid of one wave at this many blocks per SM is preferred (below).
  int stream_blocks_per_sm = 0;
};

// Decode is bound by reading K/V: a block streams its share of the cache, so the GPU reaches its
// bandwidth only when every SM holds as many blocks as fit. Splitting the keys multiplies the
// blocks; the last wave is what quantisation wastes. The rule: among 1..max splits (each split
// keeps at least kMinTilesPerSplit tiles, so that per-block set-up and the combine stay small
// next to the streaming), find the best wave efficiency blocks·s / (waves·slots), and take the
// fewest splits within 5% of it (fewer splits: less partial output to write and combine).
// With stream_blocks_per_sm below blocks_per_sm, the rule first runs on those slots, and its
// answer is taken when the grid then fits in one wave of them: fewer, longer blocks. The e4m3
// cache asks for 2 (three fit at hd 128): measured on the H100 (2026-11-25, graph-timed, hd 128,
// 32/8 heads), one wave at two blocks per SM against the three-per-SM choice: b1/32k 30.0 vs 32.3
// us, b1/16k 18.2 vs 20.1, b8/8k 53.1 vs 54.6, b32/4k 95.3 vs 107.7; but b64/8k, which would take
// two waves, 478 vs 392 (bench/results/2026-11-25_h100_decode_e4m3_splits_rule_probe.txt).
// Paged e4m3 caches keep the plain rule: with this one b8/8k page 16 took 72.5 us against 63.3,
// b1/64k page 256 70.5 against 62.5 (..._decode_e4m3_split_rule_ab.txt): their scattered pages
// want the third block's loads in flight. Again with pages of whole tiles read once per tile
// (kernel.cuh's kDecodeTilePages; H200, 2026-11-29, the race's grid at page 16): this rule 1.09x
// the row-pages build's speed against the plain rule's 1.15x (b8/8k 58.8 against 53.0 us).
int decode_num_splits(const DecodeSplitInputs& in);

inline constexpr int kDecodeMinTilesPerSplit = 8;
// stream_blocks_per_sm of an e4m3 cache (decode_num_splits' comment has the measurements).
inline constexpr int kDecodeE4m3StreamBlocksPerSm = 2;

}  // namespace flashattn
