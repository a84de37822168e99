"""The flash_attn-style functions: the names, layouts and behaviour of the flash-attn package.

Errors: a refused argument raises ValueError carrying the library's message, which names the
argument and the rule ("heads_q: must be a multiple of heads_kv (6 is not a multiple of 4)"); a
valid request that the chosen kernel or this build cannot run raises flashattn.UnsupportedError,
a subclass of ValueError ("cu_seqlens_q: kernel k2 does not support variable length"); a failed
CUDA call raises RuntimeError. The backward raises the same types.

Gradients: flash_attn_func and flash_attn_varlen_func are differentiable (torch.autograd; under
torch.compile the backward is traced with the forward). dq, dk, dv and the sinks' gradient are
returned for the inputs that require them. The backward runs on the forward's family when it has
one ("cpu", "fa2"), else on "auto" ("cpu" for CPU tensors, the GPU backward for CUDA tensors).
deterministic=True makes it bitwise reproducible (a fixed accumulation order; slower on the
GPU). The returned LSE carries no gradient (lse.requires_grad is False).

FP8: torch.float8_e4m3fn q, k and v (with the keywords q_descale, k_descale, v_descale and
out_dtype, or K8's q_block_descale, k_block_descale, v_block_descale) run forward only: an FP8
input or a descale that requires grad raises flashattn.UnsupportedError while grad mode is on.
flash_attn_func(..., fp8="per_tensor" | "per_block" | "per_block_hadamard") quantises bf16/fp16
inputs itself (forward only too).
"""
import torch

from . import _checks, _lib, fp8 as _fp8, ops


def _forward_only(q, k, v, q_descale, k_descale, v_descale, q_block_descale=None,
                  k_block_descale=None, v_block_descale=None):
    # Only where autograd would record the call: under torch.no_grad FP8 inputs that require
    # grad are fine (nothing is recorded).
    if torch.is_grad_enabled():
        _checks.forward_only(q, k, v, q_descale=q_descale, k_descale=k_descale,
                             v_descale=v_descale, q_block_descale=q_block_descale,
                             k_block_descale=k_block_descale, v_block_descale=v_block_descale)


def _quantise(fp8, q, k, v, out_dtype):
    """flash_attn_func's fp8=: (q8, k8, v8, the per-head descales (3) or Nones, the block
    descales (3) or Nones, o's dtype: out_dtype, default the inputs')."""
    o_dtype = _checks.out_dtype(torch.float8_e4m3fn, q.dtype if out_dtype is None else out_dtype)
    if fp8 == "per_tensor":
        (q8, qd), (k8, kd), (v8, vd) = (_fp8.quantize_per_kv_head(t, k.shape[2])
                                        for t in (q, k, v))
        return q8, k8, v8, (qd, kd, vd), (None, None, None), o_dtype
    rotation = "hadamard" if fp8 == "per_block_hadamard" else "none"
    q8, k8, v8, *blocks = ops.quantize_fp8(q, k, v, rotation, 0)
    return q8, k8, v8, (None, None, None), tuple(blocks), o_dtype


def flash_attn_func(q, k, v, softmax_scale=None, causal=False, window_size=(-1, -1),
                    return_lse=False, kernel="auto", *, sinks=None, deterministic=False,
                    softcap=0.0, q_descale=None, k_descale=None, v_descale=None,
                    out_dtype=None, fp8=None, q_block_descale=None, k_block_descale=None,
                    v_block_descale=None):
    """Attention over (batch, seqlen, heads, head_dim) tensors.

    q: (batch, seqlen_q, heads_q, head_dim); k: (batch, seqlen_k, heads_kv, head_dim);
    v: (batch, seqlen_k, heads_kv, head_dim_v); bf16 or fp16, all on one CUDA device or all on
    the CPU. Any strides whose last one is 1 are used as they are (a tensor whose last dimension
    is strided is copied once). heads_q must be a multiple of heads_kv (GQA/MQA).
    softmax_scale: default 1/sqrt(head_dim). causal: bottom-right aligned, as in flash-attn.
    window_size: (left, right) keys visible around the diagonal, -1 unbounded.
    kernel: "auto" (the fastest built family for the tensors' device: "cpu" for CPU tensors),
    or a family name ("cpu", "k1", "k2", "fa2", ...; see flashattn.built_kernels()).
    sinks: learnable attention sinks (gpt-oss), fp32 (heads_q,) on q's device: one logit per
    query head, in the units of the scaled scores, that joins every row's softmax denominator and
    contributes no value (families k6, fa2, cpu). Runs on the current CUDA stream of the tensors'
    device. deterministic: the backward accumulates in a fixed order, so that repeated calls give
    bitwise identical gradients (the forward always is). softcap: flash-attn's logit
    soft-capping (Gemma-2/3, Grok): 0 off; else > 0, the scaled scores become
    softcap * tanh(scores / softcap) before masking and softmax (families k6, fa2, cpu; the
    backward on fa2 and cpu).

    FP8 (forward only): q, k, v torch.float8_e4m3fn (families k7 on Hopper, which `auto` picks
    for CUDA tensors, and cpu). q_descale, k_descale, v_descale: optional fp32 (batch, heads_kv)
    on q's device, one factor per sequence and KV head (FlashAttention-3's convention; None:
    1.0, and each must be finite and > 0): attention runs on the dequantised inputs
    q_descale * q, k_descale * k, v_descale * v (query head h uses KV head h // (heads_q /
    heads_kv)'s q_descale). out_dtype: torch.bfloat16 (the default for FP8 inputs) or
    torch.float16, the output's dtype; with 16-bit inputs only None or their own dtype. The LSE
    is fp32 in true units (of the dequantised scores). Not with sinks, softcap or block_table.
    K8: q_block_descale, k_block_descale, v_block_descale instead of the descales: fp32, one
    per block of rows, as flashattn.quantize_fp8 returns them with q8, k8, v8 (families k8 on
    Hopper, which `auto` picks for them, and cpu; all three or none).

    fp8 (forward only): FP8 attention of bf16/fp16 q, k, v in one call. "per_tensor": each
    quantised with one descale amax/448 per sequence and KV head (in torch; then k7, as with the
    descales above); "per_block": flashattn.quantize_fp8's blocks (then k8); "per_block_hadamard":
    the same with q and k rotated first (seed 0), which spreads outliers. out is in the inputs'
    dtype (or out_dtype); not with FP8 inputs or descales. Inputs that require grad raise
    flashattn.UnsupportedError while grad mode is on.

    Differentiable: gradients flow to q, k, v and sinks where they require them (the backward
    reads this call's out and lse, saved by autograd); the returned lse carries none.

    Returns out (batch, seqlen_q, heads_q, head_dim_v), contiguous, in q's dtype (out_dtype
    for FP8 inputs); with
    return_lse, (out, lse) where lse is (batch, heads_q, seqlen_q) fp32, natural log (the log of
    the softmax denominator, sink included), -inf for rows that see no key (their output is 0;
    with sinks their lse is the sink).
    """
    _checks.dense(q, k, v)
    blocks = (q_block_descale, k_block_descale, v_block_descale)
    if fp8 is not None:
        _checks.fp8_mode(fp8, q, q_descale=q_descale, k_descale=k_descale, v_descale=v_descale,
                         q_block_descale=q_block_descale, k_block_descale=k_block_descale,
                         v_block_descale=v_block_descale)
        if torch.is_grad_enabled():
            _checks.fp8_forward_only(fp8, q, k, v)
        q, k, v, (q_descale, k_descale, v_descale), blocks, out_dtype = _quantise(
            fp8, q, k, v, out_dtype)
    _checks.descales(q, q.shape[0], k.shape[2], q_descale=q_descale, k_descale=k_descale,
                     v_descale=v_descale)
    _checks.block_descales(q, *blocks)
    _forward_only(q, k, v, q_descale, k_descale, v_descale, *blocks)
    left, right = _checks.window(window_size)
    out, lse = ops.apply_fwd(q, k, v, 0.0 if softmax_scale is None else float(softmax_scale),
                             bool(causal), left, right, kernel, sinks, bool(deterministic),
                             float(softcap), q_descale, k_descale, v_descale, out_dtype, *blocks)
    return (out, lse) if return_lse else out


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           softmax_scale=None, causal=False, window_size=(-1, -1),
                           return_lse=False, kernel="auto", *, sinks=None, deterministic=False,
                           softcap=0.0, block_table=None, q_descale=None, k_descale=None,
                           v_descale=None, out_dtype=None):
    """Attention over packed sequences of different lengths.

    q: (total_q, heads_q, head_dim); k: (total_k, heads_kv, head_dim);
    v: (total_k, heads_kv, head_dim_v). cu_seqlens_q/cu_seqlens_k: int32 (batch + 1,) prefix
    sums of the sequence lengths on q's device (sequence b is rows cu[b]..cu[b+1]-1; empty
    sequences allowed). max_seqlen_q/max_seqlen_k: the longest sequence (no sequence may be
    longer). Masks apply per sequence. Needs a family with variable-length support (cpu, fa2,
    k3-k6); others raise flashattn.UnsupportedError. sinks, deterministic, softcap and
    gradients: as flash_attn_func (the backward needs a variable-length backward family: fa2,
    cpu).

    block_table: paged KV (flash-attn's keyword; chunked prefill against a paged cache). An int32
    (batch, max_blocks_per_seq) tensor on q's device; k and v are then the cache's blocks,
    (num_blocks, page_size, heads_kv, head_dim) and (num_blocks, page_size, heads_kv,
    head_dim_v), any page_size >= 1. Key j of sequence b is k[block_table[b, j // page_size],
    j % page_size]; sequence b has cu_seqlens_k[b + 1] - cu_seqlens_k[b] keys (at most
    max_blocks_per_seq * page_size). Block ids must lie in [0, num_blocks): checked on the CPU;
    on CUDA the caller's duty (an id out of range is never read; the result is then
    unspecified). On CUDA the keys and values used are gathered into library workspace first
    (one extra read and write of them). No backward: gradients raise UnsupportedError.

    FP8: q_descale, k_descale, v_descale and out_dtype as flash_attn_func, the descales
    (batch, heads_kv) with batch the number of sequences (cu_seqlens_q.shape[0] - 1).

    Returns out (total_q, heads_q, head_dim_v); with return_lse, (out, lse), lse (heads_q,
    total_q) fp32.
    """
    _checks.varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, block_table)
    _checks.descales(q, cu_seqlens_q.shape[0] - 1, k.shape[-2], q_descale=q_descale,
                     k_descale=k_descale, v_descale=v_descale)
    _forward_only(q, k, v, q_descale, k_descale, v_descale)
    left, right = _checks.window(window_size)
    out, lse = ops.apply_varlen_fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q),
                                    int(max_seqlen_k),
                                    0.0 if softmax_scale is None else float(softmax_scale),
                                    bool(causal), left, right, kernel, sinks,
                                    bool(deterministic), float(softcap), block_table, q_descale,
                                    k_descale, v_descale, out_dtype)
    return (out, lse) if return_lse else out


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, block_table=None,
                            softmax_scale=None, causal=False, window_size=(-1, -1), num_splits=0,
                            return_softmax_lse=False, *, check_indices=False, sinks=None,
                            softcap=0.0, rotary_interleaved=True, k_scale=None, v_scale=None):
    """Decode: a few new query tokens against a KV cache, as flash-attn's function of this name
    (without its alibi and cache_leftpad arguments). CUDA tensors only.

    q: (batch, seqlen_q, heads_q, head_dim), seqlen_q 1..16, head_dim 64, 96, 128, 192 or 256
    (bf16/fp16 and e4m3 caches alike). k_cache, v_cache: (batch_cache,
    seqlen_cache, heads_kv, head_dim), or paged (num_blocks, page_block_size, heads_kv,
    head_dim) with block_table (batch, max_blocks) int32; their last dimension must be contiguous.
    k, v: optional (batch, seqlen_new, heads_kv, head_dim): written into the caches in place at
    positions cache_seqlens[b] .. cache_seqlens[b] + seqlen_new - 1 (rows cache_batch_idx[b] of a
    contiguous cache when given), then attended to. cache_seqlens: int or (batch,) int32 tensor of
    the keys already in the cache; None means the whole cache (not allowed with k, v).
    cache_batch_idx: optional (batch,) int32, the cache row of each batch entry. causal and
    window_size are bottom-right aligned: entry b attends to its first cache_seqlens[b] +
    seqlen_new keys. num_splits: 0 lets the library choose. check_indices (keyword, not in
    flash-attn): copy the index tensors to the host first and raise ValueError for one out of
    range (synchronises the stream, so not inside a CUDA graph); off, out-of-range indices are
    never dereferenced but the result is unspecified. sinks: as flash_attn_func (fp32 (heads_q,)
    on q's device). softcap: as flash_attn_func.
    rotary_cos, rotary_sin: optional (seqlen_ro, rotary_dim / 2) tensors in q's dtype on q's
    device (rotary_dim even, <= head_dim): q and k are rotated before k is appended (into
    library workspace; the tensors passed are not modified), only their first rotary_dim dims.
    k's token i sits at position cache_seqlens[b] + i; q's token i too when causal or local
    (window_size != (-1, -1)), else every query token sits at cache_seqlens[b]. Arithmetic:
    fp32, then rounded once to the element type. rotary_interleaved: True rotates pairs (0, 1),
    (2, 3), ... (GPT-J), False the halves x[:rotary_dim / 2], x[rotary_dim / 2:rotary_dim]
    (GPT-NeoX). seqlen_ro must cover every position used; check_indices=True checks it (and
    synchronises), otherwise it is the caller's duty.
    k_scale, v_scale (keywords): an FP8 KV cache. k_cache and v_cache torch.float8_e4m3fn (q, k,
    v stay bf16/fp16), the scales fp32 on q's device, (1,) per tensor or (heads_kv,) per KV head:
    the cache means float(e4m3) * scale, and k, v are appended as e4m3 of (x / scale) rounded to
    nearest even and saturated to +-448 (flashattn's decode.h states the rule bit for bit).

    Returns out (batch, seqlen_q, heads_q, head_dim); with return_softmax_lse, (out, lse), lse
    (batch, heads_q, seqlen_q) fp32, natural log, -inf for rows that see no key.
    """
    if cache_seqlens is None:
        if k is not None or v is not None:
            raise ValueError("cache_seqlens: required when k and v are appended")
        per_row = k_cache.shape[1] * (1 if block_table is None else block_table.shape[1])
        cache_seqlens = per_row
    if isinstance(cache_seqlens, int):
        cache_seqlens = torch.full((q.shape[0],), cache_seqlens, dtype=torch.int32,
                                   device=q.device)
    left, right = _checks.window(window_size)
    out, lse = ops.fwd_kvcache(q, k_cache, v_cache, k, v, cache_seqlens, cache_batch_idx,
                               block_table, 0.0 if softmax_scale is None else float(softmax_scale),
                               bool(causal), left, right, int(num_splits), bool(check_indices),
                               sinks, float(softcap), rotary_cos, rotary_sin,
                               bool(rotary_interleaved), k_scale, v_scale)
    return (out, lse) if return_softmax_lse else out


def kvcache_check_errors(device=None):
    """Reports the bad indices flash_attn_with_kvcache met with check_indices=False (C++:
    flashattn::decode_check_errors). Unchecked, a cache_seqlens[b] + seqlen_new outside the cache,
    a cache_batch_idx outside it or a block_table entry outside [0, num_blocks) for a block that
    was read is read as zeros and the call's result is unspecified; the kernel records it on the
    device. This waits for the current stream of `device` (default: the current device), then
    raises ValueError naming the first bad entry (and the kinds of any others) and clears the
    record, or returns None when there were none. One call per batch of decode steps costs one
    synchronisation; not inside CUDA graph capture (check after a replay).
    """
    if not torch.cuda.is_available():
        _lib.decode_check_errors(0)  # raises UnsupportedError: no device
        return
    with torch.cuda.device(device if device is not None else torch.cuda.current_device()):
        _lib.decode_check_errors(torch.cuda.current_stream().cuda_stream)
