// can_quantize_fp8() and quantize_fp8() (flashattn/fp8.h): K8's pre-pass, validated once here and
// then run by the GPU kernel (kernels/quant) for device memory or by the reference implementation
// (reference/quantize_fp8.h, the same bytes) for host memory. Every refusal names the argument
// and the rule; a refused call reads and writes nothing.
#include "reference/quantize_fp8.h"

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "api/tensor_check.h"
#include "common/head_dims.h"
#include "flashattn/flashattn.h"
#include "kernels/quant/entry.h"

namespace flashattn {
namespace {

// The pre-pass is plain element-wise CUDA, built for sm_80 and sm_90 like the portable families.
constexpr int kQuantMinCc = 80;

std::string str(int64_t x) {
  return std::to_string(x);
}

int head_dim_v_of(const QuantizeFp8Params& p) {
  return p.head_dim_v > 0 ? p.head_dim_v : p.head_dim;
}

int64_t blocks(int seqlen, int rows) {
  return rows > 0 ? (int64_t{seqlen} + rows - 1) / rows : 0;
}

// The six tensors with their logical shapes: inputs in the input dtype, outputs e4m3.
std::array<TensorArg, 3> inputs_of(const QuantizeFp8Params& p) {
  const int64_t b = p.batch, dv = head_dim_v_of(p);
  return {tensor_arg("q", p.q, {b, p.seqlen_q, p.heads_q, p.head_dim}, p.dtype),
          tensor_arg("k", p.k, {b, p.seqlen_k, p.heads_kv, p.head_dim}, p.dtype),
          tensor_arg("v", p.v, {b, p.seqlen_k, p.heads_kv, dv}, p.dtype)};
}
std::array<TensorArg, 6> outputs_of(const QuantizeFp8Params& p) {
  const int64_t b = p.batch, dv = head_dim_v_of(p);
  const Fp8BlockRows rows = fp8_block_rows(p.head_dim);
  const int64_t nq = b * p.heads_q * blocks(p.seqlen_q, rows.q);
  const int64_t nk = b * p.heads_kv * blocks(p.seqlen_k, rows.kv);
  return {tensor_arg("q_out", p.q_out, {b, p.seqlen_q, p.heads_q, p.head_dim}, DType::e4m3),
          tensor_arg("k_out", p.k_out, {b, p.seqlen_k, p.heads_kv, p.head_dim}, DType::e4m3),
          tensor_arg("v_out", p.v_out, {b, p.seqlen_k, p.heads_kv, dv}, DType::e4m3),
          fp32_array_arg("q_block_descale", p.q_block_descale, nq),
          fp32_array_arg("k_block_descale", p.k_block_descale, nk),
          fp32_array_arg("v_block_descale", p.v_block_descale, nk)};
}

bool has_elements(const TensorArg& t) {
  return t.size[0] > 0 && t.size[1] > 0 && t.size[2] > 0 && t.size[3] > 0;
}

// A tensor the pre-pass reads or writes element by element: any strides >= 0 with a contiguous
// last dim (no alignment or vector rule). An empty tensor is never touched: its pointer may be
// null.
Status check_tensor_arg(const TensorArg& t) {
  if (!has_elements(t)) return Status::success();
  const std::string n = t.name;
  if (t.data == nullptr) return invalid(n + ".data: must not be null (the tensor has elements)");
  if (t.stride[3] != 1) {
    return invalid(n +
                   ".stride[3]: the last (head_dim) dimension must be contiguous (stride 1), "
                   "got " +
                   str(t.stride[3]));
  }
  for (int i = 0; i < 3; ++i) {
    if (t.stride[i] < 0) {
      return invalid(n + ".stride[" + str(i) + "]: must be >= 0, got " + str(t.stride[i]));
    }
  }
  return Status::success();
}

// A descale array of n fp32 values (t.size[2]), written by the pre-pass.
Status check_descale_arg(const TensorArg& t) {
  const int64_t n = t.size[2];
  const std::string name = t.name;
  if (n > 0 && t.data == nullptr) {
    return invalid(name + ": must not be null (" + str(n) + " blocks to describe)");
  }
  if (reinterpret_cast<uintptr_t>(t.data) % alignof(float) != 0) {
    return invalid(name + ": must be a 4-byte aligned fp32 array");
  }
  return Status::success();
}

// Every pointer of the call, for the memory rules.
std::vector<NamedPointer> pointers_of(const QuantizeFp8Params& p) {
  std::vector<NamedPointer> out;
  for (const TensorArg& t : inputs_of(p)) out.push_back(data_pointer(t));
  const std::array<TensorArg, 6> outputs = outputs_of(p);
  for (const TensorArg& t : std::span(outputs).first(3)) out.push_back(data_pointer(t));
  for (const TensorArg& t : std::span(outputs).last(3)) out.push_back({t.name, t.data});
  return out;
}

// Host memory when the first pointer given is host memory the device cannot reach (auto's rule
// for forward(), api/selection.h); no pointer at all is host work with nothing to do.
bool runs_on_host(std::span<const NamedPointer> pointers) {
  for (const NamedPointer& ptr : pointers) {
    if (ptr.data == nullptr) continue;
    const Location where = locate(ptr.data);
    return where.host_ok && !where.device_ok;
  }
  return true;
}

// All pointers in host memory (the reference implementation) or all in device memory (the GPU
// pre-pass): the first pointer given decides which, and the others must follow it.
Status check_memory_kind(std::span<const NamedPointer> pointers, bool host) {
  const NamedPointer* first = nullptr;
  for (const NamedPointer& ptr : pointers) {
    if (ptr.data == nullptr) continue;
    if (first == nullptr) {
      first = &ptr;
      continue;
    }
    const Location where = locate(ptr.data);
    if (host ? where.host_ok : where.device_ok) continue;
    const char* want = host ? "host" : "device";
    return invalid(ptr.name + ": must be in " + want + " memory like " + first->name +
                   " (quantize_fp8 takes all its pointers in host memory or all in device "
                   "memory), got " +
                   (host ? "device" : "host") + " memory");
  }
  if (host) return Status::success();
  // Device work: a device, the pointers on the current one, and its compute capability.
  return check_placement({.who = "quantize_fp8", .min_cc = kQuantMinCc}, pointers);
}

}  // namespace

Status can_quantize_fp8(const QuantizeFp8Params& p) {
  if (p.dtype != DType::bf16 && p.dtype != DType::fp16) {
    const bool known = dtype_size(p.dtype) > 0;
    return invalid(std::string("dtype: must be bf16 or fp16 (q, k and v's element type; the "
                               "outputs are e4m3), got ") +
                   (known ? dtype_name(p.dtype) : "DType " + str(static_cast<int>(p.dtype))));
  }
  if (p.rotation != Fp8Rotation::none && p.rotation != Fp8Rotation::hadamard) {
    return invalid("rotation: must be none or hadamard, got Fp8Rotation " +
                   str(static_cast<int>(p.rotation)));
  }
  const std::pair<const char*, int> non_negative[] = {{"batch", p.batch},
                                                      {"seqlen_q", p.seqlen_q},
                                                      {"seqlen_k", p.seqlen_k},
                                                      {"heads_q", p.heads_q},
                                                      {"heads_kv", p.heads_kv}};
  for (const auto& [name, value] : non_negative) {
    if (value < 0) return invalid(std::string(name) + ": must be >= 0, got " + str(value));
  }
  // 0 is the only multiple of 0.
  if (p.heads_kv == 0 ? p.heads_q != 0 : p.heads_q % p.heads_kv != 0) {
    return invalid("heads_q: must be a multiple of heads_kv (" + str(p.heads_q) +
                   " is not a multiple of " + str(p.heads_kv) + ")");
  }
  if (fp8_block_rows(p.head_dim).q == 0) {
    return invalid("head_dim: must be " + head_dims_text<kFp8HeadDims>() +
                   " (the FP8 forward's head dims), got " + str(p.head_dim));
  }
  if (p.head_dim_v != 0 && p.head_dim_v != p.head_dim) {
    return invalid("head_dim_v: must be 0 or head_dim (" + str(p.head_dim) +
                   "; K8 runs head_dim_v == head_dim), got " + str(p.head_dim_v));
  }

  const std::array<TensorArg, 3> inputs = inputs_of(p);
  const std::array<TensorArg, 6> outputs = outputs_of(p);
  for (const TensorArg& t : inputs) {
    if (Status s = check_tensor_arg(t); !s.ok()) return s;
  }
  for (const TensorArg& t : std::span(outputs).first(3)) {
    if (Status s = check_tensor_arg(t); !s.ok()) return s;
  }
  for (const TensorArg& t : std::span(outputs).last(3)) {
    if (Status s = check_descale_arg(t); !s.ok()) return s;
  }
  // The outputs are written while inputs are still to be read (and the GPU reads each block
  // twice): no output may overlap an input or another output.
  if (Status s = check_no_aliasing(outputs, inputs); !s.ok()) return s;

  const std::vector<NamedPointer> pointers = pointers_of(p);
  return check_memory_kind(pointers, runs_on_host(pointers));
}

Status quantize_fp8(const QuantizeFp8Params& p) {
  if (Status s = can_quantize_fp8(p); !s.ok()) return s;
  if (runs_on_host(pointers_of(p))) {
    reference::quantize_fp8_host(p);
    return Status::success();
  }
  return quantize_fp8_device(p);
}

}  // namespace flashattn
