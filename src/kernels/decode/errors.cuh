// The device half of decode_check_errors (decode.h): a kernel that meets an out-of-range index
// (possible only with check_indices off) records it in the library's per-device DecodeErrorRecord.
// Only the error path runs this; a call with good indices writes nothing.
#pragma once

#include <cstdint>

#include "common/decode_problem.h"

namespace flashattn::decoding {

// The first error of each kind claims its entry and describes it; later ones of that kind find
// it claimed and write nothing.
__device__ __forceinline__ void record_decode_error(DecodeErrorRecord* r, int kind, int batch,
                                                    int index, int value, int limit,
                                                    int seqlen_new) {
  if (r == nullptr) return;
  DecodeErrorEntry& e = r->by_kind[kind];
  if (atomicCAS(&e.seen, 0, 1) == 0) {
    e.batch = batch;
    e.index = index;
    e.value = value;
    e.limit = limit;
    e.seqlen_new = seqlen_new;
  }
}

}  // namespace flashattn::decoding
