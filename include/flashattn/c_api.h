/* flashattn C API: a stable ABI over flashattn::forward() and flashattn::decode() for front ends
 * that cannot link C++ (the Python package loads it with ctypes, so one shared library serves
 * every Python and torch).
 *
 * Rules of the ABI:
 *   - plain C types of fixed width; enums travel as int32_t with the values below, which equal
 *     those of the C++ enums (c_api.cpp static_asserts it);
 *   - flashattn_c_fwd_params starts with `struct_size`: the caller sets it to
 *     sizeof(flashattn_c_fwd_params) as it was compiled. New fields are only ever appended, so a
 *     newer library reads an older caller's struct (the missing tail takes its defaults) and an
 *     older library reads the prefix it knows of a newer caller's struct;
 *   - every function returns; no C++ exception crosses the boundary (one caught inside is
 *     reported as FLASHATTN_C_INTERNAL_ERROR);
 *   - messages go to a caller-owned buffer `err` of `err_len` bytes, always NUL-terminated when
 *     err_len > 0, truncated when longer;
 *   - the library describes each params struct field by field (name, C type, offset, size:
 *     flashattn_c_fwd_params_fields(), flashattn_c_decode_params_fields(), ...), so that a front
 *     end's mirror of a struct can be checked against the struct it was compiled as. A new field
 *     is appended here, to the field list in c_api.cpp (which drives the copy into the C++ params
 *     and the description; it fails to compile while the two differ), and to the mirror in
 *     python/flashattn/_lib.py (tests/python/test_c_api.py checks it against the description).
 * The fields mean what the same-named fields of flashattn::ForwardParams mean (flashattn.h). */
#ifndef FLASHATTN_C_API_H_
#define FLASHATTN_C_API_H_

#include <stddef.h>
#include <stdint.h>

#if defined(FLASHATTN_C_BUILDING)
#define FLASHATTN_C_EXPORT __attribute__((visibility("default")))
#else
#define FLASHATTN_C_EXPORT
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes (flashattn::StatusCode), plus one for an exception caught at the boundary. */
enum {
  FLASHATTN_C_OK = 0,
  FLASHATTN_C_INVALID_ARGUMENT = 1, /* the input breaks a rule; the message names the rule */
  FLASHATTN_C_UNSUPPORTED = 2,      /* valid, but the kernel or this build lacks the feature */
  FLASHATTN_C_CUDA_ERROR = 3,       /* a CUDA call failed */
  FLASHATTN_C_INTERNAL_ERROR = 4    /* an exception inside the library (e.g. out of host memory) */
};

/* Element types (flashattn::DType). Forward with FLASHATTN_C_E4M3 inputs writes o as the params'
 * `out_dtype` (version 5); FLASHATTN_C_E5M2 has no kernel (FLASHATTN_C_UNSUPPORTED). */
enum { FLASHATTN_C_BF16 = 0, FLASHATTN_C_FP16 = 1, FLASHATTN_C_E4M3 = 2, FLASHATTN_C_E5M2 = 3 };

/* Kernel families (flashattn::Kernel); flashattn_c_kernel_from_name() maps the names. */
enum {
  FLASHATTN_C_KERNEL_AUTO = 0,
  FLASHATTN_C_KERNEL_CPU = 1,
  FLASHATTN_C_KERNEL_K1 = 2,
  FLASHATTN_C_KERNEL_K2 = 3,
  FLASHATTN_C_KERNEL_FA2 = 4,
  FLASHATTN_C_KERNEL_K3 = 5,
  FLASHATTN_C_KERNEL_K4 = 6,
  FLASHATTN_C_KERNEL_K5 = 7,
  FLASHATTN_C_KERNEL_K6 = 8,
  FLASHATTN_C_KERNEL_K7 = 9,
  FLASHATTN_C_KERNEL_K8 = 10
};

/* The forward parameters: 64 bytes of 32-bit fields, then 8-byte fields, so that the layout has
 * no implicit padding. Version 1 was 256 bytes on LP64; version 2 appends `sinks` (264); version
 * 3 appends `softcap` and a `reserved2` that keeps the size a multiple of 8 (272); version 4 the
 * paged KV fields (`block_table` .. `page_size`) and `reserved3` (304); version 5 FP8 inputs,
 * `out_dtype`, `reserved4` and the three descales (336); version 6 the three block descales of
 * K8 (360). Strides
 * are in elements, ordered (batch, seqlen, heads, dim); with cu_seqlens the tensors are (total,
 * heads, dim) and stride[0] is ignored; with block_table, k and v are (num_blocks, page_size,
 * heads, dim) and every stride is used. */
typedef struct flashattn_c_fwd_params {
  uint32_t struct_size; /* sizeof(flashattn_c_fwd_params) as the caller knows it */
  int32_t dtype;        /* an element type above: FLASHATTN_C_BF16, ... */
  int32_t batch;
  int32_t seqlen_q; /* with cu_seqlens: the longest query sequence */
  int32_t seqlen_k; /* with cu_seqlens: the longest key sequence */
  int32_t heads_q;
  int32_t heads_kv;
  int32_t head_dim;
  int32_t head_dim_v;   /* 0: same as head_dim */
  float softmax_scale;  /* 0: 1/sqrt(head_dim) */
  int32_t causal;       /* 0 or 1 */
  int32_t window_left;  /* -1: unbounded */
  int32_t window_right; /* -1: unbounded */
  int32_t total_q;      /* with cu_seqlens: packed query tokens */
  int32_t total_k;      /* with cu_seqlens: packed key tokens */
  uint32_t reserved;    /* must be 0 */

  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse; /* optional fp32 (batch, heads_q, seqlen_q), or (heads_q, total_q) with cu_seqlens */
  const int32_t* cu_seqlens_q; /* optional, batch + 1 prefix sums */
  const int32_t* cu_seqlens_k;
  void* stream; /* cudaStream_t; ignored by the cpu kernel */
  int64_t q_stride[4];
  int64_t k_stride[4];
  int64_t v_stride[4];
  int64_t o_stride[4];
  /* Version 2 (264 bytes): */
  const float* sinks; /* optional fp32 (heads_q,): ForwardParams::sinks */
  /* Version 3 (272 bytes): */
  float softcap;      /* 0: off; else > 0: ForwardParams::softcap */
  uint32_t reserved2; /* must be 0 */
  /* Version 4 (304 bytes): paged KV in prefill (ForwardParams::block_table). */
  const int32_t* block_table; /* optional int32 (batch, max_blocks_per_seq), with cu_seqlens */
  int64_t block_table_stride; /* elements between rows of block_table (0: max_blocks_per_seq) */
  int32_t max_blocks_per_seq; /* columns of block_table */
  int32_t num_blocks;         /* blocks in k and v */
  int32_t page_size;          /* rows per block, >= 1 */
  uint32_t reserved3;         /* must be 0 */
  /* Version 5 (336 bytes): FP8 inputs (ForwardParams::out_dtype, q/k/v_descale). An older
   * caller's struct reads as o in bf16 and no descales. */
  int32_t out_dtype;      /* with dtype FLASHATTN_C_E4M3: o's type, FLASHATTN_C_BF16 (0) or
                             FLASHATTN_C_FP16; ignored for 16-bit inputs (o is `dtype`) */
  uint32_t reserved4;     /* must be 0 */
  const float* q_descale; /* optional fp32 (batch, heads_kv), contiguous, FP8 inputs only */
  const float* k_descale; /* (null: 1.0; finite, > 0; in the memory the kernel reads) */
  const float* v_descale;
  /* Version 6 (360 bytes): K8's block descales (ForwardParams::q/k/v_block_descale), as
   * flashattn_c_quantize_fp8() writes them; all three or none, e4m3 inputs, dense batches, the
   * per-head descales above null. fp32, contiguous: q's (batch, heads_q, ceil(seqlen_q /
   * rows.q)), k's and v's (batch, heads_kv, ceil(seqlen_k / rows.kv)), rows from
   * flashattn_c_fp8_block_rows(). An older caller's struct reads as none. */
  const float* q_block_descale;
  const float* k_block_descale;
  const float* v_block_descale;
} flashattn_c_fwd_params;

/* Validates and runs (asynchronously on `stream` for GPU kernels). Returns a status code. */
FLASHATTN_C_EXPORT int flashattn_c_forward(const flashattn_c_fwd_params* params, int kernel,
                                           char* err, size_t err_len);

/* Validates only: FLASHATTN_C_OK when flashattn_c_forward() would run. */
FLASHATTN_C_EXPORT int flashattn_c_can_implement(const flashattn_c_fwd_params* params, int kernel,
                                                 char* err, size_t err_len);

/* The family `auto` resolves to for these params, or FLASHATTN_C_KERNEL_AUTO when none can run
 * (or the params are malformed). */
FLASHATTN_C_EXPORT int flashattn_c_select_kernel(const flashattn_c_fwd_params* params);

/* "auto", "cpu", "k1", ... -> the kernel id; -1 for an unknown name. */
FLASHATTN_C_EXPORT int flashattn_c_kernel_from_name(const char* name);

/* The kernel id -> its name (a static string); NULL for an unknown id. */
FLASHATTN_C_EXPORT const char* flashattn_c_kernel_name(int kernel);

/* 1 when the family is in this build (auto always is), else 0. */
FLASHATTN_C_EXPORT int flashattn_c_kernel_is_built(int kernel);

/* 1 when the family runs on the host over host memory (cpu), else 0. */
FLASHATTN_C_EXPORT int flashattn_c_kernel_runs_on_host(int kernel);

/* sizeof(flashattn_c_fwd_params) in this library, for callers that check their mirror. */
FLASHATTN_C_EXPORT size_t flashattn_c_fwd_params_size(void);

/* The decode parameters (flashattn::DecodeParams, decode.h: the fields mean what the same-named
 * fields there mean; `struct_size` as above): 80 bytes of 32-bit fields, then pointers and 64-bit
 * fields, no implicit padding (368 bytes on LP64 in version 1; version 2 appends `sinks`, 376;
 * version 3 `softcap` and `reserved2`, 384; version 4 the rotary tables, `rotary_dim`,
 * `seqlen_ro`, `rotary_interleaved` and `reserved3`, 416; version 5 the FP8 KV cache,
 * `cache_dtype`, `kv_scale_layout`, `k_scale`, `v_scale`, 440).
 * Strides are in elements, ordered (batch, seqlen, heads, dim); the cache's are (cache row or
 * page, row in it, heads, dim). The caches are written in place when k_new/v_new are given. */
typedef struct flashattn_c_decode_params {
  uint32_t struct_size; /* sizeof(flashattn_c_decode_params) as the caller knows it */
  int32_t dtype;        /* an element type above: FLASHATTN_C_BF16, ... */
  int32_t batch;
  int32_t seqlen_q; /* 1..16 */
  int32_t heads_q;
  int32_t heads_kv;
  int32_t head_dim;
  int32_t cache_batch;  /* contiguous cache: its rows (0: batch) */
  int32_t cache_seqlen; /* contiguous cache: tokens per row */
  int32_t num_pages;    /* paged cache (page_table set) */
  int32_t page_size;
  int32_t max_pages; /* columns of page_table */
  int32_t seqlen_new;   /* tokens in k_new/v_new (0: nothing appended) */
  float softmax_scale;  /* 0: 1/sqrt(head_dim) */
  int32_t causal;       /* 0 or 1 */
  int32_t window_left;  /* -1: unbounded */
  int32_t window_right; /* -1: unbounded */
  int32_t num_splits;   /* 0: chosen by the library */
  int32_t check_indices; /* 1: copy the index arrays to the host and refuse bad ones (syncs) */
  uint32_t reserved;     /* must be 0 */

  const void* q;
  void* o;
  float* lse; /* optional fp32 (batch, heads_q, seqlen_q) */
  void* k_cache;
  void* v_cache;
  const int32_t* cache_batch_idx; /* optional (batch), contiguous caches only */
  const int32_t* page_table;      /* optional (batch, max_pages): the cache is paged */
  const int32_t* cache_seqlens;   /* (batch), required */
  const void* k_new;              /* optional (batch, seqlen_new, heads_kv, head_dim) */
  const void* v_new;
  void* stream;              /* cudaStream_t */
  int64_t page_table_stride; /* elements between page_table rows (0: max_pages) */
  int64_t q_stride[4];
  int64_t o_stride[4];
  int64_t k_cache_stride[4];
  int64_t v_cache_stride[4];
  int64_t k_new_stride[4];
  int64_t v_new_stride[4];
  /* Version 2 (376 bytes): */
  const float* sinks; /* optional fp32 (heads_q,) device memory: DecodeParams::sinks */
  /* Version 3 (384 bytes): */
  float softcap;      /* 0: off; else > 0: DecodeParams::softcap */
  uint32_t reserved2; /* must be 0 */
  /* Version 4 (416 bytes): rotary embedding of q and k_new (DecodeParams::rotary_*). */
  const void* rotary_cos;     /* optional (seqlen_ro, rotary_dim / 2) of dtype, device memory */
  const void* rotary_sin;     /* with rotary_cos, same shape */
  int32_t rotary_dim;         /* even, <= head_dim with the tables; else 0 */
  int32_t seqlen_ro;          /* rows of the tables; 0 without them */
  int32_t rotary_interleaved; /* 1: pairs (0,1),(2,3)... (GPT-J); 0: halves (GPT-NeoX) */
  uint32_t reserved3;         /* must be 0 */
  /* Version 5 (440 bytes): an FP8 KV cache (DecodeParams::cache_dtype, k_scale, v_scale). */
  int32_t cache_dtype;     /* 0: the caches are `dtype`; FLASHATTN_C_E4M3: e4m3 (q etc. stay) */
  int32_t kv_scale_layout; /* 0: one scale per tensor; 1: one per KV head (heads_kv values) */
  const float* k_scale;    /* fp32 device memory, with an e4m3 cache only */
  const float* v_scale;
} flashattn_c_decode_params;

/* Validates, appends k_new/v_new into the caches and runs decode attention (asynchronously on
 * `stream`; with check_indices, after a synchronising copy of the indices). Returns a status. */
FLASHATTN_C_EXPORT int flashattn_c_decode(const flashattn_c_decode_params* params, char* err,
                                          size_t err_len);

/* Validates only: FLASHATTN_C_OK when flashattn_c_decode() would run. */
FLASHATTN_C_EXPORT int flashattn_c_decode_can_implement(const flashattn_c_decode_params* params,
                                                        char* err, size_t err_len);

/* sizeof(flashattn_c_decode_params) in this library. */
FLASHATTN_C_EXPORT size_t flashattn_c_decode_params_size(void);

/* flashattn::decode_check_errors (decode.h): waits for `stream` (a cudaStream_t, NULL: the legacy
 * default stream), then reports and clears the bad indices decode kernels met with
 * check_indices = 0 on the current device. FLASHATTN_C_OK when there were none,
 * FLASHATTN_C_INVALID_ARGUMENT naming the first bad entry when there were. */
FLASHATTN_C_EXPORT int flashattn_c_decode_check_errors(void* stream, char* err, size_t err_len);

/* The backward parameters (flashattn::BackwardParams, backward.h; `struct_size` as above):
 * 64 bytes of 32-bit fields, then pointers and 64-bit strides, no implicit padding (432 bytes on
 * LP64 in version 1; version 2 appends `softcap` and `reserved2`, 440). Strides are in elements, ordered (batch, seqlen, heads, dim); with
 * cu_seqlens the tensors are (total, heads, dim) and stride[0] is ignored. */
typedef struct flashattn_c_bwd_params {
  uint32_t struct_size; /* sizeof(flashattn_c_bwd_params) as the caller knows it */
  int32_t dtype;        /* an element type above: FLASHATTN_C_BF16, ... */
  int32_t batch;
  int32_t seqlen_q; /* with cu_seqlens: the longest query sequence */
  int32_t seqlen_k; /* with cu_seqlens: the longest key sequence */
  int32_t heads_q;
  int32_t heads_kv;
  int32_t head_dim;
  int32_t head_dim_v;    /* 0: same as head_dim */
  float softmax_scale;   /* 0: 1/sqrt(head_dim) */
  int32_t causal;        /* 0 or 1 */
  int32_t window_left;   /* -1: unbounded */
  int32_t window_right;  /* -1: unbounded */
  int32_t total_q;       /* with cu_seqlens: packed query tokens */
  int32_t total_k;       /* with cu_seqlens: packed key tokens */
  int32_t deterministic; /* 0 or 1 */

  const void* q;
  const void* k;
  const void* v;
  const void* o;
  const void* dout;
  const float* lse; /* required fp32, the forward's */
  void* dq;
  void* dk;
  void* dv;
  const int32_t* cu_seqlens_q; /* optional, batch + 1 prefix sums */
  const int32_t* cu_seqlens_k;
  const float* sinks; /* optional fp32 (heads_q,) */
  float* dsinks;      /* optional fp32 (heads_q,) output */
  void* stream;       /* cudaStream_t; ignored by the cpu kernel */
  int64_t q_stride[4];
  int64_t k_stride[4];
  int64_t v_stride[4];
  int64_t o_stride[4];
  int64_t dout_stride[4];
  int64_t dq_stride[4];
  int64_t dk_stride[4];
  int64_t dv_stride[4];
  /* Version 2 (440 bytes): */
  float softcap;      /* 0: off; else > 0: the forward's softcap */
  uint32_t reserved2; /* must be 0 */
} flashattn_c_bwd_params;

/* Validates and runs the backward (asynchronously on `stream` for GPU kernels). */
FLASHATTN_C_EXPORT int flashattn_c_backward(const flashattn_c_bwd_params* params, int kernel,
                                            char* err, size_t err_len);

/* Validates only: FLASHATTN_C_OK when flashattn_c_backward() would run. */
FLASHATTN_C_EXPORT int flashattn_c_backward_can_implement(const flashattn_c_bwd_params* params,
                                                          int kernel, char* err, size_t err_len);

/* sizeof(flashattn_c_bwd_params) in this library. */
FLASHATTN_C_EXPORT size_t flashattn_c_bwd_params_size(void);

/* K8's pre-pass (flashattn::QuantizeFp8Params and quantize_fp8(), flashattn/fp8.h, which states
 * the blocks, the rounding and the rotation bit for bit): bf16/fp16 q, k, v in, e4m3 q_out,
 * k_out, v_out and fp32 block descales out, q and k optionally rotated first. Rotations
 * (flashattn::Fp8Rotation): */
enum { FLASHATTN_C_ROTATION_NONE = 0, FLASHATTN_C_ROTATION_HADAMARD = 1 };

/* The pre-pass parameters (`struct_size` as above): 40 bytes of 32-bit fields, the 64-bit seed,
 * then pointers and strides, no implicit padding (320 bytes on LP64 in version 1). Strides are
 * in elements, ordered (batch, seqlen, heads, dim), the last 1; dense batches only. All pointers
 * in device memory (the GPU pre-pass, asynchronous on `stream`) or all in host memory (the
 * reference implementation, the same bytes). */
typedef struct flashattn_c_quantize_fp8_params {
  uint32_t struct_size; /* sizeof(flashattn_c_quantize_fp8_params) as the caller knows it */
  int32_t dtype;        /* of q, k, v: FLASHATTN_C_BF16 or FLASHATTN_C_FP16 */
  int32_t batch;
  int32_t seqlen_q;
  int32_t seqlen_k;
  int32_t heads_q;
  int32_t heads_kv;
  int32_t head_dim;
  int32_t head_dim_v; /* 0: same as head_dim (K8 runs head_dim_v == head_dim) */
  int32_t rotation;   /* FLASHATTN_C_ROTATION_NONE or FLASHATTN_C_ROTATION_HADAMARD */
  uint64_t seed;      /* the rotation's random signs (ignored without rotation) */

  const void* q; /* inputs (batch, seqlen, heads, dim) of dtype */
  const void* k;
  const void* v;
  void* q_out; /* e4m3, the inputs' shapes, not overlapping them */
  void* k_out;
  void* v_out;
  float* q_block_descale; /* fp32, contiguous, shapes as flashattn_c_fwd_params' (version 6) */
  float* k_block_descale;
  float* v_block_descale;
  void* stream; /* cudaStream_t; ignored for host memory */
  int64_t q_stride[4];
  int64_t k_stride[4];
  int64_t v_stride[4];
  int64_t q_out_stride[4];
  int64_t k_out_stride[4];
  int64_t v_out_stride[4];
} flashattn_c_quantize_fp8_params;

/* Validates and quantises (asynchronously on `stream` for device memory). Returns a status. */
FLASHATTN_C_EXPORT int flashattn_c_quantize_fp8(const flashattn_c_quantize_fp8_params* params,
                                                char* err, size_t err_len);

/* Validates only: FLASHATTN_C_OK when flashattn_c_quantize_fp8() would run. */
FLASHATTN_C_EXPORT int flashattn_c_can_quantize_fp8(const flashattn_c_quantize_fp8_params* params,
                                                    char* err, size_t err_len);

/* sizeof(flashattn_c_quantize_fp8_params) in this library. */
FLASHATTN_C_EXPORT size_t flashattn_c_quantize_fp8_params_size(void);

/* Rows per block descale for a head dim (flashattn::fp8_block_rows: the FP8 kernel's query tile
 * and key block): *q_rows for q, *kv_rows for k and v (either pointer may be NULL). Returns 1,
 * or 0 with both 0 where no FP8 kernel is built for the head dim. */
FLASHATTN_C_EXPORT int flashattn_c_fp8_block_rows(int head_dim, int32_t* q_rows, int32_t* kv_rows);

/* One field of a params struct as this library was compiled: name, C type ("uint32", "int32",
 * "uint64", "float", "int64", "pointer", "int64[4]"), byte offset and size. */
typedef struct flashattn_c_field {
  const char* name;
  const char* type;
  size_t offset;
  size_t size;
} flashattn_c_field;

/* The fields of flashattn_c_fwd_params (flashattn_c_decode_params, ...) in declaration order,
 * every byte of the struct covered: a static array, its length stored in *count (when count is
 * not NULL). */
FLASHATTN_C_EXPORT const flashattn_c_field* flashattn_c_fwd_params_fields(size_t* count);
FLASHATTN_C_EXPORT const flashattn_c_field* flashattn_c_decode_params_fields(size_t* count);
FLASHATTN_C_EXPORT const flashattn_c_field* flashattn_c_bwd_params_fields(size_t* count);
FLASHATTN_C_EXPORT const flashattn_c_field* flashattn_c_quantize_fp8_params_fields(size_t* count);

/* The library version, "major.minor.patch" (a static string). */
FLASHATTN_C_EXPORT const char* flashattn_c_version(void);

#ifdef __cplusplus
}
#endif

#endif /* FLASHATTN_C_API_H_ */
