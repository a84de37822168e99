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

// The ldmatrix offset of one lane: its own (row, col) inside a 16 x 16 fragment (row < 16, col 0
// or 8) resolved through the swizzle once. Any fragment origin (row0, col0), both multiples of 16,
// is then reached without re-swizzling: row0 keeps row % 8 and col0 / kPanel only moves whole
// panels (compile-time adds), and the 16-column step j inside a panel flips the chunk bits 16·j,
// which the XOR swizzle passes through unchanged (swizzle(x ^ y) = swizzle(x) ^ swizzle(y), and
// x = row·kPanel + col has no bits in common with 16·j). One register per operand instead of one
// per 16-column step (kPanel / 16 of them), at the price of one LOP per ldmatrix.
// Without this, ptxas hoists every swizzled address of the unrolled GEMMs out of the key loop
// (up to 80 registers) and spills.
template <class Tile>
struct LaneOffsets {
  int base;

  __device__ __forceinline__ LaneOffsets(int row, int col) : base(Tile::offset(row, col)) {}
  // A copy the compiler cannot prove loop-invariant: called once per key block, it keeps NVVM
  // from hoisting the kPanel / 16 XORed bases (and their shared-memory addresses) out of the
  // key loop, which would cost the registers this struct exists to save.
  __device__ __forceinline__ LaneOffsets opaque() const {
    LaneOffsets o = *this;
    asm volatile("" : "+r"(o.base));
    return o;
  }
  // Element offset of this lane's address in the fragment at (row0, col0).
  __device__ __forceinline__ int at(int row0, int col0) const {
    return (base ^ (col0 % Tile::kPanel)) + col0 / Tile::kPanel * (Tile::kRows * Tile::kPanel) +
           row0 * Tile::kPanel;
  }
};

// Issues the cp.async copies of a kRows x kCols tile (global rows `row_stride` elements apart) into
// `dst`. Rows at or past `valid_rows` are zero-filled (src-size 0; their source address is clamped
// to row 0, which the caller guarantees exists): a ragged K block must give S = 0 there before
// masking, and a ragged V block must give V = 0, or P = 0 times garbage could be NaN.
// A row of one panel is covered by kPanel / 8 lanes (128 contiguous bytes for 64-element panels,
// four whole 32-byte sectors); a thread keeps its chunk column and steps down rows by multiples
// of 8 and across columns by whole panels, so every destination is the thread's first swizzled
// offset plus a compile-time constant (one live register for all of a tile's copies) and a
// thread's chunks of one row share one global pointer (the column steps are immediates). With 4
// lanes per 64-element panel the column steps moved inside a panel, each destination needed its
// own swizzled offset, and ptxas kept all of them live through the key loop (spills at 128 x 64).
// The thread mapping of copy_tile_async.
template <int kRows, int kCols, int kThreads>
struct CopyPlan {
  using Tile = SmemTile<kRows, kCols>;
  // More lanes per row (several panels per step) when the tile has too few rows for kThreads.
  static constexpr int kLanesPerRow =
      kThreads / (Tile::kPanel / 8) <= kRows ? Tile::kPanel / 8 : kThreads / kRows;
  static constexpr int kColStep = 8 * kLanesPerRow;
  static constexpr int kRowStep = kThreads / kLanesPerRow;
  static_assert(kColStep % Tile::kPanel == 0 && kCols % kColStep == 0 && kRows % kRowStep == 0 &&
                    kRowStep % 8 == 0,
                "steps of whole panels and whole 8-row swizzle groups");

  __device__ __forceinline__ static int row(int tid) { return tid / kLanesPerRow; }
  __device__ __forceinline__ static int col(int tid) { return tid % kLanesPerRow * 8; }
  // Element offset of the thread's first chunk in global memory.
  __device__ __forceinline__ static int64_t src_offset(int64_t row_stride, int tid) {
    return row(tid) * row_stride + col(tid);
  }
};

template <typename Element, int kRows, int kCols, int kThreads>
__device__ __forceinline__ void copy_tile_async(Element* dst, const Element* src,
                                                int64_t row_stride, int valid_rows, int tid) {
  using Plan = CopyPlan<kRows, kCols, kThreads>;
  using Tile = typename Plan::Tile;
  using CpAsync = cute::SM80_CP_ASYNC_CACHEGLOBAL_ZFILL<uint4>;
  const int row = Plan::row(tid), col = Plan::col(tid);
  const int base = Tile::offset(row, col);
  // One running pointer (a product per row step would be hoisted out of the key loop, 2
  // registers each).
  const Element* first = src + col;
  const Element* next = first + row * row_stride;
#pragma unroll
  for (int i = 0; i < kRows / Plan::kRowStep; ++i) {
    const int r = row + i * Plan::kRowStep;
    const bool pred = r < valid_rows;
    const Element* s = pred ? next : first;  // clamped to the first row
    next += Plan::kRowStep * row_stride;
#pragma unroll
    for (int j = 0; j < kCols / Plan::kColStep; ++j) {
      // == Tile::offset(r, col + kColStep * j): whole rows of 8 and whole panels keep the XOR.
      const int d = base + i * Plan::kRowStep * Tile::kPanel +
                    j * (Plan::kColStep / Tile::kPanel) * kRows * Tile::kPanel;
      CpAsync::copy(*reinterpret_cast<const uint4*>(s + Plan::kColStep * j),
                    *reinterpret_cast<uint4*>(dst + d), pred);
    }
  }
}

// A whole tile (no ragged rows) from the thread's own first chunk, src_thread = tile origin +
// CopyPlan::src_offset: the key loop keeps one such pointer per operand and steps it, instead of
// the tensor base and a 64-bit product per block.
template <typename Element, int kRows, int kCols, int kThreads>
__device__ __forceinline__ void copy_whole_tile_async(Element* dst, const Element* src_thread,
                                                      int64_t row_stride, int tid) {
  using Plan = CopyPlan<kRows, kCols, kThreads>;
  using Tile = typename Plan::Tile;
  using CpAsync = cute::SM80_CP_ASYNC_CACHEGLOBAL_ZFILL<uint4>;
  const int base = Tile::offset(Plan::row(tid), Plan::col(tid));
  const Element* s = src_thread;
#pragma unroll
  for (int i = 0; i < kRows / Plan::kRowStep; ++i) {
#pragma unroll
    for (int j = 0; j < kCols / Plan::kColStep; ++j) {
      const int d = base + i * Plan::kRowStep * Tile::kPanel +
                    j * (Plan::kColStep / Tile::kPanel) * kRows * Tile::kPanel;
      CpAsync::copy(*reinterpret_cast<const uint4*>(s + Plan::kColStep * j),
                    *reinterpret_cast<uint4*>(dst + d), true);
    }
    s += Plan::kRowStep * row_stride;
  }
}

}  // namespace flashattn::fa2
