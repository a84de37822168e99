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
  int step_n;       // keys per S = Q·Kᵀ, softmax, O += P·V step (divides block_n; S of one step
                    // is what lives in registers beside O)
  int step_n_sm80;  // the step of the sm_80 SASS, where step_n would spill (the H100 runs the
                    // sm_90 SASS, with step_n)
};

// Shared memory is Q (block_m x d) + stages x (K: block_n x d, V: block_n x dv), 2 bytes each.
// Every choice fits the 163 KB an sm_80 block may opt into, so one build serves A100 and H100;
// H100 (228 KB per SM) runs two blocks per SM where shared memory and registers allow.
// Four warps own 2 m16 tiles each (kMFrags = 2): each K/V fragment loaded by ldmatrix feeds twice
// the MMAs it feeds with 8 warps x 1 tile, which matters because mma.sync on H100 is close to
// shared-memory bound. The limit is registers: O (kMFrags x dv/2 fp32) + S (kMFrags x step_n/2)
// + fragments, addresses and state must stay within 255. Two stages pay one barrier per block_n
// keys (K and V of block i+1 are issued together at the top of block i); step_n < block_n runs
// several S / softmax / P·V steps under that one barrier, so S stays the size of a step.
// ptxas -v (sm_80 / sm_90), 0 spills, 0 stack everywhere.
// Measured on the H100 SXM (bf16, 16k tokens, hidden 2048; TFLOP/s, median of 10, non-causal
// unless said; "flash" is PyTorch SDPA's FA2 backend in the same run):
//   d64      128 x 128 keys in steps of 64, 4 warps, 2 stages: 80 KB, 212/221 regs, 2 blocks/SM:
//            252 / 279 / 299 / 309 / 316 / 319 (s512 .. s16k), 0.93 .. 1.03 of flash. Before: 128
//            x 64 unsplit (236/239 regs): 230 / 255 / 273 / 283 / 288 (s512 .. s8192), against
//            246 / 274 / 295 / 306 / 313 for this plan in the same run (+7-9%).
//            128 x 128 unsplit still spills (S alone is 128 registers).
//   d96      128 x 64, 4 warps, 2 stages:  72 KB, 243/245 regs, 2 blocks/SM (not re-measured)
//   d128     128 x 64 unsplit (one 64-key step) on sm_90, 4 warps, 2 stages: 96 KB, 255 regs,
//            0 spills, 2 blocks/SM: 306 / 344 / 368 / 387 / 397 / 393 (s512 .. s16k; 1.00 .. 1.13
//            of flash), causal 192 .. 406 (1.01 .. 1.26). Against 128 x 64 in 32-key steps in the
//            same run (all else equal): 272 / 304 / 326 / 342 / 353 / 359, i.e. +10-13% dense,
//            +4-14% causal. Expected up to +17%: the 32-key steps read Q from shared memory
//            twice per block (96 ldmatrix per warp per 64 keys, 80 unsplit) and mma.sync here is
//            close to shared-memory bound; got +10-13%, so shared memory is not the only limit.
//            It fits only since the prologue split (kernel.cuh): before it, and with the dense
//            block order alone, ptxas spilled 40-64 bytes here. The sm_80 SASS spills 20 bytes
//            at the 64-key step, so it keeps 32-key steps (244 regs; not measured, no A100).
//            Earlier, 128 x 64 keys in steps of 32 (238 regs):
//            305 / 325 / 341 / 351 / 352 (s1024 .. s16k; 0.90 .. 1.00 of flash), causal 245 ..
//            359 (0.98 .. 1.12). Before: 128 x 32 (253/254 regs, two barriers per 32 keys): 290 /
//            309 / 324 / 338 / 340 (docs/perf/fa2.md, other run). Expected +5-8% from a quarter of
//            the barriers; got +3-4%: the split re-reads Q from shared memory per 32-key step, and
//            the gap to flash is largest at short sequences (0.88 at s1024 against 1.00 at s16k),
//            i.e. it is mostly a per-tile fixed cost that the key-block shape does not touch. 128 x
//            64 unsplit, 4 warps: demand ~270 registers after cutting the overhead (per-row mask
//            bounds, per-step ldmatrix and cp.async offsets, epilogue state: ~15 registers); still
//            spills 36-64 bytes, mostly in Q·Kᵀ where O + S + in-flight fragments peak. 128 x 64
//            with 8 warps fits in 194 registers but ran at 232 / 247 / 241: it gives up the 2-tile
//            fragment reuse and the second block per SM. (That 270 was demand before the
//            split prologue; the unsplit plan above now fits.)
//   d192     128 x 64, 8 warps, 2 stages: 144 KB (128 KB for dv 128), 204/210 regs, 1 block/SM;
//            with 4 warps O alone would be 192 registers (not re-measured)
//   d256     128 x 64, 8 warps, 1 stage:  128 KB, 245 regs, 1 block/SM (FA2's A100 choice):
//            with the dense block order 265 / 296 / 319 / 330 / 335 / 335 (s512 .. s16k; 0.91 ..
//            1.03 of flash), causal 180 .. 342 (0.87 .. 1.15); s512 and s1024 dense stay under
//            flash (0.91, 0.95): one block per SM leaves the prologue and epilogue of every
//            tile exposed. Before: 253 / 286 / 310 (s512 .. s2048) with the mask's block order
//            (docs/perf/fa2.md), 275 (s1024), 308 (s4096) before the shorter in-loop state.
//            With lazy rescale 253 / 283: with one block per SM nothing hides the serialised
//            rescale. 128 x 32, 8 warps, 2 stages (128 KB): 227 / 251 / 263 (s16k), against 253 /
//            283 / 295. Two stages of 128 x 64 would need 192 KB, more than an sm_80 block can
//            have.
// The full grid against PyTorch's FA2 is in docs/PERF.md (history: docs/perf/fa2.md) and
// bench/results/.
constexpr TileSize tile_size(int head_dim, int /*head_dim_v*/) {
  if (head_dim <= 64) return {128, 128, 4, 2, true, 64, 64};
  if (head_dim <= 96) return {128, 64, 4, 2, true, 64, 64};
  if (head_dim <= 128) return {128, 64, 4, 2, true, 64, 32};
  if (head_dim <= 192) return {128, 64, 8, 2, false, 64, 64};
  return {128, 64, 8, 1, false, 64, 64};
}

}  // namespace flashattn::fa2
