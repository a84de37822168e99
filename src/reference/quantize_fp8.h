// quantize_fp8() on host memory (flashattn/fp8.h): the reference implementation of K8's pre-pass,
// bit for bit what the GPU pre-pass (kernels/quant) writes. Internal: the public entry point is
// flashattn::quantize_fp8, which validates and then calls this for host pointers.
#pragma once

#include <cstdint>

#include "flashattn/flashattn.h"

namespace flashattn::reference {

// Quantises q, k and v of validated host-memory params (can_quantize_fp8 passed).
void quantize_fp8_host(const QuantizeFp8Params& params);

// One row of d = head_dim (64, 128 or 256) values rotated in place by diag(s)·H/√d, in fp32 with
// the pre-pass's operations in its order (flashattn/fp8.h): signs, butterfly stages h = 1, 2, ...,
// d/2, then the 1/√d factor. Exposed for the tests.
void hadamard_rotate_row(float* x, int d, uint64_t seed);

}  // namespace flashattn::reference
