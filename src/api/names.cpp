// Names of the public enums, parsing of user-facing spellings, and small layout helpers.
#include <string_view>

#include "api/capabilities.h"
#include "flashattn/flashattn.h"

namespace flashattn {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::ok: return "ok";
    case StatusCode::invalid_argument: return "invalid_argument";
    case StatusCode::unsupported: return "unsupported";
    case StatusCode::cuda_error: return "cuda_error";
  }
  return "unknown";
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::bf16: return "bf16";
    case DType::fp16: return "fp16";
    case DType::e4m3: return "e4m3";
    case DType::e5m2: return "e5m2";
  }
  return "unknown";
}

std::optional<DType> parse_dtype(std::string_view name) {
  if (name == "bf16" || name == "bfloat16") return DType::bf16;
  if (name == "fp16" || name == "float16" || name == "half") return DType::fp16;
  if (name == "e4m3" || name == "float8_e4m3fn") return DType::e4m3;
  if (name == "e5m2" || name == "float8_e5m2") return DType::e5m2;
  return std::nullopt;
}

int dtype_size(DType dtype) {
  switch (dtype) {
    case DType::bf16:
    case DType::fp16: return 2;
    case DType::e4m3:
    case DType::e5m2: return 1;
  }
  return 0;
}

const char* kernel_name(Kernel kernel) {
  switch (kernel) {
    case Kernel::automatic: return "auto";
    case Kernel::cpu: return "cpu";
    case Kernel::k1: return "k1";
    case Kernel::k2: return "k2";
    case Kernel::fa2: return "fa2";
    case Kernel::k3: return "k3";
    case Kernel::k4: return "k4";
    case Kernel::k5: return "k5";
    case Kernel::k6: return "k6";
    case Kernel::k7: return "k7";
    case Kernel::k8: return "k8";
  }
  return "unknown";
}

std::optional<Kernel> parse_kernel(std::string_view name) {
  for (Kernel k : kAllKernels) {
    if (name == kernel_name(k)) return k;
  }
  return std::nullopt;
}

bool kernel_is_built(Kernel kernel) {
  return kernel == Kernel::automatic || kernel_caps(kernel).built;
}

bool kernel_runs_on_host(Kernel kernel) { return kernel_caps(kernel).host; }

void set_contiguous_layout(ForwardParams& p) {
  const int dv = p.head_dim_v > 0 ? p.head_dim_v : p.head_dim;
  set_contiguous_strides(p.q.stride, p.seqlen_q, p.heads_q, p.head_dim);
  set_contiguous_strides(p.k.stride, p.seqlen_k, p.heads_kv, p.head_dim);
  set_contiguous_strides(p.v.stride, p.seqlen_k, p.heads_kv, dv);
  set_contiguous_strides(p.o.stride, p.seqlen_q, p.heads_q, dv);
}

}  // namespace flashattn
