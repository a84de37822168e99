// can_implement(BackwardParams): every rule a backward call must satisfy, each failure naming the
// argument and the rule. The problem's shape is the forward's (check_attention_shapes on
// forward_params), so the two calls refuse the same shapes with the same messages; the tensor
// rules go through the shared checks of tensor_check.h. Nothing here launches work.
#include <array>
#include <cstdint>
#include <span>
#include <string>

#include "api/capabilities.h"
#include "api/selection.h"
#include "api/tensor_check.h"
#include "api/validate.h"
#include "common/backward_problem.h"
#include "flashattn/flashattn.h"

namespace flashattn {
namespace {

std::string str(int64_t x) {
  return std::to_string(x);
}

// "fa2 or cpu": the families with a backward, for messages.
std::string backward_families() {
  std::string out;
  for (Kernel k : kBackwardGpuPreference) {
    if (backward_kernel_caps(k).built) out += std::string(out.empty() ? "" : ", ") + kernel_name(k);
  }
  return out + (out.empty() ? "" : " or ") + kernel_name(Kernel::cpu);
}

// The eight tensors with their logical shapes: inputs q, k, v, o, dout, then outputs dq, dk, dv
// (the shapes of q, k, v). Packed (varlen) tensors are one batch of total tokens, and their unused
// batch stride is not checked.
std::array<TensorArg, 8> backward_tensors(const BackwardParams& p) {
  const int dv = p.head_dim_v > 0 ? p.head_dim_v : p.head_dim;
  const bool varlen = p.cu_seqlens_q != nullptr;
  const int64_t nb = varlen ? 1 : p.batch;
  const int64_t sq = varlen ? p.total_q : p.seqlen_q;
  const int64_t sk = varlen ? p.total_k : p.seqlen_k;
  const int first = varlen ? 1 : 0;
  const std::array<int64_t, 4> q_shape{nb, sq, p.heads_q, p.head_dim};
  const std::array<int64_t, 4> k_shape{nb, sk, p.heads_kv, p.head_dim};
  const std::array<int64_t, 4> v_shape{nb, sk, p.heads_kv, dv};
  const std::array<int64_t, 4> o_shape{nb, sq, p.heads_q, dv};
  return {tensor_arg("q", p.q, q_shape, p.dtype, first),
          tensor_arg("k", p.k, k_shape, p.dtype, first),
          tensor_arg("v", p.v, v_shape, p.dtype, first),
          tensor_arg("o", p.o, o_shape, p.dtype, first),
          tensor_arg("dout", p.dout, o_shape, p.dtype, first),
          tensor_arg("dq", p.dq, q_shape, p.dtype, first),
          tensor_arg("dk", p.dk, k_shape, p.dtype, first),
          tensor_arg("dv", p.dv, v_shape, p.dtype, first)};
}

Status check_shapes(const BackwardParams& p) {
  if (Status s = check_attention_shapes(forward_params(p)); !s.ok()) return s;
  if (p.dsinks != nullptr && p.sinks == nullptr) {
    return invalid("dsinks: given without sinks (it is the gradient of the sink logits)");
  }
  // Valid input that no backward runs: after every invalid_argument rule.
  if (!dtype_has_kernel(p.dtype, &backward_kernel_caps)) {
    return unsupported(std::string("dtype: ") + dtype_name(p.dtype) +
                       " has no backward in this build (the backward runs bf16 and fp16)");
  }
  return Status::success();
}


Status check_memory(const BackwardParams& p, Kernel kernel, const KernelCaps& caps) {
  const std::array<TensorArg, 8> tensors = backward_tensors(p);
  if (Status s = check_tensors(tensors); !s.ok()) return s;
  if (p.lse == nullptr) {
    return invalid("lse: must not be null (the forward's LSE is an input of the backward)");
  }
  if (reinterpret_cast<uintptr_t>(p.lse) % alignof(float) != 0) {
    return invalid("lse: must be 4-byte aligned");
  }
  if (Status s = check_sinks_pointer(p.sinks); !s.ok()) return s;
  if (reinterpret_cast<uintptr_t>(p.dsinks) % alignof(float) != 0) {
    return invalid("dsinks: must be a 4-byte aligned fp32 array of heads_q values");
  }
  // The gradients alias no input and no other gradient: the kernels read q, k, v, o and dout
  // after they have written parts of dq, dk and dv.
  const TensorArg& o = tensors[3];
  const TensorArg outputs[] = {tensors[5], tensors[6], tensors[7], dsinks_arg(p.dsinks, p.heads_q)};
  const TensorArg inputs[] = {tensors[0],
                              tensors[1],
                              tensors[2],
                              tensors[3],
                              tensors[4],
                              lse_arg(p.lse, o.size[0], p.heads_q, o.size[1]),
                              sinks_arg(p.sinks, p.heads_q)};
  if (Status s = check_no_aliasing(outputs, inputs); !s.ok()) return s;

  // Host or device memory, as the kernel needs, and a device the kernel runs on.
  const NamedPointer pointers[] = {data_pointer(tensors[0]),
                                   data_pointer(tensors[1]),
                                   data_pointer(tensors[2]),
                                   data_pointer(tensors[3]),
                                   data_pointer(tensors[4]),
                                   data_pointer(tensors[5]),
                                   data_pointer(tensors[6]),
                                   data_pointer(tensors[7]),
                                   {"lse", p.lse},
                                   {"cu_seqlens_q", p.cu_seqlens_q},
                                   {"cu_seqlens_k", p.cu_seqlens_k},
                                   {"sinks", p.sinks},
                                   {"dsinks", p.dsinks}};
  const Placement where{std::string("kernel ") + kernel_name(kernel), caps.host, caps.min_cc,
                        caps.max_cc_major};
  if (Status s = check_placement(where, pointers); !s.ok()) return s;
  if (caps.tma) {  // q, k, v and dout are read by TMA
    const TensorArg read[] = {tensors[0], tensors[1], tensors[2], tensors[4]};
    const std::string who = std::string("kernel ") + kernel_name(kernel);
    if (Status s = check_tma_strides(read, who); !s.ok()) return s;
  }

  if (caps.host && p.cu_seqlens_q != nullptr) {
    if (Status s = check_host_cu_seqlens("cu_seqlens_q", p.cu_seqlens_q, p.batch, p.seqlen_q,
                                         "seqlen_q", "total_q", p.total_q);
        !s.ok()) {
      return s;
    }
    return check_host_cu_seqlens("cu_seqlens_k", p.cu_seqlens_k, p.batch, p.seqlen_k, "seqlen_k",
                                 "total_k", p.total_k);
  }
  return Status::success();
}

Status check_features(const BackwardParams& p, Kernel kernel, const KernelCaps& caps) {
  const std::string k = kernel_name(kernel);
  if (p.cu_seqlens_q != nullptr && !caps.varlen) {
    return unsupported("cu_seqlens_q: kernel " + k + " has no variable-length backward");
  }
  if (p.sinks != nullptr && !caps.sinks) {
    return unsupported("sinks: kernel " + k + " has no backward with attention sinks");
  }
  if (p.softcap > 0.f && !caps.softcap) {
    return unsupported("softcap: kernel " + k + " has no backward with softcap");
  }
  const int dv = p.head_dim_v > 0 ? p.head_dim_v : p.head_dim;
  if (dv != p.head_dim && !caps.hdim_v_differs) {
    return unsupported("head_dim_v: kernel " + k + " needs head_dim_v == head_dim");
  }
  if (!runs_head_dims(caps, p.head_dim, dv)) {
    return unsupported("head_dim: kernel " + k + "'s backward is built for head_dim " +
                       head_dims_text(caps) + " (head_dim_v equal); got " + str(p.head_dim) +
                       " / " + str(dv) + " (fa2's backward runs every head dim)");
  }
  return Status::success();
}

}  // namespace

Kernel select_kernel(const BackwardParams& p) {
  return select_family(p.q.data, kBackwardGpuPreference, &backward_kernel_caps,
                       [&](Kernel k) { return can_implement(p, k).ok(); });
}

Status can_implement(const BackwardParams& p, Kernel kernel) {
  if (Status s = check_shapes(p); !s.ok()) return s;
  if (kernel == Kernel::automatic) {
    kernel = select_kernel(p);
    if (kernel == Kernel::automatic) {
      return refusal_of_auto(
          kBackwardGpuPreference, &backward_kernel_caps, p.dtype,
          [&](Kernel k) { return can_implement(p, k); }, "kernel auto: no backward is built");
    }
  }
  const KernelCaps caps = backward_kernel_caps(kernel);
  if (!caps.built) {
    return unsupported(std::string("kernel ") + kernel_name(kernel) +
                       ": no backward in this build; backward runs on " + backward_families());
  }
  if (Status s = check_features(p, kernel, caps); !s.ok()) return s;
  return check_memory(p, kernel, caps);
}

}  // namespace flashattn
