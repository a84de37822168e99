// The tensor rules shared by every can_implement (see tensor_check.h).
#include "api/tensor_check.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace flashattn {
namespace {

std::string str(int64_t x) {
  return std::to_string(x);
}

// "q, k or v": the tensors given (an optional one left null is not named).
std::string name_list(std::span<const TensorArg> tensors) {
  std::vector<const char*> names;
  for (const TensorArg& t : tensors) {
    if (t.data != nullptr) names.push_back(t.name);
  }
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? " or " : ", ";
    out += names[i];
  }
  return out;
}

}  // namespace

TensorArg lse_arg(const float* lse, int64_t batch, int64_t heads, int64_t seqlen) {
  return {"lse", lse, {heads * seqlen, seqlen, 1, 1}, {batch, heads, seqlen, 1}, 4};
}

TensorArg fp32_array_arg(const char* name, const float* data, int64_t n) {
  return {name, data, {n, n, 1, 1}, {1, 1, n, 1}, 4};
}

TensorArg sinks_arg(const float* sinks, int64_t heads_q) {
  return fp32_array_arg("sinks", sinks, heads_q);
}

TensorArg dsinks_arg(const float* dsinks, int64_t heads_q) {
  return fp32_array_arg("dsinks", dsinks, heads_q);
}

Status check_sinks_pointer(const float* sinks) {
  if (reinterpret_cast<uintptr_t>(sinks) % alignof(float) != 0) {
    return invalid("sinks: must be a 4-byte aligned fp32 array of heads_q logits");
  }
  return Status::success();
}

Status check_tensor(const TensorArg& t) {
  const std::string n = t.name;
  if (t.data == nullptr) return invalid(n + ".data: must not be null");
  if (t.stride[3] != 1) {
    return invalid(n +
                   ".stride[3]: the last (head_dim) dimension must be contiguous (stride 1), "
                   "got " +
                   str(t.stride[3]));
  }
  for (int i = t.first_stride; i < 3; ++i) {
    if (t.stride[i] < 0) {
      return invalid(n + ".stride[" + str(i) + "]: must be >= 0, got " + str(t.stride[i]));
    }
  }
  if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0) {
    return invalid(n + ".data: must be 16-byte aligned (kernels load 16-byte vectors)");
  }
  const int64_t vec = 16 / std::max(t.elem_bytes, 1);  // elements per 16-byte vector
  for (int i = t.first_stride; i < 3; ++i) {
    if (t.stride[i] % vec != 0) {
      return invalid(n + ".stride[" + str(i) + "]: must be a multiple of " + str(vec) +
                     " elements (16 bytes), got " + str(t.stride[i]));
    }
  }
  return Status::success();
}

Status check_tensors(std::span<const TensorArg> tensors) {
  for (const TensorArg& t : tensors) {
    if (Status s = check_tensor(t); !s.ok()) return s;
  }
  return Status::success();
}

ByteRange byte_range(const TensorArg& t) {
  if (t.data == nullptr) return {};
  int64_t last = 0;
  for (int i = 0; i < 4; ++i) {
    if (t.size[i] <= 0) return {};
    last += (t.size[i] - 1) * t.stride[i];
  }
  const auto b = reinterpret_cast<uintptr_t>(t.data);
  return {b, b + static_cast<uintptr_t>((last + 1) * t.elem_bytes)};
}

Status check_no_aliasing(std::span<const TensorArg> outputs, std::span<const TensorArg> inputs) {
  for (const TensorArg& in : inputs) {
    const ByteRange read = byte_range(in);
    for (const TensorArg& out : outputs) {
      if (byte_range(out).overlaps(read)) {
        return invalid(std::string(out.name) + ": overlaps input " + in.name +
                       "; the output must not alias " + name_list(inputs));
      }
    }
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    for (size_t j = i + 1; j < outputs.size(); ++j) {
      if (byte_range(outputs[j]).overlaps(byte_range(outputs[i]))) {
        return invalid(std::string(outputs[j].name) + ": overlaps the output " + outputs[i].name);
      }
    }
  }
  return Status::success();
}

Status check_tma_strides(std::span<const TensorArg> tensors, const std::string& who) {
  for (const TensorArg& t : tensors) {
    // An empty tensor (seqlen_k = 0: contiguous strides of 0) is never read.
    if (t.size[0] == 0 || t.size[1] == 0 || t.size[2] == 0 || t.size[3] == 0) continue;
    for (int i = 0; i < 3; ++i) {
      const int64_t s = t.stride[i];
      if (t.size[i] > 1 && (s == 0 || s * t.elem_bytes >= (int64_t{1} << 40))) {
        return unsupported(std::string(t.name) + ".stride[" + str(i) + "]: " + who +
                           " loads through TMA, which needs a stride in (0, 2^40) bytes for a "
                           "dimension of extent > 1, got " +
                           str(s));
      }
    }
  }
  return Status::success();
}

Location locate(const void* ptr) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the error so that later calls are unaffected
    return {};
  }
  switch (attr.type) {
    case cudaMemoryTypeDevice: return {false, true, attr.device};
    case cudaMemoryTypeManaged: return {true, true, attr.device};
    // Pinned host memory: mapped into the device address space when devicePointer is set.
    case cudaMemoryTypeHost: return {true, attr.devicePointer != nullptr, attr.device};
    default: return {};
  }
}

Status check_placement(const Placement& where, std::span<const NamedPointer> pointers) {
  int current = -1;
  if (!where.host) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0 ||
        cudaGetDevice(&current) != cudaSuccess) {
      (void)cudaGetLastError();
      return unsupported(where.who + ": needs a CUDA device and none is available");
    }
  }
  for (const auto& [name, data] : pointers) {
    if (data == nullptr) continue;
    const Location loc = locate(data);
    if (where.host && !loc.host_ok) {
      return invalid(name + ": " + where.who + " needs host memory, got device memory");
    }
    if (!where.host && !loc.device_ok) {
      return invalid(name + ": " + where.who + " needs device memory, got host memory");
    }
    if (!where.host && loc.device >= 0 && loc.device != current) {
      return invalid(name + ": lives on device " + str(loc.device) + " but the current device is " +
                     str(current));
    }
  }
  if (where.host) return Status::success();
  // Attribute queries, not cudaGetDeviceProperties: this runs on every call, and the full
  // property query costs far more than the launch it guards.
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, current) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, current) != cudaSuccess) {
    (void)cudaGetLastError();
    return {StatusCode::cuda_error, "cudaDeviceGetAttribute failed for the current device"};
  }
  if (major * 10 + minor < where.min_cc ||
      (where.max_cc_major != 0 && major > where.max_cc_major)) {
    return unsupported(where.who + ": needs compute capability " + str(where.min_cc / 10) + "." +
                       str(where.min_cc % 10) +
                       (where.max_cc_major ? " up to " + str(where.max_cc_major) + ".x" : "+") +
                       ", device " + str(current) + " is " + str(major) + "." + str(minor));
  }
  return Status::success();
}

}  // namespace flashattn
