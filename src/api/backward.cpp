// backward(): validate, resolve `auto`, normalise the parameters into a BackwardProblem, and hand
// it to the chosen family. Empty problems are dispatched too: with seqlen_q == 0 the family still
// writes dk = dv = 0 (and dsinks = 0), with seqlen_k == 0 it writes dq = 0.
#include "common/backward_problem.h"
#include "flashattn/flashattn.h"
#include "kernels/cpu/entry.h"
#include "kernels/fa2_bwd_sm80/entry.h"
#include "kernels/fa3_sm90/entry.h"

namespace flashattn {

Status backward(const BackwardParams& params, Kernel kernel) {
  if (Status s = can_implement(params, kernel); !s.ok()) return s;
  if (kernel == Kernel::automatic) kernel = select_kernel(params);
  const BackwardProblem problem = make_backward_problem(params);
  switch (kernel) {
    case Kernel::cpu: return cpu_backward(problem);
    case Kernel::fa2: return fa2_backward(problem);
    case Kernel::k6: return k6_backward(problem);
    default: break;
  }
  return {StatusCode::unsupported,
          std::string("kernel ") + kernel_name(kernel) + ": no backward in this build"};
}

void set_contiguous_layout(BackwardParams& p) {
  const int dv = p.head_dim_v > 0 ? p.head_dim_v : p.head_dim;
  set_contiguous_strides(p.q.stride, p.seqlen_q, p.heads_q, p.head_dim);
  set_contiguous_strides(p.k.stride, p.seqlen_k, p.heads_kv, p.head_dim);
  set_contiguous_strides(p.v.stride, p.seqlen_k, p.heads_kv, dv);
  set_contiguous_strides(p.o.stride, p.seqlen_q, p.heads_q, dv);
  set_contiguous_strides(p.dout.stride, p.seqlen_q, p.heads_q, dv);
  set_contiguous_strides(p.dq.stride, p.seqlen_q, p.heads_q, p.head_dim);
  set_contiguous_strides(p.dk.stride, p.seqlen_k, p.heads_kv, p.head_dim);
  set_contiguous_strides(p.dv.stride, p.seqlen_k, p.heads_kv, dv);
}

}  // namespace flashattn
