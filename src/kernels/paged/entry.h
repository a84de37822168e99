// Paged KV in prefill, the gather step the dispatch layer runs before the variable-length
// forward (src/api/paged_forward.cpp): each sequence's keys and values copied out of the cache's
// blocks into packed buffers (common/paged_kv.h). A block id outside [0, num_blocks) is never
// dereferenced: its rows are written as zeros. Nothing is written at or past `rows`.
#pragma once

#include "common/paged_kv.h"

namespace flashattn {

// On the GPU, asynchronously on p.stream: every sequence, then kPagedTailRows zeroed rows after
// the last one (clipped at p.rows).
Status paged_gather(const PagedKv& p);

// On the host (the cpu family; everything in host memory): every sequence, no tail.
void paged_gather_host(const PagedKv& p);

}  // namespace flashattn
