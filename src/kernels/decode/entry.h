// The decode family's entry points for the dispatch layer (launch.cu).
#pragma once

#include "common/decode_problem.h"

namespace flashattn {

// Thread blocks of the split kernel that fit on one SM at once, for the split heuristic
// (`kv_e4m3`: the FP8-cache kernel, whose shared memory differs).
Status decode_blocks_per_sm(DType dtype, int head_dim, bool kv_e4m3, int* blocks);
// The current device's DecodeErrorRecord (a __device__ variable of launch.cu; its address is
// looked up once per device): the kernels record bad indices there, decode_check_errors reads it.
Status decode_error_record(DecodeErrorRecord** record);
// Appends k_new/v_new (when given), runs the split kernel and, with num_splits > 1, the combine
// kernel, all on problem.stream. The partial buffers must be set when num_splits > 1.
Status decode_run(const DecodeProblem& problem);

}  // namespace flashattn
