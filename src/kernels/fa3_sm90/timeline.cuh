// A per-warp timeline of the Hopper kernels, for diagnosis only: the hooks of the one trace scheme
// (common/trace.h), compiled in by the CMake option FLASHATTN_TIMELINE (never in a normal build,
// where FA_TRACE and friends are empty; bench/timeline.py says how to build, run and read it).
// Every Hopper header that traces includes this one, so the hooks are defined before trace.h.
//
// The first kTraceBlocks blocks record (tag, SM clock) pairs from one thread per role: the
// producer thread and lane 0 of each consumer warpgroup's first warp. After each launch the host
// side (FA_TRACE_DUMP, in run_forward) copies the records of that launch into the file named
// by DebugOptions::timeline_out (flashattn-bench --timeline-out), overwriting it; bench/timeline.py reads it. The stamps cost a clock
// read, a shared-memory counter and a global store each, so the traced kernel runs slightly
// slower than the real one: read the timeline for where time goes, not for absolute speed.
#pragma once

#ifdef FLASHATTN_TIMELINE
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

namespace flashattn::fa3::timeline {

inline constexpr int kTraceBlocks = 8;
inline constexpr int kRoles = 4;  // producer, consumer warpgroups 0 to 2 (three at head dim 64)
inline constexpr int kMaxEvents = 8192;

enum Tag : unsigned {
  kTile = 1,     // consumer: the tile is announced (q_full passed)
  kKWait = 2,    // consumer: key block's K stage is full
  kSlot = 3,     // consumer: ping-pong turn granted (GEMMs may issue)
  kS = 4,        // consumer: S of the block is in registers
  kSoftmax = 5,  // consumer: softmax of the block done
  kPV = 6,       // consumer: the previous block's P·V is done (O rescaled after)
  kLastPV = 8,   // consumer: the tile's last P·V is done
  kEpilogue = 9, // consumer: the epilogue returned
  kExit = 10,    // consumer or producer: leaves the tile loop
  kBegin = 11,   // every role: the block's setup is done (after the first barrier)
  kEpiConvert = 12,  // epilogue: O normalised and rounded in registers
  kEpiBar1 = 13,     // epilogue: the staging rows are free (first warpgroup barrier)
  kEpiStaged = 14,   // epilogue: O is in shared memory (second warpgroup barrier)
  kEpiStored = 15,   // epilogue: the global stores are issued
  kProdTile = 20,  // producer: Q's buffer is free, the tile is announced next
  kProdKV = 21,    // producer: a K/V stage was acquired and its loads issued
  kProdQ = 23,     // producer: Q's load issued
  kProdK = 24,     // producer: K's stage acquired and its load issued (V next)
  kProdNext = 22,  // producer: the next tile is known
};

static __device__ uint2 records[kTraceBlocks][kRoles][kMaxEvents];
static __device__ int counts[kTraceBlocks][kRoles];

__device__ __forceinline__ unsigned tid_x() {
  unsigned t;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(t));
  return t;
}

// The block's event counters, one per role, in shared memory.
__device__ __forceinline__ int* counters() {
  __shared__ int n[kRoles];
  return n;
}

// Zeroes the counters; thread 0, before the block's first barrier.
__device__ __forceinline__ void init() {
  if (blockIdx.x < kTraceBlocks) {
    for (int r = 0; r < kRoles; ++r) counters()[r] = 0;
  }
}

// role: 0 producer, 1 + consumer warpgroup. Only the calling thread records: the tag and the low
// 32 bits of the SM clock (they wrap every ~2 s; the reader unwraps). The count is published to
// global memory at kExit only, to keep each stamp to a few instructions.
__device__ __forceinline__ void stamp(int role, unsigned tag) {
  const unsigned b = blockIdx.x;
  if (b >= kTraceBlocks) return;
  int* n = counters();
  const int i = n[role];
  if (i < kMaxEvents) {
    unsigned clk;
    asm volatile("mov.u32 %0, %%clock;" : "=r"(clk));
    records[b][role][i] = make_uint2(tag, clk);
    n[role] = i + 1;
  }
  if (tag == kExit) counts[b][role] = min(i + 1, kMaxEvents);
}

// Host: after a launch, when `path` (DebugOptions::timeline_out) names a file, waits for the kernel
// and writes its records there: int32 blocks, roles, then per (block, role) an int32 count and that many
// (uint32 tag, uint32 SM clock) records.
inline void dump(const char* path) {
  if (path == nullptr) return;
  static uint2 host[kTraceBlocks][kRoles][kMaxEvents];
  static int n[kTraceBlocks][kRoles];
  if (cudaDeviceSynchronize() != cudaSuccess) return;
  cudaMemcpyFromSymbol(host, records, sizeof(host));
  cudaMemcpyFromSymbol(n, counts, sizeof(n));
  FILE* f = std::fopen(path, "wb");
  if (f == nullptr) return;
  const int dims[2] = {kTraceBlocks, kRoles};
  std::fwrite(dims, sizeof(int), 2, f);
  for (int b = 0; b < kTraceBlocks; ++b) {
    for (int r = 0; r < kRoles; ++r) {
      std::fwrite(&n[b][r], sizeof(int), 1, f);
      std::fwrite(host[b][r], sizeof(uint2), n[b][r], f);
    }
  }
  std::fclose(f);
}

}  // namespace flashattn::fa3::timeline
#endif

#ifdef FLASHATTN_TIMELINE
// The hooks of common/trace.h: one thread per role records (lane 0 of its warpgroup).
#define FA_TRACE_HOOK(role, tag, after)                                        \
  do {                                                                          \
    if (::flashattn::fa3::timeline::tid_x() % 128 == 0)                         \
      ::flashattn::fa3::timeline::stamp(role, ::flashattn::fa3::timeline::tag); \
  } while (0)
#define FA_TRACE_INIT_HOOK() ::flashattn::fa3::timeline::init()
#define FA_TRACE_DUMP_HOOK(path) ::flashattn::fa3::timeline::dump(path)
#endif
#include "common/trace.h"
