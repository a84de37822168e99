// forward(): validate, resolve `auto`, normalise the parameters into a Problem, and hand it to
// the chosen family's launcher (paged KV first through the gather of api/paged_forward.h).
#include "api/capabilities.h"
#include "api/paged_forward.h"
#include "common/problem.h"
#include "flashattn/flashattn.h"
#include "kernels/cpu/entry.h"
#include "kernels/fa2_sm80/entry.h"
#include "kernels/fa3_sm90/entry.h"
#include "kernels/k1_naive/entry.h"
#include "kernels/k2_simt/entry.h"

namespace flashattn {

namespace {

// A validated call on a resolved family: normalise, then the family's launcher.
Status run(const ForwardParams& params, Kernel kernel) {
  const Problem problem = make_problem(params);
  if (problem.seqlen_q == 0) return Status::success();  // nothing to compute or write
  switch (kernel) {
    case Kernel::cpu: return cpu_forward(problem);
    case Kernel::fa2: return fa2_forward(problem);
    case Kernel::k6: return k6_forward(problem, params.debug);
    case Kernel::k7: return k7_forward(problem, params.debug);
    case Kernel::k8: return k8_forward(problem, params.debug);
#if FLASHATTN_LINEAGE
    case Kernel::k1: return k1_forward(problem);
    case Kernel::k2: return k2_forward(problem);
    case Kernel::k3: return k3_forward(problem);
    case Kernel::k4: return k4_forward(problem, params.debug);
    case Kernel::k5: return k5_forward(problem, params.debug);
#endif
    default: break;
  }
  return {StatusCode::unsupported, std::string("kernel ") + kernel_name(kernel) +
                                       ": not built in this version of flashattn"};
}

}  // namespace

Status forward(const ForwardParams& params, Kernel kernel) {
  if (Status s = can_implement(params, kernel); !s.ok()) return s;
  if (kernel == Kernel::automatic) kernel = select_kernel(params);
  // Paged KV: gathered into packed buffers, then the same variable-length call.
  if (params.block_table != nullptr) return forward_paged(params, kernel, run);
  return run(params, kernel);
}

}  // namespace flashattn
