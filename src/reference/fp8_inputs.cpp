// FP8 (e4m3) forward inputs on the host: per-(batch, KV head) quantisation of 16-bit data with
// amax / 448 descales (reference.h), so that tests and the CLI build FP8 inputs one way.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "common/host_dtype.h"
#include "flashattn/reference.h"

namespace flashattn::reference {

namespace {
constexpr float kE4m3Max = 448.f;  // largest finite e4m3
}  // namespace

void quantize_e4m3_per_head(DType dtype, const void* in, int batch, int64_t seqlen, int heads,
                            int dim, int heads_per_descale, uint8_t* out, float* descales) {
  const int groups = heads / heads_per_descale;
  const int64_t group_elems = int64_t{heads_per_descale} * dim;  // one token's share of a group
  for (int b = 0; b < batch; ++b) {
    for (int g = 0; g < groups; ++g) {
      // Element (b, s, g * heads_per_descale + h, i) for s < seqlen: group_elems in a row.
      auto at = [&](int64_t s) {
        return ((int64_t{b} * seqlen + s) * heads + int64_t{g} * heads_per_descale) * dim;
      };
      float amax = 0.f;
      for (int64_t s = 0; s < seqlen; ++s)
        for (int64_t i = 0; i < group_elems; ++i)
          amax = std::max(amax, std::abs(load_as_float(in, at(s) + i, dtype)));
      const float descale = amax > 0.f ? amax / kE4m3Max : 1.f;
      descales[int64_t{b} * groups + g] = descale;
      for (int64_t s = 0; s < seqlen; ++s)
        for (int64_t i = 0; i < group_elems; ++i)
          out[at(s) + i] = flashattn::quantize_e4m3(load_as_float(in, at(s) + i, dtype), descale);
    }
  }
}

}  // namespace flashattn::reference
