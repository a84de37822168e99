// An FP8 (e4m3) KV cache on the host: decode()'s quantisation of appended rows (decode.h) and the
// cache's dequantised values, over common/host_dtype.h's one definition of the rounding, so that
// tests and the CLI build and check e4m3 caches the way decode() writes them.
#include <cstdint>

#include "common/host_dtype.h"
#include "flashattn/reference.h"

namespace flashattn::reference {

void quantize_e4m3(DType dtype, const void* in, int64_t n, float scale, uint8_t* out) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = flashattn::quantize_e4m3(load_as_float(in, i, dtype), scale);
}

void dequantize_e4m3(const uint8_t* in, int64_t n, float scale, DType dtype, void* out) {
  for (int64_t i = 0; i < n; ++i)
    store_from_float(out, i, flashattn::dequantize_e4m3(in[i], scale), dtype);
}

}  // namespace flashattn::reference
