// The Hopper family's tile orders (src/kernels/fa3_sm90/tile_scheduler.cuh), checked on the CPU:
// every (query tile, head, sequence) is computed exactly once whatever the grid, and the
// longest-first order really starts with the longest tiles of each group (the smaller, left-over
// group first).
#include <gtest/gtest.h>

#include <set>
#include <tuple>
#include <vector>

#include <cstdint>
#include <random>

#include "common/fast_div.h"
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

// Tiles aligned to the sequence's end: the first starts top_rows before row 0 (less than a tile)
// and holds the partial tile's rows, the last ends exactly at the sequence's end, and the same
// number of tiles covers every row.
TEST(TileScheduler, TopRowsAlignTheLastTileToTheEnd) {
  for (int block_m : {64, 128, 192}) {
    for (int len : {1, 17, 64, 113, 128, 191, 192, 193, 239, 512, 799, 1023, 1024, 16384}) {
      const int tiles = (len + block_m - 1) / block_m;
      EXPECT_EQ(flashattn::fa3::top_rows(block_m, len, false), 0);
      const int top = flashattn::fa3::top_rows(block_m, len, true);
      SCOPED_TRACE(testing::Message() << "block_m " << block_m << " len " << len);
      EXPECT_GE(top, 0);
      EXPECT_LT(top, block_m);
      EXPECT_EQ(tiles * block_m - top, len) << "the last tile ends at the sequence's end";
      EXPECT_EQ(block_m - top, len % block_m == 0 ? block_m : len % block_m)
          << "the partial tile is the first";
    }
  }
}

TEST(TileScheduler, EveryTileOnceForAnyGrid) {
  for (int group : {0, 1, 3, 7}) {
    for (int blocks : {1, 5, 132, 1000}) {
      const TileScheduler s = TileScheduler::make(9, 5, 3, group);
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
  const TileScheduler causal = TileScheduler::make(4, 3, 2, 4);
  // 6 pairs in groups of 4: the 2 left over (pairs 4 and 5) make the first group, walked longest
  // tile first (the last query tile is the longest under a causal mask).
  for (int t = 0; t < 2; ++t) {
    EXPECT_EQ(causal.coord(t).m_block, 3) << t;
    EXPECT_EQ(causal.coord(t).head + 3 * causal.coord(t).batch, 4 + t) << t;
  }
  for (int t = 2; t < 4; ++t) EXPECT_EQ(causal.coord(t).m_block, 2) << t;
  // Then the whole group of pairs 0-3, its 4 longest tiles first.
  for (int t = 8; t < 12; ++t) {
    EXPECT_EQ(causal.coord(t).m_block, 3) << t;
    EXPECT_EQ(causal.coord(t).head + 3 * causal.coord(t).batch, t - 8) << t;
  }
  EXPECT_EQ(causal.coord(12).m_block, 2);
  // Pairs that divide into whole groups: no rotation.
  const TileScheduler whole = TileScheduler::make(4, 3, 2, 3);
  for (int t = 0; t < 3; ++t) EXPECT_EQ(whole.coord(t).head, t) << t;
  EXPECT_EQ(whole.coord(3).m_block, 2);
  const TileScheduler dense = TileScheduler::make(4, 3, 2, 0);
  for (int t = 0; t < 4; ++t) {  // one head's query tiles side by side: its K/V stays in L2
    EXPECT_EQ(dense.coord(t).head, 0);
    EXPECT_EQ(dense.coord(t).m_block, t);
  }
}

TEST(TileScheduler, RoundsSnake) {
  const TileScheduler s = TileScheduler::make(8, 4, 1, 4);
  // Round 0 hands tiles out in block order, round 1 in reverse.
  EXPECT_EQ(s.tile_of(0, 0, 10), 0);
  EXPECT_EQ(s.tile_of(0, 9, 10), 9);
  EXPECT_EQ(s.tile_of(1, 0, 10), 19);
  EXPECT_EQ(s.tile_of(1, 9, 10), 10);
}

// FastDiv against `/` and `%`: every divisor up to 4096 with the numerators where rounding is
// hardest (around multiples of the divisor, and the top of the range), then random pairs.
TEST(FastDiv, MatchesIntegerDivision) {
  auto check = [](int d, int n) {
    const flashattn::FastDiv f(d);
    int q = -1, r = -1;
    f.divmod(n, q, r);
    ASSERT_EQ(q, n / d) << n << " / " << d;
    ASSERT_EQ(r, n % d) << n << " % " << d;
  };
  for (int d = 1; d <= 4096; ++d) {
    for (int k : {0, 1, 2, 3, 1000, 65535, (INT32_MAX / d) - 1, INT32_MAX / d}) {
      for (int delta : {-1, 0, 1}) {
        const int64_t n = int64_t(k) * d + delta;
        if (n >= 0 && n <= INT32_MAX) check(d, int(n));
      }
    }
    check(d, INT32_MAX);
  }
  std::mt19937 rng(12345);
  std::uniform_int_distribution<int> any(0, INT32_MAX), divisor(1, INT32_MAX);
  for (int i = 0; i < 200000; ++i) check(divisor(rng), any(rng));
}

// coord() and kv_head() (fast divisions) against the same order written with `/` and `%`.
TEST(TileScheduler, CoordMatchesPlainDivision) {
  for (int group : {0, 1, 2, 3, 5, 7, 15, 16, 100}) {
    for (int m : {1, 2, 9, 33}) {
      for (int kv_group : {1, 2, 4, 7}) {
        const int heads = 7 * kv_group, batch = 3;
        const TileScheduler s = TileScheduler::make(m, heads, batch, group, kv_group);
        for (int t = 0; t < s.num_tiles(); ++t) {
          int m_block, bh;
          if (group == 0) {
            m_block = t % m;
            bh = t / m;
          } else {
            // The order with the smaller group last, rotated so that group comes first.
            const int pairs = heads * batch, rest = pairs % group;
            const int first = pairs > group && rest > 0 ? rest * m : 0;
            const int u = t < first ? t + s.num_tiles() - first : t - first;
            const int per_group = group * m, g = u / per_group, r = u % per_group;
            const int left = heads * batch - g * group, in_group = group < left ? group : left;
            m_block = m - 1 - r / in_group;
            bh = g * group + r % in_group;
          }
          const TileCoord c = s.coord(t);
          ASSERT_EQ(c.m_block, m_block) << t;
          ASSERT_EQ(c.head, bh % heads) << t;
          ASSERT_EQ(c.batch, bh / heads) << t;
          ASSERT_EQ(s.kv_head(c.head), c.head / kv_group) << t;
          const TileCoord d = s.coord<false>(t);
          ASSERT_EQ(d.m_block, c.m_block) << t;
          ASSERT_EQ(d.head, c.head) << t;
          ASSERT_EQ(d.batch, c.batch) << t;
          ASSERT_EQ(s.kv_head<false>(c.head), s.kv_head(c.head)) << t;
        }
      }
    }
  }
}

}  // namespace
