"""The torch.library custom ops: flashattn::fwd, flashattn::varlen_fwd and flashattn::fwd_kvcache,
the backward ops flashattn::bwd and flashattn::varlen_bwd, and K8's FP8 pre-pass
flashattn::quantize_fp8.

Each op has a real implementation (fill the C struct from the tensors, call the library on the
tensors' device and current stream), a fake implementation (output shapes, dtypes and strides
only, so torch.compile traces through without a graph break). The forward ops always return the
LSE as well as the output: the kernels write it at no measurable cost, and the backward reads it.

Autograd: fwd and varlen_fwd register a formula (torch.library.register_autograd) that saves q,
k, v, out, lse and sinks and calls the matching backward op, so torch.compile(fullgraph=True)
traces the forward and the backward into one joint graph. The backward runs on the forward's
family when that family has a backward (cpu, fa2), else on `auto` (cpu for host tensors, the
fastest GPU backward for CUDA tensors: a forward on k6 trains with the fa2 backward). The LSE
output carries no gradient (marked non-differentiable, as flash-attn's is in effect): a loss
that uses it treats it as a constant, and lse.requires_grad is False to say so.
flash_attn_func and flash_attn_varlen_func call them through apply_fwd / apply_varlen_fwd: in
plain eager mode the same implementations and formulas run through a torch.autograd.Function,
without torch's custom-op layers (a third of the host time of a forward and backward; below).
Neither path has a double backward: differentiating the gradients raises.
"""
import torch

from . import _checks, _lib

# Families with a backward pass (backward.h); any other forward family trains on `auto`.
BACKWARD_FAMILIES = ("cpu", "fa2")

_INT32_MAX = 2**31 - 1


def _last_dim_contiguous(t):
    # The kernels need a unit stride along head_dim; every other stride is passed through.
    return t if t.stride(-1) == 1 or t.shape[-1] <= 1 else t.contiguous()


def _strides(t):
    # A dimension of size 1 is never stepped over, but torch may give it any stride (after a
    # transpose or unsqueeze); 0 states that and keeps the library's stride rules from refusing
    # a stride that is never used.
    return [0 if n == 1 else s for n, s in zip(t.shape, t.stride())]


def _ptr(t):
    return t.data_ptr() if t.numel() > 0 else None


def _dims(**dims):
    for name, value in dims.items():
        if not 0 <= value <= _INT32_MAX:
            raise ValueError(f"{name}: {value} does not fit the library's int32")
    return dims


def _readable(t):
    """t when the library reads it as it is (unit last stride; every other stride of a dimension
    longer than 1 a positive multiple of 16 bytes; 16-byte aligned data), else a contiguous copy.
    For tensors autograd makes, such as the output gradient of out.sum() (expanded, stride 0)."""
    vec = max(1, 16 // t.element_size())
    ok = (t.stride(-1) == 1 or t.shape[-1] <= 1) and t.data_ptr() % 16 == 0 and all(
        n <= 1 or (s > 0 and s % vec == 0) for n, s in zip(t.shape[:-1], t.stride()[:-1]))
    return t if ok else t.contiguous()


def _run(params, q, kernel, call=None):
    """Resolves `kernel` for q's device and runs `call` (the library's forward unless given) on
    q's device and current stream."""
    call = _lib.forward if call is None else call
    kid = _lib.kernel_id(kernel)
    if q.device.type == "cpu":
        # Host memory runs on the host kernel; a GPU kernel given pinned host memory would run
        # asynchronously behind torch's back.
        if kernel == "auto":
            kid = _lib.kernel_id("cpu")
        elif not _lib.kernel_runs_on_host(kernel):
            raise ValueError(f"kernel: '{kernel}' runs on the GPU, but the tensors are on the CPU "
                             "(use kernel='auto' or 'cpu', or move them to CUDA)")
        call(params, kid)
        return
    with torch.cuda.device(q.device):
        params.stream = torch.cuda.current_stream(q.device).cuda_stream or None
        call(params, kid)


def _set_fp8(params, o_dtype, *descales, blocks=(None, None, None)):
    """params.out_dtype and the descale pointers (ForwardParams'; q_descale, k_descale, v_descale
    in that order, each None or fp32 (batch, heads_kv); `blocks` K8's q/k/v_block_descale, None
    or fp32 (batch, heads, blocks)). Returns the contiguous descales, which must outlive the
    call."""
    params.out_dtype = _checks.DTYPE_CODES[o_dtype]
    dense = [None if t is None else t.contiguous() for t in (*descales, *blocks)]
    (params.q_descale, params.k_descale, params.v_descale, params.q_block_descale,
     params.k_block_descale, params.v_block_descale) = (
        None if t is None else t.data_ptr() for t in dense)
    return dense


def block_counts(q, k):
    """K8's block descale shapes for dense q (batch, seqlen_q, heads_q, head_dim) and k:
    ((batch, heads_q, ceil(seqlen_q / rows.q)), (batch, heads_kv, ceil(seqlen_k / rows.kv))) with
    the library's rows per block (flashattn_c_fp8_block_rows; (0, 0) for a head dim without an
    FP8 kernel, which gives no blocks and is refused by the library). For the ops' real and fake
    implementations: it calls the library, which torch.compile traces only from there."""
    q_rows, kv_rows = _lib.fp8_block_rows(int(q.shape[3]))

    def blocks(seqlen, rows):
        return (seqlen + rows - 1) // rows if rows > 0 else 0

    batch, seqlen_q, heads_q, _ = q.shape
    return ((batch, heads_q, blocks(seqlen_q, q_rows)),
            (batch, k.shape[2], blocks(k.shape[1], kv_rows)))


# The undecorated implementations of the attention ops, by name, for the eager autograd path
# (`apply_fwd` below): the same code the custom ops run, without torch's dispatch around it.
_IMPLS = {}


def _keep_impl(fn):
    _IMPLS[fn.__name__] = fn
    return fn


# ---- flashattn::fwd -----------------------------------------------------------------------------
@torch.library.custom_op(
    "flashattn::fwd", mutates_args=(),
    schema="(Tensor q, Tensor k, Tensor v, float softmax_scale, bool causal, int window_left, "
           "int window_right, str kernel, Tensor? sinks=None, bool deterministic=False, "
           "float softcap=0.0, Tensor? q_descale=None, Tensor? k_descale=None, "
           "Tensor? v_descale=None, ScalarType? out_dtype=None, Tensor? q_block_descale=None, "
           "Tensor? k_block_descale=None, Tensor? v_block_descale=None) -> (Tensor, Tensor)")
@_keep_impl
def fwd(q, k, v, softmax_scale, causal, window_left, window_right, kernel, sinks=None,
        deterministic=False, softcap=0.0, q_descale=None, k_descale=None, v_descale=None,
        out_dtype=None, q_block_descale=None, k_block_descale=None, v_block_descale=None):
    """out (batch, seqlen_q, heads_q, head_dim_v) and lse (batch, heads_q, seqlen_q), fp32.
    `deterministic` is the backward's (the forward is always deterministic). softcap: 0 off, else
    scores become softcap * tanh(scores / softcap) (ForwardParams::softcap). FP8 (e4m3) q, k, v:
    out is out_dtype (None: bf16), the descales fp32 (batch, heads_kv) or None (1.0); or K8's
    block descales (flashattn::quantize_fp8's), fp32 (batch, heads, blocks)."""
    _checks.dense(q, k, v)  # again, for callers of torch.ops.flashattn.fwd itself
    _checks.sinks(sinks, q, q.shape[2])
    _checks.descales(q, q.shape[0], k.shape[2], q_descale=q_descale, k_descale=k_descale,
                     v_descale=v_descale)
    blocks = (q_block_descale, k_block_descale, v_block_descale)
    _checks.block_descales(q, *blocks, shapes=block_counts(q, k) if any(
        t is not None for t in blocks) else None)
    o_dtype = _checks.out_dtype(q.dtype, out_dtype)
    q, k, v = (_last_dim_contiguous(t) for t in (q, k, v))
    batch, seqlen_q, heads_q, _ = q.shape
    out = torch.empty((batch, seqlen_q, heads_q, v.shape[-1]), dtype=o_dtype, device=q.device)
    lse = torch.empty((batch, heads_q, seqlen_q), dtype=torch.float32, device=q.device)
    if batch == 0 or seqlen_q == 0:  # nothing to compute (the library refuses batch 0)
        return out, lse
    dims = _dims(batch=batch, seqlen_q=seqlen_q, seqlen_k=k.shape[1], heads_q=heads_q,
                 heads_kv=k.shape[2], head_dim=q.shape[3], head_dim_v=v.shape[3])
    # With seqlen_k == 0 nothing of k and v is read, but the library wants real pointers.
    kv_ptr = (lambda t: _ptr(t)) if k.shape[1] > 0 else (lambda t: _ptr(q))
    params = _lib.Params(
        dtype=_checks.DTYPE_CODES[q.dtype], **dims, softmax_scale=softmax_scale,
        causal=int(causal), window_left=window_left, window_right=window_right,
        softcap=softcap, q=_ptr(q), k=kv_ptr(k), v=kv_ptr(v), o=_ptr(out), lse=_ptr(lse),
        q_stride=(_lib.ctypes.c_int64 * 4)(*_strides(q)),
        k_stride=(_lib.ctypes.c_int64 * 4)(*_strides(k)),
        v_stride=(_lib.ctypes.c_int64 * 4)(*_strides(v)),
        o_stride=(_lib.ctypes.c_int64 * 4)(*_strides(out)))
    if sinks is not None:
        sinks = sinks.contiguous()
        params.sinks = _ptr(sinks)
    keep = _set_fp8(params, o_dtype, q_descale, k_descale, v_descale, blocks=blocks)
    _run(params, q, kernel)
    del keep
    return out, lse


@fwd.register_fake
def _(q, k, v, softmax_scale, causal, window_left, window_right, kernel, sinks=None,
      deterministic=False, softcap=0.0, q_descale=None, k_descale=None, v_descale=None,
      out_dtype=None, q_block_descale=None, k_block_descale=None, v_block_descale=None):
    blocks = (q_block_descale, k_block_descale, v_block_descale)
    if any(t is not None for t in blocks):  # the shapes: a traced call fails where eager would
        _checks.block_descales(q, *blocks, shapes=block_counts(q, k))
    batch, seqlen_q, heads_q, _ = q.shape
    out = q.new_empty((batch, seqlen_q, heads_q, v.shape[-1]),
                      dtype=_checks.out_dtype(q.dtype, out_dtype))
    lse = q.new_empty((batch, heads_q, seqlen_q), dtype=torch.float32)
    return out, lse


# ---- flashattn::varlen_fwd ----------------------------------------------------------------------
@torch.library.custom_op(
    "flashattn::varlen_fwd", mutates_args=(),
    schema="(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, Tensor cu_seqlens_k, "
           "int max_seqlen_q, int max_seqlen_k, float softmax_scale, bool causal, "
           "int window_left, int window_right, str kernel, Tensor? sinks=None, "
           "bool deterministic=False, float softcap=0.0, Tensor? block_table=None, "
           "Tensor? q_descale=None, Tensor? k_descale=None, Tensor? v_descale=None, "
           "ScalarType? out_dtype=None) -> (Tensor, Tensor)")
@_keep_impl
def varlen_fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale,
               causal, window_left, window_right, kernel, sinks=None, deterministic=False,
               softcap=0.0, block_table=None, q_descale=None, k_descale=None, v_descale=None,
               out_dtype=None):
    """out (total_q, heads_q, head_dim_v) and lse (heads_q, total_q), fp32. `deterministic` is
    the backward's. With block_table (int32 (batch, max_blocks_per_seq)), k and v are a paged
    cache (num_blocks, page_size, heads_kv, head_dim[_v]) (ForwardParams::block_table). FP8
    inputs: as fwd, the descales (batch, heads_kv) with batch the number of sequences."""
    _checks.varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, block_table)
    _checks.sinks(sinks, q, q.shape[1])
    _checks.descales(q, cu_seqlens_q.shape[0] - 1, k.shape[-2], q_descale=q_descale,
                     k_descale=k_descale, v_descale=v_descale)
    o_dtype = _checks.out_dtype(q.dtype, out_dtype)
    q, k, v = (_last_dim_contiguous(t) for t in (q, k, v))
    cu_seqlens_q, cu_seqlens_k = cu_seqlens_q.contiguous(), cu_seqlens_k.contiguous()
    total_q, heads_q, _ = q.shape
    out = torch.empty((total_q, heads_q, v.shape[-1]), dtype=o_dtype, device=q.device)
    lse = torch.empty((heads_q, total_q), dtype=torch.float32, device=q.device)
    paged = block_table is not None
    dims = _dims(batch=cu_seqlens_q.numel() - 1, seqlen_q=max_seqlen_q, seqlen_k=max_seqlen_k,
                 heads_q=heads_q, heads_kv=k.shape[-2], head_dim=q.shape[2],
                 head_dim_v=v.shape[-1], total_q=total_q, total_k=0 if paged else k.shape[0])

    def packed(t):  # (total, heads, dim): stride[0] is ignored by the library
        return (_lib.ctypes.c_int64 * 4)(0, *_strides(t))

    def blocks(t):  # (num_blocks, page_size, heads, dim): every stride used
        return (_lib.ctypes.c_int64 * 4)(*_strides(t))

    kv_strides = blocks if paged else packed
    params = _lib.Params(
        dtype=_checks.DTYPE_CODES[q.dtype], **dims, softmax_scale=softmax_scale,
        causal=int(causal), window_left=window_left, window_right=window_right,
        softcap=softcap, q=_ptr(q), k=_ptr(k), v=_ptr(v), o=_ptr(out), lse=_ptr(lse),
        cu_seqlens_q=cu_seqlens_q.data_ptr(), cu_seqlens_k=cu_seqlens_k.data_ptr(),
        q_stride=packed(q), k_stride=kv_strides(k), v_stride=kv_strides(v),
        o_stride=packed(out))
    if paged:
        rows, cols = block_table.shape
        # The library reads rows of unit column stride, block_table_stride >= cols apart (0 means
        # cols): anything else (a transposed or expanded table) is copied first.
        if ((cols > 1 and block_table.stride(1) != 1)
                or (rows > 1 and block_table.stride(0) < cols)):
            block_table = block_table.contiguous()
        params.block_table = block_table.data_ptr()
        params.block_table_stride = block_table.stride(0) if rows > 1 else 0
        layout = _dims(num_blocks=k.shape[0], page_size=k.shape[1],
                       max_blocks_per_seq=block_table.shape[1])
        params.num_blocks, params.page_size = layout["num_blocks"], layout["page_size"]
        params.max_blocks_per_seq = layout["max_blocks_per_seq"]
    if sinks is not None:
        sinks = sinks.contiguous()
        params.sinks = _ptr(sinks)
    keep = _set_fp8(params, o_dtype, q_descale, k_descale, v_descale)
    _run(params, q, kernel)
    del keep
    return out, lse


@varlen_fwd.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
      window_left, window_right, kernel, sinks=None, deterministic=False, softcap=0.0,
      block_table=None, q_descale=None, k_descale=None, v_descale=None, out_dtype=None):
    total_q, heads_q, _ = q.shape
    out = q.new_empty((total_q, heads_q, v.shape[-1]),
                      dtype=_checks.out_dtype(q.dtype, out_dtype))
    lse = q.new_empty((heads_q, total_q), dtype=torch.float32)
    return out, lse


# ---- flashattn::fwd_kvcache --------------------------------------------------------------------
# Decode against a KV cache. k_cache and v_cache are written in place (k/v appended at
# cache_seqlens[b]), so the op declares them mutated: torch.compile and functionalization then
# order the op correctly with other readers of the cache. No autograd: a decode step is inference.
@torch.library.custom_op(
    "flashattn::fwd_kvcache", mutates_args=("k_cache", "v_cache"),
    schema="(Tensor q, Tensor(a!) k_cache, Tensor(b!) v_cache, Tensor? k, Tensor? v, "
           "Tensor cache_seqlens, Tensor? cache_batch_idx, Tensor? block_table, "
           "float softmax_scale, bool causal, int window_left, int window_right, int num_splits, "
           "bool check_indices, Tensor? sinks=None, float softcap=0.0, Tensor? rotary_cos=None, "
           "Tensor? rotary_sin=None, bool rotary_interleaved=True, Tensor? k_scale=None, "
           "Tensor? v_scale=None) -> (Tensor, Tensor)")
def fwd_kvcache(q, k_cache, v_cache, k, v, cache_seqlens, cache_batch_idx, block_table,
                softmax_scale, causal, window_left, window_right, num_splits, check_indices,
                sinks=None, softcap=0.0, rotary_cos=None, rotary_sin=None,
                rotary_interleaved=True, k_scale=None, v_scale=None):
    """out (batch, seqlen_q, heads_q, head_dim) and lse (batch, heads_q, seqlen_q), fp32. With
    rotary_cos/rotary_sin, q and k are rotated into library workspace first (never in place).
    An e4m3 cache takes k_scale/v_scale (fp32, (1,) per tensor or (heads_kv,) per KV head)."""
    _checks.kvcache(q, k_cache, v_cache, k, v, cache_seqlens, cache_batch_idx, block_table,
                    k_scale, v_scale)
    _checks.sinks(sinks, q, q.shape[2])
    _checks.rotary(rotary_cos, rotary_sin, q)
    q = _last_dim_contiguous(q)
    if k is not None:
        k, v = _last_dim_contiguous(k), _last_dim_contiguous(v)
    cache_seqlens = cache_seqlens.contiguous()
    batch, seqlen_q, heads_q, head_dim = q.shape
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    lse = torch.empty((batch, heads_q, seqlen_q), dtype=torch.float32, device=q.device)
    if batch == 0 or seqlen_q == 0:  # nothing to compute (the library refuses batch 0)
        return out, lse
    rows, per_row = k_cache.shape[0], k_cache.shape[1]
    paged = block_table is not None
    dims = _dims(batch=batch, seqlen_q=seqlen_q, heads_q=heads_q, heads_kv=k_cache.shape[2],
                 head_dim=head_dim, seqlen_new=0 if k is None else k.shape[1],
                 num_splits=num_splits)
    layout = (_dims(num_pages=rows, page_size=per_row, max_pages=block_table.shape[1]) if paged
              else _dims(cache_batch=rows, cache_seqlen=per_row))
    strides = lambda t: (_lib.ctypes.c_int64 * 4)(*_strides(t))  # noqa: E731
    params = _lib.DecodeParams(
        dtype=_checks.DTYPE_CODES[q.dtype], **dims, **layout, softmax_scale=softmax_scale,
        causal=int(causal), window_left=window_left, window_right=window_right,
        check_indices=int(check_indices), softcap=softcap,
        q=_ptr(q), o=_ptr(out), lse=_ptr(lse), k_cache=_ptr(k_cache), v_cache=_ptr(v_cache),
        cache_seqlens=_ptr(cache_seqlens), q_stride=strides(q), o_stride=strides(out),
        k_cache_stride=strides(k_cache), v_cache_stride=strides(v_cache))
    if k is not None and k.shape[1] > 0:
        params.k_new, params.v_new = _ptr(k), _ptr(v)
        params.k_new_stride, params.v_new_stride = strides(k), strides(v)
    if cache_batch_idx is not None:
        cache_batch_idx = cache_batch_idx.contiguous()
        params.cache_batch_idx = _ptr(cache_batch_idx)
    if paged:
        params.page_table = _ptr(block_table)
        params.page_table_stride = block_table.stride(0)
    if sinks is not None:
        sinks = sinks.contiguous()
        params.sinks = _ptr(sinks)
    if k_scale is not None:  # an e4m3 cache (checked above)
        k_scale, v_scale = k_scale.contiguous(), v_scale.contiguous()
        params.cache_dtype = _lib.E4M3
        params.kv_scale_layout = 0 if k_scale.shape[0] == 1 else 1
        params.k_scale, params.v_scale = _ptr(k_scale), _ptr(v_scale)
    if rotary_cos is not None:  # dense tables; no host synchronisation (graph-capture safe)
        rotary_cos, rotary_sin = rotary_cos.contiguous(), rotary_sin.contiguous()
        params.rotary_cos, params.rotary_sin = _ptr(rotary_cos), _ptr(rotary_sin)
        rot = _dims(rotary_dim=2 * rotary_cos.shape[1], seqlen_ro=rotary_cos.shape[0])
        params.rotary_dim, params.seqlen_ro = rot["rotary_dim"], rot["seqlen_ro"]
        params.rotary_interleaved = int(bool(rotary_interleaved))
    with torch.cuda.device(q.device):
        params.stream = torch.cuda.current_stream(q.device).cuda_stream or None
        _lib.decode(params)
    return out, lse


@fwd_kvcache.register_fake
def _(q, k_cache, v_cache, k, v, cache_seqlens, cache_batch_idx, block_table, softmax_scale,
      causal, window_left, window_right, num_splits, check_indices, sinks=None, softcap=0.0,
      rotary_cos=None, rotary_sin=None, rotary_interleaved=True, k_scale=None, v_scale=None):
    batch, seqlen_q, heads_q, _ = q.shape
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    lse = q.new_empty((batch, heads_q, seqlen_q), dtype=torch.float32)
    return out, lse


# ---- flashattn::bwd -----------------------------------------------------------------------------
def _backward_outputs(q, k, v, sinks):
    """dq, dk, dv (q's, k's, v's shapes, contiguous) and dsinks (fp32 (heads_q,), or (0,) when
    there are no sinks: an op output cannot be None)."""
    dq, dk, dv = (torch.empty(t.shape, dtype=t.dtype, device=t.device) for t in (q, k, v))
    heads_q = q.shape[-2] if sinks is not None else 0
    return dq, dk, dv, torch.empty((heads_q,), dtype=torch.float32, device=q.device)


def _zero(*tensors):
    # Nothing to compute (no query, or no key): every gradient is 0. With no key each row
    # outputs 0, so D = rowsum(dout * out) is 0 and so is the sinks' gradient.
    for t in tensors:
        t.zero_()
    return tensors


@torch.library.custom_op(
    "flashattn::bwd", mutates_args=(),
    schema="(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, "
           "float softmax_scale, bool causal, int window_left, int window_right, "
           "bool deterministic, str kernel, Tensor? sinks=None, float softcap=0.0) "
           "-> (Tensor, Tensor, Tensor, Tensor)")
@_keep_impl
def bwd(dout, q, k, v, out, lse, softmax_scale, causal, window_left, window_right, deterministic,
        kernel, sinks=None, softcap=0.0):
    """dq, dk, dv (the shapes and dtype of q, k, v; contiguous) and dsinks (fp32 (heads_q,), or
    (0,) without sinks), given the forward's inputs, its out and lse, and dout = dL/dout. The
    mask, scale, sinks and softcap must be the forward's."""
    _checks.dense(q, k, v)
    _checks.sinks(sinks, q, q.shape[2])
    batch, seqlen_q, heads_q, _ = q.shape
    _checks.backward(q, dout, out, lse, (batch, seqlen_q, heads_q, v.shape[3]),
                     (batch, heads_q, seqlen_q))
    q, k, v, out = (_last_dim_contiguous(t) for t in (q, k, v, out))
    dout, lse = _readable(dout), lse.contiguous()
    dq, dk, dv, dsinks = _backward_outputs(q, k, v, sinks)
    seqlen_k = k.shape[1]
    if batch == 0 or seqlen_q == 0 or seqlen_k == 0:
        return _zero(dq, dk, dv, dsinks)
    dims = _dims(batch=batch, seqlen_q=seqlen_q, seqlen_k=seqlen_k, heads_q=heads_q,
                 heads_kv=k.shape[2], head_dim=q.shape[3], head_dim_v=v.shape[3])
    strides = lambda t: (_lib.ctypes.c_int64 * 4)(*_strides(t))  # noqa: E731
    params = _lib.BwdParams(
        dtype=_checks.DTYPE_CODES[q.dtype], **dims, softmax_scale=softmax_scale,
        causal=int(causal), window_left=window_left, window_right=window_right,
        deterministic=int(deterministic), softcap=softcap,
        q=_ptr(q), k=_ptr(k), v=_ptr(v), o=_ptr(out), dout=_ptr(dout), lse=_ptr(lse),
        dq=_ptr(dq), dk=_ptr(dk), dv=_ptr(dv),
        q_stride=strides(q), k_stride=strides(k), v_stride=strides(v), o_stride=strides(out),
        dout_stride=strides(dout), dq_stride=strides(dq), dk_stride=strides(dk),
        dv_stride=strides(dv))
    if sinks is not None:
        sinks = sinks.contiguous()
        params.sinks, params.dsinks = _ptr(sinks), _ptr(dsinks)
    _run(params, q, kernel, _lib.backward)
    return dq, dk, dv, dsinks


@bwd.register_fake
def _(dout, q, k, v, out, lse, softmax_scale, causal, window_left, window_right, deterministic,
      kernel, sinks=None, softcap=0.0):
    return _backward_outputs(q, k, v, sinks)


# ---- flashattn::varlen_bwd ----------------------------------------------------------------------
@torch.library.custom_op(
    "flashattn::varlen_bwd", mutates_args=(),
    schema="(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, "
           "Tensor cu_seqlens_q, Tensor cu_seqlens_k, int max_seqlen_q, int max_seqlen_k, "
           "float softmax_scale, bool causal, int window_left, int window_right, "
           "bool deterministic, str kernel, Tensor? sinks=None, float softcap=0.0) "
           "-> (Tensor, Tensor, Tensor, Tensor)")
@_keep_impl
def varlen_bwd(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
               softmax_scale, causal, window_left, window_right, deterministic, kernel,
               sinks=None, softcap=0.0):
    """flashattn::bwd over packed sequences: q, dq (total_q, heads_q, head_dim), k, v, dk, dv
    (total_k, heads_kv, ...), out, dout (total_q, heads_q, head_dim_v), lse (heads_q, total_q)."""
    _checks.varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    _checks.sinks(sinks, q, q.shape[1])
    total_q, heads_q, _ = q.shape
    _checks.backward(q, dout, out, lse, (total_q, heads_q, v.shape[2]), (heads_q, total_q))
    q, k, v, out = (_last_dim_contiguous(t) for t in (q, k, v, out))
    dout, lse = _readable(dout), lse.contiguous()
    cu_seqlens_q, cu_seqlens_k = cu_seqlens_q.contiguous(), cu_seqlens_k.contiguous()
    dq, dk, dv, dsinks = _backward_outputs(q, k, v, sinks)
    if total_q == 0 or k.shape[0] == 0:
        return _zero(dq, dk, dv, dsinks)
    dims = _dims(batch=cu_seqlens_q.numel() - 1, seqlen_q=max_seqlen_q, seqlen_k=max_seqlen_k,
                 heads_q=heads_q, heads_kv=k.shape[1], head_dim=q.shape[2],
                 head_dim_v=v.shape[2], total_q=total_q, total_k=k.shape[0])

    def packed(t):  # (total, heads, dim): stride[0] is ignored by the library
        return (_lib.ctypes.c_int64 * 4)(0, *_strides(t))

    params = _lib.BwdParams(
        dtype=_checks.DTYPE_CODES[q.dtype], **dims, softmax_scale=softmax_scale,
        causal=int(causal), window_left=window_left, window_right=window_right,
        deterministic=int(deterministic), softcap=softcap,
        q=_ptr(q), k=_ptr(k), v=_ptr(v), o=_ptr(out), dout=_ptr(dout), lse=_ptr(lse),
        dq=_ptr(dq), dk=_ptr(dk), dv=_ptr(dv),
        cu_seqlens_q=cu_seqlens_q.data_ptr(), cu_seqlens_k=cu_seqlens_k.data_ptr(),
        q_stride=packed(q), k_stride=packed(k), v_stride=packed(v), o_stride=packed(out),
        dout_stride=packed(dout), dq_stride=packed(dq), dk_stride=packed(dk),
        dv_stride=packed(dv))
    if sinks is not None:
        sinks = sinks.contiguous()
        params.sinks, params.dsinks = _ptr(sinks), _ptr(dsinks)
    _run(params, q, kernel, _lib.backward)
    return dq, dk, dv, dsinks


@varlen_bwd.register_fake
def _(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
      softmax_scale, causal, window_left, window_right, deterministic, kernel, sinks=None,
      softcap=0.0):
    return _backward_outputs(q, k, v, sinks)


# ---- flashattn::quantize_fp8 --------------------------------------------------------------------
# K8's pre-pass (flashattn/fp8.h): no autograd (FP8 attention is forward-only); the seed travels
# as the schema's int64, its bits those of the library's uint64.
_UINT64 = 2**64 - 1


def _quantize_outputs(q, k, v):
    """q8, k8, v8 (e4m3, the inputs' shapes, contiguous) and the fp32 block descales."""
    q_shape, kv_shape = block_counts(q, k)
    e4m3 = torch.float8_e4m3fn
    return (*(t.new_empty(t.shape, dtype=e4m3) for t in (q, k, v)),
            q.new_empty(q_shape, dtype=torch.float32), q.new_empty(kv_shape, dtype=torch.float32),
            q.new_empty(kv_shape, dtype=torch.float32))


@torch.library.custom_op(
    "flashattn::quantize_fp8", mutates_args=(),
    schema="(Tensor q, Tensor k, Tensor v, str rotation, int seed) "
           "-> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)")
def quantize_fp8(q, k, v, rotation, seed):
    """bf16/fp16 q, k, v (batch, seqlen, heads, head_dim) -> e4m3 q8, k8, v8 (same shapes,
    contiguous) and fp32 block descales q (batch, heads_q, ceil(seqlen_q / rows.q)), k and v
    (batch, heads_kv, ceil(seqlen_k / rows.kv)). rotation "none" or "hadamard" (q and k rotated
    by the seeded orthogonal matrix first). On the tensors' device and current stream (the host
    implementation, the same bytes, for CPU tensors)."""
    _checks.dense(q, k, v)
    rotation_code = _checks.quantize_fp8(q, rotation)
    q, k, v = (_last_dim_contiguous(t) for t in (q, k, v))
    outputs = _quantize_outputs(q, k, v)
    batch, seqlen_q, heads_q, head_dim = q.shape
    dims = _dims(batch=batch, seqlen_q=seqlen_q, seqlen_k=k.shape[1], heads_q=heads_q,
                 heads_kv=k.shape[2], head_dim=head_dim, head_dim_v=v.shape[3])
    strides = lambda t: (_lib.ctypes.c_int64 * 4)(*_strides(t))  # noqa: E731
    q8, k8, v8, qd, kd, vd = outputs
    params = _lib.QuantizeFp8Params(
        dtype=_checks.DTYPE_CODES[q.dtype], **dims, rotation=rotation_code, seed=seed & _UINT64,
        q=_ptr(q), k=_ptr(k), v=_ptr(v), q_out=_ptr(q8), k_out=_ptr(k8), v_out=_ptr(v8),
        q_block_descale=_ptr(qd), k_block_descale=_ptr(kd), v_block_descale=_ptr(vd),
        q_stride=strides(q), k_stride=strides(k), v_stride=strides(v), q_out_stride=strides(q8),
        k_out_stride=strides(k8), v_out_stride=strides(v8))
    if q.device.type == "cpu":
        _lib.quantize_fp8(params)
    else:
        with torch.cuda.device(q.device):
            params.stream = torch.cuda.current_stream(q.device).cuda_stream or None
            _lib.quantize_fp8(params)
    return outputs


@quantize_fp8.register_fake
def _(q, k, v, rotation, seed):
    _checks.quantize_fp8(q, rotation)
    return _quantize_outputs(q, k, v)


# ---- autograd -----------------------------------------------------------------------------------
def backward_kernel(kernel):
    """The family the backward of a forward on `kernel` runs on."""
    return kernel if kernel in BACKWARD_FAMILIES else "auto"


def _gradients(ctx, dq, dk, dv, dsinks):
    """Gradients for the forward op's inputs (q, k, v, ..., sinks at ctx.sinks_index, ...): None
    for an input that does not require one. needs_input_grad covers the arguments as the op was
    called (trailing defaults left out: sinks may be absent)."""
    needs = ctx.needs_input_grad
    grads = [None] * len(needs)
    for i, g in ((0, dq), (1, dk), (2, dv), (ctx.sinks_index, dsinks)):
        if i < len(needs) and needs[i]:
            grads[i] = g
    return tuple(grads)


def _save(ctx, q, k, v, out, lse, sinks, sinks_index, *extra):
    ctx.mark_non_differentiable(lse)
    ctx.save_for_backward(q, k, v, out, lse, sinks, *extra)
    ctx.sinks_index = sinks_index


def _fp8_forward_only(q, k, v, fp8, names=("q_descale", "k_descale", "v_descale")):
    # FP8 inputs have no backward: refused when autograd would record one (the descales, when
    # the op was called with them, are the trailing inputs `fp8`; out_dtype is not a tensor).
    _checks.forward_only(q, k, v, **dict(zip(names, fp8)))


def _fwd_setup_context(ctx, inputs, output):
    q, k, v, scale, causal, left, right, kernel, sinks, deterministic, softcap, *fp8 = inputs
    _fp8_forward_only(q, k, v, fp8[:3] + fp8[4:7], ("q_descale", "k_descale", "v_descale",
                                                   "q_block_descale", "k_block_descale",
                                                   "v_block_descale"))
    _save(ctx, q, k, v, *output, sinks, 8)
    ctx.softcap = softcap
    ctx.args = (scale, bool(causal), left, right, bool(deterministic), backward_kernel(kernel))


def _fwd_backward(ctx, grad_out, grad_lse):
    q, k, v, out, lse, sinks = ctx.saved_tensors
    if grad_out is None:
        grad_out = torch.zeros_like(out)
    args = (grad_out, q, k, v, out, lse, *ctx.args, sinks, ctx.softcap)
    grads = (_IMPLS["bwd"] if _eager_backward(args) else bwd)(*args)
    return _gradients(ctx, *grads)


def _varlen_setup_context(ctx, inputs, output):
    (q, k, v, cu_q, cu_k, max_q, max_k, scale, causal, left, right, kernel, sinks,
     deterministic, softcap, *rest) = inputs
    _fp8_forward_only(q, k, v, rest[1:4])
    _save(ctx, q, k, v, *output, sinks, 12, cu_q, cu_k)
    ctx.softcap = softcap
    ctx.paged = bool(rest) and rest[0] is not None
    ctx.args = (max_q, max_k, scale, bool(causal), left, right, bool(deterministic),
                backward_kernel(kernel))


def _varlen_backward(ctx, grad_out, grad_lse):
    if ctx.paged:
        raise _lib.UnsupportedError(
            "block_table: the backward of a paged call is not supported (paged KV is for "
            "prefill against a cache; train with contiguous k and v)")
    q, k, v, out, lse, sinks, cu_q, cu_k = ctx.saved_tensors
    if grad_out is None:
        grad_out = torch.zeros_like(out)
    args = (grad_out, q, k, v, out, lse, cu_q, cu_k, *ctx.args, sinks, ctx.softcap)
    grads = (_IMPLS["varlen_bwd"] if _eager_backward(args) else varlen_bwd)(*args)
    return _gradients(ctx, *grads)


torch.library.register_autograd("flashattn::fwd", _fwd_backward,
                                setup_context=_fwd_setup_context)
torch.library.register_autograd("flashattn::varlen_fwd", _varlen_backward,
                                setup_context=_varlen_setup_context)


# ---- the eager autograd path ------------------------------------------------------------------
# flash_attn_func and flash_attn_varlen_func call the ops through apply_fwd / apply_varlen_fwd.
# Where nothing traces or intercepts the call (_eager), these run the same implementations and
# the same autograd formulas as above through a torch.autograd.Function, skipping torch's
# custom-op layers. Most of what those cost a forward that records autograd is
# torch._library.utils.fill_defaults, which rebuilds schema.arguments once per argument
# (quadratic in fwd's 18): on the H200's host 348 -> 127 µs, a forward and backward 1165 -> 754
# (bench/host_overhead.py, docs/PERF.md). Anything else (torch.compile, fake tensors, a dispatch
# or function mode, functorch transforms, tensor subclasses) takes the ops, which it can trace;
# so does a torch without the private checks _eager reads.
_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)
_MODE_CHECKS = tuple(getattr(torch._C, name, None) for name in (
    "_is_torch_function_mode_enabled", "_len_torch_dispatch_stack",
    "_are_functorch_transforms_active"))


def _eager(args):
    """True when the call runs in plain eager mode: not being compiled, no torch function or
    dispatch mode or functorch transform active, and every tensor argument a plain tensor (or
    nn.Parameter). The first test short-circuits the others while dynamo traces."""
    if torch.compiler.is_compiling() or None in _MODE_CHECKS:
        return False
    function_mode, dispatch_stack, functorch = _MODE_CHECKS
    return (not function_mode() and dispatch_stack() == 0 and not functorch()
            and all(type(a) in _PLAIN_TENSORS for a in args if isinstance(a, torch.Tensor)))


def _eager_backward(args):
    """_eager, and not building a graph of the backward (create_graph=True turns grad mode on in
    it): then the backward op runs, whose outputs refuse to be differentiated, as they always
    did; the implementation's would silently carry no gradient."""
    return not torch.is_grad_enabled() and _eager(args)


class _Fwd(torch.autograd.Function):
    """flashattn::fwd and its autograd formula (the arguments are fwd's, all 18 of them)."""

    @staticmethod
    def forward(ctx, *inputs):
        output = _IMPLS["fwd"](*inputs)
        ctx.set_materialize_grads(False)  # a grad_out of None is handled as the op's formula does
        _fwd_setup_context(ctx, inputs, output)
        return output

    @staticmethod
    def backward(ctx, grad_out, grad_lse):  # with create_graph, through the op (_eager_backward)
        return _fwd_backward(ctx, grad_out, grad_lse)


class _VarlenFwd(torch.autograd.Function):
    """flashattn::varlen_fwd and its autograd formula (varlen_fwd's 20 arguments)."""

    @staticmethod
    def forward(ctx, *inputs):
        output = _IMPLS["varlen_fwd"](*inputs)
        ctx.set_materialize_grads(False)
        _varlen_setup_context(ctx, inputs, output)
        return output

    @staticmethod
    def backward(ctx, grad_out, grad_lse):
        return _varlen_backward(ctx, grad_out, grad_lse)


def _apply(function, op, impl, args):
    """op(*args) with its autograd formula. Through the op unless _eager(args); then, as the op's
    autograd layer does, through `function` (recording the backward) where grad mode is on and
    a tensor argument requires grad, else the implementation `impl` alone."""
    if not _eager(args):
        return op(*args)
    if torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad
                                       for a in args):
        return function.apply(*args)
    return impl(*args)


def apply_fwd(*args):
    """fwd(*args) with autograd (_apply); args: all 18 of fwd's arguments, positionally."""
    return _apply(_Fwd, fwd, _IMPLS["fwd"], args)


def apply_varlen_fwd(*args):
    """varlen_fwd(*args) with autograd (_apply); args: all 20 of its arguments, positionally."""
    return _apply(_VarlenFwd, varlen_fwd, _IMPLS["varlen_fwd"], args)
