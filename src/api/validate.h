// Rules shared by the calls that describe one attention problem (forward and backward): the
// shapes, dtype, head dims, scale, mask and variable-length arguments of ForwardParams. The
// backward checks them on forward_params(BackwardParams), so both calls refuse the same inputs
// with the same messages.
#pragma once

#include "flashattn/flashattn.h"

namespace flashattn {

// Every invalid_argument rule of the problem's shape (not its memory): dtype, batch, heads,
// sequence lengths, head dims (common/head_dims.h), softmax_scale, window and causal,
// cu_seqlens/total. FP8 dtypes pass here; each call says `unsupported` for them in its own words.
Status check_attention_shapes(const ForwardParams& p);

}  // namespace flashattn
