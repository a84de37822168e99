"""Learnable attention sinks (sinks=, gpt-oss): a logit per query head that joins every row's
softmax denominator and adds no value. Checked against a torch reference that appends the sink as
one more column of the logits (value 0), with FlashAttention's oracle: on the CPU kernel here, on
the GPU families (k6, fa2, auto, varlen, the KV-cache decode with one and several splits) with
the `gpu` marker. Rows that see no key output 0 with LSE = the sink."""
import ctypes

import pytest
import torch

from attn_ref import rounding_floor, visible_mask, LSE_REL_TOL
from flashattn import _lib, flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache

DTYPES = [torch.bfloat16, torch.float16]


def sink_reference(q, k, v, sinks, scale=None, causal=False, window=(-1, -1)):
    """(ref out fp32 (b, sq, hq, dv), ref lse fp32 (b, hq, sq), pt out fp32): the sink as a
    logit column with a zero value row; pt rounds P to the input dtype before P·V."""
    b, sq, hq, d = q.shape
    sk = k.shape[1]
    scale = d ** -0.5 if scale is None else scale
    group = hq // k.shape[2]
    qf = q.float().transpose(1, 2)
    kf = k.float().repeat_interleave(group, dim=2).transpose(1, 2)
    vf = v.float().repeat_interleave(group, dim=2).transpose(1, 2)
    logits = (qf @ kf.transpose(-1, -2)) * scale
    logits = logits.masked_fill(~visible_mask(sq, sk, causal, window, q.device), float("-inf"))
    col = sinks.float().view(1, hq, 1, 1).expand(b, hq, sq, 1)
    full = torch.cat([logits, col], dim=-1)
    p = torch.softmax(full, dim=-1)[..., :sk]
    lse = torch.logsumexp(full, dim=-1)
    ref = p @ vf
    pt = (p.to(q.dtype).float() @ vf).to(q.dtype).float()
    return ref.transpose(1, 2), lse, pt.transpose(1, 2)


def check_sinks(out, lse, q, k, v, sinks, **kw):
    ref, ref_lse, pt = sink_reference(q, k, v, sinks, **kw)
    out = out.float().cpu()
    ref, ref_lse, pt = ref.cpu(), ref_lse.cpu(), pt.cpu()
    assert torch.isfinite(out).all()
    err = (out - ref).abs().max().item()
    err_pt = (pt - ref).abs().max().item()
    atol = 2 * rounding_floor(ref, q.dtype)
    assert err <= 2 * err_pt + atol, f"max|out-ref| {err:.3g} > 2*{err_pt:.3g} + {atol:.3g}"
    if lse is not None:
        lse = lse.float().cpu()
        assert torch.isfinite(lse).all()
        lse_err = (lse - ref_lse).abs().max().item()
        assert lse_err <= LSE_REL_TOL * (1 + ref_lse.abs().max().item()), lse_err


def inputs(b, sq, sk, hq, hkv, d, dtype, device="cpu", q_scale=1.0):
    q = (torch.randn(b, sq, hq, d, device=device) * q_scale).to(dtype)
    k = torch.randn(b, sk, hkv, d, device=device).to(dtype)
    v = torch.randn(b, sk, hkv, d, device=device).to(dtype)
    sinks = torch.empty(hq, device=device).uniform_(-6, 6)
    sinks[0] = 30.0  # dominates every row of head 0
    if hq > 1:
        sinks[1] = -30.0  # as if absent
    return q, k, v, sinks


SHAPES = [  # b, sq, sk, hq, hkv, d, causal, window
    (2, 1, 1, 4, 2, 64, False, (-1, -1)),
    (2, 113, 203, 4, 4, 128, False, (37, 5)),
    (1, 239, 1, 6, 2, 64, True, (-1, -1)),  # causal, sq > sk: rows that see no key
    (2, 128, 128, 2, 1, 96, True, (-1, -1)),
]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_cpu_kernel(shape, dtype):
    b, sq, sk, hq, hkv, d, causal, window = shape
    q, k, v, sinks = inputs(b, sq, sk, hq, hkv, d, dtype)
    out, lse = flash_attn_func(q, k, v, causal=causal, window_size=window, return_lse=True,
                               sinks=sinks)
    check_sinks(out, lse, q, k, v, sinks, causal=causal, window=window)
    if causal and sq > sk:
        assert torch.equal(lse[:, :, 0], sinks.view(1, hq).expand(b, hq))
        assert torch.equal(out[:, 0], torch.zeros_like(out[:, 0]))


def test_very_negative_sink_is_no_sink():
    q, k, v, _ = inputs(1, 64, 80, 2, 2, 64, torch.bfloat16)
    plain = flash_attn_func(q, k, v)
    sunk = flash_attn_func(q, k, v, sinks=torch.full((2,), -1e4))
    assert (plain.float() - sunk.float()).abs().max().item() <= 2 ** -7


@pytest.mark.parametrize("bad, says", [
    (lambda h: torch.zeros(h, dtype=torch.float16), "sinks.dtype"),
    (lambda h: torch.zeros(h + 1), "sinks.shape"),
    (lambda h: torch.zeros(1, h), "sinks: expected 1 dimensions"),
])
def test_bad_sinks_raise_value_error(bad, says):
    q, k, v, _ = inputs(1, 8, 8, 4, 2, 64, torch.bfloat16)
    with pytest.raises(ValueError, match=says):
        flash_attn_func(q, k, v, sinks=bad(4))


def test_unsupported_family_names_the_argument():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device for a GPU family")
    q, k, v, sinks = inputs(1, 8, 8, 4, 2, 64, torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match="sinks: kernel k2 does not support attention sinks"):
        flash_attn_func(q, k, v, sinks=sinks, kernel="k2")


def test_version1_struct_has_no_sinks():
    """A caller built against version 1 of the ABI (struct_size 256) still runs, without sinks:
    the library does not read past the struct_size it was given."""
    q, k, v, _ = inputs(1, 16, 16, 2, 2, 64, torch.bfloat16)
    out = torch.empty_like(q)
    p = _lib.Params(dtype=_lib.BF16, batch=1, seqlen_q=16, seqlen_k=16, heads_q=2, heads_kv=2,
                    head_dim=64, window_left=-1, window_right=-1,
                    q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(),
                    o=out.data_ptr(),
                    q_stride=(ctypes.c_int64 * 4)(*q.stride()),
                    k_stride=(ctypes.c_int64 * 4)(*k.stride()),
                    v_stride=(ctypes.c_int64 * 4)(*v.stride()),
                    o_stride=(ctypes.c_int64 * 4)(*out.stride()))
    p.struct_size = 256
    p.sinks = 8  # garbage beyond version 1: never read
    assert _lib.can_implement(p, _lib.kernel_id("cpu"))[0] == _lib.OK
    _lib.forward(p, _lib.kernel_id("cpu"))
    assert torch.equal(out, flash_attn_func(q, k, v))


def test_compiles_fullgraph():
    q, k, v, sinks = inputs(1, 32, 32, 2, 2, 64, torch.bfloat16)
    fn = torch.compile(lambda q, k, v, s: flash_attn_func(q, k, v, sinks=s), fullgraph=True,
                       backend="aot_eager")
    assert torch.equal(fn(q, k, v, sinks), flash_attn_func(q, k, v, sinks=sinks))


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["auto", "k6", "fa2"])
@pytest.mark.parametrize("shape", SHAPES + [(1, 1024, 1023, 8, 2, 256, True, (-1, -1)),
                                            (2, 799, 3, 4, 1, 192, False, (-1, -1))])
@pytest.mark.parametrize("dtype", DTYPES)
def test_gpu_families(kernel, shape, dtype):
    import flashattn
    if kernel == "k6" and "k6" not in flashattn.gpu_kernels():
        pytest.skip("k6 needs an sm_90 device")
    b, sq, sk, hq, hkv, d, causal, window = shape
    q, k, v, sinks = inputs(b, sq, sk, hq, hkv, d, dtype, device="cuda", q_scale=2.0)
    out, lse = flash_attn_func(q, k, v, causal=causal, window_size=window, return_lse=True,
                               sinks=sinks, kernel=kernel)
    check_sinks(out, lse, q, k, v, sinks, causal=causal, window=window)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["auto", "fa2"])
def test_gpu_varlen(kernel):
    lens = [37, 0, 300, 129]
    hq, hkv, d, dtype = 4, 2, 128, torch.bfloat16
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32, device="cuda")
    total = int(cu[-1])
    q = torch.randn(total, hq, d, device="cuda").to(dtype)
    k = torch.randn(total, hkv, d, device="cuda").to(dtype)
    v = torch.randn(total, hkv, d, device="cuda").to(dtype)
    sinks = torch.empty(hq, device="cuda").uniform_(-4, 4)
    out, lse = flash_attn_varlen_func(q, k, v, cu, cu, max(lens), max(lens), causal=True,
                                      return_lse=True, sinks=sinks, kernel=kernel)
    for i, n in enumerate(lens):
        if n == 0:
            continue
        s, e = int(cu[i]), int(cu[i + 1])
        check_sinks(out[s:e].unsqueeze(0), lse[:, s:e].unsqueeze(0), q[s:e].unsqueeze(0),
                    k[s:e].unsqueeze(0), v[s:e].unsqueeze(0), sinks, causal=True)


@pytest.mark.gpu
@pytest.mark.parametrize("splits", [1, 5])
@pytest.mark.parametrize("page_size", [0, 16])
def test_gpu_kvcache(splits, page_size):
    b, hq, hkv, d, dtype = 3, 8, 2, 128, torch.bfloat16
    lens = [700, 1, 333]
    cap = 1024
    k_full = torch.randn(b, cap, hkv, d, device="cuda").to(dtype)
    v_full = torch.randn(b, cap, hkv, d, device="cuda").to(dtype)
    q = torch.randn(b, 1, hq, d, device="cuda").to(dtype)
    sinks = torch.empty(hq, device="cuda").uniform_(-4, 4)
    sinks[0] = 25.0
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    kw = dict(cache_seqlens=seqlens, num_splits=splits, return_softmax_lse=True, sinks=sinks)
    if page_size:
        pages = cap // page_size
        perm = torch.randperm(b * pages, device="cuda")
        table = perm.view(b, pages).to(torch.int32)
        k_cache = torch.empty(b * pages, page_size, hkv, d, device="cuda", dtype=dtype)
        v_cache = torch.empty_like(k_cache)
        k_cache[perm] = k_full.view(b * pages, page_size, hkv, d)
        v_cache[perm] = v_full.view(b * pages, page_size, hkv, d)
        out, lse = flash_attn_with_kvcache(q, k_cache, v_cache, block_table=table, **kw)
    else:
        out, lse = flash_attn_with_kvcache(q, k_full, v_full, **kw)
    for i, n in enumerate(lens):
        check_sinks(out[i:i + 1], lse[i:i + 1], q[i:i + 1], k_full[i:i + 1, :n],
                    v_full[i:i + 1, :n], sinks)
