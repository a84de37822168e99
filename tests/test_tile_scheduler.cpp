// The Hopper family's tile orders (src/kernels/fa3_sm90/tile_scheduler.cuh), checked on the CPU:
// every (query tile, head, sequence) is computed exactly once whatever the grid, and the
// longest-first order really starts with the longest tiles of each group.
#include <gtest/gtest.h>

#include <set>
#include <tuple>
#include <vector>

#include "kernels/fa3_sm90/tile_scheduler.cuh"

namespace {

using flashattn::fa3::TileCoord;
using flashattn::fa3::TileScheduler;

// All tiles the blocks of a grid of `blocks` visit, round by round, as the kernel walks them.
std::vector<int> visited(const TileScheduler& s, int blocks) {
  std::vector<int> tiles;
  for (int b = 0; b < blocks; ++b) {
    for (int round = 0, t; (t = s.tile_of(round, b, blocks)) < s.num_tiles(); ++round) {
      tiles.push_back(t);
    }
  }
  return tiles;
}

TEST(TileScheduler, EveryTileOnceForAnyGrid) {
  for (int group : {0, 1, 3, 7}) {
    for (int blocks : {1, 5, 132, 1000}) {
      TileScheduler s{.num_m_blocks = 9, .heads = 5, .batch = 3, .group_heads = group};
      std::vector<int> tiles = visited(s, std::min(blocks, s.num_tiles()));
      std::set<int> unique(tiles.begin(), tiles.end());
      EXPECT_EQ(tiles.size(), size_t(s.num_tiles())) << "group " << group << " blocks " << blocks;
      EXPECT_EQ(unique.size(), size_t(s.num_tiles()));
      std::set<std::tuple<int, int, int>> coords;
      for (int t = 0; t < s.num_tiles(); ++t) {
        const TileCoord c = s.coord(t);
        ASSERT_GE(c.m_block, 0);
        ASSERT_LT(c.m_block, s.num_m_blocks);
        ASSERT_LT(c.head, s.heads);
        ASSERT_LT(c.batch, s.batch);
        coords.insert({c.m_block, c.head, c.batch});
      }
      EXPECT_EQ(coords.size(), size_t(s.num_tiles())) << "coord() must be a bijection";
    }
  }
}

TEST(TileScheduler, LongestFirstWithinGroupsAndDenseKeepsHeadsTogether) {
  const TileScheduler causal{.num_m_blocks = 4, .heads = 3, .batch = 2, .group_heads = 4};
  // First group: the 4 pairs' last query tiles (the longest under a causal mask) come first.
  for (int t = 0; t < 4; ++t) EXPECT_EQ(causal.coord(t).m_block, 3) << t;
  for (int t = 4; t < 8; ++t) EXPECT_EQ(causal.coord(t).m_block, 2) << t;
  // The last group holds the 2 remaining pairs.
  EXPECT_EQ(causal.coord(16).m_block, 3);
  EXPECT_EQ(causal.coord(16).head + 3 * causal.coord(16).batch, 4);
  const TileScheduler dense{.num_m_blocks = 4, .heads = 3, .batch = 2, .group_heads = 0};
  for (int t = 0; t < 4; ++t) {  // one head's query tiles side by side: its K/V stays in L2
    EXPECT_EQ(dense.coord(t).head, 0);
    EXPECT_EQ(dense.coord(t).m_block, t);
  }
}

TEST(TileScheduler, RoundsSnake) {
  const TileScheduler s{.num_m_blocks = 8, .heads = 4, .batch = 1, .group_heads = 4};
  // Round 0 hands tiles out in block order, round 1 in reverse.
  EXPECT_EQ(s.tile_of(0, 0, 10), 0);
  EXPECT_EQ(s.tile_of(0, 9, 10), 9);
  EXPECT_EQ(s.tile_of(1, 0, 10), 19);
  EXPECT_EQ(s.tile_of(1, 9, 10), 10);
}

}  // namespace
