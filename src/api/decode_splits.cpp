#include "api/decode_splits.h"

#include <algorithm>

#include "common/decode_problem.h"

namespace flashattn {

namespace {

int splits_for_slots(const DecodeSplitInputs& in) {
  const long long slots = static_cast<long long>(in.num_sms) * std::max(1, in.blocks_per_sm);
  const int max_splits = std::clamp(
      (in.key_tiles + kDecodeMinTilesPerSplit - 1) / kDecodeMinTilesPerSplit, 1, kDecodeMaxSplits);
  auto efficiency = [&](int s) {
    const long long total = static_cast<long long>(in.blocks) * s;
    const long long waves = (total + slots - 1) / slots;
    return static_cast<double>(total) / static_cast<double>(waves * slots);
  };
  double best = 0;
  for (int s = 1; s <= max_splits; ++s) best = std::max(best, efficiency(s));
  for (int s = 1; s <= max_splits; ++s) {
    if (efficiency(s) >= 0.95 * best) return s;
  }
  return 1;
}

}  // namespace

int decode_num_splits(const DecodeSplitInputs& in) {
  if (in.blocks <= 0 || in.key_tiles <= 0 || in.num_sms <= 0) return 1;
  const int per_sm = std::max(1, in.blocks_per_sm);
  if (in.stream_blocks_per_sm > 0 && in.stream_blocks_per_sm < per_sm) {
    DecodeSplitInputs fewer = in;
    fewer.blocks_per_sm = in.stream_blocks_per_sm;
    const int s = splits_for_slots(fewer);
    if (static_cast<long long>(in.blocks) * s <=
        static_cast<long long>(in.num_sms) * in.stream_blocks_per_sm) {
      return s;
    }
  }
  return splits_for_slots(in);
}

}  // namespace flashattn
