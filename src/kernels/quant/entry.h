// K8's pre-pass on the GPU (quantize_fp8.cu): bf16/fp16 q, k, v -> e4m3 with one descale per
// block of rows, optionally after the Hadamard rotation of q and k (flashattn/fp8.h). Takes
// validated parameters; enqueues on params.stream.
#pragma once

#include "flashattn/flashattn.h"

namespace flashattn {

Status quantize_fp8_device(const QuantizeFp8Params& params);

}  // namespace flashattn
