// Rules shared by the calls that describe one attention problem (forward and backward): the
// shapes, dtype, head dims, scale, mask and variable-length arguments of ForwardParams. The
// backward checks them on forward_params(BackwardParams), so both calls refuse the same inputs
// with the same messages.
#pragma once

#include <cstdint>
#include <string>

#include "flashattn/flashattn.h"

namespace flashattn {

// Every invalid_argument rule of the problem's shape (not its memory): dtype, batch, heads,
// sequence lengths, head dims (common/head_dims.h), softmax_scale, window and causal,
// cu_seqlens/total. FP8 dtypes pass here; each call says `unsupported` for them in its own words.
Status check_attention_shapes(const ForwardParams& p);

// The contents of a host cu_seqlens array of batch + 1 prefix sums: starts at 0, never
// decreases, no sequence longer than max_len, and (total_name non-null) ends at total. Each
// failure names the array (n), the entry and the rule.
Status check_host_cu_seqlens(const std::string& n, const int32_t* cu, int batch, int max_len,
                             const char* max_name, const char* total_name, int total);

}  // namespace flashattn
