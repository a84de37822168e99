"""The custom ops in PyTorch's machinery: opcheck, fake implementations, torch.compile with
fullgraph=True (no graph break), and autograd through them (test_backward.py checks the values)."""
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import flashattn  # noqa: F401  (registers torch.ops.flashattn)
from flashattn import flash_attn_func, flash_attn_varlen_func


def qkv(b=2, sq=48, sk=80, hq=4, hkv=2, d=64, dv=None):
    dv = d if dv is None else dv
    return (torch.randn(b, sq, hq, d).bfloat16(), torch.randn(b, sk, hkv, d).bfloat16(),
            torch.randn(b, sk, hkv, dv).bfloat16())


def model(q, k, v):
    # Work on both sides of the op, so the op sits inside a larger graph.
    out, lse = flash_attn_func(q * 0.5, k, v, causal=True, return_lse=True)
    return out, lse, out.float().sum(-1) + lse.transpose(1, 2)


def assert_same(got, want):
    # The op's outputs bit for bit; the fused reduction after it up to summation order.
    torch.testing.assert_close(got[:2], want[:2], rtol=0, atol=0)
    torch.testing.assert_close(got[2], want[2])


def test_opcheck_fwd():
    q, k, v = qkv()
    torch.library.opcheck(torch.ops.flashattn.fwd.default, (q, k, v, 0.0, True, 5, -1, "auto"))
    # With a grad-requiring input: every test, the AOT-compiled backward included.
    torch.library.opcheck(torch.ops.flashattn.fwd.default,
                          (q.clone().requires_grad_(), k, v, 0.0, False, -1, -1, "cpu"))


def test_fake_matches_real_metadata():
    q, k, v = qkv(d=192, dv=128)
    real = torch.ops.flashattn.fwd(q, k, v, 0.0, False, -1, -1, "auto")
    q0, k0, v0 = (t[0] for t in (q, k, v))
    with FakeTensorMode() as mode:
        fq, fk, fv = (mode.from_tensor(t) for t in (q, k, v))
        fake = torch.ops.flashattn.fwd(fq, fk, fv, 0.0, False, -1, -1, "auto")
        cu = mode.from_tensor(torch.tensor([0, 20, 20, 48], dtype=torch.int32))
        vq, vk, vv = (mode.from_tensor(t) for t in (q0, k0, v0))
        vout, vlse = torch.ops.flashattn.varlen_fwd(vq, vk, vv, cu, cu, 28, 28, 0.0, False, -1, -1,
                                                    "auto")
    for r, f in zip(real, fake):
        assert (r.shape, r.dtype, r.stride()) == (f.shape, f.dtype, f.stride())
    assert real[0].shape == (2, 48, 4, 128) and real[1].shape == (2, 4, 48)
    assert vout.shape == (48, 4, 128) and vout.dtype == torch.bfloat16 and vout.is_contiguous()
    assert vlse.shape == (4, 48) and vlse.dtype == torch.float32 and vlse.is_contiguous()


@pytest.mark.parametrize("backend,dynamic", [("aot_eager", False), ("aot_eager", True),
                                             ("inductor", False)])
def test_compile_fullgraph(backend, dynamic):
    torch._dynamo.reset()
    q, k, v = qkv()
    compiled = torch.compile(model, fullgraph=True, backend=backend, dynamic=dynamic)
    assert_same(compiled(q, k, v), model(q, k, v))
    if dynamic:  # a second shape reuses the symbolic graph
        q2, k2, v2 = qkv(b=1, sq=33, sk=70)
        assert_same(compiled(q2, k2, v2), model(q2, k2, v2))


def test_no_graph_break():
    torch._dynamo.reset()
    explained = torch._dynamo.explain(model)(*qkv())
    assert explained.graph_break_count == 0 and explained.graph_count == 1


def test_compile_varlen_fullgraph():
    # The cpu kernel runs variable length: the graph compiles whole (fullgraph) and gives the
    # eager result bit for bit.
    torch._dynamo.reset()
    q, k, v = (t[0] for t in qkv(hkv=4))
    cu_q = torch.tensor([0, 20, 20, 48], dtype=torch.int32)
    cu_k = torch.tensor([0, 30, 50, 80], dtype=torch.int32)

    def f(q, k, v):
        return flash_attn_varlen_func(q, k, v, cu_q, cu_k, 28, 30, causal=True) * 2

    got = torch.compile(f, fullgraph=True, backend="aot_eager")(q, k, v)
    torch.testing.assert_close(got, f(q, k, v), rtol=0, atol=0)


def test_backward_through_out_and_lse():
    q, k, v = qkv()
    q.requires_grad_()
    out = flash_attn_func(q, k, v)
    assert out.requires_grad
    out.float().sum().backward()
    assert q.grad.shape == q.shape and torch.isfinite(q.grad.float()).all()
    assert q.grad.abs().max() > 0
    # The LSE is not differentiable: a loss of it alone has nothing to differentiate.
    _, lse = flash_attn_func(q, k, v, return_lse=True)
    assert not lse.requires_grad
    with pytest.raises(RuntimeError, match="does not require grad"):
        lse.sum().backward()


def test_compiled_forward_and_backward_match_eager():
    torch._dynamo.reset()
    q, k, v = qkv()
    q.requires_grad_()
    out = torch.compile(model, fullgraph=True, backend="aot_eager")(q, k, v)
    assert_same([t.detach() for t in out], model(q.detach(), k, v))
    (got,) = torch.autograd.grad(out[2].sum(), q)
    (want,) = torch.autograd.grad(model(q, k, v)[2].sum(), q)
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_no_grad_inference_needs_no_backward():
    q, k, v = qkv()
    q.requires_grad_()
    with torch.no_grad():
        out = flash_attn_func(q, k, v)
    assert not out.requires_grad
