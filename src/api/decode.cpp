// decode(): validate, normalise into a DecodeProblem, choose the number of KV splits, take the
// workspace (split partials, rotated q/k_new) from the library's stream-ordered pool, and run the
// decode family.
#include <cuda_runtime.h>

#include <algorithm>

#include "common/decode_problem.h"
#include "api/decode_splits.h"
#include "api/decode_validate.h"
#include "kernels/decode/entry.h"
#include "common/cuda_check.h"
#include "common/launch_limits.h"
#include "common/workspace.h"
#include "flashattn/flashattn.h"

namespace flashattn {
namespace {

// Keys the longest sequence may attend to: the cache's capacity, narrowed by a window. The
// capacity, not cache_seqlens, so that choosing splits reads nothing from the device; and a paged
// and a contiguous cache of the same capacity get the same splits (hence bitwise equal results).
int max_visible_keys(const DecodeProblem& d) {
  int64_t keys = d.capacity;
  if (d.window_left >= 0 && d.window_right >= 0) {
    keys = std::min<int64_t>(keys, int64_t{d.window_left} + d.window_right + d.seqlen_q);
  } else if (d.window_left >= 0) {
    keys = std::min<int64_t>(keys, int64_t{d.window_left} + d.seqlen_q);
  }
  return static_cast<int>(keys);
}

Status choose_splits(const DecodeParams& p, DecodeProblem& d) {
  if (p.num_splits > 0) {
    d.num_splits = p.num_splits;
    return Status::success();
  }
  int sms = 0, per_sm = 1;
  if (Status s = device_sm_count(&sms); !s.ok()) return s;
  if (Status s = decode_blocks_per_sm(d.dtype, d.head_dim, d.kv_e4m3, &per_sm); !s.ok()) return s;
  DecodeSplitInputs in;
  in.blocks = d.batch * d.heads_kv * d.row_chunks;
  in.key_tiles = (max_visible_keys(d) + kDecodeKeysPerTile - 1) / kDecodeKeysPerTile;
  in.num_sms = sms;
  in.blocks_per_sm = per_sm;
  // Contiguous e4m3 caches only: paged ones ran 12-15% slower with it (decode_splits.h).
  if (d.kv_e4m3 && !d.paged) in.stream_blocks_per_sm = kDecodeE4m3StreamBlocksPerSm;
  d.num_splits = decode_num_splits(in);
  return Status::success();
}

}  // namespace

Status decode(const DecodeParams& params) {
  if (Status s = can_implement(params); !s.ok()) return s;
  DecodeProblem d = make_decode_problem(params);
  if (Status s = choose_splits(params, d); !s.ok()) return s;
  if (Status s = decode_error_record(&d.errors); !s.ok()) return s;

  // One workspace block: the split partials (fp32 O and the log2-domain LSE of every (split,
  // batch, query, head)) when num_splits > 1, then the rotated q and k_new when rotary is on
  // (each start 256-byte aligned for the kernels' 16-byte loads).
  const auto round_up = [](size_t n) { return (n + 255) / 256 * 256; };
  const size_t rows = size_t(d.num_splits) * d.batch * d.seqlen_q * d.heads_q;
  const size_t partial_bytes = d.num_splits > 1 ? round_up(rows * (d.head_dim + 1) * 4) : 0;
  const size_t es = 2;  // bf16 / fp16
  const size_t q_rot_bytes =
      d.rotary_dim > 0 ? round_up(size_t(d.batch) * d.seqlen_q * d.heads_q * d.head_dim * es) : 0;
  const size_t k_rot_bytes =
      d.rotary_dim > 0 ? size_t(d.batch) * d.seqlen_new * d.heads_kv * d.head_dim * es : 0;
  const size_t bytes = partial_bytes + q_rot_bytes + k_rot_bytes;
  if (bytes == 0) return decode_run(d);

  const auto stream = static_cast<cudaStream_t>(d.stream);
  void* ws = nullptr;
  if (Status s = workspace_alloc(bytes, stream, &ws); !s.ok()) return s;
  char* at = static_cast<char*>(ws);
  if (partial_bytes > 0) {
    d.o_partial = reinterpret_cast<float*>(at);
    d.lse_partial = d.o_partial + rows * d.head_dim;
  }
  if (d.rotary_dim > 0) {
    d.q_rotated = at + partial_bytes;
    d.k_new_rotated = k_rot_bytes > 0 ? at + partial_bytes + q_rot_bytes : nullptr;
  }
  const Status run = decode_run(d);
  const Status freed = workspace_free(ws, stream);
  return run.ok() ? freed : run;
}

Status decode_check_errors(void* stream_handle) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    return {StatusCode::unsupported,
            "decode_check_errors: needs a CUDA device and none is available"};
  }
  const auto stream = static_cast<cudaStream_t>(stream_handle);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  FA_CUDA_TRY(cudaStreamIsCapturing(stream, &capture));
  if (capture != cudaStreamCaptureStatusNone) {
    return {StatusCode::invalid_argument,
            "stream: is capturing a CUDA graph; decode_check_errors synchronises, so call it "
            "after a replay"};
  }
  DecodeErrorRecord* record = nullptr;
  if (Status s = decode_error_record(&record); !s.ok()) return s;
  DecodeErrorRecord seen;
  FA_CUDA_TRY(cudaMemcpyAsync(&seen, record, sizeof seen, cudaMemcpyDeviceToHost, stream));
  FA_CUDA_TRY(cudaStreamSynchronize(stream));
  const Status status = decode_error_status(seen);
  if (status.ok()) return status;
  // Cleared in stream order: decode calls queued after this one on `stream` record afresh.
  FA_CUDA_TRY(cudaMemsetAsync(record, 0, sizeof seen, stream));
  return status;
}

void set_contiguous_layout(DecodeParams& p) {
  set_contiguous_strides(p.q.stride, p.seqlen_q, p.heads_q, p.head_dim);
  set_contiguous_strides(p.o.stride, p.seqlen_q, p.heads_q, p.head_dim);
  set_contiguous_strides(p.k_new.stride, p.seqlen_new, p.heads_kv, p.head_dim);
  set_contiguous_strides(p.v_new.stride, p.seqlen_new, p.heads_kv, p.head_dim);
  const bool paged = p.page_table != nullptr;
  const int rows = paged ? p.page_size : p.cache_seqlen;
  set_contiguous_strides(p.k_cache.stride, rows, p.heads_kv, p.head_dim);
  set_contiguous_strides(p.v_cache.stride, rows, p.heads_kv, p.head_dim);
  if (paged) p.page_table_stride = p.max_pages;
}

}  // namespace flashattn
