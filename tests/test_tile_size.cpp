// CPU tests of the FA2 tile-size function: every plan the kernels instantiate must satisfy the
// constraints the kernel's fragment layout and copy loops assume, and fit an sm_80 block.
#include <gtest/gtest.h>

#include <utility>

#include "kernels/fa2_sm80/tile_size.h"

namespace {

using flashattn::fa2::tile_size;
using flashattn::fa2::TileSize;

constexpr std::pair<int, int> kHeadDims[] = {{64, 64},   {96, 96},   {128, 128},
                                             {192, 192}, {192, 128}, {256, 256}};

TEST(Fa2TileSize, PlansFitTheFragmentLayout) {
  for (auto [d, dv] : kHeadDims) {
    const TileSize t = tile_size(d, dv);
    SCOPED_TRACE(testing::Message() << "head_dim " << d << "/" << dv);
    EXPECT_TRUE(t.warps == 4 || t.warps == 8);
    EXPECT_EQ(t.block_m % (16 * t.warps), 0) << "whole m16 tiles per warp";
    EXPECT_EQ(t.block_n % 16, 0) << "whole k16 steps of P·V";
    EXPECT_TRUE(t.stages == 1 || t.stages == 2);
    // cp.async copies: rows per step of 4 (or 8) lanes per row must divide the tile.
    const int threads = 32 * t.warps;
    EXPECT_EQ(t.block_m % (threads / 4), 0);
    EXPECT_EQ(t.block_n * 8 % threads, 0);
  }
}

TEST(Fa2TileSize, SharedMemoryFitsSm80) {
  for (auto [d, dv] : kHeadDims) {
    const TileSize t = tile_size(d, dv);
    const int bytes = 2 * (t.block_m * d + t.stages * t.block_n * (d + dv));
    EXPECT_LE(bytes, 163 * 1024) << "head_dim " << d << "/" << dv;
  }
}

}  // namespace
