// The rules of a decode call, split by what they need so that the CPU tests can reach each one:
// shapes and scalars (no memory is touched), and the index arrays' contents (on host copies).
// can_implement(DecodeParams) runs them in order, with the memory checks (pointers, alignment,
// aliasing, device) between the two.
#pragma once

#include <cstdint>

#include "common/decode_problem.h"
#include "flashattn/flashattn.h"

namespace flashattn {

Status check_decode_shapes(const DecodeParams& p);

// `cache_seqlens` (batch), `page_table` (batch rows of page_table_stride, or null when the cache
// is contiguous) and `cache_batch_idx` (batch, or null) are host copies of the arrays.
Status check_decode_indices(const DecodeParams& p, const int32_t* cache_seqlens,
                            const int32_t* page_table, const int32_t* cache_batch_idx);

// With an e4m3 cache: host copies of k_scale and v_scale (1 or heads_kv values each, by
// kv_scale_layout) must be finite and > 0.
Status check_decode_scales(const DecodeParams& p, const float* k_scale, const float* v_scale);

// What decode_check_errors reports for a record read back from the device: success when no entry
// is claimed, else invalid_argument naming the entry of the first kind in DecodeErrorKind's order
// (in check_decode_indices' words) and the other kinds met.
Status decode_error_status(const DecodeErrorRecord& record);

}  // namespace flashattn
