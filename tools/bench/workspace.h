// Input sets and outputs of one workload, in host or device memory.
//
// Timing rotates among several input sets so that the 50 MB L2 cannot hold the working set. In
// backward mode a set also holds dout and the forward's o and lse (the backward's inputs), and the
// gradients are the shared outputs.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "flashattn/flashattn.h"
#include "workload.h"

namespace flashattn::bench {

enum class Memory { host, device };

Status cuda_status(cudaError_t err, const char* what);

// One allocation, freed on destruction (std::malloc or cudaMalloc). Move-only.
class Block {
 public:
  Block() = default;
  Block(const Block&) = delete;
  Block& operator=(const Block&) = delete;
  Block(Block&& other) noexcept;
  Block& operator=(Block&& other) noexcept;
  ~Block();

  Status allocate(Memory memory, size_t bytes);
  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void release();
  Memory memory_ = Memory::host;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

struct InputSet {
  Block q, k, v;
  Block dout, o, lse;  // backward mode only
  // K8 (--fp8 per_block[_hadamard]): the bf16 data the timed pre-pass quantises into q, k, v (e4m3)
  // and the block descales it writes beside them (fp32, ForwardParams::q/k/v_block_descale).
  Block q_src, k_src, v_src;
  Block q_block_descale, k_block_descale, v_block_descale;
};

// K8's timed call: the pre-pass and the forward that reads what it wrote (issue 17 counts the
// pre-pass in K8's time).
struct QuantizedForward {
  QuantizeFp8Params quantize;
  ForwardParams forward;
};

// With a paged workload, k and v are (batch * blocks_per_sequence, page_size, kv_heads, dim)
// caches: every sequence's keys in blocks of its own, in a shuffled order.
struct TensorSizes {  // in bytes
  size_t q = 0, k = 0, v = 0, o = 0, lse = 0;
  // K8 workloads: the bf16 sources of q, k, v, and the fp32 block descales of q and of k (v's
  // are k's size): (batch, heads, ceil(seqlen / rows)), rows = fp8_block_rows(hdim).
  size_t q_src = 0, k_src = 0, v_src = 0, q_block_descale = 0, kv_block_descale = 0;
};
TensorSizes tensor_sizes(const Workload& w);

class Workspace {
 public:
  // Allocates the outputs and as many input sets as keep the rotation above the L2 (bounded by
  // kMaxInputSets and, on the device, by free memory).
  Status allocate(const Workload& w, Memory memory);

  // Fills set 0 from `seed` (N(0, 1), or the outlier distribution) and copies it into the other
  // sets: L2 residency depends on addresses, not values, and drawing fresh normals for 256 MB
  // costs seconds per config. FP8 (e4m3) workloads: q, k, v are drawn in bf16 and quantised per
  // (batch, KV head) with descale = amax / 448 (reference::quantize_e4m3_per_head); the bf16
  // originals stay on the host (original()) for the accuracy report. K8 workloads: the same bf16
  // data (the same seed draws the same values) goes into every set's q_src, k_src, v_src, and
  // q, k, v are left to the pre-pass.
  Status fill_inputs(uint64_t seed, cudaStream_t stream);

  // Backward mode: runs the forward once (Kernel::automatic: the cpu family on host memory) on
  // set 0 into its o and lse, and copies them to the other sets.
  Status prepare_backward(cudaStream_t stream, const DebugOptions& debug);

  // NaN bit patterns in the outputs: o and lse, or in backward mode dq, dk, dv and dsinks (0xFF
  // bytes are NaN in bf16, fp16, fp32 and e4m3); K8 also set 0's q, k, v and block descales (the
  // pre-pass's outputs).
  Status poison_outputs(cudaStream_t stream);

  // Params for input set `set`, writing the shared o and lse (K8: reading the set's block
  // descales).
  ForwardParams params(int set, cudaStream_t stream, const DebugOptions& debug) const;

  // K8: the pre-pass of set `set` (its q_src, k_src, v_src into its q, k, v and block
  // descales; the Hadamard rotation with kRotationSeed for per_block_hadamard), and the forward.
  QuantizedForward quantized_params(int set, cudaStream_t stream, const DebugOptions& debug) const;

  // Backward mode: params for input set `set`, writing the shared gradients.
  BackwardParams backward_params(int set, cudaStream_t stream, const DebugOptions& debug) const;

  int num_sets() const { return static_cast<int>(sets_.size()); }
  Memory memory() const { return memory_; }
  const Workload& workload() const { return w_; }
  const TensorSizes& sizes() const { return sizes_; }
  const Block& o() const { return o_; }
  const Block& lse() const { return lse_; }
  const Block& sinks() const { return sinks_; }  // empty unless the workload has sinks
  // FP8 workloads: the (batch, kv_heads) fp32 descales of q, k, v (i = 0, 1, 2), and the dense
  // bf16 data they were quantised from, on the host (filled by fill_inputs).
  const Block& descale(int i) const { return descales_[static_cast<size_t>(i)]; }
  const std::vector<uint16_t>& original(int i) const { return originals_[static_cast<size_t>(i)]; }
  const Block& dq() const { return dq_; }        // backward mode only, as are dk, dv, dsinks
  const Block& dk() const { return dk_; }
  const Block& dv() const { return dv_; }
  const Block& dsinks() const { return dsinks_; }
  // Paged workloads: block_table (batch, blocks_per_sequence()) as filled, on the host.
  const std::vector<int32_t>& block_table_host() const { return block_table_host_; }
  int blocks_per_sequence() const;
  const InputSet& set(int i) const { return sets_[static_cast<size_t>(i)]; }

 private:
  // Varlen and paged workloads: cu_seqlens and the shuffled block table.
  Status fill_indices();
  // n values of `dtype` from `dist` (reference::fill_normal or fill_outliers).
  static void fill(void* data, int64_t n, DType dtype, InputDist dist, uint64_t seed);
  // FP8: tensor t (0 q, 1 k, 2 v) drawn in bf16 (per --dist) into originals_[t], the data K7's
  // host quantisation and K8's pre-pass both start from.
  void draw_original(int t, uint64_t seed);
  // K7: originals_[t] quantised into `out` (set 0's bytes, on the host), its descales into
  // descales_[t].
  Status fill_fp8(int t, uint64_t seed, void* out);
  // K8: originals_[t] into every set's q_src, k_src, v_src.
  Status fill_sources(uint64_t seed, cudaStream_t stream);
  // K8: a set's sources and block descales (the descales 1.0 until the first pre-pass).
  Status allocate_k8(InputSet& s) const;
  size_t first_set_bytes(int t) const;  // bytes of set 0's q, k or v
  Status upload_descales(Block& dst, const std::vector<float>& src) const;

  Workload w_;
  Memory memory_ = Memory::host;
  TensorSizes sizes_;
  std::vector<InputSet> sets_;
  Block o_, lse_;
  Block sinks_;  // fp32 (heads,), filled by fill_inputs when the workload has sinks
  Block descales_[3];                   // FP8: q, k, v descales, (batch, kv_heads) fp32
  std::vector<uint16_t> originals_[3];  // FP8: the bf16 q, k, v before quantisation
  Block dq_, dk_, dv_, dsinks_;  // backward mode: the gradients (dsinks with sinks)
  Block cu_q_, cu_k_;            // varlen workloads: cu_seqlens of equal lengths
  Block block_table_;            // paged workloads: a seeded permutation of the blocks
  std::vector<int32_t> block_table_host_;
};

inline constexpr size_t kRotationBytes = size_t{256} << 20;  // > 5x the H100's 50 MB L2
inline constexpr int kMaxInputSets = 8;

}  // namespace flashattn::bench
