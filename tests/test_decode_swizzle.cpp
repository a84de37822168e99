// The decode family's shared-memory tile layout (src/kernels/decode/swizzle.h), checked on the CPU
// for every head dim decode is built for: each row's chunks stay in the row (a permutation, so a
// tile never spills into its neighbour), and the eight rows one ldmatrix phase reads at one chunk
// column fall on eight different 16-byte bank groups (no bank conflicts). The e4m3 ring tiles'
// layouts (e4m3_k_offset, e4m3_v_offset): each a permutation of the tile's 16-byte chunks, and the
// S and P·V fragment reads of kernel.cuh (and, but at hd 96's V, the cp.async writes) take the
// fewest shared-memory wavefronts a warp's access can.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <map>
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

// Shared-memory wavefronts of one warp access of `unit` bytes per lane (4, 8 or 16) at byte
// addresses `addr` (lane order): the warp is served in phases of 128 bytes' worth of lanes; a
// phase takes as many wavefronts as the most distinct 4-byte words any one bank holds.
int wavefronts(const std::vector<int>& addr, int unit) {
  const int per_phase = 128 / unit;
  int total = 0;
  for (int first = 0; first < 32; first += per_phase) {
    std::map<int, std::set<int>> words;  // bank -> words
    for (int lane = first; lane < first + per_phase; ++lane)
      for (int w = 0; w < unit / 4; ++w) {
        const int word = addr[lane] / 4 + w;
        words[word % 32].insert(word);
      }
    int most = 0;
    for (const auto& [bank, set] : words) most = std::max(most, static_cast<int>(set.size()));
    total += most;
  }
  return total;
}

template <int kD>
void check_e4m3_layout() {
  using flashattn::decoding::e4m3_k_offset;
  using flashattn::decoding::e4m3_v_offset;
  constexpr int kChunks = kD / 16;  // 16-byte chunks per row of an e4m3 tile
  for (int which = 0; which < 2; ++which) {
    std::vector<int> got, want;
    for (int row = 0; row < kTileRows; ++row)
      for (int c = 0; c < kChunks; ++c) {
        for (int in : {0, 5, 15}) {  // bytes keep their place in the chunk
          const int off = which == 0 ? e4m3_k_offset<kD>(row, 16 * c + in)
                                     : e4m3_v_offset<kD>(row, 16 * c + in);
          EXPECT_EQ(off % 16, in) << "hd " << kD;
        }
        got.push_back(which == 0 ? e4m3_k_offset<kD>(row, 16 * c) : e4m3_v_offset<kD>(row, 16 * c));
        want.push_back(16 * (row * kChunks + c));
      }
    std::sort(got.begin(), got.end());
    EXPECT_EQ(got, want) << "hd " << kD << (which == 0 ? " K" : " V")
                         << ": not a permutation of the tile's chunks";
  }
  // S: lane 4g + t reads W bytes of keys g and g + 8 at group*4W + t*W.
  constexpr int kW = flashattn::decoding::e4m3_qk_bytes(kD);
  for (int group = 0; group < kD / (4 * kW); ++group)
    for (int key0 : {0, 8}) {
      std::vector<int> addr;
      for (int lane = 0; lane < 32; ++lane)
        addr.push_back(e4m3_k_offset<kD>(key0 + lane / 4, group * 4 * kW + (lane % 4) * kW));
      EXPECT_EQ(wavefronts(addr, kW), kW / 4) << "hd " << kD << " K read, group " << group;
    }
  // P·V: lane 4g + t reads kD/8 bytes of keys 2t + j (j = 0, 1, 8, 9) at g·kD/8, in units.
  constexpr int kWv = flashattn::decoding::e4m3_v_bytes(kD);
  constexpr int kUnit = flashattn::decoding::e4m3_v_unit(kD);
  for (int j : {0, 1, 8, 9})
    for (int u = 0; u < kWv / kUnit; ++u) {
      std::vector<int> addr;
      for (int lane = 0; lane < 32; ++lane)
        addr.push_back(e4m3_v_offset<kD>(2 * (lane % 4) + j, (lane / 4) * kWv + u * kUnit));
      EXPECT_EQ(wavefronts(addr, kUnit), kUnit / 4) << "hd " << kD << " V read, key " << j;
    }
  // cp.async: lane + 32i copies chunk (lane + 32i) % kChunks of row (lane + 32i) / kChunks.
  for (int i = 0; i < kTileRows * kChunks / 32; ++i)
    for (int which = 0; which < 2; ++which) {
      if (kD == 96 && which == 1) continue;  // 6 wavefronts against 4: see swizzle.h
      std::vector<int> addr;
      for (int lane = 0; lane < 32; ++lane) {
        const int flat = lane + 32 * i, row = flat / kChunks, c = flat % kChunks;
        addr.push_back(which == 0 ? e4m3_k_offset<kD>(row, 16 * c)
                                  : e4m3_v_offset<kD>(row, 16 * c));
      }
      EXPECT_EQ(wavefronts(addr, 16), 4)
          << "hd " << kD << (which == 0 ? " K" : " V") << " write " << i;
    }
}

template <std::size_t... I>
void check_every_e4m3_head_dim(std::index_sequence<I...>) {
  (check_e4m3_layout<flashattn::kDecodeHeadDims[I].qk>(), ...);
}

TEST(DecodeSwizzle, E4m3TilesArePermutedAndFragmentReadsConflictFree) {
  check_every_e4m3_head_dim(std::make_index_sequence<std::size(flashattn::kDecodeHeadDims)>{});
}

}  // namespace
