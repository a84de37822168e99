// can_implement(): every rule a forward call must satisfy, each failure naming the argument and
// the rule. Nothing here launches work; a refused call touches no memory.
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string>

#include "api/capabilities.h"
#include "flashattn/flashattn.h"

namespace flashattn {
namespace {

Status invalid(std::string msg) { return {StatusCode::invalid_argument, std::move(msg)}; }
Status unsupported(std::string msg) { return {StatusCode::unsupported, std::move(msg)}; }

bool supported_head_dims(int d, int dv) {
  constexpr std::array<int, 5> kDims = {64, 96, 128, 192, 256};
  const bool d_ok = std::find(kDims.begin(), kDims.end(), d) != kDims.end();
  return d_ok && (dv == d || (d == 192 && dv == 128));
}

// Where a pointer lives, as far as CUDA can tell. With no driver or no device every pointer is
// host memory.
struct Location {
  bool host_ok = true;     // dereferenceable by the CPU
  bool device_ok = false;  // dereferenceable by a GPU kernel
  int device = -1;
};

Location locate(const void* ptr) {
  Location loc;
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky-free error so later calls are unaffected
    return loc;
  }
  switch (attr.type) {
    case cudaMemoryTypeDevice:
      loc = {false, true, attr.device};
      break;
    case cudaMemoryTypeManaged:
      loc = {true, true, attr.device};
      break;
    case cudaMemoryTypeHost:  // pinned host memory: mapped into the device address space
      loc = {true, attr.devicePointer != nullptr, attr.device};
      break;
    default:
      break;
  }
  return loc;
}

// The bytes a (batch, seqlen, heads, dim) tensor can touch: [begin, end).
struct Extent {
  uintptr_t begin = 0, end = 0;
  bool empty() const { return end <= begin; }
  bool overlaps(const Extent& o) const {
    return !empty() && !o.empty() && begin < o.end && o.begin < end;
  }
};

Extent extent(const void* data, const int64_t (&stride)[4], const std::array<int64_t, 4>& size,
              int elem) {
  int64_t last = 0;
  for (int i = 0; i < 4; ++i) {
    if (size[i] <= 0) return {};
    last += (size[i] - 1) * stride[i];
  }
  const auto b = reinterpret_cast<uintptr_t>(data);
  return {b, b + static_cast<uintptr_t>((last + 1) * elem)};
}

struct NamedTensor {
  const char* name;
  const void* data;
  const int64_t (&stride)[4];
  std::array<int64_t, 4> size;
};

// Strides from index `first_stride` on are checked (1 skips the unused batch stride of varlen).
Status check_tensor(const NamedTensor& t, int elem, int first_stride) {
  const std::string n = t.name;
  if (t.data == nullptr) return invalid(n + ".data: must not be null");
  if (t.stride[3] != 1) {
    return invalid(n + ".stride[3]: the last (head_dim) dimension must be contiguous (stride 1), got " +
                   std::to_string(t.stride[3]));
  }
  for (int i = first_stride; i < 3; ++i) {
    if (t.stride[i] < 0) {
      return invalid(n + ".stride[" + std::to_string(i) + "]: must be >= 0, got " +
                     std::to_string(t.stride[i]));
    }
  }
  if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0) {
    return invalid(n + ".data: must be 16-byte aligned (kernels load 16-byte vectors)");
  }
  const int64_t vec = 16 / elem;  // elements per 16-byte vector
  for (int i = first_stride; i < 3; ++i) {
    if (t.stride[i] % vec != 0) {
      return invalid(n + ".stride[" + std::to_string(i) + "]: must be a multiple of " +
                     std::to_string(vec) + " elements (16 bytes), got " +
                     std::to_string(t.stride[i]));
    }
  }
  return Status::success();
}

Status check_shapes(const ForwardParams& p) {
  if (p.dtype != DType::bf16 && p.dtype != DType::fp16) {
    return invalid("dtype: must be bf16 or fp16");
  }
  const std::pair<const char*, int> positive[] = {
      {"batch", p.batch}, {"heads_q", p.heads_q}, {"heads_kv", p.heads_kv}, {"head_dim", p.head_dim}};
  for (const auto& [name, value] : positive) {
    if (value <= 0) {
      return invalid(std::string(name) + ": must be positive, got " + std::to_string(value));
    }
  }
  const std::pair<const char*, int> non_negative[] = {
      {"seqlen_q", p.seqlen_q}, {"seqlen_k", p.seqlen_k}, {"head_dim_v", p.head_dim_v}};
  for (const auto& [name, value] : non_negative) {
    if (value < 0) {
      return invalid(std::string(name) + ": must be >= 0, got " + std::to_string(value));
    }
  }
  if (p.heads_q % p.heads_kv != 0) {
    return invalid("heads_q: must be a multiple of heads_kv (" + std::to_string(p.heads_q) +
                   " is not a multiple of " + std::to_string(p.heads_kv) + ")");
  }
  const int dv = p.head_dim_v > 0 ? p.head_dim_v : p.head_dim;
  if (!supported_head_dims(p.head_dim, dv)) {
    return invalid("head_dim: must be 64, 96, 128, 192 or 256 with head_dim_v equal to it, or "
                   "head_dim 192 with head_dim_v 128; got head_dim " +
                   std::to_string(p.head_dim) + ", head_dim_v " + std::to_string(dv));
  }
  if (!std::isfinite(p.softmax_scale)) return invalid("softmax_scale: must be finite");
  if (p.window_left < -1) {
    return invalid("window_left: must be >= -1 (-1 is unbounded), got " +
                   std::to_string(p.window_left));
  }
  if (p.window_right < -1) {
    return invalid("window_right: must be >= -1 (-1 is unbounded), got " +
                   std::to_string(p.window_right));
  }
  if (p.causal && p.window_right > 0) {
    return invalid("window_right: must be -1 or 0 when causal (causal sees no key right of the "
                   "diagonal), got " + std::to_string(p.window_right));
  }
  if ((p.cu_seqlens_q == nullptr) != (p.cu_seqlens_k == nullptr)) {
    return invalid("cu_seqlens_q/cu_seqlens_k: give both or neither");
  }
  if (p.cu_seqlens_q != nullptr) {
    if (p.total_q < 0 || p.total_k < 0) {
      return invalid("total_q/total_k: must be >= 0 with cu_seqlens, got " +
                     std::to_string(p.total_q) + "/" + std::to_string(p.total_k));
    }
    if (reinterpret_cast<uintptr_t>(p.cu_seqlens_q) % 4 != 0 ||
        reinterpret_cast<uintptr_t>(p.cu_seqlens_k) % 4 != 0) {
      return invalid("cu_seqlens_q/cu_seqlens_k: must be 4-byte aligned int32 arrays");
    }
  }
  return Status::success();
}

Status check_memory(const ForwardParams& p, Kernel kernel, const KernelCaps& caps) {
  const int elem = dtype_size(p.dtype);
  const int dv = p.head_dim_v > 0 ? p.head_dim_v : p.head_dim;
  // Packed (varlen) tensors are one batch of total tokens; their batch stride is unused.
  const bool varlen = p.cu_seqlens_q != nullptr;
  const int64_t nb = varlen ? 1 : p.batch;
  const int64_t sq = varlen ? p.total_q : p.seqlen_q;
  const int64_t sk = varlen ? p.total_k : p.seqlen_k;
  const NamedTensor tensors[] = {
      {"q", p.q.data, p.q.stride, {nb, sq, p.heads_q, p.head_dim}},
      {"k", p.k.data, p.k.stride, {nb, sk, p.heads_kv, p.head_dim}},
      {"v", p.v.data, p.v.stride, {nb, sk, p.heads_kv, dv}},
      {"o", p.o.data, p.o.stride, {nb, sq, p.heads_q, dv}},
  };
  for (const auto& t : tensors) {
    // The batch stride of a packed tensor is not used, so its rules do not apply.
    if (Status s = check_tensor(t, elem, /*first_stride=*/varlen ? 1 : 0); !s.ok()) return s;
  }
  if (reinterpret_cast<uintptr_t>(p.lse) % alignof(float) != 0) {
    return invalid("lse: must be 4-byte aligned");
  }

  // Outputs must not alias inputs or each other: a kernel reads K/V tiles after writing O.
  const Extent o = extent(p.o.data, p.o.stride, tensors[3].size, elem);
  const int64_t lse_stride[4] = {static_cast<int64_t>(p.heads_q) * sq, sq, 1, 1};
  const Extent lse = p.lse ? extent(p.lse, lse_stride, {nb, p.heads_q, sq, 1}, 4) : Extent{};
  for (int i = 0; i < 3; ++i) {
    const Extent in = extent(tensors[i].data, tensors[i].stride, tensors[i].size, elem);
    if (o.overlaps(in)) {
      return invalid(std::string("o: overlaps input ") + tensors[i].name +
                     "; the output must not alias q, k or v");
    }
    if (lse.overlaps(in)) {
      return invalid(std::string("lse: overlaps input ") + tensors[i].name);
    }
  }
  if (lse.overlaps(o)) return invalid("lse: overlaps the output o");

  // Host or device memory, as the kernel needs.
  int current = -1;
  int count = 0;
  const bool have_device = !caps.host && cudaGetDeviceCount(&count) == cudaSuccess && count > 0 &&
                           cudaGetDevice(&current) == cudaSuccess;
  if (!caps.host && !have_device) {
    (void)cudaGetLastError();
    return unsupported(std::string("kernel ") + kernel_name(kernel) +
                       ": needs a CUDA device and none is available");
  }
  struct Ptr {
    const char* name;
    const void* data;
  };
  const Ptr ptrs[] = {{"q", p.q.data},   {"k", p.k.data},
                      {"v", p.v.data},   {"o", p.o.data},
                      {"lse", p.lse},    {"cu_seqlens_q", p.cu_seqlens_q},
                      {"cu_seqlens_k", p.cu_seqlens_k}};
  for (const auto& [name, data] : ptrs) {
    if (data == nullptr) continue;
    const Location loc = locate(data);
    if (caps.host && !loc.host_ok) {
      return invalid(std::string(name) + (name[0] == 'c' || name[0] == 'l' ? "" : ".data") +
                     ": kernel cpu needs host memory, got device memory");
    }
    if (!caps.host && !loc.device_ok) {
      return invalid(std::string(name) + (name[0] == 'c' || name[0] == 'l' ? "" : ".data") +
                     ": kernel " + kernel_name(kernel) + " needs device memory, got host memory");
    }
    if (!caps.host && loc.device >= 0 && loc.device != current) {
      return invalid(std::string(name) + ": lives on device " + std::to_string(loc.device) +
                     " but the current device is " + std::to_string(current));
    }
  }
  if (!caps.host) {
    // Attribute queries, not cudaGetDeviceProperties: this runs on every call, and the full
    // property query costs far more than the launch it guards.
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, current) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, current) != cudaSuccess) {
      (void)cudaGetLastError();
      return {StatusCode::cuda_error, "cudaDeviceGetAttribute failed for the current device"};
    }
    const int cc = major * 10 + minor;
    if (cc < caps.min_cc || (caps.max_cc_major != 0 && major > caps.max_cc_major)) {
      return unsupported(std::string("kernel ") + kernel_name(kernel) + ": needs compute capability " +
                         std::to_string(caps.min_cc / 10) + "." + std::to_string(caps.min_cc % 10) +
                         (caps.max_cc_major ? " up to " + std::to_string(caps.max_cc_major) + ".x" : "+") +
                         ", device " + std::to_string(current) + " is " + std::to_string(major) +
                         "." + std::to_string(minor));
    }
  }
  return Status::success();
}

// TMA descriptors take one stride per dimension, non-zero and below 2^40 bytes (16-byte multiples
// are already required of every family). A dimension of extent 1 is never stepped over.
Status check_tma_strides(const ForwardParams& p, const std::string& k) {
  const bool varlen = p.cu_seqlens_q != nullptr;
  const int64_t elem = dtype_size(p.dtype);
  const struct {
    const char* name;
    const TensorRef& t;
    int64_t extent[3];  // batch, token, head
  } inputs[] = {
      {"q", p.q, {varlen ? 1 : p.batch, varlen ? p.total_q : p.seqlen_q, p.heads_q}},
      {"k", p.k, {varlen ? 1 : p.batch, varlen ? p.total_k : p.seqlen_k, p.heads_kv}},
      {"v", p.v, {varlen ? 1 : p.batch, varlen ? p.total_k : p.seqlen_k, p.heads_kv}},
  };
  for (const auto& in : inputs) {
    for (int i = 0; i < 3; ++i) {
      const int64_t s = in.t.stride[i];
      if (in.extent[i] > 1 && (s == 0 || s * elem >= (int64_t{1} << 40))) {
        return unsupported(std::string(in.name) + ".stride[" + std::to_string(i) + "]: kernel " +
                           k + " loads through TMA, which needs a stride in (0, 2^40) bytes for a "
                           "dimension of extent > 1, got " + std::to_string(s));
      }
    }
  }
  return Status::success();
}

Status check_features(const ForwardParams& p, Kernel kernel, const KernelCaps& caps) {
  const std::string k = kernel_name(kernel);
  if (p.cu_seqlens_q != nullptr && !caps.varlen) {
    return unsupported("cu_seqlens_q: kernel " + k + " does not support variable length");
  }
  const int dv = p.head_dim_v > 0 ? p.head_dim_v : p.head_dim;
  if (dv != p.head_dim && !caps.hdim_v_differs) {
    return unsupported("head_dim_v: kernel " + k + " needs head_dim_v == head_dim");
  }
  if (caps.only_head_dim != 0 && (p.head_dim != caps.only_head_dim || dv != caps.only_head_dim)) {
    return unsupported("head_dim: kernel " + k + " is built for head_dim " +
                       std::to_string(caps.only_head_dim) + " only (k6 has every head dim)");
  }
  if (caps.tma) return check_tma_strides(p, k);
  return Status::success();
}

}  // namespace

Kernel select_kernel(const ForwardParams& p) {
  // Host memory runs on the CPU backend; device memory on the fastest GPU family that accepts it.
  if (p.q.data != nullptr) {
    const Location q = locate(p.q.data);
    if (q.host_ok && !q.device_ok) return Kernel::cpu;
  }
  for (Kernel k : kGpuPreference) {
    if (kernel_caps(k).built && can_implement(p, k).ok()) return k;
  }
  return Kernel::automatic;
}

Status can_implement(const ForwardParams& p, Kernel kernel) {
  if (Status s = check_shapes(p); !s.ok()) return s;
  if (kernel == Kernel::automatic) {
    const Kernel chosen = select_kernel(p);
    if (chosen == Kernel::automatic) {
      // Report why the most capable candidate refused.
      for (Kernel k : kGpuPreference) {
        if (kernel_caps(k).built) return can_implement(p, k);
      }
      return unsupported("kernel auto: no kernel family is built");
    }
    kernel = chosen;
  }
  const KernelCaps caps = kernel_caps(kernel);
  if (!caps.built) {
    return unsupported(std::string("kernel ") + kernel_name(kernel) +
                       ": not built in this version of flashattn");
  }
  if (Status s = check_features(p, kernel, caps); !s.ok()) return s;
  return check_memory(p, kernel, caps);
}

}  // namespace flashattn
