// The schedules of the Hopper forward kernel: how warps are given roles and how a tile's GEMMs
// and softmax are ordered. Each is one idea on top of the last (docs/DESIGN.md, docs/perf/):
//   ScheduleK4: TMA ring + wgmma; every warp computes, thread 0 also issues the loads in line.
//   ScheduleK5: + warp specialization: a producer warpgroup (one thread issues TMA) and consumer
//               warpgroups, registers moved from producer to consumers with setmaxnreg.
//   ScheduleK6: + ping-pong of the consumer warpgroups (named barriers order their GEMMs so one's
//               softmax runs under the other's GEMMs), softmax of block j overlapping Q·Kᵀ of
//               block j+1 inside each warpgroup, and a persistent, longest-first tile scheduler.
// The kernel (kernel_fwd_sm90.cuh) reads only these flags; a mainloop collective reads
// kOverlap/kPingpong to pick its consumer loop.
#pragma once

namespace flashattn::fa3 {

struct ScheduleK4 {
  static constexpr const char* kName = "k4";
  static constexpr bool kWarpSpecialized = false;
  static constexpr bool kPingpong = false;
  static constexpr bool kOverlap = false;
  static constexpr bool kPersistent = false;
};

struct ScheduleK5 {
  static constexpr const char* kName = "k5";
  static constexpr bool kWarpSpecialized = true;
  static constexpr bool kPingpong = false;
  static constexpr bool kOverlap = false;
  static constexpr bool kPersistent = false;
};

struct ScheduleK6 {
  static constexpr const char* kName = "k6";
  static constexpr bool kWarpSpecialized = true;
  static constexpr bool kPingpong = true;    // consumer warpgroups take turns at the tensor cores
  static constexpr bool kOverlap = true;     // softmax(j) under Q·Kᵀ(j+1)
  static constexpr bool kPersistent = true;  // one block per SM walks tiles
};

// Warp roles. Warpgroup 0 is the producer of a warp-specialized schedule (K5, K6); every other
// warpgroup, and every warpgroup of K4, is a consumer.
enum class Role { producer, consumer };

template <class Schedule>
__host__ __device__ constexpr Role role_of(int warp_group) {
  return Schedule::kWarpSpecialized && warp_group == 0 ? Role::producer : Role::consumer;
}

// Registers per thread after setmaxnreg (multiples of 8). A block's 65536 registers are 512 per
// thread index of a warpgroup, shared by the producer and the consumers:
//   role      | 2 consumer warpgroups | 3 consumer warpgroups (d 64)
//   producer  | 24                    | 24
//   consumer  | 240                   | 160
//   total     | 24 + 2 x 240 = 504    | 24 + 3 x 160 = 504
// (The producer issues TMA from one thread; 24 is the floor setmaxnreg allows.) The FP8
// mainloop's producer warpgroup also transposes V (transpose_v_sm90.cuh): 40 with two consumer
// warpgroups, 32 with three (the leader spilled 40 bytes at 32 while it kept four ring states;
// with one, as K6's producer, it fits):
//   producer  | 40                    | 32
//   consumer  | 232                   | 160
//   total     | 40 + 2 x 232 = 504    | 32 + 3 x 160 = 512
constexpr int role_registers(Role role, int consumer_warp_groups, bool transposing = false) {
  if (transposing && consumer_warp_groups == 2) return role == Role::producer ? 40 : 232;
  if (transposing) return role == Role::producer ? 32 : 160;
  return role == Role::producer ? 24 : consumer_warp_groups == 2 ? 240 : 160;
}

// Named barrier ids of the schedules (bar.sync; 0 is __syncthreads).
enum Barrier : int {
  kPingpongWG0 = 1,   // + w: consumer warpgroup w may issue its GEMMs (w < 3)
  kEpilogueWG0 = 4,   // + w: warpgroup w's rows of the O staging buffer are written / read
};

}  // namespace flashattn::fa3
