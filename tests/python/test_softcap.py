"""Logit soft-capping (softcap=, flash-attn's): the scaled scores become softcap * tanh(scores /
softcap) before masking and softmax. The forward against an fp64 torch reference with
FlashAttention's oracle, the backward with attn_ref.check_grads (fp64 autograd through the tanh):
on the cpu kernel here, on the GPU families (k6, fa2, auto, varlen, the KV-cache decode, the fa2
backward, torch.compile) with the `gpu` marker. softcap 0 is off; negative or non-finite values
are refused naming `softcap`, and so is a family without it."""
import pytest
import torch

from attn_ref import LSE_REL_TOL, _logits, _probs, check_grads, rounding_floor
from flashattn import (UnsupportedError, flash_attn_func, flash_attn_qkvpacked_func,
                       flash_attn_varlen_func, flash_attn_with_kvcache)

DTYPES = [torch.bfloat16, torch.float16]
CAPS = [5.0, 30.0, 50.0]
SHAPES = [  # b, sq, sk, hq, hkv, d, causal, window
    (2, 1, 1, 4, 2, 64, False, (-1, -1)),
    (2, 113, 203, 4, 4, 128, False, (37, 5)),
    (1, 239, 1, 6, 2, 64, True, (-1, -1)),  # causal, sq > sk: rows that see no key
    (2, 128, 131, 6, 1, 96, True, (-1, -1)),  # MQA
]


def softcap_reference(q, k, v, softcap, scale=None, causal=False, window=(-1, -1), sinks=None):
    """(ref out fp64 (b, sq, hq, dv), ref lse fp64 (b, hq, sq), pt out fp32): fp64 attention
    with the capped logits; pt as a kernel of the input precision (fp32 logits through the tanh,
    P rounded to the input dtype before P V, O rounded)."""
    scale = q.shape[3] ** -0.5 if scale is None else scale
    group = q.shape[2] // k.shape[2]

    def heads_first(dtype):
        return (q.to(dtype).transpose(1, 2),
                k.to(dtype).repeat_interleave(group, dim=2).transpose(1, 2),
                v.to(dtype).repeat_interleave(group, dim=2).transpose(1, 2))

    qd, kd, vd = heads_first(torch.float64)
    logits = _logits(qd, kd, scale, causal, window, softcap)
    p, _ = _probs(logits, None if sinks is None else sinks.double())
    full = logits if sinks is None else torch.cat(
        [logits, sinks.double().view(1, -1, 1, 1).expand(*logits.shape[:3], 1)], dim=-1)
    lse = torch.logsumexp(full, dim=-1)
    qf, kf, vf = heads_first(torch.float32)
    pf, _ = _probs(_logits(qf, kf, scale, causal, window, softcap),
                   None if sinks is None else sinks.float())
    pt = (pf.to(q.dtype).float() @ vf).to(q.dtype).float()
    return (p @ vd).transpose(1, 2), lse, pt.transpose(1, 2)


def check_softcap(out, lse, q, k, v, softcap, **kw):
    ref, ref_lse, pt = softcap_reference(q.cpu(), k.cpu(), v.cpu(), softcap, **{
        n: (t.cpu() if torch.is_tensor(t) else t) for n, t in kw.items()})
    out = out.double().cpu()
    assert torch.isfinite(out).all(), "output has NaN/inf (unwritten or overflow)"
    err = (out - ref).abs().max().item()
    err_pt = (pt.double() - ref).abs().max().item()
    atol = 2 * rounding_floor(ref.float(), q.dtype)
    assert err <= 2 * err_pt + atol, f"max|out-ref| {err:.3g} > 2*{err_pt:.3g} + {atol:.3g}"
    if lse is not None:
        lse = lse.double().cpu()
        masked = torch.isneginf(ref_lse)
        assert torch.equal(torch.isneginf(lse), masked)
        if (~masked).any():
            lse_err = (lse[~masked] - ref_lse[~masked]).abs().max().item()
            assert lse_err <= LSE_REL_TOL * (1 + ref_lse[~masked].abs().max().item()), lse_err


def inputs(b, sq, sk, hq, hkv, d, dtype, device="cpu", q_scale=4.0):
    """q scaled up by default: logits of several softcaps at 5, so the tanh saturates."""
    q = (torch.randn(b, sq, hq, d, device=device) * q_scale).to(dtype)
    k = torch.randn(b, sk, hkv, d, device=device).to(dtype)
    v = torch.randn(b, sk, hkv, d, device=device).to(dtype)
    return q, k, v


# ---- cpu kernel ---------------------------------------------------------------------------------
@pytest.mark.parametrize("softcap", CAPS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_cpu_forward(softcap, shape, dtype):
    b, sq, sk, hq, hkv, d, causal, window = shape
    q, k, v = inputs(b, sq, sk, hq, hkv, d, dtype)
    out, lse = flash_attn_func(q, k, v, causal=causal, window_size=window, return_lse=True,
                               softcap=softcap)
    check_softcap(out, lse, q, k, v, softcap, causal=causal, window=window)


def test_cpu_softcap_changes_large_logits_and_zero_is_off():
    q, k, v = inputs(1, 64, 80, 2, 2, 64, torch.bfloat16, q_scale=8.0)
    plain = flash_attn_func(q, k, v)
    assert torch.equal(flash_attn_func(q, k, v, softcap=0.0), plain)
    capped = flash_attn_func(q, k, v, softcap=5.0)
    assert (capped.float() - plain.float()).abs().max().item() > 0.1
    huge = flash_attn_func(q, k, v, softcap=1e6)  # tanh(x / 1e6) * 1e6 ~ x
    assert (huge.float() - plain.float()).abs().max().item() <= 2 ** -6


@pytest.mark.parametrize("softcap", CAPS)
def test_cpu_forward_with_sinks(softcap):
    q, k, v = inputs(2, 113, 203, 4, 2, 64, torch.bfloat16)
    sinks = torch.empty(4).uniform_(-6, 6)
    sinks[0] = 30.0
    out, lse = flash_attn_func(q, k, v, causal=True, return_lse=True, sinks=sinks,
                               softcap=softcap)
    check_softcap(out, lse, q, k, v, softcap, causal=True, sinks=sinks)


def _grads(q, k, v, dout, sinks=None, **kw):
    out = flash_attn_func(q, k, v, sinks=sinks, **kw)
    leaves = {"dq": q, "dk": k, "dv": v}
    if sinks is not None:
        leaves["dsinks"] = sinks
    got = torch.autograd.grad(out, list(leaves.values()), dout)
    return dict(zip(leaves, got)), out.detach()


@pytest.mark.parametrize("softcap", CAPS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_cpu_backward(softcap, shape, dtype):
    b, sq, sk, hq, hkv, d, causal, window = shape
    q, k, v = (t.requires_grad_() for t in inputs(b, sq, sk, hq, hkv, d, dtype))
    dout = torch.randn(b, sq, hq, d).to(dtype)
    got, out = _grads(q, k, v, dout, causal=causal, window_size=window, softcap=softcap)
    check_grads(got, q.detach(), k.detach(), v.detach(), dout, causal=causal, window=window,
                out=out, softcap=softcap)


@pytest.mark.parametrize("softcap", CAPS)
def test_cpu_backward_with_sinks(softcap):
    q, k, v = (t.requires_grad_() for t in inputs(2, 77, 90, 4, 2, 64, torch.bfloat16))
    sinks = torch.empty(4).uniform_(-3, 3).requires_grad_()
    dout = torch.randn(2, 77, 4, 64).bfloat16()
    got, out = _grads(q, k, v, dout, sinks=sinks, causal=True, softcap=softcap)
    check_grads(got, q.detach(), k.detach(), v.detach(), dout, causal=True,
                sinks=sinks.detach(), out=out, softcap=softcap)


def test_cpu_packed_passes_softcap():
    qkv = (torch.randn(2, 40, 3, 4, 64) * 4).bfloat16()
    q, k, v = qkv.unbind(2)
    assert torch.equal(flash_attn_qkvpacked_func(qkv, causal=True, softcap=5.0),
                       flash_attn_func(q, k, v, causal=True, softcap=5.0))


def test_cpu_op_schemas_and_compile_fullgraph():
    q, k, v = (t.requires_grad_() for t in inputs(2, 32, 48, 4, 2, 64, torch.bfloat16))
    args = (q.detach(), k.detach(), v.detach(), 0.0, True, -1, -1, "cpu", None, False, 30.0)
    torch.library.opcheck(torch.ops.flashattn.fwd.default, args)
    out, lse = torch.ops.flashattn.fwd(*args)
    dout = torch.randn_like(out)
    torch.library.opcheck(torch.ops.flashattn.bwd.default,
                          (dout, *args[:3], out, lse, 0.0, True, -1, -1, False, "cpu", None,
                           30.0))

    def model(q, k, v):
        return (flash_attn_func(q, k, v, causal=True, softcap=30.0).float() ** 2).sum()

    torch._dynamo.reset()
    want = torch.autograd.grad(model(q, k, v), (q, k, v))
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    got = torch.autograd.grad(compiled(q, k, v), (q, k, v))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=0, atol=0)


@pytest.mark.parametrize("bad, says", [
    (-1.0, "softcap: must be >= 0"),
    (float("inf"), "softcap: must be finite"),
    (float("nan"), "softcap: must be finite"),
])
def test_bad_softcap_raises_value_error(bad, says):
    q, k, v = inputs(1, 8, 8, 4, 2, 64, torch.bfloat16)
    with pytest.raises(ValueError, match=says):
        flash_attn_func(q, k, v, softcap=bad)


def test_unsupported_family_names_the_argument():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device for a GPU family")
    q, k, v = inputs(1, 8, 8, 4, 2, 64, torch.bfloat16, device="cuda")
    with pytest.raises(UnsupportedError, match="softcap: kernel k2 does not support softcap"):
        flash_attn_func(q, k, v, softcap=30.0, kernel="k2")


# ---- GPU families -------------------------------------------------------------------------------
gpu = pytest.mark.gpu
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@gpu
@needs_cuda
@pytest.mark.parametrize("kernel", ["auto", "k6", "fa2"])
@pytest.mark.parametrize("softcap", CAPS)
@pytest.mark.parametrize("shape", SHAPES + [(1, 1024, 1023, 8, 2, 256, True, (-1, -1))])
@pytest.mark.parametrize("dtype", DTYPES)
def test_gpu_forward(kernel, softcap, shape, dtype):
    if kernel == "k6" and torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("k6 needs sm_90")
    b, sq, sk, hq, hkv, d, causal, window = shape
    q, k, v = inputs(b, sq, sk, hq, hkv, d, dtype, device="cuda")
    out, lse = flash_attn_func(q, k, v, causal=causal, window_size=window, return_lse=True,
                               kernel=kernel, softcap=softcap)
    check_softcap(out, lse, q, k, v, softcap, causal=causal, window=window)


@gpu
@needs_cuda
@pytest.mark.parametrize("kernel", ["auto", "fa2"])
@pytest.mark.parametrize("softcap", CAPS)
def test_gpu_varlen(kernel, softcap):
    lens = [(37, 50), (0, 17), (130, 129), (1, 1), (64, 0), (200, 300)]
    cu_q = torch.tensor([0] + [sum(a for a, _ in lens[:i + 1]) for i in range(len(lens))],
                        dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0] + [sum(b for _, b in lens[:i + 1]) for i in range(len(lens))],
                        dtype=torch.int32, device="cuda")
    q = (torch.randn(int(cu_q[-1]), 4, 128, device="cuda") * 4).bfloat16()
    k = torch.randn(int(cu_k[-1]), 2, 128, device="cuda").bfloat16()
    v = torch.randn_like(k)
    out = flash_attn_varlen_func(q, k, v, cu_q, cu_k, 200, 300, causal=True, kernel=kernel,
                                 softcap=softcap)
    for i, (lq, lk) in enumerate(lens):
        if lq == 0 or lk == 0:
            continue
        qs, ks = slice(int(cu_q[i]), int(cu_q[i + 1])), slice(int(cu_k[i]), int(cu_k[i + 1]))
        check_softcap(out[qs][None], None, q[qs][None], k[ks][None], v[ks][None], softcap,
                      causal=True)


@gpu
@needs_cuda
@pytest.mark.parametrize("softcap", CAPS)
@pytest.mark.parametrize("splits", [1, 5])
@pytest.mark.parametrize("page_size", [0, 16])
def test_gpu_kvcache(softcap, splits, page_size):
    b, hq, hkv, d, cache = 3, 8, 2, 128, 512
    q = (torch.randn(b, 1, hq, d, device="cuda") * 4).bfloat16()
    k_all = torch.randn(b, cache, hkv, d, device="cuda").bfloat16()
    v_all = torch.randn_like(k_all)
    seqlens = torch.tensor([300, 1, 511], dtype=torch.int32, device="cuda")
    if page_size:
        pages = cache // page_size
        k_cache = k_all.reshape(b * pages, page_size, hkv, d)
        v_cache = v_all.reshape(b * pages, page_size, hkv, d)
        table = torch.arange(b * pages, dtype=torch.int32, device="cuda").view(b, pages)
    else:
        k_cache, v_cache, table = k_all, v_all, None
    out, lse = flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=seqlens,
                                       block_table=table, num_splits=splits,
                                       return_softmax_lse=True, softcap=softcap)
    for i in range(b):
        n = int(seqlens[i])
        check_softcap(out[i:i + 1], lse[i:i + 1], q[i:i + 1], k_all[i:i + 1, :n],
                      v_all[i:i + 1, :n], softcap)


@gpu
@needs_cuda
@pytest.mark.parametrize("softcap", CAPS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_gpu_backward(softcap, shape, dtype):
    b, sq, sk, hq, hkv, d, causal, window = shape
    q, k, v = (t.requires_grad_() for t in inputs(b, sq, sk, hq, hkv, d, dtype, device="cuda"))
    dout = torch.randn(b, sq, hq, d, device="cuda").to(dtype)
    got, out = _grads(q, k, v, dout, causal=causal, window_size=window, kernel="fa2",
                      softcap=softcap)
    check_grads({n: g.cpu() for n, g in got.items()}, q.detach().cpu(), k.detach().cpu(),
                v.detach().cpu(), dout.cpu(), causal=causal, window=window, out=out.cpu(),
                softcap=softcap)


@gpu
@needs_cuda
def test_gpu_compile_fullgraph_forward_and_backward():
    q, k, v = (t.requires_grad_() for t in inputs(2, 128, 160, 4, 2, 128, torch.bfloat16,
                                                  device="cuda"))

    def model(q, k, v):
        return (flash_attn_func(q, k, v, causal=True, softcap=30.0).float() ** 2).sum()

    torch._dynamo.reset()
    want = torch.autograd.grad(model(q, k, v), (q, k, v))
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    got = torch.autograd.grad(compiled(q, k, v), (q, k, v))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=0, atol=0)
