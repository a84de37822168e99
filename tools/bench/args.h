// Command-line options of flashattn-bench and their parser.
//
// The parser never throws and never exits: it reports a refused argument as one line naming the
// flag, and main() turns that into exit code 2.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "flashattn/flashattn.h"

namespace flashattn::bench {

// The distribution of q, k and v (--dist).
enum class InputDist {
  normal,    // N(0, 1)
  outliers,  // FlashAttention-3's N(0, 1) + N(0, 100)·Bernoulli(0.001) (reference::fill_outliers)
};

// How e4m3 inputs are made from the bf16 data (--fp8).
enum class Fp8Scaling {
  per_tensor,  // K7: quantised once on the host, one descale per (batch, KV head)
  per_block,   // K8: quantize_fp8() inside every timed run, one descale per block of rows
  per_block_hadamard,  // K8 with the Hadamard rotation of q and k (Fp8Rotation::hadamard)
};
const char* fp8_scaling_name(Fp8Scaling s);  // "per_tensor", "per_block", "per_block_hadamard"

// The rotation's seed of --fp8 per_block_hadamard: fixed, so that runs compare (printed, and in
// the JSON as rotation_seed).
inline constexpr uint64_t kRotationSeed = 17;

struct Options {
  std::vector<Kernel> kernels{Kernel::automatic};
  int batch = 2;
  int heads = 16;
  int kv_heads = 0;  // 0: same as heads
  int seqlen_q = 1024;
  int seqlen_k = 1024;
  int hdim = 128;
  int hdim_v = 0;  // 0: same as hdim
  // q, k and v. e4m3: drawn in bf16 (per --dist) and quantised as `fp8` says; o in bf16.
  DType dtype = DType::bf16;
  bool dtype_given = false;  // --dtype was passed (--fp8 then requires e4m3)
  // --fp8: how e4m3 inputs are made, per_tensor (K7, --dtype e4m3's default; descale =
  // amax / 448 per (batch, KV head), reference::quantize_e4m3_per_head) or quantize_fp8()'s
  // blocks (K8). Given, it sets dtype e4m3.
  std::optional<Fp8Scaling> fp8;
  InputDist dist = InputDist::normal;
  bool causal = false;
  bool sinks = false;    // learnable attention sinks, one random logit per query head
  float softcap = 0.f;   // logit soft-capping (ForwardParams::softcap), 0: off
  int window_left = -1;  // -1: unbounded
  int window_right = -1;
  int iters = 20;
  std::optional<int> warmup;  // unset: kDefaultWarmupGpu or kDefaultWarmupCpu
  bool check = false;
  bool sweep_standard = false;
  int max_seqlen = 0;  // 0: no limit
  std::string json_path;
  std::optional<uint64_t> seed;  // unset: drawn from std::random_device
  int device = 0;
  // Decode mode (tools/bench/decode.cpp): decode_q query tokens (1..16) against a KV cache of
  // seqlen_k tokens per batch entry; 0 = forward mode.
  int decode_q = 0;
  // Decode: 0 contiguous cache, else paged with this page size. Forward: 0 dense k/v, else a
  // variable-length call (as --varlen) reading k/v from a paged cache with this page size
  // (ForwardParams::block_table; blocks in a shuffled order).
  int page_size = 0;
  bool varlen = false;  // forward: the batch as one variable-length call (equal cu_seqlens)
  int num_splits = 0;  // decode: 0 lets the heuristic choose
  int rotary_dim = 0;  // decode: rotary embedding of q over this many dims (0: off)
  bool rotary_interleaved = false;  // decode: GPT-J pairs instead of GPT-NeoX halves
  bool kv_e4m3 = false;  // decode: an FP8 (e4m3) KV cache, per-tensor scales (--kv-dtype e4m3)
  bool sweep_decode = false;
  bool graph = false;  // decode: time CUDA-graph replays (per call: replay time / calls held)
  // Backward mode (--bwd): the forward runs once for o and lse, then backward() is timed.
  bool bwd = false;
  bool deterministic = false;  // --deterministic: BackwardParams::deterministic
  // Ablation switches of the forward kernels (--fa4, --no-persistent); the defaults are the
  // measured best. debug.timeline_out is left null here: main() points it at timeline_out.
  DebugOptions debug;
  std::string timeline_out;  // --timeline-out: empty writes no timeline
  std::string command;  // argv joined by spaces, for the JSON record
};

inline constexpr int kDefaultWarmupGpu = 5;
// One warm-up is enough on the host: there is no JIT, clock ramp or lazy module load to hide.
inline constexpr int kDefaultWarmupCpu = 1;

enum class ParseOutcome { run, help, error };

// Fills `opts` from argv. On ParseOutcome::error, `error` holds a one-line message naming the flag.
ParseOutcome parse_args(int argc, char** argv, Options& opts, std::string& error);

void print_usage(std::FILE* out);

}  // namespace flashattn::bench
