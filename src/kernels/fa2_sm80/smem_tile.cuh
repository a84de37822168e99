// Shared-memory tiles of 16-bit elements: the swizzled layout, and the cp.async copy that fills
// one from global memory with 16-byte loads.
//
// Layout: a kRows x kCols tile is split into column panels of kPanel (64, or 32 when kCols is not
// a multiple of 64, i.e. head dim 96) elements; each panel is row-major, and inside it the
// 16-byte chunks of row r are XOR-permuted by r (CuTe's Swizzle<3,3,3> on 128-byte rows,
// Swizzle<2,3,3> on 64-byte rows). ldmatrix has 8 lanes read the same logical chunk of 8
// consecutive rows; the swizzle puts those 8 chunks in 8 distinct 16-byte bank groups, so every
// ldmatrix phase and every cp.async store phase is conflict-free. Unswizzled, 128-byte rows would
// put all 8 in one bank group (8-way conflict).
#pragma once

#include <cstdint>
#include <cute/arch/copy_sm80.hpp>
#include <cute/swizzle.hpp>
#include <type_traits>

namespace flashattn::fa2 {

template <int kRows_, int kCols>
struct SmemTile {
  static constexpr int kRows = kRows_;
  static constexpr int kPanel = kCols % 64 == 0 ? 64 : 32;
  static constexpr int kElems = kRows_ * kCols;
  static_assert(kCols % kPanel == 0 && kRows % 8 == 0, "whole panels of whole 8-row groups");
  using Swizzle = std::conditional_t<kPanel == 64, cute::Swizzle<3, 3, 3>, cute::Swizzle<2, 3, 3>>;

  // Element offset of (row, col); col % 8 (the position inside a 16-byte chunk) is preserved.
  __device__ __forceinline__ static int offset(int row, int col) {
    return (col / kPanel) * (kRows * kPanel) + Swizzle{}(row * kPanel + col % kPanel);
  }
};

// The ldmatrix offsets of one lane: its own (row, col) inside a 16 x 16 fragment (row < 16,
// col 0 or 8) resolved through the swizzle once, for each 16-column step of a panel. Any
// fragment origin (row0, col0), both multiples of 16, is then base + a compile-time constant:
// row0 keeps row % 8 and col0 / kPanel only moves whole panels, so the XOR pattern is unchanged.
// Without this, ptxas hoists every swizzled address of the unrolled GEMMs out of the key loop
// (up to 80 registers) and spills.
template <class Tile>
struct LaneOffsets {
  static constexpr int kSteps = Tile::kPanel / 16;
  int base[kSteps];

  __device__ __forceinline__ LaneOffsets(int row, int col) {
#pragma unroll
    for (int j = 0; j < kSteps; ++j) base[j] = Tile::offset(row, col + 16 * j);
  }
  // Element offset of this lane's address in the fragment at (row0, col0).
  __device__ __forceinline__ int at(int row0, int col0) const {
    return base[col0 % Tile::kPanel / 16] + col0 / Tile::kPanel * (Tile::kRows * Tile::kPanel) +
           row0 * Tile::kPanel;
  }
};

// Issues the cp.async copies of a kRows x kCols tile (global rows `row_stride` elements apart) into
// `dst`. Rows at or past `valid_rows` are zero-filled (src-size 0; their source address is clamped
// to row 0, which the caller guarantees exists): a ragged K block must give S = 0 there before
// masking, and a ragged V block must give V = 0, or P = 0 times garbage could be NaN.
// Four lanes cover 64 contiguous bytes of a row (two whole 32-byte sectors), a thread keeps its
// chunk column and steps down rows: a thread's chunks of one row share one global pointer (the
// column steps are immediates), which keeps the hoisted address registers few (they spilled when
// every chunk had its own pointer).
template <typename Element, int kRows, int kCols, int kThreads>
__device__ __forceinline__ void copy_tile_async(Element* dst, const Element* src,
                                                int64_t row_stride, int valid_rows, int tid) {
  using Tile = SmemTile<kRows, kCols>;
  using CpAsync = cute::SM80_CP_ASYNC_CACHEGLOBAL_ZFILL<uint4>;
  // 8 lanes per row when the tile has fewer rows than kThreads / 4 (a 32-key block, 8 warps).
  constexpr int kLanesPerRow = kThreads / 4 <= kRows ? 4 : kThreads / kRows;
  constexpr int kColStep = 8 * kLanesPerRow;
  constexpr int kRowStep = kThreads / kLanesPerRow;
  static_assert(kCols % kColStep == 0 && kRows % kRowStep == 0 && kRowStep % 8 == 0,
                "whole rows per step; steps of whole 8-row swizzle groups");
  const int row = tid / kLanesPerRow;
  const int col = tid % kLanesPerRow * 8;
#pragma unroll
  for (int i = 0; i < kRows / kRowStep; ++i) {
    const int r = row + i * kRowStep;
    const bool pred = r < valid_rows;
    const Element* s = src + (pred ? r : 0) * row_stride + col;  // clamped to the first row
#pragma unroll
    for (int j = 0; j < kCols / kColStep; ++j) {
      CpAsync::copy(*reinterpret_cast<const uint4*>(s + kColStep * j),
                    *reinterpret_cast<uint4*>(dst + Tile::offset(r, col + kColStep * j)), pred);
    }
  }
}

}  // namespace flashattn::fa2
