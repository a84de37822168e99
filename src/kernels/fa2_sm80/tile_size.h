// The one tile-size function of the FA2 family: a pure constexpr function of the head dims, so the
// host (launch grid, shared-memory check) and the kernel (register tiles) agree by construction.
#pragma once

namespace flashattn::fa2 {

struct TileSize {
  int block_m;  // query rows per thread block
  int block_n;  // keys per mainloop iteration
  int warps;    // warps tile along M: each owns block_m / warps consecutive query rows
  int stages;   // K/V shared-memory buffers: 2 = load block n+1 during block n (double buffer),
               // 1 = FA2's split overlap (V_n loads during Q·K_nᵀ, K_n+1 during softmax and P·V)
  bool lazy_rescale;  // rescale O only when a row max moved (OnlineSoftmax::update)
};

// Shared memory is Q (block_m x d) + stages x (K: block_n x d, V: block_n x dv), 2 bytes each.
// Every choice fits the 163 KB an sm_80 block may opt into, so one build serves A100 and H100;
// H100 (228 KB per SM) runs two blocks per SM where shared memory and registers allow.
// Four warps own 2 m16 tiles each (kMFrags = 2): each K/V fragment loaded by ldmatrix feeds twice
// the MMAs it feeds with 8 warps x 1 tile, which matters because mma.sync on H100 is close to
// shared-memory bound. The limit is registers: O (kMFrags x dv/2 fp32) + S (kMFrags x block_n/2)
// + about 95 for fragments, addresses and state must stay within 255. ptxas -v (sm_80 / sm_90).
// Measured on the H100 SXM (bf16/fp16, 16k tokens, hidden 2048; TFLOP/s, median of 20):
//   d64      128 x 64, 4 warps, 2 stages:  48 KB, 236/239 regs, 2 blocks/SM. (128 x 128, FA2's
//            A100 choice, spilled ~100 bytes: S alone is 128 registers.)
//            232 (s512) .. 297 (s16k) non-causal before lazy rescale.
//   d96      128 x 64, 4 warps, 2 stages:  72 KB, 254/255 regs, 2 blocks/SM
//   d128     128 x 32, 4 warps, 2 stages:  64 KB, 253/254 regs, 2 blocks/SM: 312 (s2048),
//            332 (s8192), 331 (s8192 causal). 128 x 64 with 4 warps spilled 60-100 bytes per
//            iteration; 128 x 64 with 8 warps fits in 194 registers but ran at 232 / 247 / 241:
//            it gives up the 2-tile fragment reuse and the second block per SM.
//            Lazy rescale: 324 -> 332 at s8192 (different machines of the same kind).
//   d192     128 x 64, 8 warps, 2 stages: 144 KB (128 KB for dv 128), 228/232 regs, 1 block/SM;
//            with 4 warps O alone would be 192 registers
//   d256     128 x 64, 8 warps, 1 stage:  128 KB, 245/249 regs, 1 block/SM (FA2's A100 choice):
//            272 (s1024), 307 (s4096). With lazy rescale 253 / 283: with one block per SM nothing
//            hides the serialised rescale. 128 x 32, 8 warps, 2 stages (128 KB): 227 / 251 / 263
//            (s16k), against 253 / 283 / 295. Two stages of 128 x 64 would need 192 KB, more than
//            an sm_80 block can have.
// The full grid against PyTorch's FA2 is in docs/PERF.md and bench/results/.
constexpr TileSize tile_size(int head_dim, int /*head_dim_v*/) {
  if (head_dim <= 64) return {128, 64, 4, 2, true};
  if (head_dim <= 96) return {128, 64, 4, 2, true};
  if (head_dim <= 128) return {128, 32, 4, 2, true};
  if (head_dim <= 192) return {128, 64, 8, 2, false};
  return {128, 64, 8, 1, false};
}

}  // namespace flashattn::fa2
