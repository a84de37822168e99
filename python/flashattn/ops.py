"""The torch.library custom ops: flashattn::fwd, flashattn::varlen_fwd and flashattn::fwd_kvcache.

Each op has a real implementation (fill the C struct from the tensors, call the library on the
tensors' device and current stream), a fake implementation (output shapes, dtypes and strides
only, so torch.compile traces through without a graph break) and an autograd formula. Both ops
always return the LSE as well as the output: the kernels write it at no measurable cost, and the
backward pass will need it.

The backward pass does not exist yet. Autograd calls flashattn::backward_not_implemented, an op
whose fake implementation returns gradients of the right shapes (so that torch.compile can build
the joint forward/backward graph of a model that only runs inference) and whose real
implementation raises NotImplementedError. It is the seam where the real backward op goes.
"""
import torch

from . import _checks, _lib

BACKWARD_NOT_IMPLEMENTED = "flashattn: the backward pass is not implemented yet"

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


def _run(params, q, kernel):
    """Resolves `kernel` for q's device and runs on q's device and current stream."""
    kid = _lib.kernel_id(kernel)
    if q.device.type == "cpu":
        # Host memory runs on the host kernel; a GPU kernel given pinned host memory would run
        # asynchronously behind torch's back.
        if kernel == "auto":
            kid = _lib.kernel_id("cpu")
        elif not _lib.kernel_runs_on_host(kernel):
            raise ValueError(f"kernel: '{kernel}' runs on the GPU, but the tensors are on the CPU "
                             "(use kernel='auto' or 'cpu', or move them to CUDA)")
        _lib.forward(params, kid)
        return
    with torch.cuda.device(q.device):
        params.stream = torch.cuda.current_stream(q.device).cuda_stream or None
        _lib.forward(params, kid)


# ---- flashattn::fwd -----------------------------------------------------------------------------
@torch.library.custom_op(
    "flashattn::fwd", mutates_args=(),
    schema="(Tensor q, Tensor k, Tensor v, float softmax_scale, bool causal, int window_left, "
           "int window_right, str kernel, Tensor? sinks=None) -> (Tensor, Tensor)")
def fwd(q, k, v, softmax_scale, causal, window_left, window_right, kernel, sinks=None):
    """out (batch, seqlen_q, heads_q, head_dim_v) and lse (batch, heads_q, seqlen_q), fp32."""
    _checks.dense(q, k, v)  # again, for callers of torch.ops.flashattn.fwd itself
    _checks.sinks(sinks, q, q.shape[2])
    q, k, v = (_last_dim_contiguous(t) for t in (q, k, v))
    batch, seqlen_q, heads_q, _ = q.shape
    out = torch.empty((batch, seqlen_q, heads_q, v.shape[-1]), dtype=q.dtype, device=q.device)
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
        q=_ptr(q), k=kv_ptr(k), v=kv_ptr(v), o=_ptr(out), lse=_ptr(lse),
        q_stride=(_lib.ctypes.c_int64 * 4)(*_strides(q)),
        k_stride=(_lib.ctypes.c_int64 * 4)(*_strides(k)),
        v_stride=(_lib.ctypes.c_int64 * 4)(*_strides(v)),
        o_stride=(_lib.ctypes.c_int64 * 4)(*_strides(out)))
    if sinks is not None:
        sinks = sinks.contiguous()
        params.sinks = _ptr(sinks)
    _run(params, q, kernel)
    return out, lse


@fwd.register_fake
def _(q, k, v, softmax_scale, causal, window_left, window_right, kernel, sinks=None):
    batch, seqlen_q, heads_q, _ = q.shape
    out = q.new_empty((batch, seqlen_q, heads_q, v.shape[-1]))
    lse = q.new_empty((batch, heads_q, seqlen_q), dtype=torch.float32)
    return out, lse


# ---- flashattn::varlen_fwd ----------------------------------------------------------------------
@torch.library.custom_op(
    "flashattn::varlen_fwd", mutates_args=(),
    schema="(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, Tensor cu_seqlens_k, "
           "int max_seqlen_q, int max_seqlen_k, float softmax_scale, bool causal, "
           "int window_left, int window_right, str kernel, Tensor? sinks=None) -> (Tensor, Tensor)")
def varlen_fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale,
               causal, window_left, window_right, kernel, sinks=None):
    """out (total_q, heads_q, head_dim_v) and lse (heads_q, total_q), fp32."""
    _checks.varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    _checks.sinks(sinks, q, q.shape[1])
    q, k, v = (_last_dim_contiguous(t) for t in (q, k, v))
    cu_seqlens_q, cu_seqlens_k = cu_seqlens_q.contiguous(), cu_seqlens_k.contiguous()
    total_q, heads_q, _ = q.shape
    out = torch.empty((total_q, heads_q, v.shape[-1]), dtype=q.dtype, device=q.device)
    lse = torch.empty((heads_q, total_q), dtype=torch.float32, device=q.device)
    dims = _dims(batch=cu_seqlens_q.numel() - 1, seqlen_q=max_seqlen_q, seqlen_k=max_seqlen_k,
                 heads_q=heads_q, heads_kv=k.shape[1], head_dim=q.shape[2],
                 head_dim_v=v.shape[2], total_q=total_q, total_k=k.shape[0])

    def packed(t):  # (total, heads, dim): stride[0] is ignored by the library
        return (_lib.ctypes.c_int64 * 4)(0, *_strides(t))

    params = _lib.Params(
        dtype=_checks.DTYPE_CODES[q.dtype], **dims, softmax_scale=softmax_scale,
        causal=int(causal), window_left=window_left, window_right=window_right,
        q=_ptr(q), k=_ptr(k), v=_ptr(v), o=_ptr(out), lse=_ptr(lse),
        cu_seqlens_q=cu_seqlens_q.data_ptr(), cu_seqlens_k=cu_seqlens_k.data_ptr(),
        q_stride=packed(q), k_stride=packed(k), v_stride=packed(v), o_stride=packed(out))
    if sinks is not None:
        sinks = sinks.contiguous()
        params.sinks = _ptr(sinks)
    _run(params, q, kernel)
    return out, lse


@varlen_fwd.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
      window_left, window_right, kernel, sinks=None):
    total_q, heads_q, _ = q.shape
    out = q.new_empty((total_q, heads_q, v.shape[-1]))
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
           "bool check_indices, Tensor? sinks=None) -> (Tensor, Tensor)")
def fwd_kvcache(q, k_cache, v_cache, k, v, cache_seqlens, cache_batch_idx, block_table,
                softmax_scale, causal, window_left, window_right, num_splits, check_indices,
                sinks=None):
    """out (batch, seqlen_q, heads_q, head_dim) and lse (batch, heads_q, seqlen_q), fp32."""
    _checks.kvcache(q, k_cache, v_cache, k, v, cache_seqlens, cache_batch_idx, block_table)
    _checks.sinks(sinks, q, q.shape[2])
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
        check_indices=int(check_indices),
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
    with torch.cuda.device(q.device):
        params.stream = torch.cuda.current_stream(q.device).cuda_stream or None
        _lib.decode(params)
    return out, lse


@fwd_kvcache.register_fake
def _(q, k_cache, v_cache, k, v, cache_seqlens, cache_batch_idx, block_table, softmax_scale,
      causal, window_left, window_right, num_splits, check_indices, sinks=None):
    batch, seqlen_q, heads_q, _ = q.shape
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    lse = q.new_empty((batch, heads_q, seqlen_q), dtype=torch.float32)
    return out, lse


# ---- autograd -----------------------------------------------------------------------------------
# The gradients of the outputs are inputs of this op: a placeholder that read only q, k and v
# would be moved into the forward graph by torch.compile's partitioner (it depends on nothing
# computed in the backward) and raise during the forward pass.
@torch.library.custom_op(
    "flashattn::backward_not_implemented", mutates_args=(),
    schema="(Tensor? grad_out, Tensor? grad_lse, Tensor q, Tensor k, Tensor v) "
           "-> (Tensor, Tensor, Tensor)")
def backward_not_implemented(grad_out, grad_lse, q, k, v):
    raise NotImplementedError(BACKWARD_NOT_IMPLEMENTED)


@backward_not_implemented.register_fake
def _(grad_out, grad_lse, q, k, v):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup_context(ctx, inputs, output):
    q, k, v = inputs[:3]
    ctx.save_for_backward(q, k, v)
    ctx.num_inputs = len(inputs)


def _backward(ctx, grad_out, grad_lse):
    q, k, v = ctx.saved_tensors
    dq, dk, dv = backward_not_implemented(grad_out, grad_lse, q, k, v)
    return (dq, dk, dv) + (None,) * (ctx.num_inputs - 3)


torch.library.register_autograd("flashattn::fwd", _backward, setup_context=_setup_context)
torch.library.register_autograd("flashattn::varlen_fwd", _backward, setup_context=_setup_context)
