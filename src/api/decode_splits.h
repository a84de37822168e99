// How many KV splits a decode call uses when the caller leaves num_splits at 0: a pure function,
// unit-tested on the CPU (tests/test_decode_splits.cpp).
#pragma once

namespace flashattn {

struct DecodeSplitInputs {
  int blocks = 0;         // thread blocks without splitting: batch * heads_kv * row chunks
  int key_tiles = 0;      // tiles of kDecodeKeysPerTile keys the longest sequence may attend to
  int num_sms = 0;        // multiprocessors of the device (132 on the H100 SXM)
  int blocks_per_sm = 1;  // blocks of the split kernel resident on one SM at once
};

// Decode is bound by reading K/V: a block streams its share of the cache, so the GPU reaches its
// bandwidth only when every SM holds as many blocks as fit. Splitting the keys multiplies the
// blocks; the last wave is what quantisation wastes. The rule: among 1..max splits (each split
// keeps at least kMinTilesPerSplit tiles, so that per-block set-up and the combine stay small
// next to the streaming), find the best wave efficiency blocks·s / (waves·slots), and take the
// fewest splits within 5% of it (fewer splits: less partial output to write and combine).
int decode_num_splits(const DecodeSplitInputs& in);

inline constexpr int kDecodeMinTilesPerSplit = 8;

}  // namespace flashattn
