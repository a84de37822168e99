"""Argument checks that need torch (dtypes, devices, ranks, shapes that must agree between
tensors). Everything the C++ API validates itself (head dims, GQA ratio, windows, strides,
alignment) is left to it, so that each rule has one home and one message. Pure Python over
tensor metadata, so torch.compile traces these checks without a graph break.
"""
import torch

from . import _lib

# torch dtype -> the library's element type. FP8 is passed on like the others: e4m3 runs (k7 on
# Hopper, cpu), e5m2 is refused by the library with flashattn.UnsupportedError.
DTYPE_CODES = {torch.bfloat16: _lib.BF16, torch.float16: _lib.FP16,
               torch.float8_e4m3fn: _lib.E4M3, torch.float8_e5m2: _lib.E5M2}
FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)
OUT_DTYPES = (torch.bfloat16, torch.float16)  # o's type with FP8 inputs


def _tensor(name, t, ndim, layout):
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.dim() != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions {layout}, got shape {tuple(t.shape)}")


def _same(name, value, want, what):
    if value != want:
        raise ValueError(f"{name}: must equal {what} ({want}), got {value}")


def _qkv(q, k, v, ndim, layout):
    for name, t in (("q", q), ("k", k), ("v", v)):
        _tensor(name, t, ndim, layout)
    if q.dtype not in DTYPE_CODES:
        raise ValueError("q.dtype: must be torch.bfloat16, torch.float16 or torch.float8_e4m3fn, "
                         f"got {q.dtype}")
    _same("k.dtype", k.dtype, q.dtype, "q.dtype")
    _same("v.dtype", v.dtype, q.dtype, "q.dtype")
    if q.device.type not in ("cpu", "cuda"):
        raise ValueError(f"q.device: must be a CUDA or CPU device, got {q.device}")
    _same("k.device", k.device, q.device, "q.device")
    _same("v.device", v.device, q.device, "q.device")


def window(window_size):
    if (not isinstance(window_size, (tuple, list)) or len(window_size) != 2
            or not all(isinstance(w, int) for w in window_size)):
        raise ValueError(f"window_size: expected (left, right) integers, got {window_size!r}")
    return int(window_size[0]), int(window_size[1])


def dense(q, k, v):
    """q (b, sq, hq, d), k (b, sk, hkv, d), v (b, sk, hkv, dv)."""
    _qkv(q, k, v, 4, "(batch, seqlen, heads, head_dim)")
    _same("k.shape[0] (batch)", k.shape[0], q.shape[0], "q's batch")
    _same("k.shape[3] (head_dim)", k.shape[3], q.shape[3], "q's head_dim")
    _same("v.shape[:3] (batch, seqlen_k, heads_kv)", tuple(v.shape[:3]), tuple(k.shape[:3]),
          "k's")


def varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, block_table=None):
    """q (total_q, hq, d), k (total_k, hkv, d), v (total_k, hkv, dv), cu_seqlens int32 (b + 1).
    With block_table (int32 (b, max_blocks_per_seq) on q's device), k and v are a paged cache:
    (num_blocks, page_size, hkv, d) and (num_blocks, page_size, hkv, dv)."""
    if block_table is None:
        _qkv(q, k, v, 3, "(total_tokens, heads, head_dim)")
        _same("k.shape[2] (head_dim)", k.shape[2], q.shape[2], "q's head_dim")
        _same("v.shape[:2] (total_k, heads_kv)", tuple(v.shape[:2]), tuple(k.shape[:2]), "k's")
    else:
        _tensor("q", q, 3, "(total_tokens, heads, head_dim)")
        _qkv(q.unsqueeze(0), k, v, 4, "(num_blocks, page_size, heads, head_dim) with block_table")
        _same("k.shape[3] (head_dim)", k.shape[3], q.shape[2], "q's head_dim")
        _same("v.shape[:3] (num_blocks, page_size, heads_kv)", tuple(v.shape[:3]),
              tuple(k.shape[:3]), "k's")
    for name, t in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        _tensor(name, t, 1, "(batch + 1,)")
        if t.dtype != torch.int32:
            raise ValueError(f"{name}.dtype: must be torch.int32, got {t.dtype}")
        _same(f"{name}.device", t.device, q.device, "q.device")
    if cu_seqlens_q.shape[0] < 2:
        raise ValueError("cu_seqlens_q: needs batch + 1 >= 2 entries, got "
                         f"{cu_seqlens_q.shape[0]}")
    _same("cu_seqlens_k.shape[0]", cu_seqlens_k.shape[0], cu_seqlens_q.shape[0],
          "cu_seqlens_q.shape[0]")
    for name, m in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
        if isinstance(m, bool) or not isinstance(m, (int, torch.SymInt)) or m < 0:
            raise ValueError(f"{name}: expected an integer >= 0, got {m!r}")
    if block_table is not None:
        _index("block_table", block_table, 2, "(batch, max_blocks_per_seq)", q.device)
        _same("block_table.shape[0]", block_table.shape[0], cu_seqlens_q.shape[0] - 1,
              "the batch (cu_seqlens_q.shape[0] - 1)")


def _index(name, t, ndim, layout, device):
    _tensor(name, t, ndim, layout)
    if t.dtype != torch.int32:
        raise ValueError(f"{name}.dtype: must be torch.int32, got {t.dtype}")
    _same(f"{name}.device", t.device, device, "q.device")


def kvcache(q, k_cache, v_cache, k, v, cache_seqlens, cache_batch_idx, block_table, k_scale=None,
            v_scale=None):
    """q (b, sq, hq, d); caches (cache_batch, seqlen_cache, hkv, d), or (num_pages, page_size,
    hkv, d) with block_table (b, max_pages); k/v (b, seqlen_new, hkv, d) or None; index tensors
    int32 on q's device (cache_seqlens already a tensor here). An FP8 cache (torch.float8_e4m3fn,
    q and k/v staying bf16/fp16) takes k_scale and v_scale: fp32 (1,) or (hkv,) on q's device."""
    layout = "(batch, seqlen, heads, head_dim)"
    if isinstance(k_cache, torch.Tensor) and k_cache.dtype == torch.float8_e4m3fn:
        _qkv(q, q, q, 4, layout)
        for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
            _tensor(name, t, 4, layout)
            _same(f"{name}.device", t.device, q.device, "q.device")
        _same("v_cache.dtype", v_cache.dtype, k_cache.dtype, "k_cache.dtype")
        if k_scale is None or v_scale is None:
            raise ValueError("k_scale, v_scale: required with a torch.float8_e4m3fn cache")
        for name, t in (("k_scale", k_scale), ("v_scale", v_scale)):
            _tensor(name, t, 1, "(1,) or (heads_kv,)")
            if t.dtype != torch.float32:
                raise ValueError(f"{name}.dtype: must be torch.float32, got {t.dtype}")
            if t.shape[0] not in (1, k_cache.shape[2]):
                raise ValueError(f"{name}.shape[0]: must be 1 (per tensor) or heads_kv = "
                                 f"{k_cache.shape[2]} (per KV head), got {t.shape[0]}")
            _same(f"{name}.device", t.device, q.device, "q.device")
        _same("v_scale.shape", tuple(v_scale.shape), tuple(k_scale.shape), "k_scale.shape")
    else:
        if k_scale is not None or v_scale is not None:
            raise ValueError("k_scale, v_scale: only with a torch.float8_e4m3fn cache, got "
                             f"{k_cache.dtype}")
        _qkv(q, k_cache, v_cache, 4, layout)
    if q.device.type != "cuda":
        raise ValueError(f"q.device: flash_attn_with_kvcache runs on CUDA tensors, got {q.device}")
    _same("k_cache.shape", tuple(k_cache.shape), tuple(v_cache.shape), "v_cache.shape")
    _same("k_cache.shape[3] (head_dim)", k_cache.shape[3], q.shape[3], "q's head_dim")
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        if t.stride(-1) != 1:  # written in place: a copy would leave the caller's cache as it was
            raise ValueError(f"{name}: the last dimension must be contiguous (stride 1), got "
                             f"strides {tuple(t.stride())}")
    if (k is None) != (v is None):
        raise ValueError("k, v: give both or neither")
    if k is not None:
        for name, t in (("k", k), ("v", v)):
            _tensor(name, t, 4, layout)
            _same(f"{name}.dtype", t.dtype, q.dtype, "q.dtype")
            _same(f"{name}.device", t.device, q.device, "q.device")
        _same("k.shape", tuple(k.shape), tuple(v.shape), "v.shape")
        _same("k.shape[0] (batch)", k.shape[0], q.shape[0], "q's batch")
        _same("k.shape[2:] (heads_kv, head_dim)", tuple(k.shape[2:]), tuple(k_cache.shape[2:]),
              "k_cache's")
    _index("cache_seqlens", cache_seqlens, 1, "(batch,)", q.device)
    _same("cache_seqlens.shape[0]", cache_seqlens.shape[0], q.shape[0], "q's batch")
    if cache_batch_idx is not None:
        _index("cache_batch_idx", cache_batch_idx, 1, "(batch,)", q.device)
        _same("cache_batch_idx.shape[0]", cache_batch_idx.shape[0], q.shape[0], "q's batch")
    if block_table is not None:
        _index("block_table", block_table, 2, "(batch, max_pages)", q.device)
        _same("block_table.shape[0]", block_table.shape[0], q.shape[0], "q's batch")


def sinks(sinks_, q, heads_q):
    """Attention sinks: None, or fp32 (heads_q,) on q's device (one logit per query head)."""
    if sinks_ is None:
        return
    _tensor("sinks", sinks_, 1, "(heads_q,)")
    if sinks_.dtype != torch.float32:
        raise ValueError(f"sinks.dtype: must be torch.float32, got {sinks_.dtype}")
    _same("sinks.shape[0]", sinks_.shape[0], heads_q, "heads_q")
    if sinks_.device != q.device:
        raise ValueError(f"sinks.device: must be q's device ({q.device}), got {sinks_.device}")


def rotary(cos, sin, q):
    """Rotary tables: both None, or (seqlen_ro, rotary_dim / 2) tensors of q's dtype on q's
    device (the library checks rotary_dim against head_dim and seqlen_ro against the positions)."""
    if (cos is None) != (sin is None):
        raise ValueError("rotary_cos/rotary_sin: give both or neither")
    if cos is None:
        return
    for name, t in (("rotary_cos", cos), ("rotary_sin", sin)):
        _tensor(name, t, 2, "(seqlen_ro, rotary_dim / 2)")
        _same(f"{name}.dtype", t.dtype, q.dtype, "q.dtype")
        _same(f"{name}.device", t.device, q.device, "q.device")
    _same("rotary_sin.shape", tuple(sin.shape), tuple(cos.shape), "rotary_cos.shape")



def out_dtype(q_dtype, out_dtype_):
    """o's dtype: `out_dtype_` (default torch.bfloat16) for FP8 inputs, else the inputs'. For
    16-bit inputs out_dtype_ may only be None or their own dtype (no conversion happens)."""
    if q_dtype in FP8_DTYPES:
        if out_dtype_ is None:
            return torch.bfloat16
        if out_dtype_ not in OUT_DTYPES:
            raise ValueError("out_dtype: must be torch.bfloat16 or torch.float16 with FP8 inputs, "
                             f"got {out_dtype_}")
        return out_dtype_
    if out_dtype_ is not None and out_dtype_ != q_dtype:
        raise ValueError(f"out_dtype: only with FP8 inputs (torch.float8_e4m3fn); {q_dtype} "
                         f"inputs give a {q_dtype} output, got out_dtype={out_dtype_}")
    return q_dtype


def descales(q, batch, heads_kv, **named):
    """FP8 descales (q_descale=..., k_descale=..., v_descale=...): each None, or fp32
    (batch, heads_kv) on q's device (one factor per sequence and KV head; for varlen batch is
    the number of sequences), with FP8 inputs only."""
    for name, t in named.items():
        if t is None:
            continue
        if q.dtype not in FP8_DTYPES:
            raise ValueError(f"{name}: only with FP8 inputs (torch.float8_e4m3fn), got q.dtype "
                             f"{q.dtype}")
        _tensor(name, t, 2, "(batch, heads_kv)")
        if t.dtype != torch.float32:
            raise ValueError(f"{name}.dtype: must be torch.float32, got {t.dtype}")
        _same(f"{name}.shape", tuple(t.shape), (batch, heads_kv), "(batch, heads_kv)")
        _same(f"{name}.device", t.device, q.device, "q.device")


def block_descales(q, q_block_descale, k_block_descale, v_block_descale, shapes=None):
    """K8's block descales (flashattn.quantize_fp8's): each None, or fp32 on q's device of
    shape (batch, heads_q, q_blocks) for q and (batch, heads_kv, kv_blocks) for k and v, with FP8
    inputs only. `shapes`, when known (the library's rows per block: ops.block_counts), are
    (q's shape, k's and v's shape). All three or none, and not beside q_descale..., are the
    library's rules."""
    named = (("q_block_descale", q_block_descale, 0), ("k_block_descale", k_block_descale, 1),
             ("v_block_descale", v_block_descale, 1))
    for name, t, which in named:
        if t is None:
            continue
        if q.dtype not in FP8_DTYPES:
            raise ValueError(f"{name}: only with FP8 inputs (torch.float8_e4m3fn), got q.dtype "
                             f"{q.dtype}")
        heads = "heads_q" if which == 0 else "heads_kv"
        _tensor(name, t, 3, f"(batch, {heads}, blocks)")
        if t.dtype != torch.float32:
            raise ValueError(f"{name}.dtype: must be torch.float32, got {t.dtype}")
        if shapes is not None:
            rows = "rows.q" if which == 0 else "rows.kv"
            seqlen = "seqlen_q" if which == 0 else "seqlen_k"
            _same(f"{name}.shape", tuple(t.shape), tuple(shapes[which]),
                  f"(batch, {heads}, ceil({seqlen} / {rows})), flashattn.quantize_fp8's")
        _same(f"{name}.device", t.device, q.device, "q.device")


FP8_MODES = ("per_tensor", "per_block", "per_block_hadamard")


def fp8_mode(fp8, q, **fp8_arguments):
    """flash_attn_func's fp8= quantisation: one of FP8_MODES, of 16-bit q, k, v, and none of
    the arguments of an FP8 call given (the quantisation makes them)."""
    if fp8 not in FP8_MODES:
        raise ValueError(f"fp8: must be None or one of {', '.join(map(repr, FP8_MODES))}, got "
                         f"{fp8!r}")
    if q.dtype not in OUT_DTYPES:
        raise ValueError(f"fp8: quantises torch.bfloat16 or torch.float16 inputs, got q.dtype "
                         f"{q.dtype} (pass FP8 tensors without fp8=, with their descales)")
    for name, t in fp8_arguments.items():
        if t is not None:
            raise ValueError(f"{name}: not with fp8={fp8!r}, which computes the descales itself")


def fp8_forward_only(fp8, q, k, v):
    """fp8= attention is forward-only: refuses q, k or v requiring grad (callers check only
    where autograd would record the call: grad mode on)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.requires_grad:
            raise _lib.UnsupportedError(
                f"{name}: requires grad, but fp8={fp8!r} attention is forward-only (no "
                "backward: FP8 inputs have none); detach it or run under torch.no_grad()")


ROTATIONS = {"none": _lib.ROTATION_NONE, "hadamard": _lib.ROTATION_HADAMARD}


def quantize_fp8(q, rotation):
    """K8's pre-pass of 16-bit q, k, v (dense() checked): the rotation's code."""
    if q.dtype not in OUT_DTYPES:
        raise ValueError(f"q.dtype: quantize_fp8 takes torch.bfloat16 or torch.float16 inputs, "
                         f"got {q.dtype}")
    if rotation not in ROTATIONS:
        raise ValueError(f"rotation: must be 'none' or 'hadamard', got {rotation!r}")
    return ROTATIONS[rotation]


def forward_only(q, k, v, **descales_):
    """FP8 inputs have no backward: refuses an FP8 q, k or v, or a descale, that requires grad
    (callers check only where autograd would record the call: grad mode on)."""
    if q.dtype not in FP8_DTYPES:  # 16-bit inputs with descales are refused by descales()
        return
    for name, t in dict(q=q, k=k, v=v, **descales_).items():
        if t is not None and t.requires_grad:
            raise _lib.UnsupportedError(
                f"{name}: requires grad, but FP8 (torch.float8_e4m3fn) attention is forward-only "
                "(no backward); detach it or run under torch.no_grad()")


def backward(q, dout, out, lse, out_shape, lse_shape):
    """The backward's extra inputs: out and dout shaped as the forward's output, in q's dtype on
    q's device; lse fp32 shaped as the forward wrote it."""
    for name, t, shape, what in (("out", out, out_shape, "the forward output's shape"),
                                 ("dout", dout, out_shape, "out's shape"),
                                 ("lse", lse, lse_shape, "the forward's LSE shape")):
        _tensor(name, t, len(shape), f"({what})")
        _same(f"{name}.shape", tuple(t.shape), tuple(shape), what)
        _same(f"{name}.device", t.device, q.device, "q.device")
    _same("out.dtype", out.dtype, q.dtype, "q.dtype")
    _same("dout.dtype", dout.dtype, q.dtype, "q.dtype")
    _same("lse.dtype", lse.dtype, torch.float32, "fp32")
