// Workloads (one attention shape on one kernel), the standard grid, and their FLOP counts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "args.h"
#include "flashattn/flashattn.h"

namespace flashattn::bench {

struct Workload {
  Kernel kernel = Kernel::automatic;
  DType dtype = DType::bf16;  // q, k, v (e4m3: quantised from bf16 data, Options::dtype)
  InputDist dist = InputDist::normal;
  Fp8Scaling fp8_scaling = Fp8Scaling::per_tensor;  // e4m3 only: how the inputs are quantised
  int batch = 0, heads = 0, kv_heads = 0;
  int seqlen_q = 0, seqlen_k = 0;
  int hdim = 0, hdim_v = 0;
  bool causal = false;
  int window_left = -1, window_right = -1;  // as given; causal is applied on top
  bool sinks = false;  // attention sinks: one logit per query head (Workspace draws them)
  float softcap = 0.f;  // ForwardParams::softcap (0: off)
  bool bwd = false;    // time backward() (the forward runs once for o and lse)
  // A variable-length call: `batch` sequences of seqlen_q x seqlen_k through cu_seqlens; with
  // page_size > 0, k and v in a paged cache of that page size (ForwardParams::block_table).
  bool varlen = false;
  int page_size = 0;
  bool deterministic = false;  // backward: BackwardParams::deterministic

  bool fp8() const { return dtype == DType::e4m3 || dtype == DType::e5m2; }
  // K8: bf16 inputs quantised by quantize_fp8() inside each timed run (block descales).
  bool block_scaled() const { return fp8() && fp8_scaling != Fp8Scaling::per_tensor; }
  // o's element type: bf16 for FP8 inputs (ForwardParams::out_dtype), else the inputs' type.
  DType out_dtype() const { return fp8() ? DType::bf16 : dtype; }
};

// The single shape of the flags, or the standard grid, for each requested kernel (kernel outermost
// so that the table reads one kernel at a time).
std::vector<Workload> make_workloads(const Options& opts);

// Exactly how many (query, key) pairs the bottom-right aligned mask lets through, in O(seqlen_q).
// left/right of -1 are unbounded.
int64_t visible_pairs(int seqlen_q, int seqlen_k, int left, int right);

struct FlopCount {
  double flops = 0;
  const char* convention = "";  // "dense", "causal/2", "exact"
};
FlopCount forward_flops(const Workload& w);
// What the TFLOP/s column divides by: the forward's count, times 2.5 for the backward (five GEMMs
// against the forward's two, FlashAttention's convention, masked the same way).
FlopCount workload_flops(const Workload& w);
const char* flop_convention_help();

// "k2 hd128 s2048 causal", for progress lines.
std::string describe(const Workload& w);

}  // namespace flashattn::bench
