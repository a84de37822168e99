"""flash-attn's packed entry points: q, k and v (or k and v) stacked in one tensor.

Each function slices the packed tensor into views (no copy: the library takes any strides whose
last one is 1) and calls flash_attn_func or flash_attn_varlen_func of flashattn.interface, so the
result is exactly that of the unpacked call on the same data, and so are the gradients: autograd
takes dq, dk and dv back through the views into one gradient of the packed tensor, laid out as
it is. `deterministic` and `softcap` are the unpacked functions'. Keywords these functions do
not name (kernel-independent options added to the interface later) are passed through unchanged.

The layouts are flash-attn 2's, (..., 3, heads, head_dim) and (..., 2, heads_kv, head_dim), and
for the qkv functions also FlashAttention-3's GQA form (..., heads_q + 2 * heads_kv, head_dim)
with num_heads_q: query heads [0, heads_q), then the key heads, then the value heads.

A malformed packed tensor raises ValueError naming the argument; everything else (dtypes,
devices, head dims, the GQA ratio, windows) is checked where the unpacked call checks it.
"""
import torch

from . import interface


def _check_tensor(name, t):
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")


def _unpack_qkv(qkv, num_heads_q, rank, tokens):
    """q, k, v views of `qkv`: `rank` dimensions (tokens..., 3, heads, head_dim), or one fewer
    (tokens..., heads_q + 2 * heads_kv, head_dim) with num_heads_q. `tokens` names the leading
    dimensions for messages ("batch, seqlen" or "total")."""
    _check_tensor("qkv", qkv)
    packing = rank - 3  # the dimension of size 3, or of the stacked heads in the GQA form
    if qkv.dim() == rank:
        if qkv.shape[packing] != 3:
            raise ValueError(f"qkv.shape[{packing}]: must be 3 (q, k, v stacked as ({tokens}, 3, "
                             f"heads, head_dim)), got shape {tuple(qkv.shape)}")
        heads = qkv.shape[packing + 1]
        if num_heads_q is not None and num_heads_q != heads:
            raise ValueError(f"num_heads_q: must be None or the heads of qkv ({heads}) when qkv "
                             f"is ({tokens}, 3, heads, head_dim), got {num_heads_q!r}")
        return qkv.unbind(packing)
    if qkv.dim() != rank - 1:
        raise ValueError(f"qkv: expected {rank} dimensions ({tokens}, 3, heads, head_dim) or "
                         f"{rank - 1} ({tokens}, heads_q + 2 * heads_kv, head_dim) with "
                         f"num_heads_q, got shape {tuple(qkv.shape)}")
    stacked = qkv.shape[packing]
    if num_heads_q is None:
        raise ValueError(f"num_heads_q: required when qkv has {rank - 1} dimensions ({tokens}, "
                         f"heads_q + 2 * heads_kv, head_dim), got shape {tuple(qkv.shape)}")
    if isinstance(num_heads_q, bool) or not isinstance(num_heads_q, int) or num_heads_q <= 0:
        raise ValueError(f"num_heads_q: expected an integer > 0, got {num_heads_q!r}")
    rest = stacked - num_heads_q
    if rest <= 0 or rest % 2:
        raise ValueError(f"num_heads_q: qkv.shape[{packing}] = {stacked} must be num_heads_q "
                         f"({num_heads_q}) + 2 * heads_kv with heads_kv >= 1")
    heads_kv = rest // 2
    if num_heads_q % heads_kv:
        raise ValueError(f"num_heads_q: must be a multiple of heads_kv ({num_heads_q} is not a "
                         f"multiple of {heads_kv}; qkv.shape[{packing}] = {stacked})")
    return (qkv.narrow(packing, 0, num_heads_q), qkv.narrow(packing, num_heads_q, heads_kv),
            qkv.narrow(packing, num_heads_q + heads_kv, heads_kv))


def _unpack_kv(kv, rank, tokens):
    """k, v views of kv (tokens..., 2, heads_kv, head_dim), `rank` dimensions."""
    _check_tensor("kv", kv)
    if kv.dim() != rank:
        raise ValueError(f"kv: expected {rank} dimensions ({tokens}, 2, heads_kv, head_dim), "
                         f"got shape {tuple(kv.shape)}")
    packing = rank - 3
    if kv.shape[packing] != 2:
        raise ValueError(f"kv.shape[{packing}]: must be 2 (k, v stacked as ({tokens}, 2, "
                         f"heads_kv, head_dim)), got shape {tuple(kv.shape)}")
    return kv.unbind(packing)


def flash_attn_qkvpacked_func(qkv, softmax_scale=None, causal=False, window_size=(-1, -1),
                              return_lse=False, kernel="auto", *, num_heads_q=None,
                              deterministic=False, softcap=0.0,
                              **kwargs):
    """Self-attention over q, k and v packed in one tensor (flash-attn's function of this name).

    qkv: (batch, seqlen, 3, heads, head_dim) as flash-attn 2, or FlashAttention-3's GQA form
    (batch, seqlen, num_heads_q + 2 * heads_kv, head_dim) with num_heads_q (q is heads
    [0, num_heads_q), k the next heads_kv, v the rest; num_heads_q a multiple of heads_kv).
    q, k and v are views of qkv, never copies. The other arguments, and any further keyword,
    are flash_attn_func's.

    Returns what flash_attn_func returns: out (batch, seqlen, heads_q, head_dim); with
    return_lse, (out, lse), lse (batch, heads_q, seqlen) fp32.
    """
    q, k, v = _unpack_qkv(qkv, num_heads_q, 5, "batch, seqlen")
    return interface.flash_attn_func(q, k, v, softmax_scale=softmax_scale, causal=causal,
                                     window_size=window_size, return_lse=return_lse,
                                     kernel=kernel, deterministic=deterministic, softcap=softcap,
                                     **kwargs)


def flash_attn_kvpacked_func(q, kv, softmax_scale=None, causal=False, window_size=(-1, -1),
                             return_lse=False, kernel="auto", *, deterministic=False, softcap=0.0,
                             **kwargs):
    """Attention with k and v packed in one tensor (flash-attn's function of this name).

    q: (batch, seqlen_q, heads_q, head_dim); kv: (batch, seqlen_k, 2, heads_kv, head_dim), k and
    v taken as views (heads_q a multiple of heads_kv). The other arguments, and any further
    keyword, are flash_attn_func's.

    Returns what flash_attn_func returns: out (batch, seqlen_q, heads_q, head_dim); with
    return_lse, (out, lse), lse (batch, heads_q, seqlen_q) fp32.
    """
    k, v = _unpack_kv(kv, 5, "batch, seqlen_k")
    return interface.flash_attn_func(q, k, v, softmax_scale=softmax_scale, causal=causal,
                                     window_size=window_size, return_lse=return_lse,
                                     kernel=kernel, deterministic=deterministic, softcap=softcap,
                                     **kwargs)


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, softmax_scale=None,
                                     causal=False, window_size=(-1, -1), return_lse=False,
                                     kernel="auto", *, num_heads_q=None, deterministic=False,
                                     softcap=0.0, **kwargs):
    """Self-attention over packed sequences of different lengths, q, k and v in one tensor.

    qkv: (total, 3, heads, head_dim), or the GQA form (total, num_heads_q + 2 * heads_kv,
    head_dim) with num_heads_q (as flash_attn_qkvpacked_func). cu_seqlens: int32 (batch + 1,),
    used for both queries and keys; max_seqlen: the longest sequence. The other arguments, and
    any further keyword, are flash_attn_varlen_func's (which needs a family with variable-length
    support).

    Returns out (total, heads_q, head_dim); with return_lse, (out, lse), lse (heads_q, total) fp32.
    """
    q, k, v = _unpack_qkv(qkv, num_heads_q, 4, "total")
    return interface.flash_attn_varlen_func(q, k, v, cu_seqlens, cu_seqlens, max_seqlen,
                                            max_seqlen, softmax_scale=softmax_scale,
                                            causal=causal, window_size=window_size,
                                            return_lse=return_lse, kernel=kernel,
                                            deterministic=deterministic, softcap=softcap,
                                            **kwargs)


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                    max_seqlen_k, softmax_scale=None, causal=False,
                                    window_size=(-1, -1), return_lse=False, kernel="auto", *,
                                    deterministic=False, softcap=0.0,
                                    **kwargs):
    """Attention over packed sequences of different lengths, k and v in one tensor.

    q: (total_q, heads_q, head_dim); kv: (total_k, 2, heads_kv, head_dim), k and v taken as
    views. The other arguments, and any further keyword, are flash_attn_varlen_func's.

    Returns out (total_q, heads_q, head_dim); with return_lse, (out, lse), lse (heads_q,
    total_q) fp32.
    """
    k, v = _unpack_kv(kv, 4, "total_k")
    return interface.flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                            max_seqlen_k, softmax_scale=softmax_scale,
                                            causal=causal, window_size=window_size,
                                            return_lse=return_lse, kernel=kernel,
                                            deterministic=deterministic, softcap=softcap,
                                            **kwargs)
