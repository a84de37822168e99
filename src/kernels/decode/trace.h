// The decode family's side of the one trace scheme (common/trace.h): FA_TRACE(role, slot, after)
// with role = which kernel records. Empty in the library; bench/decode_timeline.cu defines the
// hook to record %globaltimer and clock64 at the marked points.
#pragma once

#include "common/trace.h"

namespace flashattn::decoding {

enum TraceRole : int { kTraceSplit = 0, kTraceCombine = 1 };

}  // namespace flashattn::decoding
