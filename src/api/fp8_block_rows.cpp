// fp8_block_rows(): K8's descale blocks are the FP8 kernel's tiles (query tile, key block), so a
// block of scores Q·Kᵀ has one k descale and each of its rows one q descale.
#include "common/head_dims.h"
#include "flashattn/flashattn.h"
#include "kernels/fa3_sm90/tile_size.h"

namespace flashattn {

Fp8BlockRows fp8_block_rows(int head_dim) {
  if (!head_dims_in<kFp8HeadDims>(head_dim, head_dim)) return {};
  const fa3::TileSizeFp8 t = fa3::tile_size_fp8(head_dim);
  return {t.block_m, t.block_n};
}

}  // namespace flashattn
