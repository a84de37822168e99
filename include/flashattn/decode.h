// flashattn decode: attention of a few new query tokens against a KV cache, with the semantics of
// FlashAttention's flash_attn_with_kvcache. Included by flashattn.h; not meant to be included
// alone.
//
// Shapes (strides in elements, last dimension contiguous):
//   q        (batch, seqlen_q, heads_q, head_dim), 1 <= seqlen_q <= 16
//   o        (batch, seqlen_q, heads_q, head_dim)      lse (batch, heads_q, seqlen_q), fp32, dense
//   k_cache, v_cache:
//     contiguous  (cache_batch, cache_seqlen, heads_kv, head_dim); batch b reads cache row
//                 cache_batch_idx[b] (or b when cache_batch_idx is null)
//     paged       (num_pages, page_size, heads_kv, head_dim) with page_table (batch, max_pages):
//                 key j of batch b lives in page page_table[b][j / page_size], row j % page_size
//   cache_seqlens (batch) int32: keys already in the cache for each batch entry
//   k_new, v_new  (batch, seqlen_new, heads_kv, head_dim), optional: written into the cache at
//                 positions cache_seqlens[b] .. cache_seqlens[b] + seqlen_new - 1 before attending
//
// Batch entry b attends to its first L_b = cache_seqlens[b] + seqlen_new keys. Masks are those of
// forward() with seqlen_k = L_b (bottom-right aligned: query row i sits on key diagonal
// i + L_b - seqlen_q), so `causal` lets the last query token see every key. A row that sees no
// key (L_b = 0, or masked away) outputs 0 and LSE = -inf.
//
// Index arrays (cache_seqlens, page_table, cache_batch_idx) live in device memory. With
// check_indices (the default) can_implement() copies them to the host on `stream`
// (cudaMemcpyAsync + cudaStreamSynchronize: the call blocks until the work queued before it is
// done) and refuses a page-table entry outside [0, num_pages) for a page that would be read, a
// cache_batch_idx outside [0, cache_batch), and cache_seqlens[b] + seqlen_new beyond the cache.
// Host-side checking is the default because an in-kernel flag can only be read after a
// synchronisation too, and by then the kernel has run: a Status before any launch is the only
// way to refuse bad indices with nothing read or written. Callers in a decode loop whose indices
// are known good set check_indices = false: no copy, no synchronisation. The kernels then still
// never read outside the cache (an out-of-range page or cache row is not loaded and counts as
// zeros), the result for such input is unspecified, and the split kernel records what it met in a
// small per-device record: a cache_seqlens[b] + seqlen_new outside [0, capacity], a
// cache_batch_idx[b] outside [0, cache_batch), a page-table entry outside [0, num_pages) for a page
// it read (with a window, pages no query sees are not read, so not checked). decode_check_errors()
// (below) synchronises once and reports it, so a serving loop can check once per batch of steps.
// The record is shared by every stream of the device and read-and-cleared by that call; an error
// recorded by a kernel still running on another stream while it clears may be lost.
//
// Rotary position embedding (flash_attn_with_kvcache's rotary_cos / rotary_sin): with both tables
// given, q and k_new are rotated before anything else happens, into copies in the library's
// workspace (the caller's q and k_new are never written); the rotated k_new is what is appended
// to the cache. Key i of k_new sits at position cache_seqlens[b] + i. Query token i sits at
// cache_seqlens[b] + i when the call is causal or local (a window_left or window_right other
// than -1), else every query token sits at cache_seqlens[b]. Only the first rotary_dim dims of
// each head are rotated, the rest pass through unchanged. For position t and pair index
// p < rotary_dim / 2, with c = cos[t][p], s = sin[t][p] and (x0, x1) the pair, dims (2p, 2p + 1)
// when rotary_interleaved (GPT-J), else (p, p + rotary_dim / 2) (GPT-NeoX):
//   x0' = fma(x0, c, -(x1 * s)),  x1' = fma(x1, c, x0 * s)
// in fp32 (the 16-bit values widened exactly; each product and fma rounded to nearest even once),
// then rounded once to the element type (nearest even). reference::apply_rotary does the same
// arithmetic on the host, so the appended keys are defined bit for bit. With check_indices, every
// position used must be < seqlen_ro (max over b of cache_seqlens[b] + max(seqlen_new, n_q), n_q
// being seqlen_q when causal or local, else 1); without it that is the caller's duty: a
// position outside the table reads its nearest row (nothing is read outside the table) and the
// result is unspecified.
//
// FP8 KV cache (cache_dtype = DType::e4m3; q, o, k_new and v_new stay bf16/fp16 in `dtype`): the
// caches hold e4m3 (OCP FP8 E4M3FN: bias 7, no infinities, largest finite 448, NaN = S.1111.111),
// one byte per element, with fp32 scales in device memory, k_scale and v_scale: one value for the
// whole tensor (KvScaleLayout::per_tensor) or one per KV head (per_kv_head: heads_kv values, head
// h uses element h). The cache means
//   k = float(k_e4m3) * k_scale[h],  v = float(v_e4m3) * v_scale[h]     (per tensor: index 0)
// (the kernel applies the scales in fp32, to Q·Kᵀ and to P·V, which is the same product up to
// fp32 rounding). Appended rows k_new/v_new are quantised with the same scales, bit for bit by
// this rule, on the device and on the host in reference::quantize_e4m3 (reference.h; one
// definition with the library's host rounding, src/common/host_dtype.h):
//   e4m3 = satfinite_rne(x / scale)
// where x / scale is one IEEE fp32 division rounded to nearest even, and satfinite_rne rounds
// that fp32 value to the nearest e4m3 value, ties to even mantissa, including the subnormals
// (multiples of 2^-9 below 2^-6); a magnitude above 448 (infinity included) becomes ±448, the sign
// is kept (so -0 stays -0), and NaN becomes the NaN 0x7F. On the device this is
// __nv_cvt_float_to_fp8(__fdiv_rn(x, scale), __NV_SATFINITE, __NV_E4M3). With check_indices the
// scales are copied to the host and must be finite and > 0; without, that is the caller's duty.
#pragma once

#include <cstdint>
#include <optional>

namespace flashattn {

// How many values k_scale and v_scale hold (FP8 KV cache only).
enum class KvScaleLayout : int {
  per_tensor = 0,   // one fp32 value for the whole cache (vLLM's convention)
  per_kv_head = 1,  // heads_kv fp32 values, one per KV head (FlashInfer's per-head scales)
};

struct DecodeParams {
  DType dtype = DType::bf16;  // q, new k/v and o (bf16 or fp16); the caches too unless set below

  // The caches' element type: unset means `dtype`; DType::e4m3 is an FP8 cache (header comment)
  // and needs k_scale and v_scale (device memory, fp32, 4-byte aligned, kv_scale_layout values).
  std::optional<DType> cache_dtype;
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
  KvScaleLayout kv_scale_layout = KvScaleLayout::per_tensor;

  int batch = 0;
  int seqlen_q = 0;  // 1..16
  int heads_q = 0;
  int heads_kv = 0;  // heads_q must be a multiple of it
  int head_dim = 0;  // 64, 96, 128, 192 or 256

  TensorRef q;
  MutableTensorRef o;
  float* lse = nullptr;  // optional

  // The cache. Contiguous when page_table is null: cache_batch and cache_seqlen give its shape.
  MutableTensorRef k_cache, v_cache;
  int cache_batch = 0;                       // contiguous: rows of the cache (0: batch)
  int cache_seqlen = 0;                      // contiguous: capacity of each row in tokens
  const int32_t* cache_batch_idx = nullptr;  // optional (batch), contiguous caches only

  // Paged: page_table (batch, max_pages) int32 with row stride page_table_stride (0: max_pages).
  const int32_t* page_table = nullptr;
  int num_pages = 0;
  int page_size = 0;  // any size >= 1
  int max_pages = 0;
  int64_t page_table_stride = 0;

  const int32_t* cache_seqlens = nullptr;  // (batch), required

  // Optional new keys and values, appended in place before attending.
  TensorRef k_new, v_new;  // data null: nothing appended; `dtype` (quantised into an FP8 cache)
  int seqlen_new = 0;

  float softmax_scale = 0.0f;  // 0: 1/sqrt(head_dim)
  bool causal = false;
  int window_left = -1;   // -1: unbounded
  int window_right = -1;  // -1: unbounded; must be -1 or 0 with causal

  int num_splits = 0;         // KV splits per (batch, KV head); 0: chosen to fill the GPU
  bool check_indices = true;  // see the header comment

  const float* sinks = nullptr;  // optional fp32 (heads_q,) device memory: ForwardParams::sinks
  float softcap = 0.0f;          // ForwardParams::softcap (0: off)

  // Rotary embedding (see the header comment); both tables or neither. Device memory, dtype,
  // dense (seqlen_ro, rotary_dim / 2) each.
  const void* rotary_cos = nullptr;
  const void* rotary_sin = nullptr;
  int rotary_dim = 0;              // even, 0 < rotary_dim <= head_dim with the tables; else 0
  int seqlen_ro = 0;               // rows of the tables (positions 0 .. seqlen_ro - 1)
  bool rotary_interleaved = true;  // true: pairs (0,1),(2,3)...; false: halves (GPT-NeoX)

  void* stream = nullptr;  // cudaStream_t
};

// The element type of the caches: cache_dtype when set, else dtype.
inline DType decode_cache_dtype(const DecodeParams& p) {
  return p.cache_dtype.value_or(p.dtype);
}

// Every rule for a decode call; ok when decode() would run. May synchronise `stream` (see
// check_indices above).
Status can_implement(const DecodeParams& params);

// Validates, then appends k_new/v_new (if given) and runs split-KV attention on `stream`.
Status decode(const DecodeParams& params);

// The index errors decode kernels met since the last call (check_indices = false; see the header
// comment): waits for `stream` (a cudaStream_t; null: the legacy default stream), then reads and
// clears the current device's record. success when there were none; invalid_argument naming the
// first bad entry (and the kinds of any others) when there were; unsupported without a device.
// It synchronises, so it refuses a stream that is capturing a CUDA graph: check after a replay.
Status decode_check_errors(void* stream = nullptr);

// Dense strides for q, o (batch, seqlen_q, heads_q, head_dim), k_new/v_new, and the cache:
// (cache_batch or batch, cache_seqlen, ...) when contiguous, (num_pages, page_size, ...) when
// paged. Sets page_table_stride to max_pages when paged.
void set_contiguous_layout(DecodeParams& params);

}  // namespace flashattn
