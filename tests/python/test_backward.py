"""The backward pass through autograd: dq, dk, dv and the sinks' gradient of flash_attn_func,
flash_attn_varlen_func and the packed functions against fp64 reference gradients (autograd over
exact attention) with FlashAttention's rule max|g - ref| <= 2 max|g_pt - ref| + atol (attn_ref:
g_pt is the backward in the input precision). The CPU kernel always (small shapes); the GPU
families (fa2, auto) with the `gpu` marker, plus bitwise repeatability of deterministic mode and
torch.compile(fullgraph=True) over forward and backward. The seed is printed by conftest."""
import contextlib

import pytest
import torch

import flashattn
from attn_ref import check_grads
from flashattn import (flash_attn_func, flash_attn_kvpacked_func,
                       flash_attn_qkvpacked_func, flash_attn_varlen_func)

DTYPES = [torch.bfloat16, torch.float16]
GRADS = ("dq", "dk", "dv")


def randn(*shape, dtype=torch.bfloat16, device="cpu", scale=1.0):
    return (torch.randn(*shape, device=device) * scale).to(dtype)


def inputs(b, sq, sk, hq, hkv, d, dv=None, dtype=torch.bfloat16, device="cpu", q_scale=1.0):
    """q, k, v requiring grad, and dout."""
    dv = d if dv is None else dv
    q = randn(b, sq, hq, d, dtype=dtype, device=device, scale=q_scale).requires_grad_()
    k = randn(b, sk, hkv, d, dtype=dtype, device=device).requires_grad_()
    v = randn(b, sk, hkv, dv, dtype=dtype, device=device).requires_grad_()
    return q, k, v, randn(b, sq, hq, dv, dtype=dtype, device=device)


def grads_of(out, dout, **tensors):
    """{"dq": ..., ...} of out w.r.t. the named tensors for the output gradient dout."""
    got = torch.autograd.grad(out, list(tensors.values()), dout)
    return dict(zip(tensors, got))


def run(q, k, v, dout, sinks=None, **kw):
    """flash_attn_func's gradients for q, k, v (and sinks when they require grad), and under
    "out" the forward's output the backward read."""
    out = flash_attn_func(q, k, v, sinks=sinks, **kw)
    leaves = {"dq": q, "dk": k, "dv": v}
    if sinks is not None and sinks.requires_grad:
        leaves["dsinks"] = sinks
    return {**grads_of(out, dout, **leaves), "out": out.detach()}


def check(got, q, k, v, dout, causal=False, window=(-1, -1), sinks=None, scale=None):
    """The oracle for the gradients in `got` (run()'s dict), g_pt reading run()'s out."""
    grads = {n: g for n, g in got.items() if n != "out"}
    return check_grads(grads, q.detach(), k.detach(), v.detach(), dout, scale=scale,
                       causal=causal, window=window,
                       sinks=None if sinks is None else sinks.detach(), out=got.get("out"))


# ---- cpu kernel ---------------------------------------------------------------------------------
@pytest.mark.parametrize("sq,sk", [(1, 1), (1, 239), (113, 203), (239, 1), (203, 113),
                                   (128, 128)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_cpu_seqlens(sq, sk, causal, dtype):
    q, k, v, dout = inputs(2, sq, sk, 2, 1, 64, dtype=dtype)
    got = run(q, k, v, dout, causal=causal)
    check(got, q, k, v, dout, causal=causal)
    if causal and sq > sk:  # the first sq - sk rows see no key: their dq is exactly 0
        assert torch.equal(got["dq"][:, :sq - sk], torch.zeros_like(got["dq"][:, :sq - sk]))


@pytest.mark.parametrize("d,dv", [(64, 64), (96, 96), (128, 128), (192, 192), (256, 256),
                                  (192, 128)])
def test_cpu_head_dims(d, dv):
    q, k, v, dout = inputs(1, 65, 97, 2, 2, d, dv)
    got = run(q, k, v, dout)
    assert got["dv"].shape == (1, 97, 2, dv)
    check(got, q, k, v, dout)


@pytest.mark.parametrize("hq,hkv", [(4, 4), (4, 2), (6, 2), (6, 1)])
def test_cpu_gqa_mqa(hq, hkv):
    q, k, v, dout = inputs(2, 77, 91, hq, hkv, 64)
    got = run(q, k, v, dout, causal=True)
    assert got["dk"].shape == k.shape and got["dv"].shape == v.shape
    check(got, q, k, v, dout, causal=True)


@pytest.mark.parametrize("window,sq,sk", [((37, 5), 113, 203), ((0, 11), 150, 96),
                                          ((16, -1), 64, 64), ((3, 0), 90, 90)])
def test_cpu_windows(window, sq, sk):
    q, k, v, dout = inputs(1, sq, sk, 4, 2, 64)
    got = run(q, k, v, dout, window_size=window)
    check(got, q, k, v, dout, window=window)


def test_cpu_large_logits_and_scale():
    # Scaled-up queries: the online softmax rescales often; a custom softmax_scale.
    q, k, v, dout = inputs(2, 97, 131, 2, 2, 64, q_scale=4.0)
    got = run(q, k, v, dout, softmax_scale=0.2, causal=True)
    check(got, q, k, v, dout, causal=True, scale=0.2)


@pytest.mark.parametrize("causal,sq,sk", [(False, 113, 203), (True, 239, 100), (True, 64, 64)])
def test_cpu_sinks(causal, sq, sk):
    q, k, v, dout = inputs(2, sq, sk, 4, 2, 64)
    sinks = torch.empty(4).uniform_(-3, 3)
    sinks[0] = 8.0  # a sink that takes most of the mass of head 0's rows
    sinks.requires_grad_()
    got = run(q, k, v, dout, sinks=sinks, causal=causal)
    assert got["dsinks"].shape == (4,) and got["dsinks"].dtype == torch.float32
    check(got, q, k, v, dout, causal=causal, sinks=sinks)


def test_cpu_sinks_without_grad_still_shape_the_other_gradients():
    q, k, v, dout = inputs(1, 50, 70, 2, 2, 64)
    sinks = torch.tensor([2.0, -1.0])
    got = run(q, k, v, dout, sinks=sinks)
    check(got, q, k, v, dout, sinks=sinks)
    plain = run(q, k, v, dout)
    assert not torch.equal(got["dq"], plain["dq"])


@pytest.mark.parametrize("which", ["q", "k", "v", "kv", "qv"])
def test_cpu_grad_only_for_inputs_that_require_it(which):
    q, k, v, dout = inputs(1, 40, 56, 2, 1, 64)
    full = run(q, k, v, dout, causal=True)
    leaves = {"q": q, "k": k, "v": v}
    for name in "qkv":
        leaves[name] = leaves[name].detach().requires_grad_(name in which)
    out = flash_attn_func(*leaves.values(), causal=True)
    out.backward(dout)
    for name, t in leaves.items():
        if name in which:
            assert torch.equal(t.grad, full["d" + name]), name
        else:
            assert t.grad is None, name
    # sinks given but not requiring grad: no gradient for them either.
    sinks = torch.zeros(2, requires_grad=False)
    q2 = q.detach().requires_grad_()
    flash_attn_func(q2, k.detach(), v.detach(), sinks=sinks).sum().backward()
    assert q2.grad is not None and sinks.grad is None


def test_cpu_no_grad_and_lse_carries_no_gradient():
    q, k, v, dout = inputs(1, 16, 16, 2, 2, 64)
    with torch.no_grad():
        assert not flash_attn_func(q, k, v).requires_grad
    out, lse = flash_attn_func(q, k, v, return_lse=True)
    assert out.requires_grad and not lse.requires_grad
    # A loss that also uses the LSE treats it as a constant: the gradient is out's alone.
    got = torch.autograd.grad((out.float() * dout.float()).sum() + lse.sum(), (q, k, v))
    want = torch.autograd.grad(flash_attn_func(q, k, v), (q, k, v), dout)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=0, atol=0)


def test_cpu_noncontiguous_dout_and_inputs():
    # dout of another layout (a transposed buffer) and of out.sum() (expanded, stride 0); q a
    # slice of a larger tensor, v with a strided last dimension.
    q, k, v, dout = inputs(2, 48, 80, 4, 2, 64)
    base = run(q, k, v, dout)
    dout_t = dout.transpose(1, 2).contiguous().transpose(1, 2)
    assert not dout_t.is_contiguous()
    assert all(torch.equal(base[n], run(q, k, v, dout_t)[n]) for n in GRADS)
    out = flash_attn_func(q, k, v)
    got = grads_of(out.sum(), torch.tensor(1.0, dtype=out.dtype), dq=q, dk=k, dv=v)
    assert all(torch.equal(got[n], run(q, k, v, torch.ones_like(dout))[n]) for n in GRADS)

    big = randn(2, 48, 6, 64).requires_grad_()
    q_view = big[:, :, 1:5]
    v_t = v.detach().transpose(-1, -2).contiguous().transpose(-1, -2).requires_grad_()
    assert v_t.stride(-1) != 1 and not q_view.is_contiguous()
    want = run(q_view.detach().contiguous().requires_grad_(), k, v, dout)
    flash_attn_func(q_view, k, v_t).backward(dout)
    torch.testing.assert_close(big.grad[:, :, 1:5], want["dq"], rtol=0, atol=0)
    assert torch.equal(big.grad[:, :, :1], torch.zeros_like(big.grad[:, :, :1]))
    torch.testing.assert_close(v_t.grad, want["dv"], rtol=0, atol=0)


def test_cpu_zero_sizes():
    # No key: every row outputs 0 and its dq is 0. No query: dk = dv = 0.
    q, k, v, dout = inputs(1, 5, 0, 2, 2, 64)
    got = run(q, k, v, dout)
    assert torch.equal(got["dq"], torch.zeros_like(q)) and got["dk"].shape == k.shape
    q, k, v, dout = inputs(1, 0, 7, 2, 2, 64)
    got = run(q, k, v, dout)
    assert got["dq"].shape == q.shape and torch.equal(got["dk"], torch.zeros_like(k))
    assert torch.equal(got["dv"], torch.zeros_like(v))


def test_cpu_deterministic_flag():
    q, k, v, dout = inputs(2, 99, 131, 4, 2, 64)
    first = run(q, k, v, dout, causal=True, deterministic=True)
    check(first, q, k, v, dout, causal=True)
    for _ in range(3):
        again = run(q, k, v, dout, causal=True, deterministic=True)
        assert all(torch.equal(first[n], again[n]) for n in GRADS)
    plain = run(q, k, v, dout, causal=True)
    for n in GRADS:
        torch.testing.assert_close(plain[n], first[n])


# ---- packed -------------------------------------------------------------------------------------
def test_cpu_qkvpacked_gradient_is_the_unpacked_ones_stacked():
    qkv = randn(2, 70, 3, 4, 64).requires_grad_()
    dout = randn(2, 70, 4, 64)
    flash_attn_qkvpacked_func(qkv, causal=True, deterministic=True).backward(dout)
    q, k, v = (t.detach().requires_grad_() for t in qkv.detach().unbind(2))
    want = run(q, k, v, dout, causal=True)
    assert qkv.grad.shape == qkv.shape
    for i, n in enumerate(GRADS):
        torch.testing.assert_close(qkv.grad[:, :, i], want[n], rtol=0, atol=0)
    check(want, q, k, v, dout, causal=True)


def test_cpu_qkvpacked_gqa_form():
    # (batch, seqlen, heads_q + 2 * heads_kv, head_dim) with num_heads_q: q 4, k 2, v 2 heads.
    qkv = randn(1, 50, 8, 64).requires_grad_()
    dout = randn(1, 50, 4, 64)
    flash_attn_qkvpacked_func(qkv, num_heads_q=4).backward(dout)
    q, k, v = (qkv.detach()[:, :, a:b].requires_grad_() for a, b in ((0, 4), (4, 6), (6, 8)))
    want = run(q, k, v, dout)
    for (a, b), n in zip(((0, 4), (4, 6), (6, 8)), GRADS):
        torch.testing.assert_close(qkv.grad[:, :, a:b], want[n], rtol=0, atol=0)


def test_cpu_kvpacked():
    q, _, _, dout = inputs(2, 33, 47, 4, 2, 64)
    kv = randn(2, 47, 2, 2, 64).requires_grad_()
    flash_attn_kvpacked_func(q, kv, window_size=(8, 8)).backward(dout)
    k, v = (t.detach().requires_grad_() for t in kv.detach().unbind(2))
    want = run(q.detach().requires_grad_(), k, v, dout, window_size=(8, 8))
    torch.testing.assert_close(q.grad, want["dq"], rtol=0, atol=0)
    torch.testing.assert_close(kv.grad[:, :, 0], want["dk"], rtol=0, atol=0)
    torch.testing.assert_close(kv.grad[:, :, 1], want["dv"], rtol=0, atol=0)


# ---- the ops in PyTorch's machinery -------------------------------------------------------------
def test_opcheck_fwd_with_autograd_and_bwd():
    q, k, v, dout = inputs(2, 24, 40, 4, 2, 64)
    args = (q, k, v, 0.0, True, -1, -1, "cpu", None, False)
    torch.library.opcheck(torch.ops.flashattn.fwd.default, args)
    out, lse = torch.ops.flashattn.fwd(*(t.detach() if torch.is_tensor(t) else t for t in args))
    sinks = torch.randn(4)
    torch.library.opcheck(torch.ops.flashattn.bwd.default,
                          (dout, q.detach(), k.detach(), v.detach(), out, lse, 0.0, True, -1, -1,
                           False, "cpu", None))
    torch.library.opcheck(torch.ops.flashattn.bwd.default,
                          (dout, q.detach(), k.detach(), v.detach(), out, lse, 0.0, True, -1, -1,
                           True, "auto", sinks))


def test_bwd_op_refuses_mismatched_inputs():
    q, k, v, dout = (t.detach() for t in inputs(1, 8, 8, 2, 2, 64))
    out, lse = torch.ops.flashattn.fwd(q, k, v, 0.0, False, -1, -1, "cpu")
    with pytest.raises(ValueError, match=r"dout.shape: must equal out's shape"):
        torch.ops.flashattn.bwd(dout[:, :4], q, k, v, out, lse, 0.0, False, -1, -1, False, "cpu")
    with pytest.raises(ValueError, match=r"lse.dtype: must equal fp32"):
        torch.ops.flashattn.bwd(dout, q, k, v, out, lse.bfloat16(), 0.0, False, -1, -1, False,
                                "cpu")
    with pytest.raises(ValueError, match="kernel: 'fa2' runs on the GPU"):
        torch.ops.flashattn.bwd(dout, q, k, v, out, lse, 0.0, False, -1, -1, False, "fa2")


def model(q, k, v, sinks):
    out = flash_attn_func(q * 0.5, k, v, causal=True, sinks=sinks)
    return (out.float() ** 2).sum()


@pytest.mark.parametrize("backend,dynamic", [("aot_eager", False), ("aot_eager", True),
                                             ("inductor", False)])
def test_cpu_compile_fullgraph_forward_and_backward(backend, dynamic):
    torch._dynamo.reset()
    q, k, v, _ = inputs(2, 48, 80, 4, 2, 64)
    sinks = torch.randn(4, requires_grad=True)
    want = torch.autograd.grad(model(q, k, v, sinks), (q, k, v, sinks))
    compiled = torch.compile(model, fullgraph=True, backend=backend, dynamic=dynamic)
    got = torch.autograd.grad(compiled(q, k, v, sinks), (q, k, v, sinks))
    exact = {} if backend == "inductor" else {"rtol": 0, "atol": 0}  # inductor fuses differently
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, **exact)
    explained = torch._dynamo.explain(model)(q, k, v, sinks)
    assert explained.graph_break_count == 0


# ---- the eager path and the ops' path --------------------------------------------------------
class Passthrough(torch.overrides.TorchFunctionMode):
    """A torch function mode that changes nothing. Under it flash_attn_func and its backward take
    the custom ops (flashattn.ops._eager is False), as under torch.compile or a tensor subclass;
    outside it they take the eager autograd.Function with the same implementations."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def both_paths(forward, leaves, dout):
    """forward() and its gradients three ways: the eager path, the op's forward with the eager
    backward, the ops both ways; asserts which autograd node each forward recorded."""
    results = []
    for fwd_mode, bwd_mode in ((None, None), (Passthrough, None), (Passthrough, Passthrough)):
        with (fwd_mode or contextlib.nullcontext)():
            out = forward()
        node = type(out.grad_fn).__name__
        assert node.startswith("Generated" if fwd_mode else "_"), node
        with (bwd_mode or contextlib.nullcontext)():
            grads = torch.autograd.grad(out, leaves, dout)
        results.append((out.detach(), *grads))
    return results


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_eager_path_equals_the_ops_path_bitwise(device):
    q, k, v, dout = inputs(2, 113, 203, 4, 2, 64, device=device)
    sinks = torch.randn(4, device=device, requires_grad=True)
    results = both_paths(lambda: flash_attn_func(q, k, v, causal=True, sinks=sinks),
                         (q, k, v, sinks), dout)
    for other in results[1:]:
        for got, want in zip(other, results[0]):
            assert torch.equal(got, want)
    check(dict(zip(("out", "dq", "dk", "dv", "dsinks"), results[0])), q, k, v, dout,
          causal=True, sinks=sinks)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_eager_varlen_path_equals_the_ops_path_bitwise(device):
    q, k, v = (randn(37, 4, 64, device=device).requires_grad_() for _ in range(3))
    cu = torch.tensor([0, 11, 11, 37], dtype=torch.int32, device=device)
    dout = randn(37, 4, 64, device=device)
    kernel = "auto" if device == "cpu" else "fa2"  # the GPU's varlen backward family
    results = both_paths(lambda: flash_attn_varlen_func(q, k, v, cu, cu, 26, 26, causal=True,
                                                        kernel=kernel), (q, k, v), dout)
    for other in results[1:]:
        for got, want in zip(other, results[0]):
            assert torch.equal(got, want)


def test_double_backward_raises_on_both_paths():
    # No double backward: a gradient built with create_graph=True refuses to be differentiated
    # (through the backward op, on the eager path too), rather than silently carrying none.
    q, k, v, _ = inputs(1, 16, 24, 2, 2, 64)
    for mode in (contextlib.nullcontext, Passthrough):
        with mode():
            out = flash_attn_func(q, k, v, causal=True)
        dq, = torch.autograd.grad(out.float().sum(), q, create_graph=True)
        assert dq.requires_grad
        with pytest.raises(RuntimeError, match="no autograd formula was registered"):
            torch.autograd.grad(dq.float().sum(), q)


def test_eager_path_gives_gradients_only_where_required():
    q, k, v, dout = inputs(1, 16, 24, 2, 2, 64)
    k.requires_grad_(False)
    out = flash_attn_func(q, k, v)
    assert type(out.grad_fn).__name__ == "_FwdBackward"
    out.backward(dout)
    assert q.grad is not None and v.grad is not None and k.grad is None


# ---- variable length ---------------------------------------------------------------------------
def varlen_reference_check(got, q, k, v, dout, out, cu_q, cu_k, **kw):
    """Per-sequence dense reference over the packed tensors (sequences without queries skipped;
    rows of a sequence without keys must have dq = 0)."""
    cq, ck = cu_q.tolist(), cu_k.tolist()
    for b in range(len(cq) - 1):
        qs, ks = slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1])
        if cq[b + 1] == cq[b]:
            continue
        part = {"dq": got["dq"][qs][None], "dk": got["dk"][ks][None], "dv": got["dv"][ks][None]}
        if ck[b + 1] == ck[b]:
            assert torch.equal(part["dq"], torch.zeros_like(part["dq"]))
            continue
        check_grads(part, q[qs][None], k[ks][None], v[ks][None], dout[qs][None],
                    out=out[qs][None], **kw)


def packed_forward(q, k, v, cu_q, cu_k, **kw):
    """out (total_q, hq, dv) and lse (hq, total_q) of a varlen batch, from one dense forward per
    sequence (independent of the cpu family's own variable-length forward)."""
    cq, ck = cu_q.tolist(), cu_k.tolist()
    outs, lses = [], []
    for b in range(len(cq) - 1):
        o, l = flash_attn_func(q[None, cq[b]:cq[b + 1]], k[None, ck[b]:ck[b + 1]],
                               v[None, ck[b]:ck[b + 1]], return_lse=True, **kw)
        outs.append(o[0])
        lses.append(l[0])
    return torch.cat(outs), torch.cat(lses, dim=1).contiguous()


@pytest.mark.parametrize("causal,window", [(False, (-1, -1)), (True, (-1, -1)), (False, (9, 4))])
def test_cpu_varlen_backward_op_with_a_zero_length_sequence(causal, window):
    lens_q, lens_k = [37, 0, 64, 1, 20], [50, 13, 64, 0, 9]
    cu_q = torch.tensor([0] + torch.tensor(lens_q).cumsum(0).tolist(), dtype=torch.int32)
    cu_k = torch.tensor([0] + torch.tensor(lens_k).cumsum(0).tolist(), dtype=torch.int32)
    q, k, v = randn(sum(lens_q), 4, 64), randn(sum(lens_k), 2, 64), randn(sum(lens_k), 2, 64)
    dout = randn(sum(lens_q), 4, 64)
    sinks = torch.tensor([1.5, -2.0, 0.0, 4.0])
    out, lse = packed_forward(q, k, v, cu_q, cu_k, causal=causal, window_size=window,
                              sinks=sinks)
    dq, dk, dv, dsinks = torch.ops.flashattn.varlen_bwd(
        dout, q, k, v, out, lse, cu_q, cu_k, max(lens_q), max(lens_k), 0.0, causal, window[0],
        window[1], False, "cpu", sinks)
    got = {"dq": dq, "dk": dk, "dv": dv}
    assert all(torch.isfinite(t.float()).all() for t in got.values())
    varlen_reference_check(got, q, k, v, dout, out, cu_q, cu_k, causal=causal, window=window,
                           sinks=sinks)
    # Keys of the empty query sequence (batch 1) are seen by no query: dk = dv = 0.
    assert torch.equal(dk[50:63], torch.zeros_like(dk[50:63]))
    assert torch.equal(dv[50:63], torch.zeros_like(dv[50:63]))
    # dsinks sums over the sequences: that of the dense backward of each, added up.
    want = torch.zeros(4)
    cq, ck = cu_q.tolist(), cu_k.tolist()
    for b in range(len(lens_q)):
        if lens_q[b] == 0:
            continue
        s = sinks.clone().requires_grad_()
        o = flash_attn_func(q[None, cq[b]:cq[b + 1]], k[None, ck[b]:ck[b + 1]],
                            v[None, ck[b]:ck[b + 1]], causal=causal, window_size=window, sinks=s)
        want += torch.autograd.grad(o, s, dout[None, cq[b]:cq[b + 1]])[0]
    torch.testing.assert_close(dsinks, want, rtol=1e-4, atol=1e-4)


def test_cpu_varlen_trains_through_autograd():
    # flash_attn_varlen_func on CPU tensors: the cpu family's varlen forward, then its backward;
    # the gradients equal those of the varlen backward op on the per-sequence forward's out/lse.
    q, k, v = (randn(20, 2, 64).requires_grad_() for _ in range(3))
    cu = torch.tensor([0, 8, 8, 20], dtype=torch.int32)
    out = flash_attn_varlen_func(q, k, v, cu, cu, 12, 12, causal=True)
    ref_out, ref_lse = packed_forward(q.detach(), k.detach(), v.detach(), cu, cu, causal=True)
    assert torch.equal(out.detach(), ref_out)
    dout = randn(20, 2, 64)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), dout)
    want = torch.ops.flashattn.varlen_bwd(dout, q.detach(), k.detach(), v.detach(), ref_out,
                                          ref_lse, cu, cu, 12, 12, 0.0, True, -1, -1, False,
                                          "cpu")
    for got, w in zip((dq, dk, dv), want):
        assert torch.equal(got, w)


# ---- GPU ----------------------------------------------------------------------------------------
gpu = pytest.mark.gpu
GPU_KERNELS = ["fa2", "auto"]


@gpu
@pytest.mark.parametrize("sq,sk", [(1, 1), (1, 239), (113, 203), (239, 1), (799, 3),
                                   (1023, 1024), (1024, 1023), (4224, 4224)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kernel", GPU_KERNELS)
def test_gpu_seqlens(sq, sk, causal, kernel):
    q, k, v, dout = inputs(1, sq, sk, 2, 1, 128, device="cuda")
    got = run(q, k, v, dout, causal=causal, kernel=kernel)
    check(got, q, k, v, dout, causal=causal)
    if causal and sq > sk:
        assert torch.equal(got["dq"][:, :sq - sk], torch.zeros_like(got["dq"][:, :sq - sk]))


@gpu
@pytest.mark.parametrize("d,dv", [(64, 64), (96, 96), (128, 128), (192, 192), (256, 256),
                                  (192, 128)])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [False, True])
def test_gpu_head_dims(d, dv, dtype, causal):
    q, k, v, dout = inputs(2, 257, 383, 4, 2, d, dv, dtype=dtype, device="cuda", q_scale=2.0)
    got = run(q, k, v, dout, causal=causal, kernel="fa2")
    check(got, q, k, v, dout, causal=causal)


@gpu
@pytest.mark.parametrize("hq,hkv", [(4, 4), (4, 2), (12, 2), (6, 1)])
@pytest.mark.parametrize("window", [(-1, -1), (37, 5), (0, 64)])
def test_gpu_gqa_windows(hq, hkv, window):
    q, k, v, dout = inputs(2, 300, 431, hq, hkv, 128, device="cuda")
    got = run(q, k, v, dout, window_size=window)
    check(got, q, k, v, dout, window=window)


@gpu
@pytest.mark.parametrize("causal,sq,sk", [(False, 301, 517), (True, 600, 257)])
def test_gpu_sinks(causal, sq, sk):
    q, k, v, dout = inputs(2, sq, sk, 4, 2, 128, device="cuda")
    sinks = torch.empty(4, device="cuda").uniform_(-3, 3)
    sinks[0] = 8.0
    sinks.requires_grad_()
    got = run(q, k, v, dout, sinks=sinks, causal=causal)
    check(got, q, k, v, dout, causal=causal, sinks=sinks)


@gpu
def test_gpu_grad_subset_and_noncontiguous_dout():
    q, k, v, dout = inputs(2, 200, 300, 4, 2, 64, device="cuda")
    full = run(q, k, v, dout, deterministic=True)
    k2 = k.detach()
    out = flash_attn_func(q, k2, v, deterministic=True)
    out.backward(dout.transpose(1, 2).contiguous().transpose(1, 2))
    assert k2.grad is None
    assert torch.equal(q.grad, full["dq"]) and torch.equal(v.grad, full["dv"])


@gpu
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kernel", GPU_KERNELS)
def test_gpu_varlen_with_a_zero_length_sequence(causal, kernel):
    lens_q, lens_k = [130, 0, 77, 1, 256], [200, 50, 77, 0, 256]
    cu_q = torch.tensor([0] + torch.tensor(lens_q).cumsum(0).tolist(), dtype=torch.int32,
                        device="cuda")
    cu_k = torch.tensor([0] + torch.tensor(lens_k).cumsum(0).tolist(), dtype=torch.int32,
                        device="cuda")
    q = randn(sum(lens_q), 4, 128, device="cuda").requires_grad_()
    k = randn(sum(lens_k), 2, 128, device="cuda").requires_grad_()
    v = randn(sum(lens_k), 2, 128, device="cuda").requires_grad_()
    dout = randn(sum(lens_q), 4, 128, device="cuda")
    out = flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), causal=causal,
                                 kernel=kernel)
    got = grads_of(out, dout, dq=q, dk=k, dv=v)
    varlen_reference_check(got, q.detach(), k.detach(), v.detach(), dout, out.detach(), cu_q,
                           cu_k, causal=causal)
    # Keys of the empty query sequence (batch 1) are seen by no query: dk = dv = 0.
    assert torch.equal(got["dk"][200:250], torch.zeros_like(got["dk"][200:250]))


@gpu
@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("hq,hkv", [(8, 8), (8, 2)])
def test_gpu_deterministic_is_bitwise_repeatable(d, hq, hkv):
    q, k, v, dout = inputs(2, 1000, 1000, hq, hkv, d, device="cuda")
    sinks = torch.randn(hq, device="cuda", requires_grad=True)
    first = run(q, k, v, dout, sinks=sinks, causal=True, deterministic=True)
    check(first, q, k, v, dout, causal=True, sinks=sinks)
    for i in range(20):
        again = run(q, k, v, dout, sinks=sinks, causal=True, deterministic=True)
        for n in first:
            assert torch.equal(first[n], again[n]), f"{n} differs on rerun {i}"


@gpu
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_gpu_compile_fullgraph_forward_and_backward(backend):
    torch._dynamo.reset()
    q, k, v, _ = inputs(2, 256, 256, 4, 2, 128, device="cuda")
    sinks = torch.randn(4, device="cuda", requires_grad=True)
    want = torch.autograd.grad(model(q, k, v, sinks), (q, k, v, sinks))
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    got = torch.autograd.grad(compiled(q, k, v, sinks), (q, k, v, sinks))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    assert torch._dynamo.explain(model)(q, k, v, sinks).graph_break_count == 0


@gpu
def test_gpu_backward_runs_on_the_current_stream():
    q, k, v, dout = inputs(2, 512, 512, 4, 4, 128, device="cuda")
    want = run(q, k, v, dout, causal=True, deterministic=True)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        got = run(q, k, v, dout, causal=True, deterministic=True)
    torch.cuda.current_stream().wait_stream(side)
    for n in GRADS:
        assert torch.equal(got[n], want[n])


@gpu
def test_gpu_forward_family_without_backward_trains_on_auto():
    # k6 (Hopper forward) has no backward: autograd runs the `auto` backward on its out/lse.
    if "k6" not in flashattn.gpu_kernels() or torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("needs k6 on an sm_90 device")
    q, k, v, dout = inputs(2, 333, 444, 4, 2, 128, device="cuda")
    got = run(q, k, v, dout, causal=True, kernel="k6")
    check(got, q, k, v, dout, causal=True)
