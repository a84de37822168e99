"""The flash_attn-style functions: the names, layouts and behaviour of the flash-attn package.

Errors: a refused argument raises ValueError carrying the library's message, which names the
argument and the rule ("heads_q: must be a multiple of heads_kv (6 is not a multiple of 4)"); a
valid request that the chosen kernel or this build cannot run raises flashattn.UnsupportedError,
a subclass of ValueError ("cu_seqlens_q: kernel k2 does not support variable length"); a failed
CUDA call raises RuntimeError. The backward pass raises NotImplementedError until it exists.
"""
from . import _checks, ops


def flash_attn_func(q, k, v, softmax_scale=None, causal=False, window_size=(-1, -1),
                    return_lse=False, kernel="auto"):
    """Attention over (batch, seqlen, heads, head_dim) tensors.

    q: (batch, seqlen_q, heads_q, head_dim); k: (batch, seqlen_k, heads_kv, head_dim);
    v: (batch, seqlen_k, heads_kv, head_dim_v); bf16 or fp16, all on one CUDA device or all on
    the CPU. Any strides whose last one is 1 are used as they are (a tensor whose last dimension
    is strided is copied once). heads_q must be a multiple of heads_kv (GQA/MQA).
    softmax_scale: default 1/sqrt(head_dim). causal: bottom-right aligned, as in flash-attn.
    window_size: (left, right) keys visible around the diagonal, -1 unbounded.
    kernel: "auto" (the fastest built family for the tensors' device: "cpu" for CPU tensors),
    or a family name ("cpu", "k1", "k2", "fa2", ...; see flashattn.built_kernels()).
    Runs on the current CUDA stream of the tensors' device.

    Returns out (batch, seqlen_q, heads_q, head_dim_v), contiguous, in q's dtype; with
    return_lse, (out, lse) where lse is (batch, heads_q, seqlen_q) fp32, natural log, -inf for
    rows that see no key (their output is 0).
    """
    _checks.dense(q, k, v)
    left, right = _checks.window(window_size)
    out, lse = ops.fwd(q, k, v, 0.0 if softmax_scale is None else float(softmax_scale),
                       bool(causal), left, right, kernel)
    return (out, lse) if return_lse else out


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           softmax_scale=None, causal=False, window_size=(-1, -1),
                           return_lse=False, kernel="auto"):
    """Attention over packed sequences of different lengths.

    q: (total_q, heads_q, head_dim); k: (total_k, heads_kv, head_dim);
    v: (total_k, heads_kv, head_dim_v). cu_seqlens_q/cu_seqlens_k: int32 (batch + 1,) prefix
    sums of the sequence lengths on q's device (sequence b is rows cu[b]..cu[b+1]-1; empty
    sequences allowed). max_seqlen_q/max_seqlen_k: the longest sequence (no sequence may be
    longer). Masks apply per sequence. Needs a family with variable-length support (fa2);
    others raise flashattn.UnsupportedError.

    Returns out (total_q, heads_q, head_dim_v); with return_lse, (out, lse), lse (heads_q,
    total_q) fp32.
    """
    _checks.varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    left, right = _checks.window(window_size)
    out, lse = ops.varlen_fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q),
                              int(max_seqlen_k),
                              0.0 if softmax_scale is None else float(softmax_scale),
                              bool(causal), left, right, kernel)
    return (out, lse) if return_lse else out
