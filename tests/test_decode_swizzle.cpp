// The decode family's shared-memory tile layout (src/kernels/decode/swizzle.h), checked on the CPU
// for every head dim decode is built for: each row's chunks stay in the row (a permutation, so a
// tile never spills into its neighbour), and the eight rows one ldmatrix phase reads at one chunk
// column fall on eight different 16-byte bank groups (no bank conflicts).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <set>
#include <utility>
#include <vector>

#include "common/head_dims.h"
#include "kernels/decode/swizzle.h"

namespace {

constexpr int kTileRows = 16;  // an m16 query tile, a 16-key K/V tile

template <int kD>
void check_layout() {
  constexpr int kChunks = kD / 8;
  for (int row = 0; row < kTileRows; ++row) {
    std::vector<int> got, want;
    for (int c = 0; c < kChunks; ++c) {
      got.push_back(flashattn::decoding::swizzle<kD>(row, c));
      want.push_back(row * kD + 8 * c);
    }
    std::sort(got.begin(), got.end());
    EXPECT_EQ(got, want) << "hd " << kD << " row " << row << ": not a permutation of the row";
  }
  for (int first = 0; first < kTileRows; first += 8)
    for (int c = 0; c < kChunks; ++c) {
      std::set<int> groups;  // 16-byte bank groups of a 128-byte line; elements are 2 bytes
      for (int row = first; row < first + 8; ++row)
        groups.insert(flashattn::decoding::swizzle<kD>(row, c) * 2 / 16 % 8);
      EXPECT_EQ(groups.size(), 8u) << "hd " << kD << " rows " << first << "-" << first + 7
                                   << " chunk " << c << ": bank conflict";
    }
}

template <std::size_t... I>
void check_every_decode_head_dim(std::index_sequence<I...>) {
  (check_layout<flashattn::kDecodeHeadDims[I].qk>(), ...);
}

TEST(DecodeSwizzle, RowsArePermutedAndLdmatrixPhasesConflictFree) {
  check_every_decode_head_dim(std::make_index_sequence<std::size(flashattn::kDecodeHeadDims)>{});
}

}  // namespace
