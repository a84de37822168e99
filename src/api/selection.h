// `auto`, as the forward and the backward resolve it: one rule for both calls.
#pragma once

#include <span>

#include "api/capabilities.h"
#include "api/tensor_check.h"
#include "flashattn/flashattn.h"

namespace flashattn {

// auto's family: the cpu family for host memory (q's location decides); for device memory the
// first built family of `preference` (fastest first) that `accepts`; Kernel::automatic if none.
template <class Accepts>
Kernel select_family(const void* q, std::span<const Kernel> preference, CapsOf caps,
                     Accepts&& accepts) {
  if (q != nullptr) {
    const Location where = locate(q);
    if (where.host_ok && !where.device_ok) return Kernel::cpu;
  }
  for (Kernel k : preference) {
    if (caps(k).built && accepts(k)) return k;
  }
  return Kernel::automatic;
}

// can_implement(auto) when select_family found none: why the most capable built candidate that
// runs `dtype` refuses (`check(kernel)`; a family of another dtype would only name the dtype), or
// `none_built` when no such family of `preference` is built.
template <class Check>
Status refusal_of_auto(std::span<const Kernel> preference, CapsOf caps, DType dtype, Check&& check,
                       const char* none_built) {
  for (Kernel k : preference) {
    if (caps(k).built && runs_dtype(caps(k), dtype)) return check(k);
  }
  return {StatusCode::unsupported, none_built};
}

}  // namespace flashattn
