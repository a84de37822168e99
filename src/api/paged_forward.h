// forward() with ForwardParams::block_table (paged KV in prefill): gather, then the
// variable-length forward (paged_forward.cpp).
#pragma once

#include "flashattn/flashattn.h"

namespace flashattn {

// A validated forward call on a resolved family, without a block table.
using ForwardRunner = Status (*)(const ForwardParams& params, Kernel kernel);

// Runs the validated paged call `params` on `kernel` (not automatic): the sequences' keys and
// values are gathered into packed buffers, and `run` gets `params` with k and v replaced by them
// (dense (rows, heads_kv, dim), total_k = rows) and no block table.
Status forward_paged(const ForwardParams& params, Kernel kernel, ForwardRunner run);

}  // namespace flashattn
