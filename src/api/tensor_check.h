// Host-side checks of the tensor arguments of a call, shared by forward, decode and the
// backward: each tensor's pointer and strides, outputs that alias inputs, TMA stride limits,
// and where the pointers live. A caller lists its tensors with their logical shapes and dtype;
// every failure names the argument and the rule, and nothing here launches work or reads memory.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <utility>

#include "flashattn/flashattn.h"

namespace flashattn {

// The two refusals of validation: a rule of the API broken, or a valid request this build or
// kernel cannot run. Messages name the argument first ("heads_q: must be ...").
inline Status invalid(std::string msg) { return {StatusCode::invalid_argument, std::move(msg)}; }
inline Status unsupported(std::string msg) { return {StatusCode::unsupported, std::move(msg)}; }

// One (batch, seqlen, heads, dim) tensor argument as validation sees it.
struct TensorArg {
  const char* name;               // as in messages: "q", "k_cache"
  const void* data;               // may be null only where the caller allows it (then skipped)
  std::array<int64_t, 4> stride;  // in elements
  std::array<int64_t, 4> size;    // logical extents; the bytes it touches follow from them
  int elem_bytes;                 // dtype_size(dtype), or 4 for the fp32 LSE
  int first_stride = 0;           // strides checked from here on (1: a packed varlen tensor's
                                  // batch stride, which is never used)
};

// A TensorRef or MutableTensorRef of `dtype` with logical sizes `size`.
template <class Ref>
TensorArg tensor_arg(const char* name, const Ref& t, const std::array<int64_t, 4>& size,
                     DType dtype, int first_stride = 0) {
  return {name, t.data, std::to_array(t.stride), size, dtype_size(dtype), first_stride};
}

// The dense fp32 LSE, (batch, heads, seqlen) row-major.
TensorArg lse_arg(const float* lse, int64_t batch, int64_t heads, int64_t seqlen);
// A dense fp32 array of n values (attention sinks, FP8 descales) as one (1, 1, n, 1) tensor.
TensorArg fp32_array_arg(const char* name, const float* data, int64_t n);
// The attention sinks, fp32 (heads_q,), as an input whose bytes outputs must not overlap.
TensorArg sinks_arg(const float* sinks, int64_t heads_q);
// The gradient of the sinks, fp32 (heads_q,), an output of the backward.
TensorArg dsinks_arg(const float* dsinks, int64_t heads_q);
// The rule of the sinks pointer itself (null is allowed: no sinks): 4-byte aligned fp32.
Status check_sinks_pointer(const float* sinks);

// The rules of one tensor: data non-null and 16-byte aligned, the last stride 1, the others >= 0
// and whole 16-byte vectors (the kernels load 16-byte vectors; 8 elements of bf16, 16 of e4m3).
Status check_tensor(const TensorArg& t);
// check_tensor on each, in order; the first failure.
Status check_tensors(std::span<const TensorArg> tensors);

// The bytes a tensor can touch, [begin, end); empty for a null pointer or a zero extent.
struct ByteRange {
  uintptr_t begin = 0, end = 0;
  bool empty() const { return end <= begin; }
  bool overlaps(const ByteRange& o) const {
    return !empty() && !o.empty() && begin < o.end && o.begin < end;
  }
};
ByteRange byte_range(const TensorArg& t);

// Outputs alias no input and no other output: kernels read inputs after writing outputs, and
// split work writes outputs in any order. "o: overlaps input q; the output must not alias q, k
// or v", "lse: overlaps the output o". Null outputs are skipped.
Status check_no_aliasing(std::span<const TensorArg> outputs, std::span<const TensorArg> inputs);

// TMA descriptors take one stride per dimension, non-zero and below 2^40 bytes; a dimension of
// extent 1 is never stepped over. `who` names the kernel in messages ("kernel k6").
Status check_tma_strides(std::span<const TensorArg> tensors, const std::string& who);

// Where a pointer lives, as far as CUDA can tell. With no driver or no device every pointer is
// host memory.
struct Location {
  bool host_ok = true;     // dereferenceable by the CPU
  bool device_ok = false;  // dereferenceable by a GPU kernel
  int device = -1;
};
Location locate(const void* ptr);

// Where a call's work runs.
struct Placement {
  std::string who;       // starts the messages: "kernel k6", "decode"
  bool host = false;     // on the CPU over host memory; else on the current CUDA device
  int min_cc = 0;        // device work: compute capability, major*10 + minor
  int max_cc_major = 0;  // device work: 0 any newer major too; else the last major it runs on
};

struct NamedPointer {
  std::string name;  // as in messages: "q.data", "lse", "cu_seqlens_q"
  const void* data;  // null: not given, skipped
};
inline NamedPointer data_pointer(const TensorArg& t) {
  return {std::string(t.name) + ".data", t.data};
}

// Device work needs a device (else `unsupported`); every pointer must be reachable where the work
// runs (host memory for host work, device memory on the current device otherwise); the device's
// compute capability must be in range (else `unsupported`).
Status check_placement(const Placement& where, std::span<const NamedPointer> pointers);

}  // namespace flashattn
