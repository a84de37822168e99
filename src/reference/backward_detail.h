// What the backward reference (backward.cpp) shares with its oracle (check_backward.cpp): the
// gradients of chosen (batch, KV head) pairs, and each pair's terms of the sink gradient.
#pragma once

#include <vector>

#include "flashattn/reference.h"

namespace flashattn::reference {

// One (batch, query head)'s share of dsinks[head] = -sum_i w_i dO_i.O_i (w_i = exp(sink - lse_i)):
// the gradient, and sum_i w_i^2 sum_c (dO_ic O_ic)^2, its variance when each element of O carries
// an independent relative error of 1 (scale by the input type's rounding error squared).
struct SinkTerms {
  double grad = 0;
  double spread = 0;
};

// Gradients of the listed pairs in `precision`, written into dense (or packed) dq, dk, dv as
// reference::backward lays them out; other elements are left alone. `sinks`, when not null and the
// params have sinks, gets (batch, heads_q) terms for the pairs' query heads.
void backward_pairs(const BackwardParams& params, Precision precision,
                    const std::vector<KvHeadId>& pairs, double* dq, double* dk, double* dv,
                    SinkTerms* sinks);

std::vector<KvHeadId> all_kv_heads(const BackwardParams& params);

}  // namespace flashattn::reference
